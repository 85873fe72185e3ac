//! Transient API faults: a rollout through a proxy that fails a seeded 10% of requests.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::plugin::plugin_async;
use crate::support::proxy::Held;
use crate::support::{
    Env, Operator, TestCtx, install_crds, jobs_per_attempt, label, pkg, proxy, skyhook, sleep,
};

/// Issue 13, acceptance 1: three nodes, three packages (one with an interrupt), 10% of the
/// operator's requests failing (500, 429, or a lost response after the API server acted): the
/// rollout completes with no duplicate Job, no second attempt of any stage and no node left
/// cordoned.
#[tokio::test]
async fn a_rollout_completes_through_ten_percent_of_failing_requests() {
    install_crds();
    let mut ctx = TestCtx::new("faults").await;
    let nodes = ctx.add_test_nodes(3);
    let seed: u64 = std::env::var("SKYHOOK_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_secs())
        });
    eprintln!("fault seed {seed} (replay with SKYHOOK_FAULT_SEED={seed})");
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = proxy::start(
        crate::support::rights::operator_client(&ctx).await,
        seed,
        10,
        dir.path(),
    )
    .await;
    let kubeconfig = proxy.kubeconfig.display().to_string();
    let op = Operator::start(&ctx, &[("KUBECONFIG", &kubeconfig)]);
    let env = Env::new(ctx, op, nodes);
    let name = env.ctx.name("sk");
    let mut reboot = pkg("1.0.0", sleep("1"));
    reboot["interrupt"] = json!({"type": "reboot"});
    let mut config = pkg("1.0.0", sleep("1"));
    config["configMap"] = json!({"a.sh": "echo a"});
    config["dependsOn"] = json!({"alpha": "1.0.0"});
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"alpha": pkg("1.0.0", sleep("1")), "bravo": config, "driver": reboot}}),
    ))
    .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(300))
        .await;

    let faults = proxy.faults.load(std::sync::atomic::Ordering::SeqCst);
    let requests = proxy.requests.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("{faults} faults in {requests} requests");
    assert!(faults >= 10, "only {faults} faults in {requests} requests");
    let jobs = env.jobs_of(&name).await;
    for (key, n) in jobs_per_attempt(&jobs) {
        assert_eq!(n, 1, "{key:?} has {n} Jobs");
        assert_eq!(key.3, "0", "{key:?}: a stage ran a second attempt");
    }
    // apply and config of three packages, interrupt and post-interrupt of the driver, per node.
    assert_eq!(jobs.len(), 3 * 8, "{} Jobs", jobs.len());
    let node_api: Api<Node> = Api::all(env.ctx.client.clone());
    for n in &env.nodes {
        let node = node_api.get(n).await.expect("node");
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        assert!(!cordoned, "{n} left cordoned");
        let (_, state) = env.node_state(n, &name).await.expect("state");
        for p in ["alpha", "bravo", "driver"] {
            let e = state.get(p, "1.0.0").expect("entry");
            assert_eq!(e.restarts, 0, "{n} {p}: {e:?}");
            assert_eq!(e.state, Some(schema::State::Complete), "{n} {p}: {e:?}");
        }
    }
}

