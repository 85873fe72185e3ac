//! D28 `drainConfig` (issue 37): a drain that `force: false` holds on an unmanaged pod times
//! out (`timeout`): the node reads `erroring`, a `DrainTimeout` Warning is recorded, the pod is
//! never evicted and the node stays cordoned; once the pod is gone the interrupt runs. With
//! `disableEviction` pods are deleted, so a PodDisruptionBudget that refuses every eviction does
//! not hold the drain.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PostParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::interrupts::SlowInterrupts;
use crate::support::{Env, reboot_pkg, setup, skyhook};

async fn node_status(env: &Env, sk: &str) -> Option<String> {
    let n = env.node_api.get(&env.nodes[0]).await.ok()?;
    n.metadata
        .annotations?
        .get(&schema::status_annotation(sk))
        .cloned()
}

#[tokio::test]
async fn a_drain_held_by_force_false_times_out_and_resumes_once_the_pod_is_gone() {
    let env = setup("up-drain-timeout", 1, &[]).await;
    let node = env.nodes[0].clone();
    let _slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "1").await;
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let web = env.ctx.name("web");
    env.run_workload(&web, &node, json!({})).await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"drainConfig": {"force": false, "timeout": "4s"},
               "packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    env.ctx
        .wait_for(
            "the node erroring after the drain timeout",
            Duration::from_secs(90),
            || async {
                (node_status(&env, &sk).await.as_deref() == Some("erroring")).then_some(())
            },
        )
        .await;
    env.wait_event("a DrainTimeout Warning", &node, |e| {
        e.reason.as_deref() == Some(schema::DRAIN_TIMEOUT_REASON)
            && e.type_.as_deref() == Some("Warning")
            && e.message
                .as_deref()
                .is_some_and(|m| m.contains("drainConfig.timeout"))
    })
    .await;
    let n = env.node_api.get(&node).await.expect("node");
    assert_eq!(
        n.spec.and_then(|s| s.unschedulable),
        Some(true),
        "uncordoned"
    );
    assert!(
        n.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(&schema::drain_start_annotation(&sk)),
        "no drain clock on the node"
    );
    let p = pods
        .get(&web)
        .await
        .expect("the unmanaged pod is still there");
    assert!(
        p.metadata.deletion_timestamp.is_none(),
        "evicted under force: false"
    );
    assert!(
        env.jobs_of(&sk)
            .await
            .iter()
            .all(|j| crate::support::label(j, schema::STAGE_LABEL) != "interrupt"),
        "the interrupt ran before the drain"
    );

    // The administrator moves the pod: the interrupt runs and the clock goes.
    pods.delete(&web, &Default::default())
        .await
        .expect("delete");
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
    let n = env.node_api.get(&node).await.expect("node");
    assert!(
        !n.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(&schema::drain_start_annotation(&sk)),
        "the drain clock stayed"
    );
}

#[tokio::test]
async fn disable_eviction_deletes_pods_a_disruption_budget_protects() {
    let env = setup("up-drain-delete", 1, &[]).await;
    let node = env.nodes[0].clone();
    let _slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "1").await;
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let web = env.ctx.name("web");
    env.run_workload(&web, &node, json!({"labels": {"app": "web"}}))
        .await;
    // A bare pod gives the disruption controller nothing to scale from: no eviction is allowed.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let pdb = serde_json::from_value(json!({"metadata": {"name": env.ctx.name("pdb")},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}}))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create the PodDisruptionBudget");
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"drainConfig": {"disableEviction": true, "gracePeriod": "3s"},
               "packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
    assert!(
        pods.get_opt(&web).await.expect("get").is_none(),
        "the protected pod was not deleted"
    );
}
