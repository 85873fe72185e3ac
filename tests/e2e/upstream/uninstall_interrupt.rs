//! D12 (tolerance): upstream v0.16+ writes the stage `uninstall-interrupt` into a node's state.
//! A node arriving with such an entry for a package no longer in the spec is neither unreadable
//! nor stuck: the uninstall ran, its interrupt went with the spec, so the entry is removed and
//! the rollout completes.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::{pkg, setup, skyhook};

#[tokio::test]
async fn an_uninstall_interrupt_entry_from_upstream_is_read_and_finished() {
    let env = setup("up-uninst-intr", 1, &[]).await;
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");
    let upstream_state = json!({
        "gone|1.0.0": {"name": "gone", "version": "1.0.0",
            "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
            "stage": "uninstall-interrupt", "state": "in_progress"},
    });
    env.node_api
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                schema::node_state_annotation(&name): upstream_state.to_string()}}})),
        )
        .await
        .expect("write upstream's node state");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"keep": pkg("1.0.0", json!([]))}}),
    ))
    .await;
    let sk = env
        .wait_status(&name, Status::Complete, Duration::from_secs(120))
        .await;
    let unreadable = sk.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == schema::NODE_STATE_UNREADABLE_CONDITION && c.status == "True")
    });
    assert!(unreadable.is_none(), "{unreadable:?}");
    let (raw, state) = env.node_state(&node, &name).await.expect("node state");
    assert!(state.get("gone", "1.0.0").is_none(), "{raw}");
    assert!(state.get("keep", "1.0.0").is_some(), "{raw}");
    assert!(!raw.contains("uninstall-interrupt"), "{raw}");
}
