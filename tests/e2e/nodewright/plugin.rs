//! The plugin on NodeWrights (issue 39, acceptance 4): run as `kubectl-nodewright` (upstream
//! v0.18's name, here a symlink) it works in the NodeWright API, reading and writing the keys under
//! `nodewright.nvidia.com/`; run as `kubectl-skyhook` it finds a NodeWright by name when no Skyhook
//! has it; `--nodewright` is `--skyhook`'s alias.

use std::time::Duration;

use serde_json::{Value, json};
use skyhook::schema::{self, Api as Kind, Status};

use super::{
    create_nodewright, create_nodewright_policy, jobs_labelled, nodewright, nodewright_state,
    nw_setup, wait_nodewright,
};
use crate::support::bundle::unpack;
use crate::support::deploy::{RoleBindings, apply_deploy};
use crate::support::plugin::{nodewright_plugin, plugin};
use crate::support::roles::{as_user_args, refused_patch, viewer_role_here, wait_bound};
use crate::support::{pkg, skyhook, sleep};

const NW_NAME_LABEL: &str = "nodewright.nvidia.com/name";

fn node_status(text: &str) -> Vec<Value> {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("node status JSON: {e}: {text}"))
}

#[tokio::test]
async fn kubectl_nodewright_and_kubectl_skyhook_work_on_a_nodewright() {
    let env = nw_setup("nw-plugin", 2, &[]).await;
    let policy = create_nodewright_policy(
        &env.ctx,
        json!({"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}}),
    )
    .await;
    let nw = env.ctx.name("nw");
    let spec = json!({"deploymentPolicy": policy,
        "packages": {"alpha": pkg("1.0.0", sleep("1")), "bravo": pkg("2.0.0", sleep("1"))}});
    create_nodewright(&env.ctx, &nw, spec).await;
    // A Skyhook on the same nodes, which `kubectl nodewright` does not show.
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    wait_nodewright(&env, &nw, Status::Complete, Duration::from_secs(120)).await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(60))
        .await;
    let ns = env.ctx.ns.clone();
    let (n1, n2) = (env.nodes[0].clone(), env.nodes[1].clone());

    // node status: the NodeWright's state, read from its keys, under both names.
    let ran = nodewright_plugin(&env.ctx, &["node", "status", &n1, &n2, "-o", "json"], None);
    let rows = node_status(ran.ok());
    let names: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["skyhookName"].as_str())
        .collect();
    assert!(
        names.iter().all(|n| *n == nw),
        "only NodeWrights: {names:?}"
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r["status"], "complete", "{r}");
        assert_eq!(r["packagesComplete"], 2, "{r}");
    }
    for args in [
        ["node", "status", "--skyhook", &nw, "-o", "json"],
        ["node", "status", "--nodewright", &nw, "-o", "json"],
    ] {
        let rows = node_status(plugin(&env.ctx, &args).ok());
        assert_eq!(rows.len(), 2, "kubectl skyhook {args:?}: {rows:?}");
    }
    let legacy = node_status(plugin(&env.ctx, &["node", "status", &n1, "-o", "json"]).ok());
    assert!(
        legacy.iter().all(|r| r["skyhookName"] == json!(sk)),
        "kubectl skyhook lists Skyhooks by default: {legacy:?}"
    );

    // deployment-policy preview reads the new group's policy, under either name of the plugin;
    // package status reads the NodeWright's node state.
    for ran in [
        nodewright_plugin(&env.ctx, &["dp", "preview", &nw, "-o", "json"], None),
        plugin(&env.ctx, &["dp", "preview", &nw, "-o", "json"]),
    ] {
        let preview: Value = serde_json::from_str(ran.ok()).expect("preview JSON");
        assert_eq!(preview["policy"], json!(policy), "{preview}");
    }
    let status: Vec<Value> = serde_json::from_str(
        plugin(
            &env.ctx,
            &["package", "status", "alpha", "--skyhook", &nw, "-o", "json"],
        )
        .ok(),
    )
    .expect("package status JSON");
    assert_eq!(status.len(), 2, "alpha on both nodes: {status:?}");

    // debug collect: the bundle's node files read the NodeWright's keys, and its Jobs are there.
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = dir.path().join("nw.tar.gz");
    let archive_arg = archive.to_string_lossy().into_owned();
    let args = ["debug", "collect", "--skyhook", &nw, "-n", &ns];
    let ran = nodewright_plugin(
        &env.ctx,
        &[&args[..], &["--output-file", &archive_arg]].concat(),
        None,
    );
    assert!(ran.code == 0 || ran.code == 3, "{ran:?}");
    let files = unpack(&archive);
    for n in [&n1, &n2] {
        let path = format!("nodes/{n}.json");
        let node: Value = serde_json::from_slice(files.get(&path).expect("node file"))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let mine = &node["skyhooks"][nw.as_str()];
        assert_eq!(mine["status"], "complete", "{path}: {node}");
        assert!(
            mine["nodeState"]["alpha|1.0.0"]["state"] == "complete",
            "{path}: {node}"
        );
    }
    assert!(
        files
            .keys()
            .any(|f| f.starts_with("jobs/") && f.ends_with(".yaml")),
        "the NodeWright's Jobs: {:?}",
        files.keys().collect::<Vec<_>>()
    );

    // pause and resume: the NodeWright's own annotation, by either name of the plugin.
    let pause = Kind::NodeWright
        .local(schema::PAUSE_ANNOTATION)
        .into_owned();
    let paused = |want: bool| {
        let (env, nw, pause) = (&env, &nw, &pause);
        async move {
            let a = nodewright(&env.ctx, nw)
                .await
                .and_then(|s| s.metadata.annotations)
                .unwrap_or_default();
            assert_eq!(a.contains_key(pause), want, "{a:?}");
            assert!(!a.contains_key(schema::PAUSE_ANNOTATION), "{a:?}");
        }
    };
    nodewright_plugin(&env.ctx, &["pause", &nw, "-y", "-n", &ns], None).ok();
    paused(true).await;
    plugin(&env.ctx, &["resume", &nw, "-y", "-n", &ns]).ok();
    paused(false).await;

    // package rerun: alpha runs again on n1 only.
    let before = jobs_labelled(&env, NW_NAME_LABEL, &nw).await;
    let args = [
        "package",
        "rerun",
        "alpha",
        "--nodewright",
        &nw,
        "--node",
        &n1,
        "-y",
    ];
    nodewright_plugin(&env.ctx, &args, None).ok();
    env.ctx
        .wait_for(
            "alpha's Jobs again on n1",
            Duration::from_secs(60),
            || async { (jobs_labelled(&env, NW_NAME_LABEL, &nw).await > before).then_some(()) },
        )
        .await;
    wait_nodewright(&env, &nw, Status::Complete, Duration::from_secs(90)).await;

    // reset: the NodeWright's node state goes, the Skyhook's stays, and everything runs again.
    let sk_state = env.node_state(&n2, &sk).await.expect("the Skyhook's state");
    let before = jobs_labelled(&env, NW_NAME_LABEL, &nw).await;
    nodewright_plugin(&env.ctx, &["reset", &nw, "-y", "-n", &ns], None).ok();
    env.ctx
        .wait_for("every stage again", Duration::from_secs(90), || async {
            (jobs_labelled(&env, NW_NAME_LABEL, &nw).await >= before + 4).then_some(())
        })
        .await;
    wait_nodewright(&env, &nw, Status::Complete, Duration::from_secs(120)).await;
    assert!(nodewright_state(&env, &n2, &nw).await.is_some());
    assert_eq!(
        env.node_state(&n2, &sk).await.map(|s| s.0),
        Some(sk_state.0)
    );
}

