//! D43 (issue 37, acceptance 7): `spec.serial: true` runs one package stage at a time on each
//! node (nodes of a batch still work side by side), and the node state says `in_progress`
//! while a stage runs. The reference accepted the field and, in effect, ignored it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use skyhook::schema::{self, State};

use crate::support::interrupts::finished;
use crate::support::{label, pkg, setup, skyhook, sleep};

#[tokio::test]
async fn serial_runs_one_package_per_node_at_a_time() {
    let env = setup("up-serial", 2, &[]).await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"serial": true, "interruptionBudget": {"count": 2}, "packages": {
            "alpha": pkg("1.0.0", sleep("2")),
            "bravo": pkg("1.0.0", sleep("2")),
            "charlie": pkg("1.0.0", sleep("2")),
        }}),
    ))
    .await;
    let mut most_per_node = 0;
    let mut nodes_at_once = 0;
    let mut in_progress_seen = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let jobs = env.jobs_of(&sk).await;
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for j in jobs.iter().filter(|j| !finished(j)) {
            *per_node
                .entry(label(j, schema::NODE_LABEL).to_string())
                .or_default() += 1;
        }
        most_per_node = most_per_node.max(per_node.values().copied().max().unwrap_or(0));
        nodes_at_once = nodes_at_once.max(per_node.len());
        for node in per_node.keys() {
            if let Some((_, state)) = env.node_state(node, &sk).await {
                in_progress_seen |= state
                    .iter()
                    .any(|(_, e)| e.state == Some(State::InProgress));
            }
        }
        if env.is_complete(&sk).await {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no rollout");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(most_per_node, 1, "two stages ran at once on a node");
    assert_eq!(
        nodes_at_once, 2,
        "the nodes of the batch did not work side by side"
    );
    assert!(in_progress_seen, "no in_progress entry while a stage ran");
    // Every package ran everywhere, one after the other.
    for node in &env.nodes {
        let (_, state) = env.node_state(node, &sk).await.expect("state");
        for p in ["alpha", "bravo", "charlie"] {
            assert_eq!(
                state.get(p, "1.0.0").and_then(|e| e.state),
                Some(State::Complete),
                "{node} {p}"
            );
        }
    }
}
