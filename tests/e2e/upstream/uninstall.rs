//! D12 (issue 37): upstream v0.16's `uninstall` block. A package with a service interrupt and
//! `uninstall: {enabled: true, apply: false}` is installed on two nodes; `apply: true` cordons
//! and drains each node, runs `<pkg>` `uninstall` then `uninstall-interrupt` Jobs, removes the
//! package's entry from the node state, uncordons, and the Skyhook is `complete`. `apply: false`
//! installs it again. The block is stored as written (not pruned).

use std::collections::BTreeSet;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::interrupts::finished;
use crate::support::{Env, label, pkg, setup, skyhook};

async fn set_apply(env: &Env, sk: &str, apply: bool) {
    env.skyhooks
        .patch(
            sk,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"packages": {"drv": {"uninstall": {"apply": apply}}}}})),
        )
        .await
        .expect("patch uninstall.apply");
}

#[tokio::test]
async fn uninstall_apply_drains_uninstalls_interrupts_and_forgets_the_package() {
    let env = setup("up-uninstall", 2, &[]).await;
    let sk = env.ctx.name("sk");
    let mut drv = pkg("1.0.0", json!([]));
    drv["interrupt"] = json!({"type": "service", "services": ["containerd"]});
    drv["uninstall"] = json!({"enabled": true, "apply": false});
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"interruptionBudget": {"count": 2}, "packages": {"drv": drv}}),
    ))
    .await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
    let stored = env.skyhooks.get(&sk).await.expect("skyhook");
    let block = stored.spec.packages["drv"].uninstall.clone();
    assert_eq!(
        block.map(|u| (u.enabled, u.apply)),
        Some((true, false)),
        "the uninstall block was pruned"
    );

    set_apply(&env, &sk, true).await;
    // Sampled until complete: each node is cordoned when its uninstall Job appears, and the
    // uninstall interrupt follows the uninstall.
    let mut order: Vec<(String, String)> = Vec::new();
    let mut uncordoned_uninstall = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        for j in env.jobs_of(&sk).await {
            let stage = label(&j, schema::STAGE_LABEL).to_string();
            let node = label(&j, schema::NODE_LABEL).to_string();
            if !stage.starts_with("uninstall") || order.contains(&(node.clone(), stage.clone())) {
                continue;
            }
            if stage == "uninstall" && !finished(&j) {
                let n = env.node_api.get(&node).await.expect("node");
                if n.spec.and_then(|s| s.unschedulable) != Some(true) {
                    uncordoned_uninstall.insert(node.clone());
                }
            }
            order.push((node, stage));
        }
        let done = order
            .iter()
            .filter(|(_, s)| s == "uninstall-interrupt")
            .count()
            == 2;
        if done && env.is_complete(&sk).await {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no uninstall: {order:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        uncordoned_uninstall.is_empty(),
        "uninstall ran on uncordoned {uncordoned_uninstall:?}"
    );
    for node in &env.nodes {
        let stages: Vec<&str> = order
            .iter()
            .filter(|(n, _)| n == node)
            .map(|(_, s)| s.as_str())
            .collect();
        assert_eq!(stages, ["uninstall", "uninstall-interrupt"], "{node}");
        let (raw, state) = env.node_state(node, &sk).await.expect("state");
        assert!(state.get("drv", "1.0.0").is_none(), "{node}: {raw}");
        let n = env.node_api.get(node).await.expect("node");
        assert_ne!(
            n.spec.and_then(|s| s.unschedulable),
            Some(true),
            "{node} left cordoned"
        );
    }

    // Cancelled: installed again everywhere.
    set_apply(&env, &sk, false).await;
    env.ctx
        .wait_for("drv installed again", Duration::from_secs(120), || async {
            for node in &env.nodes {
                let (_, state) = env.node_state(node, &sk).await?;
                state.get("drv", "1.0.0")?;
            }
            env.is_complete(&sk).await.then_some(())
        })
        .await;
}
