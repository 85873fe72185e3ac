//! The alert gate (issue 38, acceptance 3) against a real Prometheus, built from its Go module,
//! with a real alerting rule on a real metric: the rollout holds while the alert fires, with a
//! condition naming it, and resumes when it clears; with Prometheus stopped it holds and says so.

use std::time::Duration;

use kube::api::{Api, PostParams};
use serde_json::json;
use skyhook::crd::DeploymentPolicy;
use skyhook::schema;

use crate::support::prometheus::{Gauge, Prometheus};
use crate::support::{Env, create_policy, label, pkg, setup, skyhook, sleep};

const RULES: &str = "groups:
- name: e2e
  rules:
  - alert: E2EGpuXidErrors
    expr: e2e_gpu_xid_errors > 0
    labels:
      severity: critical
";

async fn jobs_on(env: &Env, sk: &str, node: &str) -> usize {
    env.jobs_of(sk)
        .await
        .iter()
        .filter(|j| label(j, schema::NODE_LABEL) == node)
        .count()
}

#[tokio::test]
async fn the_rollout_holds_while_a_matching_alert_fires_and_while_prometheus_is_down() {
    let env = setup("gates-alerts", 2, &[]).await;
    let gauge = Gauge::serve("e2e_gpu_xid_errors", 1).await;
    let mut prom = Prometheus::start(&env.ctx, &[gauge.port], RULES).await;
    env.ctx
        .eventually(
            "the alert firing in Prometheus",
            Duration::from_secs(60),
            || async {
                let alerts = prom.alerts();
                if alerts.contains("E2EGpuXidErrors") && alerts.contains("\"firing\"") {
                    Ok(())
                } else {
                    Err(format!("{alerts}\n{}", prom.log_tail()))
                }
            },
        )
        .await;
    let spec = json!({
        "default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
        "alertGate": {"url": prom.url(),
            "matchers": ["severity=\"critical\"", "alertname=~\"E2E.*\""]}});
    let policy = create_policy(&env.ctx, spec).await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": policy, "packages": {"tool": pkg("1.0.0", sleep("15"))}}),
    ))
    .await;
    // Held: the condition names the alert; nothing starts.
    env.ctx
        .eventually(
            "the AlertsFiring condition",
            Duration::from_secs(60),
            || async {
                match env.condition(&sk, schema::ALERT_GATE_CONDITION).await {
                    Some((r, m))
                        if r == schema::ALERTS_FIRING_REASON && m.contains("E2EGpuXidErrors") =>
                    {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    env.wait_event("the hold's Event", &sk, |e| {
        e.reason.as_deref() == Some(schema::ALERTS_FIRING_REASON)
    })
    .await;
    // The preview shows the gate and that it holds now.
    let ran =
        crate::support::plugin::plugin_async(&env.ctx, &["deployment-policy", "preview", &sk])
            .await;
    let out = ran.ok();
    assert!(
        out.contains("Gate: alert gate: Prometheus at")
            && out.contains("holding now: AlertsFiring"),
        "{out}"
    );
    env.ctx
        .holds_for(
            "no Job while the alert fires",
            Duration::from_secs(8),
            || async {
                match env.jobs_of(&sk).await.len() {
                    0 => Ok(()),
                    n => Err(format!("{n} Jobs")),
                }
            },
        )
        .await;
    // The metric goes back to 0: the alert resolves and the first batch starts.
    gauge.set(0);
    let first = env
        .ctx
        .wait_for(
            "the first batch started",
            Duration::from_secs(60),
            || async {
                let jobs = env.jobs_of(&sk).await;
                jobs.first()
                    .map(|j| label(j, schema::NODE_LABEL).to_string())
            },
        )
        .await;
    // Prometheus stops while batch 1 runs: the next batch holds, saying the source is down.
    prom.stop();
    let second = env
        .nodes
        .iter()
        .find(|n| **n != first)
        .expect("node")
        .clone();
    env.ctx
        .eventually(
            "the AlertSourceUnreachable condition",
            Duration::from_secs(90),
            || async {
                match env.condition(&sk, schema::ALERT_GATE_CONDITION).await {
                    Some((r, m))
                        if r == schema::ALERT_SOURCE_UNREACHABLE_REASON && m.contains("Hold") =>
                    {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    env.ctx
        .eventually("batch 1 done", Duration::from_secs(90), || async {
            let s = env.skyhooks.get(&sk).await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            match st.node_status.get(&first) {
                Some(schema::Status::Complete) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    env.ctx
        .holds_for(
            "batch 2 held while Prometheus is down",
            Duration::from_secs(10),
            || async {
                match jobs_on(&env, &sk, &second).await {
                    0 => Ok(()),
                    n => Err(format!("{n} Jobs on {second}")),
                }
            },
        )
        .await;
}

#[tokio::test]
async fn a_bad_alert_gate_is_refused_naming_the_field() {
    crate::support::install_crds();
    let ctx = crate::support::TestCtx::new("gates-alerts-bad").await;
    let cases = [
        (json!({"url": "prometheus:9090"}), "alertGate.url"),
        (
            json!({"url": "http://prometheus:9090", "matchers": ["severity"]}),
            "alertGate.matchers",
        ),
    ];
    for (gate, field) in cases {
        let p: DeploymentPolicy = serde_json::from_value(json!({
            "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
            "metadata": {"name": ctx.name("bad")},
            "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
                "alertGate": gate},
        }))
        .expect("policy");
        let err = Api::<DeploymentPolicy>::all(ctx.client.clone())
            .create(&PostParams::default(), &p)
            .await
            .expect_err("a bad alert gate is refused");
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
}
