//! Interrupts for real: a `reboot` restarts the node (its init ends, the harness boots it again
//! with a new boot id) and the rollout resumes after it; a `service` interrupt calls the node's
//! service manager (a stub that records its arguments) once for merged packages.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use skyhook::schema::{Stage, State};

use super::{roll_out, setup, shellscript};
use crate::support::env::Env;

async fn boot_id(env: &Env, node: &str) -> String {
    let n: Node = env.node_api.get(node).await.expect("node");
    n.status
        .and_then(|s| s.node_info)
        .map(|i| i.boot_id)
        .unwrap_or_default()
}

/// The node rebooted exactly once, into a new boot id, and post-interrupt (its script records
/// the boot id to /var/tmp/post-interrupt-boots) ran only in that new boot.
async fn rebooted_once(env: &Env, node: &str, before: &str) {
    let after = boot_id(env, node).await;
    assert_ne!(after, before, "the boot id did not change");
    let reboots = env
        .ctx
        .read_on_node(node, "/var/log/skyhook-node/reboot.log")
        .unwrap_or_default();
    assert_eq!(reboots.lines().count(), 1, "reboots: {reboots}");
    let post = env
        .ctx
        .read_on_node(node, "/var/tmp/post-interrupt-boots")
        .unwrap_or_default();
    let post: Vec<&str> = post.lines().map(str::trim).collect();
    assert!(!post.is_empty(), "post-interrupt never ran");
    assert!(
        post.iter().all(|b| *b == after),
        "post-interrupt ran in boots {post:?}, not only in the new one {after} (before: {before})"
    );
}

