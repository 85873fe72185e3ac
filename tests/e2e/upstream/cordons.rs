//! Cordons that are not this Skyhook's to lift:
//! * D39 (issue 37, acceptance 5): a node cordoned with `kubectl cordon` before an interrupt
//!   package runs there stays cordoned afterwards and never carries our `cordon_` key.
//! * D38: a node carrying upstream's `nodewright.nvidia.com/runtimeRequiredCordon` is never
//!   uncordoned, even when the cordon was ours; `runtimeRequiredCordonAfter` places that mark
//!   when the runtime-required taint leaves a node.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::interrupts::SlowInterrupts;
use crate::support::{Env, reboot_pkg, setup, skyhook};

/// (unschedulable, carries `cordon_<sk>`)
async fn cordon_of(env: &Env, sk: &str) -> (bool, bool) {
    let n = env.node_api.get(&env.nodes[0]).await.expect("node");
    let ours = n
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(&schema::cordon_annotation(sk)));
    (n.spec.and_then(|s| s.unschedulable).unwrap_or(false), ours)
}

#[tokio::test]
async fn an_administrators_cordon_is_neither_adopted_nor_lifted() {
    let env = setup("up-admin-cordon", 1, &[]).await;
    let node = env.nodes[0].clone();
    let cordon = env.ctx.kubectl(&["cordon", &node]);
    assert!(cordon.status.success(), "kubectl cordon");
    let _slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "3").await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (cordoned, ours) = cordon_of(&env, &sk).await;
        assert!(cordoned, "the administrator's cordon was lifted");
        assert!(!ours, "the administrator's cordon was marked ours");
        if env.is_complete(&sk).await {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no rollout");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(cordon_of(&env, &sk).await, (true, false));
}

#[tokio::test]
async fn upstreams_runtime_required_cordon_is_never_lifted() {
    let env = setup("up-rr-cordon", 1, &[]).await;
    let node = env.nodes[0].clone();
    let _slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "4").await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    env.ctx
        .wait_for("our cordon", Duration::from_secs(60), || async {
            (cordon_of(&env, &sk).await == (true, true)).then_some(())
        })
        .await;
    env.node_api
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                schema::RUNTIME_REQUIRED_CORDON_ANNOTATION: "true"}}})),
        )
        .await
        .expect("annotate the node as upstream does");
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
    env.ctx
        .wait_for("our share dropped", Duration::from_secs(30), || async {
            (!cordon_of(&env, &sk).await.1).then_some(())
        })
        .await;
    assert!(
        cordon_of(&env, &sk).await.0,
        "uncordoned under runtimeRequiredCordon"
    );
}

/// D38 `runtimeRequiredCordonAfter`: the node joining tainted is cordoned and marked when its
/// taint is lifted; a later interrupt Skyhook completes there and leaves it cordoned; an
/// administrator's release (mark and cordon lifted) is kept.
#[tokio::test]
async fn runtime_required_cordon_after_keeps_the_node_cordoned_past_later_interrupts() {
    let env = setup("up-rr-after", 1, &[]).await;
    let node = env.nodes[0].clone();
    env.node_api
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": [
                {"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}]}})),
        )
        .await
        .expect("taint the joining node");
    let base = env.ctx.name("base");
    env.create(&skyhook(
        &env.ctx,
        &base,
        json!({"runtimeRequired": true, "runtimeRequiredCordonAfter": true,
               "packages": {"tool": crate::support::pkg("1.0.0", json!([]))}}),
    ))
    .await;
    env.wait_status(&base, Status::Complete, Duration::from_secs(120))
        .await;
    let marked = || async {
        let n = env.node_api.get(&node).await.expect("node");
        let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "skyhook.nvidia.com"));
        let mark = n
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(schema::RUNTIME_REQUIRED_CORDON_ANNOTATION);
        (cordoned, tainted, mark)
    };
    env.ctx
        .wait_for(
            "taint lifted, node cordoned and marked",
            Duration::from_secs(30),
            || async { (marked().await == (true, false, true)).then_some(()) },
        )
        .await;

    let _slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "2").await;
    let later = env.ctx.name("later");
    env.create(&skyhook(
        &env.ctx,
        &later,
        json!({"priority": 300, "packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    env.wait_status(&later, Status::Complete, Duration::from_secs(120))
        .await;
    assert_eq!(
        marked().await,
        (true, false, true),
        "the later interrupt lifted the runtime-required cordon"
    );
    assert!(!cordon_of(&env, &later).await.1, "its cordon key stayed");
    // `node status` shows it as upstream's CLI v0.4 does.
    let ran = crate::support::plugin::plugin(
        &env.ctx,
        &["node", "status", &node, "--skyhook", &base, "-o", "json"],
    );
    let rows: serde_json::Value = serde_json::from_str(ran.ok()).expect("node status JSON");
    assert_eq!(
        (&rows[0]["cordoned"], &rows[0]["runtimeRequiredCordon"]),
        (&json!(true), &json!(true)),
        "{rows}"
    );
    let table = crate::support::plugin::plugin(&env.ctx, &["node", "status", &node]);
    let header = table.ok().lines().next().unwrap_or_default().to_string();
    assert!(
        header.ends_with("CORDONED   RUNTIME-REQUIRED-CORDON"),
        "{header}"
    );

    // The administrator releases the node: it stays released.
    env.node_api
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"unschedulable": false}, "metadata": {"annotations": {
                schema::RUNTIME_REQUIRED_CORDON_ANNOTATION: null}}}),
            ),
        )
        .await
        .expect("release the node");
    env.ctx
        .holds_for(
            "the released node stays schedulable",
            Duration::from_secs(8),
            || async {
                match marked().await {
                    (false, false, false) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
}
