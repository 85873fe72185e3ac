//! D48: a node of the batch that is ignored mid-rollout keeps its state but gives its slot
//! back, so the rest of the rollout is not stalled; unignored, it resumes where it stopped.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::{Env, reboot_pkg, setup, skyhook};

async fn cordoned_by(env: &Env, node: &str, sk: &str) -> bool {
    let n = env.node_api.get(node).await.expect("node");
    n.metadata
        .annotations
        .is_some_and(|a| a.contains_key(&schema::cordon_annotation(sk)))
}

async fn set_ignored(env: &Env, node: &str, ignored: bool) {
    let value = if ignored {
        json!(schema::TRUE_VALUE)
    } else {
        json!(null)
    };
    env.node_api
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {schema::IGNORE_LABEL: value}}})),
        )
        .await
        .expect("label the node");
}

#[tokio::test]
async fn an_ignored_node_mid_batch_does_not_stall_the_rollout() {
    let env = setup("up-ignore-mid", 2, &[]).await;
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    // A protected pod on each node holds its interrupt: the node of the batch stays cordoned
    // with no Job running, the case that stalled the batch.
    let mut guards = Vec::new();
    for node in &env.nodes {
        let name = env.ctx.name(&format!("guard-{node}"));
        env.run_workload(&name, node, json!({"labels": {"dontmess": "withme"}}))
            .await;
        guards.push(name);
    }
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"interruptionBudget": {"count": 1},
            "podNonInterruptLabels": {"matchLabels": {"dontmess": "withme"}},
            "packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    let first = env
        .ctx
        .wait_for(
            "the first node of the batch",
            Duration::from_secs(60),
            || async {
                for n in &env.nodes {
                    if cordoned_by(&env, n, &sk).await {
                        return Some(n.clone());
                    }
                }
                None
            },
        )
        .await;
    let second = env
        .nodes
        .iter()
        .find(|n| **n != first)
        .expect("two nodes")
        .clone();
    // Held by its guard: the batch of one waits on it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !cordoned_by(&env, &second, &sk).await,
        "the budget of 1 was exceeded"
    );
    set_ignored(&env, &first, true).await;
    env.ctx
        .wait_for(
            "the second node to start",
            Duration::from_secs(60),
            || async { cordoned_by(&env, &second, &sk).await.then_some(()) },
        )
        .await;
    // The ignored node is left as it was (still cordoned for this Skyhook).
    assert!(
        cordoned_by(&env, &first, &sk).await,
        "the ignored node was touched"
    );
    // Unignored and unguarded, everything completes.
    set_ignored(&env, &first, false).await;
    for g in &guards {
        pods.delete(g, &DeleteParams::default())
            .await
            .expect("delete guard");
    }
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
}

/// D6: a node keeps its slot between two chained packages (v0.13 let it go between them, so a
/// budget of one ran every node at once); sampled, never two nodes at work.
#[tokio::test]
async fn a_node_keeps_its_slot_between_chained_packages() {
    use std::collections::BTreeSet;

    use crate::support::interrupts::finished;
    use crate::support::{label, pkg, sleep};

    let env = setup("up-sticky", 3, &[]).await;
    let sk = env.ctx.name("sk");
    let mut second = pkg("1.0.0", sleep("2"));
    second["dependsOn"] = json!({"first": "1.0.0"});
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"interruptionBudget": {"count": 1},
            "packages": {"first": pkg("1.0.0", sleep("2")), "second": second}}),
    ))
    .await;
    let status_key = schema::status_annotation(&sk);
    let (k, v) = env.ctx.test_label();
    let test_nodes = kube::api::ListParams::default().labels(&format!("{k}={v}"));
    let mut most = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while !env.is_complete(&sk).await {
        assert!(tokio::time::Instant::now() < deadline, "no rollout");
        // Each list is one snapshot: nodes with a Job at work, and nodes the operator marked
        // in progress (a node between two chained packages has no Job but keeps its slot).
        let with_jobs: BTreeSet<String> = env
            .jobs_of(&sk)
            .await
            .iter()
            .filter(|j| !finished(j))
            .map(|j| label(j, schema::NODE_LABEL).to_string())
            .collect();
        let marked: BTreeSet<String> = env
            .node_api
            .list(&test_nodes)
            .await
            .expect("nodes")
            .items
            .into_iter()
            .filter(|n| {
                n.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(&status_key))
                    .map(String::as_str)
                    == Some(Status::InProgress.as_str())
            })
            .filter_map(|n| n.metadata.name)
            .collect();
        most = most.max(with_jobs.len()).max(marked.len());
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(most, 1, "two nodes at work under a budget of one");
}
