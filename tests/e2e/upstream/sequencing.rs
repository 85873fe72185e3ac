//! D3: `spec.sequencing`. A Skyhook with `sequencing: all` holds back the Skyhooks ordered after
//! it until it is complete on every node it targets, even on nodes it does not share with them
//! (the later one reads `waiting`); with `node` (the default, v0.13's behaviour) a node goes on
//! as soon as the earlier Skyhook is complete there. The field is stored, not pruned.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use skyhook::crd::{Sequencing, Skyhook};
use skyhook::schema::{self, Stage, Status};

use crate::support::{Env, label, pkg, setup, sleep};

/// A Skyhook of this test on the nodes labelled `role`.
fn on_role(env: &Env, name: &str, role: &str, spec: Value) -> Skyhook {
    let (k, v) = env.ctx.test_label();
    let mut spec = spec;
    spec["nodeSelectors"] = json!({"matchLabels": {k.clone(): v.clone(), "e2e-role": role}});
    serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": name, "labels": {k: v}},
        "spec": spec,
    }))
    .expect("Skyhook")
}

async fn set_role(env: &Env, node: &str, role: &str) {
    env.node_api
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"e2e-role": role}}})),
        )
        .await
        .expect("label the node");
}

async fn complete_on(env: &Env, node: &str, sk: &str) -> bool {
    let n = env.node_api.get(node).await.expect("node");
    n.metadata
        .annotations
        .and_then(|a| a.get(&schema::status_annotation(sk)).cloned())
        .as_deref()
        == Some(Status::Complete.as_str())
}

/// Runs the scenario; returns whether B started on the shared node before A was complete on
/// A's other node, and the statuses B showed before it started.
async fn scenario(test: &str, sequencing: &str) -> (bool, Vec<Status>) {
    let env = setup(test, 2, &[]).await;
    for n in &env.nodes {
        set_role(&env, n, "a").await;
    }
    let a = env.ctx.name("a");
    let b = env.ctx.name("b");
    env.create(&on_role(
        &env,
        &a,
        "a",
        json!({"priority": 100, "sequencing": sequencing, "interruptionBudget": {"count": 1},
            "packages": {"slow": pkg("1.0.0", sleep("4"))}}),
    ))
    .await;
    let stored = env.skyhooks.get(&a).await.expect("get A");
    let want = if sequencing == "all" {
        Sequencing::All
    } else {
        Sequencing::Node
    };
    assert_eq!(
        stored.spec.sequencing,
        Some(want),
        "sequencing was not stored"
    );
    // A works one node at a time: B goes on A's first node.
    let first = env
        .ctx
        .wait_for("A's first node", Duration::from_secs(60), || async {
            let jobs = env.jobs_of(&a).await;
            jobs.first()
                .map(|j| label(j, schema::NODE_LABEL).to_string())
        })
        .await;
    let other = env
        .nodes
        .iter()
        .find(|n| **n != first)
        .expect("two")
        .clone();
    // B targets only A's first node (a role of its own: the label is replaced).
    env.node_api
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"e2e-role-b": "yes"}}})),
        )
        .await
        .expect("label");
    let (k, v) = env.ctx.test_label();
    let b_sk: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": b, "labels": {k.clone(): v.clone()}},
        "spec": {"priority": 200,
            "nodeSelectors": {"matchLabels": {k: v, "e2e-role-b": "yes"}},
            "packages": {"quick": pkg("1.0.0", sleep("1"))}},
    }))
    .expect("B");
    env.create(&b_sk).await;
    let mut statuses = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let early = loop {
        assert!(tokio::time::Instant::now() < deadline, "B never started");
        let a_done_elsewhere = complete_on(&env, &other, &a).await;
        let b_started = env
            .jobs_of(&b)
            .await
            .iter()
            .any(|j| label(j, schema::STAGE_LABEL) == Stage::Apply.as_str());
        if b_started {
            break !a_done_elsewhere;
        }
        if let Some(s) = env
            .skyhooks
            .get(&b)
            .await
            .ok()
            .and_then(|s| s.status?.status)
        {
            statuses.push(s);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    env.wait_status(&b, Status::Complete, Duration::from_secs(120))
        .await;
    (early, statuses)
}

#[tokio::test]
async fn sequencing_all_holds_later_skyhooks_until_complete_everywhere() {
    let (early, statuses) = scenario("up-seq-all", "all").await;
    assert!(!early, "B started before A was complete on every node");
    assert!(
        statuses.contains(&Status::Waiting),
        "B did not read waiting: {statuses:?}"
    );
}

#[tokio::test]
async fn sequencing_node_lets_a_node_go_on_once_done_there() {
    let (early, _) = scenario("up-seq-node", "node").await;
    assert!(
        early,
        "B waited for A's other node although sequencing is node"
    );
}
