//! The alert gate (issue 38, acceptance 3) against a real Prometheus, built from its Go module,
//! with a real alerting rule on a real metric: the rollout holds while the alert fires, with a
//! condition naming it, and resumes when it clears; with Prometheus stopped it holds and says so.
//! Where the gate may send its requests and credentials (issue 50, item 3), and a source that
//! never answers stalling no pass (item 4).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
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

/// A fake alert source on 127.0.0.1: answers 500 with a planted body, and records the
/// `authorization` header of every request.
struct Source {
    port: u16,
    authorizations: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Source {
    async fn start(body: String) -> Source {
        let authorizations: Arc<Mutex<Vec<String>>> = Arc::default();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the source");
        let port = listener.local_addr().expect("address").port();
        let seen = authorizations.clone();
        let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let (seen, body) = (seen.clone(), body.clone());
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                seen.lock().expect("lock").push(auth);
                (axum::http::StatusCode::INTERNAL_SERVER_ERROR, body)
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Source {
            port,
            authorizations,
            task,
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A Skyhook `name` held by an alert gate of `gate`; returns its name.
async fn gated(env: &Env, name: &str, gate: serde_json::Value) -> String {
    let spec = json!({"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
        "alertGate": gate});
    let policy = env.ctx.name(&format!("{name}-policy"));
    let object: DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": policy}, "spec": spec,
    }))
    .expect("policy");
    Api::<DeploymentPolicy>::all(env.ctx.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create the DeploymentPolicy");
    let sk = env.ctx.name(name);
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": policy, "packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    sk
}

/// The alert gate's condition message once it says `says`.
async fn gate_says(env: &Env, sk: &str, says: &str) -> String {
    env.ctx
        .eventually(
            &format!("the alert gate of {sk} saying {says:?}"),
            Duration::from_secs(60),
            || async {
                match env.condition(sk, schema::ALERT_GATE_CONDITION).await {
                    Some((_, m)) if m.contains(says) => Ok(m),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await
}

/// Issue 50, item 3: whoever writes a DeploymentPolicy chooses the URL; the operator (running
/// with its shipped rights) sends its credentials only over https, never reaches a
/// cloud-metadata address, reads only the allowed hosts, and reports an answer's status and
/// host, never its body.
#[tokio::test]
async fn an_alert_gate_never_sends_credentials_astray_nor_reads_an_answer_back() {
    let env = setup(
        "gates-alert-egress",
        1,
        &[("ALERT_GATE_ALLOWED_HOSTS", "127.0.0.1,169.254.169.254")],
    )
    .await;
    let planted_body = format!("PLANTED-body-{}", env.ctx.prefix);
    let planted_token = format!("PLANTED-token-{}", env.ctx.prefix);
    let source = Source::start(planted_body.clone()).await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "skyhook-alert-credentials"},
        "stringData": {"token": planted_token},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(env.ctx.client.clone(), &env.ctx.ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the credentials Secret");
    let url = format!("http://127.0.0.1:{}", source.port);

    // Credentials and plain http: nothing is sent, and the gate says why.
    let creds = gated(
        &env,
        "creds",
        json!({"url": url, "credentialsSecret": "skyhook-alert-credentials"}),
    )
    .await;
    gate_says(&env, &creds, "ALERT_GATE_ALLOW_HTTP_CREDENTIALS").await;
    // An answer's body never reaches the status or an Event: its status and host do.
    let plain = gated(&env, "plain", json!({"url": url})).await;
    let said = gate_says(&env, &plain, "HTTP 500 from 127.0.0.1").await;
    assert!(!said.contains(&planted_body), "{said}");
    // A cloud-metadata address is never connected to, even when allowed by name.
    let metadata = gated(&env, "metadata", json!({"url": "http://169.254.169.254"})).await;
    gate_says(&env, &metadata, "link-local or cloud-metadata").await;
    // A host outside the allow-list is not read.
    let other = gated(
        &env,
        "other",
        json!({"url": format!("http://localhost:{}", source.port)}),
    )
    .await;
    gate_says(&env, &other, "ALERT_GATE_ALLOWED_HOSTS").await;

    let seen = source.authorizations.lock().expect("lock").clone();
    assert!(!seen.is_empty(), "the plain source was read");
    assert!(
        seen.iter().all(String::is_empty),
        "credentials went over http: {seen:?}"
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(env.ctx.client.clone());
    let all = events
        .list(&kube::api::ListParams::default())
        .await
        .expect("events");
    for e in all.items {
        let m = e.message.unwrap_or_default();
        assert!(
            !m.contains(&planted_body) && !m.contains("PLANTED-token"),
            "an Event leaks: {m}"
        );
    }
}

/// Sum and count of the operator's plan-phase pass seconds.
async fn plan_seconds(env: &Env) -> (f64, f64) {
    let port = env.op.metrics_port;
    let text = tokio::task::spawn_blocking(move || crate::support::metrics::metrics(port))
        .await
        .expect("metrics");
    let mut out = (0.0, 0.0);
    for (name, labels, value) in crate::support::metrics::samples(&text) {
        if labels.get("phase").map(String::as_str) != Some("plan") {
            continue;
        }
        let v: f64 = value.parse().unwrap_or(0.0);
        match name.as_str() {
            "skyhook_operator_pass_seconds_sum" => out.0 = v,
            "skyhook_operator_pass_seconds_count" => out.1 = v,
            _ => {}
        }
    }
    out
}

/// One Skyhook without a gate rolled out to the nodes: (seconds, mean plan seconds a pass of
/// any Skyhook took meanwhile).
async fn ungated_rollout(env: &Env, name: &str) -> (f64, f64) {
    let before = plan_seconds(env).await;
    let started = std::time::Instant::now();
    let sk = env.ctx.name(name);
    let mut second = pkg("1.0.0", sleep("1"));
    second["dependsOn"] = json!({"first": "1.0.0"});
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"first": pkg("1.0.0", sleep("1")), "second": second}}),
    ))
    .await;
    env.wait_status(&sk, schema::Status::Complete, Duration::from_secs(180))
        .await;
    let took = started.elapsed().as_secs_f64();
    let after = plan_seconds(env).await;
    let passes = (after.1 - before.1).max(1.0);
    (took, (after.0 - before.0) / passes)
}

/// Issue 50, item 4: an alert source that never answers costs the passes nothing. A Skyhook
/// without a gate rolls out as fast beside a Skyhook whose gate reads a black hole (a listener
/// that accepts and never answers) as without it.
#[tokio::test]
async fn a_black_holed_alert_source_stalls_no_pass() {
    let env = setup("gates-alert-hole", 2, &[]).await;
    let (alone, alone_pass) = ungated_rollout(&env, "alone").await;
    let (port, held) = crate::support::black_hole().await;
    let gated_sk = gated(
        &env,
        "hole",
        json!({"url": format!("http://127.0.0.1:{port}")}),
    )
    .await;
    gate_says(&env, &gated_sk, "127.0.0.1").await;
    let (beside, beside_pass) = ungated_rollout(&env, "beside").await;
    held.abort();
    eprintln!(
        "ungated rollout alone: {alone:.1} s (mean plan phase {:.3} s); beside a black-holed \
         alert source: {beside:.1} s (mean plan phase {:.3} s)",
        alone_pass, beside_pass
    );
    assert!(
        beside <= alone * 1.3 + 3.0,
        "the black hole slowed the other rollout: {alone:.1} s alone, {beside:.1} s beside it"
    );
    assert!(
        beside_pass < 0.5,
        "passes waited on the black hole: mean plan phase {beside_pass:.3} s"
    );
}