/// The node's status annotation for `sk`, each distinct value in order, sampled every 200 ms
/// until the flag is set, and once after.
fn status_sampler(
    env: &crate::support::Env,
    node: &str,
    sk: &str,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<Vec<String>>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let nodes = env.node_api.clone();
    let (node, key) = (node.to_string(), skyhook::schema::status_annotation(sk));
    let handle = tokio::spawn(async move {
        let mut seen: Vec<String> = Vec::new();
        loop {
            // Read before the flag: the last sample is taken after the caller stopped.
            let last = flag.load(std::sync::atomic::Ordering::SeqCst);
            if let Ok(n) = nodes.get(&node).await
                && let Some(v) = n.metadata.annotations.and_then(|a| a.get(&key).cloned())
                && seen.last() != Some(&v)
            {
                seen.push(v);
            }
            if last {
                break seen;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    (stop, handle)
}

#[tokio::test]
async fn a_reboot_restarts_the_node_and_post_interrupt_runs_after_it() {
    let (env, node) = setup("rn-reboot", &[]).await;
    let sk = env.ctx.name("reboot");
    let before = boot_id(&env, &node).await;
    assert!(!before.is_empty(), "the kubelet reports no boot id");
    // post-interrupt records the boot it ran in: it must be the new one.
    let pkg = shellscript(
        &env.ctx,
        json!({
            "config.sh": "#!/bin/bash\necho configured\n",
            "post_interrupt.sh": "#!/bin/bash\ncat /proc/sys/kernel/random/boot_id >> /var/tmp/post-interrupt-boots\n",
        }),
        json!({"interrupt": {"type": "reboot"}}),
    );
    let version = pkg["version"].as_str().expect("version").to_string();
    // Delta D40: the agent killed by its own reboot is not a failure; sampled, the node never
    // reads erroring on the way.
    let statuses = status_sampler(&env, &node, &sk);
    roll_out(&env, &sk, json!({"reboot": pkg})).await;
    statuses.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = statuses.1.await.expect("sampler");
    assert!(
        !seen.contains(&"erroring".to_string()),
        "the node read erroring during its reboot: {seen:?}"
    );

    rebooted_once(&env, &node, &before).await;
    let n: Node = env.node_api.get(&node).await.expect("node");
    assert!(
        !n.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        "the node is still cordoned"
    );
    let (_, state) = env.node_state(&node, &sk).await.expect("node state");
    let e = state.get("reboot", &version).expect("package state");
    assert_eq!(
        (e.stage, e.state),
        (Stage::PostInterrupt, Some(State::Complete))
    );
}

#[tokio::test]
async fn a_service_interrupt_restarts_the_merged_services_once() {
    let (env, node) = setup("rn-service", &[]).await;
    let sk = env.ctx.name("service");
    let script = json!({"config.sh": "#!/bin/bash\necho configured\n"});
    let a = shellscript(
        &env.ctx,
        script.clone(),
        json!({"interrupt": {"type": "service", "services": ["containerd", "skyhook-a"]}}),
    );
    let b = shellscript(
        &env.ctx,
        script,
        json!({"interrupt": {"type": "service", "services": ["skyhook-b"]}}),
    );
    roll_out(&env, &sk, json!({"svc-a": a, "svc-b": b})).await;
    let calls = env
        .ctx
        .wait_for(
            "the service manager's calls",
            Duration::from_secs(10),
            || async {
                env.ctx
                    .read_on_node(&node, "/var/log/skyhook-node/systemctl.log")
            },
        )
        .await;
    // Each line is `time args…`.
    let mut lines: Vec<&str> = calls
        .lines()
        .map(|l| l.split_once(' ').map_or(l, |(_, args)| args))
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "daemon-reload",
            "restart containerd",
            "restart skyhook-a",
            "restart skyhook-b"
        ],
        "systemctl calls:\n{calls}"
    );
}

/// `spec.unschedulable` of the node, each distinct value in order, sampled every 200 ms until
/// the flag is set, and once after.
fn cordon_sampler(
    env: &Env,
    node: &str,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<Vec<bool>>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let nodes = env.node_api.clone();
    let node = node.to_string();
    let handle = tokio::spawn(async move {
        let mut seen: Vec<bool> = Vec::new();
        loop {
            // Read before the flag: the last sample is taken after the caller stopped, so the
            // uncordon written just before the Skyhook reads complete is seen.
            let last = flag.load(std::sync::atomic::Ordering::SeqCst);
            if let Ok(n) = nodes.get(&node).await {
                let c = n.spec.and_then(|s| s.unschedulable).unwrap_or(false);
                if seen.last() != Some(&c) {
                    seen.push(c);
                }
            }
            if last {
                break seen;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    (stop, handle)
}

/// A reboot under the emulation of agent v7's documented contract
/// (tests/cluster/images.d/agent-v7-emulation; `end` is how its reboot ends): post-interrupt
/// runs only in the new boot, the node is cordoned once and uncordoned once, at the end, and it
/// never reads `erroring`. The emulation reads the boot id through the root mount (its `/proc`)
/// and refuses a fourth argument to any stage but the interrupt, as v7 does.
async fn v7_reboot(test: &str, end: &str) {
    let (env, node) = setup(test, &[]).await;
    let sk = env.ctx.name("v7");
    let before = boot_id(&env, &node).await;
    assert!(!before.is_empty(), "the kubelet reports no boot id");
    let emulation = crate::support::real::images(&env.ctx).agent_v7_emulation;
    let pkg = shellscript(
        &env.ctx,
        json!({
            "config.sh": format!("#!/bin/bash\nmkdir -p /etc/skyhook-test\necho {end} >/etc/skyhook-test/v7-reboot-end\n"),
            "post_interrupt.sh": "#!/bin/bash\ncat /proc/sys/kernel/random/boot_id >> /var/tmp/post-interrupt-boots\n",
        }),
        json!({"interrupt": {"type": "reboot"}, "agentImageOverride": emulation}),
    );
    let version = pkg["version"].as_str().expect("version").to_string();
    let statuses = status_sampler(&env, &node, &sk);
    let cordons = cordon_sampler(&env, &node);
    roll_out(&env, &sk, json!({"agent": pkg})).await;
    statuses.0.store(true, std::sync::atomic::Ordering::SeqCst);
    cordons.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = statuses.1.await.expect("sampler");
    let cordoned = cordons.1.await.expect("sampler");
    assert!(
        !seen.contains(&"erroring".to_string()),
        "the node read erroring during its reboot: {seen:?}"
    );
    rebooted_once(&env, &node, &before).await;
    // Cordoned once, uncordoned once at the end: never schedulable in between.
    let lifted = cordoned.windows(2).filter(|w| w[0] && !w[1]).count();
    assert!(
        lifted <= 1 && cordoned.last() == Some(&false),
        "{cordoned:?}"
    );
    assert!(cordoned.contains(&true), "never cordoned: {cordoned:?}");
    let (_, state) = env.node_state(&node, &sk).await.expect("node state");
    let e = state.get("agent", &version).expect("package state");
    assert_eq!(
        (e.stage, e.state),
        (Stage::PostInterrupt, Some(State::Complete))
    );
}

/// Agent v7 may exit 0 while the host is still going down: the operator waits for the new boot.
#[tokio::test]
async fn agent_v7_emulated_exiting_0_before_the_host_is_down_goes_on_only_in_the_new_boot() {
    v7_reboot("rn-v7-exit0", "exit0").await;
}

/// Agent v7 killed by its own reboot ends with 143: not a failure (upstream #633).
#[tokio::test]
async fn agent_v7_emulated_killed_by_its_reboot_never_reads_erroring() {
    v7_reboot("rn-v7-killed", "killed").await;
}
