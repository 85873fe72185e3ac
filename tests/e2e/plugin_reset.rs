//! The plugin commands that make packages run again (`node reset`, `reset`, `package rerun`)
//! and `deployment-policy reset`, against the local cluster.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use skyhook::schema;

use crate::support::TestCtx;
use crate::support::plugin::plugin_with;

/// Runs the plugin; returns (exit code, stdout, stderr).
fn plugin(ctx: &TestCtx, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let ran = plugin_with(ctx, args, &[], stdin);
    (ran.code, ran.stdout, ran.stderr)
}

#[tokio::test]
async fn node_reset_removes_state_after_confirmation() {
    let mut ctx = TestCtx::new("plugin-reset").await;
    let nodes = ctx.add_test_nodes(1);
    let node = nodes[0].clone();
    let sk = ctx.name("sk");
    let state_key = schema::node_state_annotation(&sk);
    let applied_key = schema::applied_annotation(&sk);
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"annotations": {
        state_key.clone(): r#"{"alpha|1.0.0":{"name":"alpha","version":"1.0.0","image":"x","stage":"config","state":"complete"}}"#,
        applied_key.clone(): r#"{"alpha|1.0.0":"x"}"#,
    }}});
    node_api
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("seed node state");
    let has = |key: String| {
        let api = node_api.clone();
        let node = node.clone();
        async move {
            api.get(&node)
                .await
                .expect("get node")
                .annotations()
                .contains_key(&key)
        }
    };
    let args = ["node", "reset", node.as_str(), "--skyhook", sk.as_str()];

    // Dry-run: summary, no prompt, nothing changed.
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let (code, out, _) = plugin(&ctx, &dry, None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("  - {node} (1 packages)")), "{out}");
    assert!(out.contains("[dry-run] No changes applied"), "{out}");
    assert!(has(state_key.clone()).await && has(applied_key.clone()).await);

    // Declined, then closed stdin: nothing changed.
    let (code, out, err) = plugin(&ctx, &args, Some("n\n"));
    assert_eq!(code, 1, "{out}");
    assert!(out.ends_with("Continue? [y/N]: Aborted\n"), "{out}");
    assert!(
        err.contains("not confirmed at the prompt; nothing was changed"),
        "{err}"
    );
    let (code, _, err) = plugin(&ctx, &args, None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: no answer to the confirmation prompt"),
        "{err}"
    );
    assert!(has(state_key.clone()).await);

    // Confirmed with "YES": both annotations go.
    let (code, out, _) = plugin(&ctx, &args, Some("YES\n"));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with(&format!(
            "\nSuccessfully reset 1 node(s) for Skyhook {sk:?}\n"
        )),
        "{out}"
    );
    assert!(!has(state_key.clone()).await && !has(applied_key.clone()).await);

    // Nothing left, and no such Skyhook either: a typo, one line, exit 1. Unknown node: the
    // same.
    let mut yes = args.to_vec();
    yes.push("-y");
    let (code, out, err) = plugin(&ctx, &yes, None);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!("error: skyhook {sk:?} not found; list them with: kubectl get skyhooks\n")
    );
    let (code, out, err) = plugin(
        &ctx,
        &["node", "reset", "no-such-node-xyz", "--skyhook", &sk, "-y"],
        None,
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: node \"no-such-node-xyz\" not found"),
        "{err}"
    );
}

/// Config Jobs and apply Jobs of `sk` on the node, by their stage label.
async fn stage_jobs(ctx: &TestCtx, sk: &str, stage: &str) -> usize {
    use k8s_openapi::api::batch::v1::Job;
    use kube::api::ListParams;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let selector = format!(
        "{}={sk},{}={stage}",
        schema::NAME_LABEL,
        schema::STAGE_LABEL
    );
    jobs.list(&ListParams::default().labels(&selector))
        .await
        .expect("list jobs")
        .items
        .len()
}