/// Issue 13, acceptance 7: `kubectl skyhook package rerun` while the operator writes the same
/// node is honoured. One node runs a chain of packages, so the operator rewrites its node-state
/// annotation (one JSON value) at every stage. In each round, once `alpha` is complete, the
/// proxy in front of the operator holds its next node-state patch: computed from a copy that
/// says `alpha` is complete, it is in flight while `package rerun alpha` removes alpha's entry,
/// and lands after it. An unguarded merge patch would write alpha's old entry back and the
/// rerun would be lost; guarded by the copy's resourceVersion, it meets a 409, the pass leaves
/// that node's work for the next one, and alpha runs again. Every round must be honoured.
#[tokio::test]
async fn a_package_rerun_during_an_operator_node_write_is_honoured() {
    const ROUNDS: usize = 3;
    install_crds();
    let mut ctx = TestCtx::new("rerun-race").await;
    let nodes = ctx.add_test_nodes(1);
    let dir = tempfile::tempdir().expect("tempdir");
    // No faults: the proxy is here for its gate.
    let proxy = proxy::start(
        crate::support::rights::operator_client(&ctx).await,
        0,
        0,
        dir.path(),
    )
    .await;
    let kubeconfig = proxy.kubeconfig.display().to_string();
    let op = Operator::start(&ctx, &[("KUBECONFIG", &kubeconfig)]);
    let env = Env::new(ctx, op, nodes);
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");
    let key = schema::node_state_annotation(&name);
    // alpha, then a chain long enough for every round to find the operator still writing.
    let mut packages = json!({"alpha": pkg("1.0.0", sleep("1"))});
    let chain = ["bravo", "charlie", "delta", "echo", "foxtrot"];
    for (i, p) in chain.iter().enumerate() {
        let mut spec = pkg("1.0.0", sleep("3"));
        let before = if i == 0 { "alpha" } else { chain[i - 1] };
        spec["dependsOn"] = json!({before: "1.0.0"});
        packages[*p] = spec;
    }
    env.create(&skyhook(&env.ctx, &name, json!({"packages": packages})))
        .await;
    let alpha_applies = || async {
        let jobs = env.jobs_of(&name).await;
        jobs.iter()
            .filter(|j| {
                label(j, schema::PACKAGE_LABEL) == schema::package_label("alpha", "1.0.0")
                    && label(j, schema::STAGE_LABEL) == "apply"
            })
            .count()
    };
    let alpha_complete = |state: &schema::NodeState| {
        state
            .get("alpha", "1.0.0")
            .is_some_and(|e| e.state == Some(schema::State::Complete))
    };
    for round in 1..=ROUNDS {
        env.ctx
            .wait_for(
                &format!("round {round}: alpha complete"),
                Duration::from_secs(120),
                || async {
                    let (_, state) = env.node_state(&node, &name).await?;
                    alpha_complete(&state).then_some(())
                },
            )
            .await;
        let (_, state) = env.node_state(&node, &name).await.expect("state");
        let rest_done = chain.iter().all(|p| {
            state
                .get(p, "1.0.0")
                .is_some_and(|e| e.state == Some(schema::State::Complete))
        });
        assert!(
            !rest_done,
            "round {round}: the rollout ended before the operator wrote again"
        );
        let before = alpha_applies().await;
        // The operator's next node-state patch that still says alpha is complete.
        let held = loop {
            let mut armed = proxy.gate.arm(&key);
            let body = tokio::time::timeout(Duration::from_secs(60), armed.recv())
                .await
                .unwrap_or_else(|_| panic!("round {round}: no node-state write by the operator"))
                .expect("the gate");
            let patch: serde_json::Value = serde_json::from_str(&body).expect("patch body");
            let written = patch["metadata"]["annotations"][&key]
                .as_str()
                .and_then(|raw| schema::NodeState::parse(raw).ok());
            if written.as_ref().is_some_and(alpha_complete) {
                break body;
            }
            proxy.gate.release();
        };
        // While it is held, the rerun lands first.
        let ran = plugin_async(
            &env.ctx,
            &[
                "package",
                "rerun",
                "alpha",
                "--skyhook",
                &name,
                "--node",
                &node,
                "-y",
            ],
        )
        .await;
        assert!(
            ran.ok()
                .contains("Successfully reset package \"alpha\" on 1 node(s)"),
            "round {round}: {ran:?}"
        );
        proxy.gate.release();
        env.ctx
            .wait_for(
                &format!("round {round}: alpha runs again (the held write was {held})"),
                Duration::from_secs(60),
                || async { (alpha_applies().await > before).then_some(()) },
            )
            .await;
    }
    env.wait_status(&name, Status::Complete, Duration::from_secs(240))
        .await;
    let (_, state) = env.node_state(&node, &name).await.expect("state");
    for p in std::iter::once("alpha").chain(chain) {
        let e = state.get(p, "1.0.0").expect("entry");
        assert_eq!(e.state, Some(schema::State::Complete), "{p}: {e:?}");
    }
    assert_eq!(alpha_applies().await, ROUNDS + 1, "one alpha run per rerun");
    let log = std::fs::read_to_string(&env.op.log).expect("operator log");
    assert!(
        log.contains("nodes changed since this pass read them"),
        "the held writes met a conflict"
    );
    assert!(
        !log.contains("reconcile error"),
        "a conflict is not an error"
    );
}