/// The plugin users' on-call role (`deploy/rbac-plugin-user.yaml`) steers NodeWrights through
/// `kubectl nodewright` as it steers Skyhooks, and the same admission policies keep it from
/// changing what runs on the hosts.
#[tokio::test]
async fn the_oncall_role_steers_nodewrights_within_the_policies() {
    let env = nw_setup("nw-roles", 1, &[]).await;
    apply_deploy(&env.ctx);
    let node = env.nodes[0].clone();
    let nw = env.ctx.name("nw");
    create_nodewright(
        &env.ctx,
        &nw,
        json!({"packages": {"tools": pkg("1.0.0", sleep("1"))}}),
    )
    .await;
    wait_nodewright(&env, &nw, Status::Complete, Duration::from_secs(90)).await;
    let oncall = env.ctx.name("oncall");
    let _bound = RoleBindings::oncall(&env.ctx, &oncall);
    viewer_role_here(&env.ctx, &oncall);
    wait_bound(&env, &oncall, "patch", "nodewrights.nodewright.nvidia.com").await;
    let as_oncall =
        |args: &[&str]| nodewright_plugin(&env.ctx, &as_user_args(&env, &oncall, args), None);
    for args in [
        vec!["pause", nw.as_str(), "--confirm"],
        vec!["resume", nw.as_str(), "--confirm"],
        vec!["node", "ignore", node.as_str(), "--confirm"],
        vec!["node", "unignore", node.as_str(), "--confirm"],
        vec![
            "package",
            "rerun",
            "tools",
            "--nodewright",
            &nw,
            "--node",
            &node,
            "--confirm",
        ],
        vec!["reset", nw.as_str(), "--confirm"],
    ] {
        as_oncall(&args).ok();
    }
    wait_nodewright(&env, &nw, Status::Complete, Duration::from_secs(90)).await;
    let labels = env
        .node_api
        .get(&node)
        .await
        .expect("node")
        .metadata
        .labels
        .unwrap_or_default();
    assert!(
        !labels.contains_key("nodewright.nvidia.com/ignore")
            || labels["nodewright.nvidia.com/ignore"] != "true",
        "unignore left {labels:?}"
    );
    let obj = format!("nodewrights.nodewright.nvidia.com/{nw}");
    let patch = json!({"spec": {"packages": {"tools": {"image": "evil.example.com/tools"}}}});
    let err = refused_patch(&env, &oncall, &[&obj], &patch);
    assert!(err.contains("skyhook-oncall-skyhooks"), "{err}");
}
