//! A NodeWright named as a Skyhook takes its nodes over (issue 39, acceptance 2): it waits while
//! the Skyhook is mid-rollout (upstream's migration hold), then copies the Skyhook's node keys to
//! its prefix (identical JSON) and reports complete with no stage run again; the Skyhook is
//! frozen from then on, and deleting it only releases its finalizer. `LEGACY_CLEANUP_DELAY` later
//! the legacy keys of the name go.

use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema::{self, Status};

use super::{
    assert_keys_under_both_prefixes, create_nodewright, jobs_labelled, nodewright_state, nw_setup,
    wait_nodewright,
};
use crate::support::{pkg, skyhook, sleep};

#[tokio::test]
async fn a_nodewright_waits_for_its_skyhook_then_takes_its_nodes_over_without_a_rerun() {
    let env = nw_setup("nw-takeover", 2, &[]).await;
    let name = env.ctx.name("sk");
    let spec = json!({"packages": {"tool": pkg("1.0.0", sleep("4"))}});
    env.create(&skyhook(&env.ctx, &name, spec.clone())).await;
    env.wait_status(&name, Status::InProgress, Duration::from_secs(60))
        .await;
    create_nodewright(&env.ctx, &name, spec).await;
    env.wait_event("the NodeWright says it waits", &name, |e| {
        e.reason.as_deref() == Some(schema::WAITING_FOR_SKYHOOK_REASON)
    })
    .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(120))
        .await;
    let done = wait_nodewright(&env, &name, Status::Complete, Duration::from_secs(60)).await;
    assert_eq!(
        done.status.map(|s| s.node_status.len()),
        Some(2),
        "both nodes complete"
    );
    assert_eq!(
        jobs_labelled(&env, "nodewright.nvidia.com/name", &name).await,
        0
    );

    // The node keys under both prefixes, with the same JSON.
    assert_keys_under_both_prefixes(&env, &name).await;

    // The Skyhook is frozen: a spec change runs nothing.
    let before = jobs_labelled(&env, schema::NAME_LABEL, &name).await;
    env.skyhooks
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"packages": {"more": pkg("1.0.0", sleep("1"))}}})),
        )
        .await
        .expect("edit the Skyhook");
    // Its owner is told, once, in a Warning on the Skyhook.
    let told = env
        .wait_event("the Skyhook says its edit is not applied", &name, |e| {
            e.reason.as_deref() == Some(schema::EDIT_NOT_APPLIED_REASON)
                && e.involved_object.kind.as_deref() == Some("Skyhook")
                && e.type_.as_deref() == Some("Warning")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("NodeWright"))
        })
        .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(jobs_labelled(&env, schema::NAME_LABEL, &name).await, before);
    let again = env
        .wait_event("the Warning still there", &name, |e| {
            e.metadata.uid == told.metadata.uid
        })
        .await;
    assert_eq!(again.count.unwrap_or(1), 1, "told once: {again:?}");
    let frozen: Skyhook = env.skyhooks.get(&name).await.expect("the Skyhook");
    assert_eq!(
        frozen.status.and_then(|s| s.status),
        Some(Status::Complete),
        "its status stays as it was"
    );

    // Deleted, it goes at once and leaves the nodes to the NodeWright.
    env.skyhooks
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the Skyhook");
    env.ctx
        .wait_for("the Skyhook gone", Duration::from_secs(30), || async {
            env.skyhooks
                .get_opt(&name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    for node in &env.nodes {
        assert!(
            nodewright_state(&env, node, &name).await.is_some(),
            "{node} lost the NodeWright's node state"
        );
    }
    wait_nodewright(&env, &name, Status::Complete, Duration::from_secs(30)).await;
}

/// `LEGACY_CLEANUP_DELAY` after the take-over (recorded on the NodeWright as upstream records it)
/// the legacy keys of the name leave the nodes; the NodeWright's stay, and so do the node's own
/// (`ignore`).
#[tokio::test]
async fn the_legacy_keys_go_after_the_clean_up_delay() {
    let env = nw_setup("nw-cleanup", 2, &[("LEGACY_CLEANUP_DELAY", "4s")]).await;
    let name = env.ctx.name("sk");
    let spec = json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}});
    for node in &env.nodes {
        env.node_api
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": {schema::IGNORE_LABEL: "false"}}})),
            )
            .await
            .expect("label the node");
    }
    env.create(&skyhook(&env.ctx, &name, spec.clone())).await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(60))
        .await;
    create_nodewright(&env.ctx, &name, spec).await;
    let done = wait_nodewright(&env, &name, Status::Complete, Duration::from_secs(60)).await;
    let at = done
        .metadata
        .annotations
        .unwrap_or_default()
        .get("nodewright.nvidia.com/legacy-migrated-at")
        .cloned();
    assert!(at.is_some(), "the take-over is not recorded");
    let legacy_prefix = "skyhook.nvidia.com/";
    env.ctx
        .eventually("the legacy keys gone", Duration::from_secs(40), || async {
            for node in &env.nodes {
                let n = env.node_api.get(node).await.map_err(|e| e.to_string())?;
                let left: Vec<String> = n
                    .metadata
                    .annotations
                    .unwrap_or_default()
                    .into_keys()
                    .chain(n.metadata.labels.unwrap_or_default().into_keys())
                    .chain(
                        n.status
                            .and_then(|s| s.conditions)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|c| c.type_),
                    )
                    .filter(|k| k.starts_with(legacy_prefix) && k.contains(&name))
                    .collect();
                if !left.is_empty() {
                    return Err(format!("{node}: {left:?}"));
                }
            }
            Ok(())
        })
        .await;
    for node in &env.nodes {
        assert!(
            nodewright_state(&env, node, &name).await.is_some(),
            "{node} lost the NodeWright's node state"
        );
        let n = env.node_api.get(node).await.expect("node");
        let l = n.metadata.labels.unwrap_or_default();
        assert_eq!(
            l.get(schema::IGNORE_LABEL).map(String::as_str),
            Some("false")
        );
        assert_eq!(
            l.get("nodewright.nvidia.com/ignore").map(String::as_str),
            Some("false"),
            "the ignore label is copied"
        );
    }
    assert_eq!(
        jobs_labelled(&env, "nodewright.nvidia.com/name", &name).await,
        0
    );
    wait_nodewright(&env, &name, Status::Complete, Duration::from_secs(10)).await;
}
