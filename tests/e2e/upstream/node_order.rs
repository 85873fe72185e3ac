//! D7: every stage Job gets `SKYHOOK_NODE_ORDER`, the node's place in the rollout (0 for the
//! first node picked), and `status.nodeOrderOffset` counts the nodes that finished; the values
//! keep growing across batches.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::{label, pkg, setup, skyhook, sleep};

#[tokio::test]
async fn each_node_gets_its_order_and_the_offset_counts_finished_nodes() {
    let env = setup("up-node-order", 3, &[]).await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"interruptionBudget": {"count": 1}, "packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    let done = env
        .wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
    let status = done.status.expect("status");
    assert_eq!(status.node_order_offset, 3, "{status:?}");
    assert!(
        status.node_priority.is_empty(),
        "finished nodes stay listed"
    );
    // Each node's Jobs carry one order; nodes picked later have higher ones.
    let mut orders: BTreeMap<String, (jiff::Timestamp, String)> = BTreeMap::new();
    for j in env.jobs_of(&sk).await {
        let node = label(&j, schema::NODE_LABEL).to_string();
        let created = j.metadata.creation_timestamp.clone().expect("created").0;
        let order = j
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .into_iter()
            .flat_map(|p| p.containers.iter())
            .flat_map(|c| c.env.iter().flatten())
            .find(|e| e.name == schema::SKYHOOK_NODE_ORDER_ENV)
            .and_then(|e| e.value.clone())
            .expect("SKYHOOK_NODE_ORDER");
        let seen = orders
            .entry(node.clone())
            .or_insert((created, order.clone()));
        assert_eq!(seen.1, order, "{node}: two orders");
        seen.0 = seen.0.min(created);
    }
    let mut by_start: Vec<(jiff::Timestamp, String)> = orders.into_values().collect();
    by_start.sort();
    let values: Vec<String> = by_start.into_iter().map(|(_, o)| o).collect();
    assert_eq!(values, ["0", "1", "2"]);
}
