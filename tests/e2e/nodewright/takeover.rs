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

use skyhook::schema::Api as Kind;

use super::{
    assert_keys_under_both_prefixes, create_nodewright, jobs_labelled, nodewright_state, nw_setup,
    objects, wait_nodewright,
};
use crate::support::plugin::plugin_async;
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
    not_ignored(&env).await;
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

/// Every node of the test labelled `ignore=false` (a node-scoped key the take-over copies).
async fn not_ignored(env: &crate::support::Env) {
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
}

/// The label `key` of every node of the test, as stored.
async fn node_labels(env: &crate::support::Env, key: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for node in &env.nodes {
        let n = env.node_api.get(node).await.expect("node");
        out.push(n.metadata.labels.unwrap_or_default().get(key).cloned());
    }
    out
}

/// From the operator's `/metrics`: (its node patches, its passes planned).
fn node_patches_and_passes(env: &crate::support::Env) -> (f64, f64) {
    let text = crate::support::metrics::raw_metrics(env.op.metrics_port);
    let patches = crate::support::metrics::requests(&text)
        .get(&("patch".to_string(), "nodes".to_string()))
        .copied()
        .unwrap_or(0.0);
    let passes = crate::support::metrics::samples(&text)
        .into_iter()
        .find(|(n, l, _)| {
            n == "skyhook_operator_pass_seconds_count"
                && l.get("phase").map(String::as_str) == Some("plan")
        })
        .and_then(|(_, _, v)| v.parse().ok())
        .unwrap_or(0.0);
    (patches, passes)
}