/// A status write is a JSON patch of what changed, guarded by the resourceVersion its pass
/// read. The proxy holds one while the test edits the Skyhook: the patch lands on a newer
/// Skyhook, the API server refuses it, and the next pass writes the status from the new one.
/// The rollout ends with every node's state in the status, exactly as a full replace leaves it.
#[tokio::test]
async fn a_status_patch_against_a_changed_skyhook_is_refused_and_redone() {
    install_crds();
    let mut ctx = TestCtx::new("status-race").await;
    let nodes = ctx.add_test_nodes(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = proxy::start(
        crate::support::rights::operator_client(&ctx).await,
        0,
        0,
        dir.path(),
    )
    .await;
    let kubeconfig = proxy.kubeconfig.display().to_string();
    let op = Operator::start(&ctx, &[("KUBECONFIG", &kubeconfig)]);
    let env = Env::new(ctx, op, nodes);
    let name = env.ctx.name("sk");
    // Only a patch names a node's entry by its path; the first write (no status yet) replaces.
    let mut armed = proxy
        .gate
        .arm_for(Held::SkyhookStatus, "\"/status/nodeState/");
    let mut bravo = pkg("1.0.0", sleep("2"));
    bravo["dependsOn"] = json!({"alpha": "1.0.0"});
    let packages = json!({"alpha": pkg("1.0.0", sleep("2")), "bravo": bravo});
    env.create(&skyhook(&env.ctx, &name, json!({"packages": packages})))
        .await;
    let held = tokio::time::timeout(Duration::from_secs(90), armed.recv())
        .await
        .expect("a status patch within 90 s")
        .expect("the gate");
    let ops: Vec<serde_json::Value> = serde_json::from_str(&held).expect("a JSON patch");
    assert_eq!(
        ops[0]["path"], "/metadata/resourceVersion",
        "the patch is guarded: {held}"
    );
    assert!(!held.contains("\"spec\""), "only the status moves: {held}");
    let poke = json!({"metadata": {"annotations": {"e2e.skyhook.test/poke": "1"}}});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&poke))
        .await
        .expect("edit the Skyhook");
    proxy.gate.release();
    let sk = env
        .wait_status(&name, Status::Complete, Duration::from_secs(240))
        .await;
    let status = sk.status.expect("status");
    let mut want = env.nodes.clone();
    want.sort();
    assert_eq!(status.node_state.keys().cloned().collect::<Vec<_>>(), want);
    for (node, state) in &status.node_state {
        for p in ["alpha", "bravo"] {
            let e = state
                .get(p, "1.0.0")
                .unwrap_or_else(|| panic!("{node}: {p}"));
            assert_eq!(e.state, Some(schema::State::Complete), "{node}: {p}: {e:?}");
        }
    }
    assert_eq!(status.complete_nodes, "2/2");
    let log = std::fs::read_to_string(&env.op.log).expect("operator log");
    assert!(
        log.contains("the Skyhook changed since this pass read it"),
        "the held patch met a conflict"
    );
    assert!(
        !log.contains("status patch refused"),
        "a conflict is not a refused patch"
    );
}
