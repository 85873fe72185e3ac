//! The plugin's roles at work (issue 35, acceptance 1): as the on-call user, the steering
//! commands work, and changing what runs on the hosts (a package image, `agentImageOverride`,
//! tolerations, a node's taint) is refused by admission naming the policy; as the viewer every
//! read command works and every write is refused. The roles and policies are
//! `deploy/rbac-plugin-user.yaml`, applied as installed.

use std::time::Duration;

use serde_json::json;
use skyhook::schema;

use crate::support::deploy::{RoleBindings, apply_deploy, text};
use crate::support::roles::{as_user, refused_patch, viewer_role_here, wait_bound};
use crate::support::{pkg, setup, skyhook, sleep};

#[tokio::test]
async fn oncall_steers_but_cannot_change_what_runs_and_viewer_only_reads() {
    let env = setup("roles", 1, &[]).await;
    apply_deploy(&env.ctx);
    let node = env.nodes[0].clone();
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"tools": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    env.wait_status(&sk, schema::Status::Complete, Duration::from_secs(90))
        .await;

    let oncall = env.ctx.name("oncall");
    let viewer = env.ctx.name("viewer");
    let _oncall = RoleBindings::oncall(&env.ctx, &oncall);
    let _viewer = RoleBindings::viewer(&env.ctx, &viewer);
    viewer_role_here(&env.ctx, &oncall);
    viewer_role_here(&env.ctx, &viewer);
    wait_bound(&env, &oncall, "patch", "skyhooks.skyhook.nvidia.com").await;
    wait_bound(&env, &viewer, "list", "nodes").await;

    // On-call: the steering commands work.
    for args in [
        vec!["pause", sk.as_str(), "--confirm"],
        vec!["resume", sk.as_str(), "--confirm"],
        vec!["node", "ignore", node.as_str(), "--confirm"],
        vec!["node", "unignore", node.as_str(), "--confirm"],
        vec![
            "package",
            "rerun",
            "tools",
            "--skyhook",
            &sk,
            "--node",
            &node,
            "--confirm",
        ],
        vec!["reset", sk.as_str(), "--confirm"],
    ] {
        as_user(&env, &oncall, &args).ok();
    }
    // The reset removed the node state: wait for the operator to run the package again.
    env.ctx
        .wait_for("tools complete again", Duration::from_secs(90), || async {
            let (_, s) = env.node_state(&node, &sk).await?;
            (s.get("tools", "1.0.0")?.state == Some(schema::State::Complete)).then_some(())
        })
        .await;

    // On-call: what runs on the hosts cannot change; admission names the policy.
    let sk_obj = format!("skyhook/{sk}");
    for patch in [
        json!({"spec": {"packages": {"tools": {"image": "evil.example.com/tools"}}}}),
        json!({"spec": {"packages": {"tools": {"agentImageOverride": "evil.example.com/agent:1"}}}}),
        json!({"spec": {"additionalTolerations": [{"operator": "Exists"}]}}),
        json!({"metadata": {"labels": {"team": "other"}}}),
        json!({"metadata": {"annotations": {"example.com/note": "x"}}}),
    ] {
        let err = refused_patch(&env, &oncall, &[&sk_obj], &patch);
        assert!(
            err.contains("skyhook-oncall-skyhooks"),
            "{patch}: refused without naming the policy: {err}"
        );
    }
    let node_obj = format!("node/{node}");
    let tainted = env
        .ctx
        .kubectl(&["taint", "node", &node, "example.com/keep=x:NoSchedule"]);
    assert!(tainted.status.success(), "{}", text(&tainted.stderr));
    for patch in [
        json!({"spec": {"taints": null}}),
        json!({"spec": {"unschedulable": true}}),
        json!({"metadata": {"labels": {"kubernetes.io/hostname": "other"}}}),
    ] {
        let err = refused_patch(&env, &oncall, &[&node_obj], &patch);
        assert!(
            err.contains("skyhook-oncall-nodes"),
            "{patch}: refused without naming the policy: {err}"
        );
    }
    let _ = env
        .ctx
        .kubectl(&["taint", "node", &node, "example.com/keep-"]);

    // Issue 50, item 5: on-call users cannot forge the operator's bookkeeping on a node: a
    // cordon mark (the operator would lift an administrator's cordon), a node state (a complete
    // one lifts the runtime-required taint), the removal of runtimeRequiredCordon, any other key
    // of ours. What the plugin writes (above) still goes through.
    let (raw, _) = env.node_state(&node, &sk).await.expect("node state");
    let cordon = schema::cordon_annotation(&sk);
    let state_key = schema::node_state_annotation(&sk);
    let forged_state = raw.replace("\"complete\"", "\"erroring\"");
    let held = env.ctx.kubectl(&[
        "annotate",
        "node",
        &node,
        &format!("{}=true", schema::RUNTIME_REQUIRED_CORDON_ANNOTATION),
    ]);
    assert!(held.status.success(), "{}", text(&held.stderr));
    for patch in [
        json!({"metadata": {"annotations": {cordon.clone(): "true"}}}),
        json!({"metadata": {"annotations": {schema::node_state_annotation("other"): raw.clone()}}}),
        json!({"metadata": {"annotations": {state_key.clone(): forged_state}}}),
        json!({"metadata": {"annotations": {schema::RUNTIME_REQUIRED_CORDON_ANNOTATION: null}}}),
        json!({"metadata": {"annotations": {schema::health_gate_annotation(&sk): "2026-01-01T00:00:00Z"}}}),
        json!({"metadata": {"labels": {schema::status_label(&sk): "forged"}}}),
    ] {
        let err = refused_patch(&env, &oncall, &[&node_obj], &patch);
        assert!(
            err.contains("skyhook-oncall-nodes"),
            "{patch}: refused without naming the policy: {err}"
        );
    }
    let _ = env.ctx.kubectl(&[
        "annotate",
        "node",
        &node,
        &format!("{}-", schema::RUNTIME_REQUIRED_CORDON_ANNOTATION),
    ]);
    // The status: only the batch state, and only back to its start (what `reset` and
    // `deployment-policy reset` write).
    let ran = as_user(
        &env,
        &oncall,
        &["deployment-policy", "reset", sk.as_str(), "--confirm"],
    );
    let reset = ran.ok();
    assert!(
        !reset.contains("no compartment statuses"),
        "the batch state reset was not exercised: {reset}"
    );
    for patch in [
        json!({"status": {"compartmentStatuses": {"__default__": {"batchState": {"currentBatch": 7}}}}}),
        json!({"status": {"nodeBootIds": {node.clone(): "forged"}}}),
        json!({"status": {"configUpdates": {"tools": ["a.conf"]}}}),
        json!({"status": {"status": "complete", "completeNodes": "9/9"}}),
    ] {
        let err = refused_patch(&env, &oncall, &[&sk_obj, "--subresource=status"], &patch);
        assert!(
            err.contains("skyhook-oncall-status"),
            "{patch}: refused without naming the policy: {err}"
        );
    }

    // Viewer: every read command works, every write is refused by RBAC.
    for args in [
        vec!["node", "list", "--skyhook", sk.as_str()],
        vec!["node", "status", node.as_str()],
        vec!["package", "status", "tools", "--skyhook", sk.as_str()],
        vec!["jobs", "--skyhook", sk.as_str()],
        vec!["deployment-policy", "preview", sk.as_str()],
        vec!["version"],
    ] {
        as_user(&env, &viewer, &args).ok();
    }
    // `plan` as the viewer: no dry run on the API server (no create or update), no pods outside
    // the operator's namespace, no ConfigMaps; it plans, and says what it could not read.
    let mut bumped = env.skyhooks.get(&sk).await.expect("skyhook");
    bumped.metadata.managed_fields = None;
    bumped.metadata.resource_version = None;
    bumped.status = None;
    bumped
        .spec
        .packages
        .get_mut("tools")
        .expect("tools")
        .version = "1.1.0".into();
    let mut file = tempfile::NamedTempFile::new().expect("a temp file");
    std::io::Write::write_all(
        &mut file,
        serde_json::to_string(&bumped).expect("json").as_bytes(),
    )
    .expect("write");
    let path = file.path().display().to_string();
    let ran = as_user(&env, &viewer, &["plan", "-f", &path]);
    let out = ran.ok();
    for said in [
        "not checked by the API server's admission",
        "drains shown without pods",
        "package ConfigMaps not read",
        "version change 1.0.0 -> 1.1.0",
    ] {
        assert!(out.contains(said), "{said:?} missing from {out}");
    }
    for args in [
        vec!["pause", sk.as_str(), "--confirm"],
        vec!["disable", sk.as_str(), "--confirm"],
        vec!["node", "ignore", node.as_str()],
        vec![
            "package",
            "rerun",
            "tools",
            "--skyhook",
            &sk,
            "--node",
            &node,
            "--confirm",
        ],
        vec!["reset", sk.as_str(), "--confirm"],
        vec!["deployment-policy", "reset", sk.as_str(), "--confirm"],
    ] {
        let ran = as_user(&env, &viewer, &args);
        assert_ne!(ran.code, 0, "{args:?} as the viewer: {ran:?}");
        assert!(
            ran.stderr.contains("forbidden") && ran.stderr.contains("skyhook-oncall"),
            "{args:?}: refused without saying by what and which role to ask for: {ran:?}"
        );
    }
    let sk_now = env.skyhooks.get(&sk).await.expect("skyhook");
    assert!(
        !kube::ResourceExt::annotations(&sk_now).contains_key(schema::PAUSE_ANNOTATION),
        "the viewer paused the Skyhook"
    );

    // A user who may patch nodes but not the status: `reset` is refused before any write
    // (acceptance 9), so no node loses its state to a reset that cannot finish.
    let partial = env.ctx.name("partial");
    let _partial = RoleBindings::viewer(&env.ctx, &partial);
    viewer_role_here(&env.ctx, &partial);
    let role = format!("{partial}-patch-nodes");
    for args in [
        vec![
            "create",
            "clusterrole",
            role.as_str(),
            "--verb=patch",
            "--resource=nodes",
        ],
        vec![
            "create",
            "clusterrolebinding",
            role.as_str(),
            "--clusterrole",
            role.as_str(),
            "--user",
            partial.as_str(),
        ],
    ] {
        let out = env.ctx.kubectl(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    wait_bound(&env, &partial, "patch", "nodes").await;
    let state_key = schema::node_state_annotation(&sk);
    let before = env.node_api.get(&node).await.expect("node");
    let ran = as_user(&env, &partial, &["reset", sk.as_str(), "--confirm"]);
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.stderr
            .contains("forbidden: you may not patch skyhooks.skyhook.nvidia.com/status"),
        "{ran:?}"
    );
    let after = env.node_api.get(&node).await.expect("node");
    assert_eq!(
        kube::ResourceExt::annotations(&after).get(&state_key),
        kube::ResourceExt::annotations(&before).get(&state_key),
        "a node was reset although the command was refused"
    );
    let _ = env
        .ctx
        .kubectl(&["delete", "clusterrolebinding,clusterrole", &role]);
}