/// Issue 49, acceptances 2, 5 and 6. After a take-over:
/// - the legacy node keys are copied once: 20 NodeWright passes with nothing changing patch no
///   node, and a key the NodeWright's owner removed (its copy of `ignore`) is not copied back;
/// - the frozen Skyhook's status follows its NodeWright's rollout, and
///   `kubectl wait --for=condition=Ready skyhook/<name>` returns when the NodeWright completes;
/// - editing, then deleting the NodeWright never runs the Skyhook's own spec (edited meanwhile,
///   so that it would have something to run): no Job of it for 60 s.
#[tokio::test]
async fn a_taken_over_skyhook_follows_its_nodewright_and_never_runs_again() {
    let env = nw_setup("nw-frozen", 2, &[]).await;
    let name = env.ctx.name("sk");
    not_ignored(&env).await;
    let spec = json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}});
    env.create(&skyhook(&env.ctx, &name, spec.clone())).await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(60))
        .await;
    create_nodewright(&env.ctx, &name, spec).await;
    wait_nodewright(&env, &name, Status::Complete, Duration::from_secs(60)).await;
    env.ctx
        .wait_for(
            "the take-over recorded on the Skyhook",
            Duration::from_secs(30),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                sk.metadata
                    .annotations?
                    .contains_key(schema::TAKEN_OVER_ANNOTATION)
                    .then_some(())
            },
        )
        .await;
    let nw_ignore = Kind::NodeWright.local(schema::IGNORE_LABEL).into_owned();
    env.ctx
        .wait_for(
            "the ignore label copied",
            Duration::from_secs(30),
            || async {
                let all = node_labels(&env, &nw_ignore).await;
                all.iter()
                    .all(|v| v.as_deref() == Some("false"))
                    .then_some(())
            },
        )
        .await;
    // The Skyhook is edited while frozen: its spec now differs from its node state.
    env.skyhooks
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"packages": {"old": pkg("1.0.0", sleep("1"))}}})),
        )
        .await
        .expect("edit the Skyhook");

    // Acceptance 2: the NodeWright's owner un-ignores a node in the new API; 20 passes follow.
    env.node_api
        .patch(
            &env.nodes[0],
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {nw_ignore.clone(): null}}})),
        )
        .await
        .expect("remove the NodeWright's ignore label");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (patches, passes) = node_patches_and_passes(&env);
    let nodewrights = objects(&env.ctx, Kind::NodeWright);
    for i in 0..20 {
        let poke = json!({"metadata": {"annotations": {"e2e-poke": i.to_string()}}});
        nodewrights
            .patch(&name, &PatchParams::default(), &Patch::Merge(&poke))
            .await
            .expect("poke the NodeWright");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    env.ctx
        .eventually("20 NodeWright passes", Duration::from_secs(40), || async {
            let (_, now) = node_patches_and_passes(&env);
            if now >= passes + 20.0 {
                Ok(())
            } else {
                Err(format!("{} passes", now - passes))
            }
        })
        .await;
    let (patched, _) = node_patches_and_passes(&env);
    assert_eq!(patched, patches, "node patches during 20 quiet passes");
    assert_eq!(
        node_labels(&env, &nw_ignore).await[0],
        None,
        "a key removed after the take-over was copied back"
    );

    // Acceptance 6: the NodeWright rolls a change out; the Skyhook's status moves with it.
    let legacy_jobs = jobs_labelled(&env, schema::NAME_LABEL, &name).await;
    nodewrights
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"packages": {"more": pkg("1.0.0", sleep("8"))}}})),
        )
        .await
        .expect("edit the NodeWright");
    env.wait_status(&name, Status::InProgress, Duration::from_secs(30))
        .await;
    let kubectl = env.ctx.cluster.kubectl();
    let target = format!("skyhook.skyhook.nvidia.com/{name}");
    let waited = tokio::task::spawn_blocking(move || {
        let mut kubectl = kubectl;
        kubectl
            .args(["wait", "--for=condition=Ready", "--timeout=120s", &target])
            .output()
            .expect("run kubectl wait")
    });
    let done = wait_nodewright(&env, &name, Status::Complete, Duration::from_secs(120)).await;
    let out = waited.await.expect("kubectl wait");
    assert!(
        out.status.success(),
        "kubectl wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = env
        .wait_status(&name, Status::Complete, Duration::from_secs(10))
        .await
        .status
        .unwrap_or_default();
    let followed = done.status.unwrap_or_default();
    assert_eq!(shown.complete_nodes, followed.complete_nodes);
    assert_eq!(shown.complete_nodes, "2/2");

    // Acceptance 5: the NodeWright goes; the Skyhook's own (edited) spec never runs.
    nodewrights
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the NodeWright");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        assert_eq!(
            jobs_labelled(&env, schema::NAME_LABEL, &name).await,
            legacy_jobs,
            "a Job of the Skyhook's spec after its NodeWright went"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let sk = env.skyhooks.get(&name).await.expect("the Skyhook");
    assert!(
        sk.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(schema::TAKEN_OVER_ANNOTATION),
        "the Skyhook stays recorded as taken over"
    );

    // Released on purpose: `kubectl skyhook release` says what will run (the package added
    // while frozen, from the legacy node state), then the operator runs it.
    let ns = env.ctx.ns.clone();
    let said = plugin_async(&env.ctx, &["release", &name, "-n", &ns, "--dry-run"]).await;
    let text = said.ok();
    assert!(text.contains("taken over by NodeWright"), "{text}");
    assert!(
        text.contains("old") && text.contains("apply") && !text.contains("more"),
        "the release names what its next pass starts: {text}"
    );
    assert!(text.contains("[dry-run]"), "{text}");
    assert_eq!(
        jobs_labelled(&env, schema::NAME_LABEL, &name).await,
        legacy_jobs
    );
    plugin_async(&env.ctx, &["release", &name, "-n", &ns, "--confirm"])
        .await
        .ok();
    env.wait_event("the release announced", &name, |e| {
        e.reason.as_deref() == Some(schema::RELEASED_FROM_NODEWRIGHT_REASON)
    })
    .await;
    env.ctx
        .wait_for(
            "the released Skyhook to run its added package everywhere",
            Duration::from_secs(120),
            || async {
                for node in &env.nodes {
                    let (raw, _) = env.node_state(node, &name).await?;
                    raw.contains("\"old\"").then_some(())?;
                }
                let sk = env.skyhooks.get(&name).await.ok()?;
                (sk.status?.status == Some(Status::Complete)).then_some(())
            },
        )
        .await;
    let sk = env.skyhooks.get(&name).await.expect("the Skyhook");
    let annotations = sk.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key(schema::TAKEN_OVER_ANNOTATION));
    assert!(!annotations.contains_key(schema::RELEASE_FROM_NODEWRIGHT_ANNOTATION));
    assert!(
        jobs_labelled(&env, schema::NAME_LABEL, &name).await > legacy_jobs,
        "the released Skyhook ran its added package"
    );
}
