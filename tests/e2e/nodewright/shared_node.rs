//! One node under both APIs (issue 49, acceptance 1): a Skyhook and a NodeWright of different
//! names select the same node. The runtime-required taint stays until both are complete there,
//! neither uncordons the node while the other's interrupt runs, and priority orders them.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Api as Kind, Status};

use super::{create_nodewright, nw_setup, wait_nodewright};
use crate::support::interrupts::SlowInterrupts;
use crate::support::{Env, pkg, reboot_pkg, skyhook, sleep};

/// The operator's runtime-required taint (its default `RUNTIME_REQUIRED_TAINT`).
const RUNTIME_TAINT: &str = "skyhook.nvidia.com=runtime-required:NoSchedule";

async fn tainted(env: &Env, node: &str) -> bool {
    let n = env.node_api.get(node).await.expect("node");
    n.spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == "skyhook.nvidia.com" && t.value.as_deref() == Some("runtime-required"))
}

#[tokio::test]
async fn the_runtime_required_taint_stays_until_both_apis_are_complete() {
    let env = nw_setup("nw-shared-rr", 1, &[]).await;
    let node = env.nodes[0].clone();
    let out = env.ctx.kubectl(&["taint", "node", &node, RUNTIME_TAINT]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let legacy = env.ctx.name("toolkit");
    let mut sk = skyhook(
        &env.ctx,
        &legacy,
        json!({"runtimeRequired": true, "packages": {"toolkit": pkg("1.0.0", sleep("1"))}}),
    );
    sk.metadata
        .annotations
        .get_or_insert_default()
        .insert(schema::PAUSE_ANNOTATION.to_string(), "true".to_string());
    env.create(&sk).await;
    let nw = env.ctx.name("driver");
    create_nodewright(
        &env.ctx,
        &nw,
        json!({"runtimeRequired": true, "packages": {"driver": pkg("1.0.0", sleep("1"))}}),
    )
    .await;
    wait_nodewright(&env, &nw, Status::Complete, Duration::from_secs(90)).await;
    env.ctx
        .holds_for(
            "the taint stays while the paused Skyhook has not run",
            Duration::from_secs(6),
            || async {
                if tainted(&env, &node).await {
                    Ok(())
                } else {
                    Err("the runtime-required taint was lifted".to_string())
                }
            },
        )
        .await;
    env.skyhooks
        .patch(
            &legacy,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {schema::PAUSE_ANNOTATION: null}}})),
        )
        .await
        .expect("resume the Skyhook");
    env.wait_status(&legacy, Status::Complete, Duration::from_secs(90))
        .await;
    env.ctx
        .wait_for("the taint lifted", Duration::from_secs(30), || async {
            (!tainted(&env, &node).await).then_some(())
        })
        .await;
}

/// The interrupt Jobs of both APIs on the test's namespace that have not finished.
async fn interrupts_at_work(env: &Env) -> Vec<String> {
    let jobs: Api<Job> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let mut out = Vec::new();
    for label in [
        schema::INTERRUPT_LABEL.to_string(),
        Kind::NodeWright.local(schema::INTERRUPT_LABEL).into_owned(),
    ] {
        let lp = ListParams::default().labels(&label);
        for j in jobs.list(&lp).await.map(|l| l.items).unwrap_or_default() {
            if !crate::support::interrupts::finished(&j) {
                out.push(format!("job/{}", j.name_any()));
            }
        }
        for p in pods.list(&lp).await.map(|l| l.items).unwrap_or_default() {
            if !crate::support::interrupts::pod_done(&p) {
                out.push(format!("pod/{}", p.name_any()));
            }
        }
    }
    out
}

#[tokio::test]
async fn neither_api_uncordons_a_node_while_the_others_interrupt_runs() {
    let env = nw_setup("nw-shared-cordon", 1, &[]).await;
    let _slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "5").await;
    let node = env.nodes[0].clone();
    let legacy = env.ctx.name("a");
    env.create(&skyhook(
        &env.ctx,
        &legacy,
        json!({"packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    let nw = env.ctx.name("b");
    create_nodewright(
        &env.ctx,
        &nw,
        json!({"packages": {"firmware": reboot_pkg("1.0.0")}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(180);
    let (mut samples, mut at_work) = (0, 0);
    loop {
        let working = interrupts_at_work(&env).await;
        let n = env.node_api.get(&node).await.expect("node");
        let cordoned = n.spec.and_then(|s| s.unschedulable).unwrap_or(false);
        samples += 1;
        if !working.is_empty() {
            at_work += 1;
            assert!(
                cordoned,
                "{node} is schedulable while {working:?} runs (sample {samples})"
            );
        }
        let sk = env.skyhooks.get(&legacy).await.expect("the Skyhook");
        let done_legacy = sk.status.and_then(|s| s.status) == Some(Status::Complete);
        let done_nw = super::nodewright(&env.ctx, &nw)
            .await
            .and_then(|s| s.status)
            .and_then(|s| s.status)
            == Some(Status::Complete);
        if done_legacy && done_nw && working.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "both rollouts did not complete in 180 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        at_work > 5,
        "no interrupt was seen at work ({at_work} of {samples} samples)"
    );
    let n = env.node_api.get(&node).await.expect("node");
    assert_ne!(
        n.spec.and_then(|s| s.unschedulable),
        Some(true),
        "left cordoned"
    );
}

/// The earliest creation and the latest completion of the Jobs labelled `label=name`.
async fn job_span(env: &Env, label: &str, name: &str) -> (jiff::Timestamp, jiff::Timestamp) {
    let jobs: Api<Job> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let list = jobs
        .list(&ListParams::default().labels(&format!("{label}={name}")))
        .await
        .expect("list Jobs")
        .items;
    assert!(!list.is_empty(), "no Job of {name}");
    let created = list
        .iter()
        .filter_map(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .min()
        .expect("created");
    let done = list
        .iter()
        .filter_map(|j| j.status.as_ref()?.completion_time.as_ref().map(|t| t.0))
        .max()
        .expect("completed");
    (created, done)
}

#[tokio::test]
async fn a_priority_1_skyhook_runs_before_a_priority_2_nodewright() {
    let env = nw_setup("nw-shared-prio", 1, &[]).await;
    // Names against the priority: by name alone the NodeWright would go first.
    let legacy = env.ctx.name("z-first");
    let nw = env.ctx.name("a-second");
    let sk = skyhook(
        &env.ctx,
        &legacy,
        json!({"priority": 1, "packages": {"early": pkg("1.0.0", sleep("3"))}}),
    );
    env.create(&sk).await;
    create_nodewright(
        &env.ctx,
        &nw,
        json!({"priority": 2, "packages": {"late": pkg("1.0.0", sleep("1"))}}),
    )
    .await;
    env.wait_status(&legacy, Status::Complete, Duration::from_secs(90))
        .await;
    wait_nodewright(&env, &nw, Status::Complete, Duration::from_secs(90)).await;
    let (_, legacy_done) = job_span(&env, schema::NAME_LABEL, &legacy).await;
    let nw_label = Kind::NodeWright.local(schema::NAME_LABEL).into_owned();
    let (nw_started, _) = job_span(&env, &nw_label, &nw).await;
    assert!(
        nw_started
            >= legacy_done
                .checked_sub(jiff::SignedDuration::from_secs(1))
                .expect("time"),
        "the NodeWright's first Job ({nw_started}) before the Skyhook finished ({legacy_done})"
    );
}
