//! Soak between batches (issue 38, acceptance 4): batch 2 starts no earlier than the soak after
//! batch 1's end; a node of batch 1 made NotReady during the soak fails the batch (here the
//! failure threshold then stops the rollout).

use std::time::Duration;

use jiff::{Timestamp, ToSpan};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use skyhook::schema::{self, Status};

use crate::support::{Env, create_policy, label, pkg, setup, skyhook, sleep};

async fn policy_with(env: &Env, strategy: Value, soak: &str) -> String {
    let spec = json!({"default": {"budget": {"count": 1}, "strategy": strategy}, "soak": soak});
    create_policy(&env.ctx, spec).await
}

fn at(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Timestamp {
    t.map(|t| t.0).unwrap_or(Timestamp::MAX)
}

fn on<'a>(jobs: &'a [Job], node: &str) -> Vec<&'a Job> {
    jobs.iter()
        .filter(|j| label(j, schema::NODE_LABEL) == node)
        .collect()
}

#[tokio::test]
async fn the_next_batch_waits_for_the_soak() {
    let env = setup("gates-soak", 2, &[]).await;
    let policy = policy_with(&env, json!({"fixed": {"initialBatch": 1}}), "20s").await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": policy, "packages": {"tool": pkg("1.0.0", sleep("2"))}}),
    ))
    .await;
    env.wait_event("the soak beginning", &sk, |e| {
        e.reason.as_deref() == Some(schema::SOAKING_REASON)
    })
    .await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
    let jobs = env.jobs_of(&sk).await;
    let first = jobs
        .iter()
        .min_by_key(|j| at(j.metadata.creation_timestamp.as_ref()))
        .expect("jobs");
    let batch1 = label(first, schema::NODE_LABEL).to_string();
    let other = env.nodes.iter().find(|n| **n != batch1).expect("node");
    let batch1_end = on(&jobs, &batch1)
        .iter()
        .map(|j| at(j.status.as_ref().and_then(|s| s.completion_time.as_ref())))
        .max()
        .expect("batch 1 ended");
    let batch2_start = on(&jobs, other)
        .iter()
        .map(|j| at(j.metadata.creation_timestamp.as_ref()))
        .min()
        .expect("batch 2 started");
    assert!(
        batch2_start >= batch1_end.checked_add(19.seconds()).expect("time"),
        "batch 2 started at {batch2_start}, batch 1 ended at {batch1_end}: less than the 20 s soak"
    );
}

#[tokio::test]
async fn a_node_going_not_ready_during_the_soak_fails_the_batch() {
    let env = setup("gates-soak-fail", 2, &[]).await;
    let strategy = json!({"fixed": {"initialBatch": 1, "failureThreshold": 1, "safetyLimit": 100}});
    let policy = policy_with(&env, strategy, "5m").await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": policy, "packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    // Batch 1 done, soaking.
    let soaking = env
        .ctx
        .wait_for("a batch soaking", Duration::from_secs(120), || async {
            let b = env.batch_state(&sk).await?;
            (b.soak_until.is_some() && b.soak_nodes.len() == 1).then_some(b)
        })
        .await;
    let sick = soaking.soak_nodes[0].clone();
    let nodes: Api<Node> = Api::all(env.ctx.client.clone());
    let set_ready = |status: &'static str| {
        let nodes = nodes.clone();
        let sick = sick.clone();
        async move {
            let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status,
                "reason": "E2ESoak", "message": "set by the soak test"}]}});
            nodes
                .patch_status(&sick, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
                .expect("patch the node's Ready condition");
        }
    };
    // kwok makes a NotReady node Ready again unless it carries this mark.
    let hold =
        |v: Option<&str>| json!({"metadata": {"annotations": {"skyhook.test/hold-not-ready": v}}});
    nodes
        .patch(
            &sick,
            &PatchParams::default(),
            &Patch::Merge(&hold(Some("true"))),
        )
        .await
        .expect("mark the node");
    set_ready("False").await;
    env.wait_event("SoakFailed", &sk, |e| {
        e.reason.as_deref() == Some(schema::SOAK_FAILED_REASON)
            && e.type_.as_deref() == Some("Warning")
            && e.message.as_deref().is_some_and(|m| m.contains(&sick))
    })
    .await;
    let b = env.batch_state(&sk).await.expect("batch state");
    assert!(
        b.should_stop && b.last_batch_failed && b.consecutive_failures == 1,
        "{b:?}"
    );
    assert!(b.soak_until.is_none(), "the failed soak goes on: {b:?}");
    let other = env
        .nodes
        .iter()
        .find(|n| **n != sick)
        .expect("node")
        .clone();
    env.ctx
        .holds_for(
            "the stopped rollout starts no node",
            Duration::from_secs(10),
            || async {
                match on(&env.jobs_of(&sk).await, &other).len() {
                    0 => Ok(()),
                    n => Err(format!("{n} Jobs on {other}")),
                }
            },
        )
        .await;
    nodes
        .patch(&sick, &PatchParams::default(), &Patch::Merge(&hold(None)))
        .await
        .expect("unmark the node");
    set_ready("True").await;
}