#[tokio::test]
async fn rerun_node_reset_and_reset_make_the_operator_run_packages_again() {
    use crate::support::{Operator, install_crds};
    use kube::api::PostParams;
    use skyhook::crd::Skyhook;
    use skyhook::schema::{NodeState, Stage, State};
    use std::time::Duration;

    install_crds();
    let mut ctx = TestCtx::new("plugin-rerun").await;
    let nodes = ctx.add_test_nodes(1);
    let node = nodes[0].clone();
    let _op = Operator::start(&ctx, &[]);
    let sk = ctx.name("sk");
    let (k, v) = ctx.test_label();
    let object: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": sk, "labels": {k.clone(): v.clone()}},
        "spec": {"nodeSelectors": {"matchLabels": {k: v}}, "packages": {"alpha": {
            "version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
            "env": [{"name": "SLEEP_LEN", "value": "1"}]}}},
    }))
    .expect("valid Skyhook");
    Api::<Skyhook>::all(ctx.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create Skyhook");
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    let key = schema::node_state_annotation(&sk);
    let complete = || {
        let api = node_api.clone();
        let node = node.clone();
        let key = key.clone();
        async move {
            let n = api.get(&node).await.ok()?;
            let s = NodeState::parse(n.annotations().get(&key)?).ok()?;
            s.get("alpha", "1.0.0")
                .is_some_and(|e| (e.stage, e.state) == (Stage::Config, Some(State::Complete)))
                .then_some(())
        }
    };
    let more_jobs = |stage: &'static str, than: usize| {
        let ctx = &ctx;
        let sk = sk.clone();
        move || {
            let sk = sk.clone();
            async move { (stage_jobs(ctx, &sk, stage).await > than).then_some(()) }
        }
    };
    ctx.wait_for("alpha complete", Duration::from_secs(180), complete)
        .await;
    let applies = stage_jobs(&ctx, &sk, "apply").await;
    let configs = stage_jobs(&ctx, &sk, "config").await;
    assert_eq!((applies, configs), (1, 1));

    // package rerun --stage config: only a new config Job, then complete again.
    let rerun = [
        "package",
        "rerun",
        "alpha",
        "--skyhook",
        sk.as_str(),
        "--node",
        node.as_str(),
        "--stage",
        "config",
    ];
    let mut dry = rerun.to_vec();
    dry.push("--dry-run");
    let (code, out, err) = plugin(&ctx, &dry, None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Re-run from stage: config"), "{out}");
    assert!(
        out.contains(&format!(
            "  - {node} (current state: complete, stage: config)"
        )),
        "{out}"
    );
    assert!(out.ends_with("[dry-run] No changes applied\n"), "{out}");
    let mut yes = rerun.to_vec();
    yes.push("-y");
    let (code, out, err) = plugin(&ctx, &yes, None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("Successfully reset package \"alpha\" on 1 node(s)"),
        "{out}"
    );
    ctx.wait_for(
        "a second config Job",
        Duration::from_secs(60),
        more_jobs("config", 1),
    )
    .await;
    ctx.wait_for(
        "alpha complete after the config re-run",
        Duration::from_secs(120),
        complete,
    )
    .await;
    assert_eq!(
        stage_jobs(&ctx, &sk, "apply").await,
        1,
        "config re-run ran apply"
    );

    // Unknown package and a package without state: one line, exit 1.
    let (code, out, err) = plugin(
        &ctx,
        &[
            "package",
            "rerun",
            "nope",
            "--skyhook",
            &sk,
            "--node",
            &node,
            "-y",
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("package \"nope\" not found in skyhook"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
    let (code, _, err) = plugin(
        &ctx,
        &[
            "package",
            "rerun",
            "alpha",
            "--skyhook",
            &sk,
            "--node",
            &node,
            "--stage",
            "upgrade",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "invalid stage \"upgrade\": must be one of apply, config, interrupt, post-interrupt"
        ),
        "{err}"
    );

    // node reset: apply runs again.
    let (code, out, err) = plugin(
        &ctx,
        &["node", "reset", &node, "--skyhook", &sk, "-y"],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    ctx.wait_for(
        "a second apply Job",
        Duration::from_secs(60),
        more_jobs("apply", 1),
    )
    .await;
    ctx.wait_for(
        "alpha complete after node reset",
        Duration::from_secs(180),
        complete,
    )
    .await;

    // reset --dry-run changes nothing; reset -y re-runs everything.
    let jobs_before = stage_jobs(&ctx, &sk, "apply").await;
    let before = node_api
        .get(&node)
        .await
        .expect("node")
        .annotations()
        .clone();
    let (code, out, err) = plugin(&ctx, &["reset", &sk, "--dry-run"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with(&format!(
            "Skyhook: {sk}\nNodes to reset (1):\n  - {node} (1 packages)\n"
        )),
        "{out}"
    );
    assert!(
        out.contains("Batch state will also be reset (use --skip-batch-reset to preserve)"),
        "{out}"
    );
    assert!(out.ends_with("\n[dry-run] No changes applied\n"), "{out}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = node_api
        .get(&node)
        .await
        .expect("node")
        .annotations()
        .clone();
    assert_eq!(
        before.get(&key),
        after.get(&key),
        "dry-run changed the node state"
    );
    assert_eq!(
        stage_jobs(&ctx, &sk, "apply").await,
        jobs_before,
        "dry-run started Jobs"
    );
    let (code, out, _) = plugin(&ctx, &["reset", &sk], Some("no\n"));
    assert_eq!(code, 1);
    assert!(out.ends_with("Continue? [y/N]: Aborted\n"), "{out}");
    let (code, out, err) = plugin(&ctx, &["reset", &sk, "-y"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("Successfully reset 1 node(s) for Skyhook {sk:?}")),
        "{out}"
    );
    ctx.wait_for(
        "a third apply Job",
        Duration::from_secs(60),
        more_jobs("apply", jobs_before),
    )
    .await;
    ctx.wait_for(
        "alpha complete after reset",
        Duration::from_secs(180),
        complete,
    )
    .await;

    // A Skyhook that does not exist: one line, exit 1.
    let (code, out, err) = plugin(&ctx, &["reset", "no-such-skyhook-xyz", "-y"], None);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "error: skyhook \"no-such-skyhook-xyz\" not found; list them with: kubectl get skyhooks\n"
    );
}

#[tokio::test]
async fn deployment_policy_reset_clears_every_counter() {
    use crate::support::install_crds;
    use kube::api::PostParams;
    use skyhook::crd::Skyhook;

    install_crds();
    let ctx = TestCtx::new("plugin-dp-reset").await;
    let sk = ctx.name("sk");
    let object: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": sk, "labels": {"skyhook-e2e": ctx.prefix.clone()}},
        "spec": {"nodeSelectors": {"matchLabels": {"skyhook-e2e": ctx.prefix.clone()}}, "packages": {}},
    }))
    .expect("valid Skyhook");
    let api: Api<Skyhook> = Api::all(ctx.client.clone());
    api.create(&PostParams::default(), &object)
        .await
        .expect("create Skyhook");

    // No compartments yet: a note, exit 0.
    let (code, out, _) = plugin(&ctx, &["dp", "reset", &sk, "-y"], None);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        format!("Skyhook {sk:?} has no compartment statuses to reset\n")
    );

    // As the Go operator leaves it after a failed batch: stopped, with counters.
    let stale = json!({"status": {"compartmentStatuses": {
        "gpu": {"matched": 4, "ceiling": 2, "inProgress": 0, "completed": 1, "progressPercent": 25,
                "batchState": {"currentBatch": 3, "consecutiveFailures": 2, "completedNodes": 1,
                               "failedNodes": 2, "shouldStop": true, "lastBatchSize": 2, "lastBatchFailed": true}},
        "__default__": {"matched": 1, "ceiling": 1, "inProgress": 0, "completed": 0, "progressPercent": 0},
    }}});
    api.patch_status(&sk, &PatchParams::default(), &Patch::Merge(&stale))
        .await
        .expect("seed compartment statuses");
    let batch = |sk: Skyhook, c: &str| {
        serde_json::to_value(sk).expect("json")["status"]["compartmentStatuses"][c]["batchState"]
            .clone()
    };

    let (code, out, err) = plugin(
        &ctx,
        &["deployment-policy", "reset", &sk, "--dry-run"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Compartments: 2 total, 1 with batch state"),
        "{out}"
    );
    assert!(
        out.contains("  - gpu: batch 3, 1 completed, 2 failed, stopped"),
        "{out}"
    );
    assert!(out.ends_with("\n[dry-run] No changes applied\n"), "{out}");
    assert_eq!(
        batch(api.get(&sk).await.expect("get"), "gpu")["shouldStop"],
        true
    );

    let (code, out, _) = plugin(&ctx, &["dp", "reset", &sk], Some("n\n"));
    assert_eq!(code, 1);
    assert!(out.ends_with("Continue? [y/N]: Aborted\n"), "{out}");
    let (code, _, err) = plugin(&ctx, &["dp", "reset", &sk], None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: no answer to the confirmation prompt"),
        "{err}"
    );
    assert_eq!(
        batch(api.get(&sk).await.expect("get"), "gpu")["currentBatch"],
        3
    );

    let (code, out, err) = plugin(&ctx, &["dp", "reset", &sk], Some("y\n"));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.ends_with(&format!(
            "\nSuccessfully reset batch state for Skyhook {sk:?}\n"
        )),
        "{out}"
    );
    let after = api.get(&sk).await.expect("get");
    // Every counter cleared, not only currentBatch (the reference's merge patch keeps them).
    for c in ["gpu", "__default__"] {
        let b = batch(after.clone(), c);
        assert_eq!(b["currentBatch"], 1, "{c}: {b}");
        for zero in [
            "consecutiveFailures",
            "completedNodes",
            "failedNodes",
            "lastBatchSize",
        ] {
            assert!(b.get(zero).is_none_or(|v| v == 0), "{c}.{zero}: {b}");
        }
        for no in ["shouldStop", "lastBatchFailed"] {
            assert!(b.get(no).is_none_or(|v| v == false), "{c}.{no}: {b}");
        }
    }

    let (code, out, err) = plugin(&ctx, &["dp", "reset", "no-such-skyhook-xyz", "-y"], None);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.starts_with("error: skyhook \"no-such-skyhook-xyz\" not found"),
        "{err}"
    );
}
