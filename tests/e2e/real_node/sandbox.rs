//! A node that reboots after a stage pod's init containers ran and before its main container
//! started (the fault campaign's seed 2 found it): the kubelet makes no new sandbox for a
//! `restartPolicy: Never` pod that ran containers, so the pod stays Pending for good. The
//! operator fails its Job under `PodSandboxLost` and runs the stage again; the reference leaves
//! the node in progress forever (docs/compatibility.md).

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use skyhook::jobs::view::SANDBOX_LOST_REASON;
use skyhook::schema::{Stage, State};

use super::{create, setup, shellscript};

/// The first time only: the kubelet is stopped while apply runs (so it never starts the pod's
/// check container), and the node's supervisor reboots the node 5 s later, once the agent and
/// its init container have ended.
const APPLY: &str = r#"#!/bin/bash
cat /proc/sys/kernel/random/boot_id >> /var/tmp/apply-boots
once=/var/lib/skyhook-test/sandbox-lost-once
if [[ ! -e $once ]]; then
  mkdir -p /var/lib/skyhook-test
  touch "$once"
  for p in /proc/[0-9]*; do
    if [[ $(cat "$p/comm" 2>/dev/null) == kubelet ]]; then kill -STOP "${p#/proc/}"; fi
  done
  echo 5 > /var/lib/skyhook-test/reboot-request
fi
echo applied
"#;

#[tokio::test]
async fn a_reboot_between_a_stage_pods_init_and_main_containers_reruns_the_stage() {
    let (env, node) = setup("rn-sandbox", &[]).await;
    let sk = env.ctx.name("sandbox");
    let pkg = shellscript(&env.ctx, json!({"apply.sh": APPLY}), json!({}));
    let version = pkg["version"].as_str().expect("version").to_string();
    create(&env, &sk, json!({"lost": pkg})).await;

    let event = env
        .ctx
        .wait_for(
            "an Event failing the stranded apply Job under PodSandboxLost",
            Duration::from_secs(240),
            || async {
                let lp = ListParams::default().fields(&format!("involvedObject.name={sk}"));
                let events: Api<Event> = Api::all(env.ctx.client.clone());
                let list = events.list(&lp).await.ok()?;
                list.items
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some(SANDBOX_LOST_REASON))
            },
        )
        .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("stage apply") && message.contains(&node),
        "the Event does not name the stage and node: {message}"
    );
    env.wait_status(
        &sk,
        skyhook::schema::Status::Complete,
        Duration::from_secs(240),
    )
    .await;

    let reboots = env
        .ctx
        .read_on_node(&node, "/var/log/skyhook-node/reboot.log")
        .unwrap_or_default();
    assert_eq!(reboots.lines().count(), 1, "reboots: {reboots}");
    let boots = env
        .ctx
        .read_on_node(&node, "/var/tmp/apply-boots")
        .unwrap_or_default();
    assert!(
        !boots.trim().is_empty(),
        "apply never ran: no /var/tmp/apply-boots"
    );
    let (_, state) = env.node_state(&node, &sk).await.expect("node state");
    let e = state.get("lost", &version).expect("package state");
    assert_eq!(
        (e.stage, e.state),
        (Stage::Config, Some(State::Complete)),
        "{e:?}"
    );
}
