//! Agent v7 ends a reboot interrupt with exit 0 while the host may still be going down
//! (`agent-v7-contract.md`). On a kwok node that keeps its boot id (`skyhook.test/hold-boot`:
//! the harness's simulated reboot leaves it alone), the interrupt's Job succeeds and the node
//! still waits, cordoned, with no post-interrupt, saying why; a new boot id lets it go on.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::{label, reboot_pkg, setup, skyhook};

#[tokio::test]
async fn a_reboot_whose_agent_exits_0_waits_for_a_new_boot_id() {
    let env = setup("v7-boot", 1, &[]).await;
    let node = env.nodes[0].clone();
    let out = env.ctx.kubectl(&[
        "annotate",
        "node",
        &node,
        "skyhook.test/hold-boot=true",
        "--overwrite",
    ]);
    assert!(out.status.success(), "{out:?}");
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"drv": reboot_pkg("1.0.0")}}),
    ))
    .await;
    let stage_of = |j: &k8s_openapi::api::batch::v1::Job| label(j, schema::STAGE_LABEL).to_string();
    env.ctx
        .wait_for(
            "the reboot interrupt's Job to succeed",
            Duration::from_secs(90),
            || async {
                let jobs = env.jobs_of(&name).await;
                jobs.iter()
                    .any(|j| {
                        stage_of(j) == "interrupt"
                            && j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0
                    })
                    .then_some(())
            },
        )
        .await;
    let message = env
        .ctx
        .wait_for(
            "the condition naming the reboot it waits for",
            Duration::from_secs(30),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                sk.status?
                    .conditions
                    .into_iter()
                    .find(|c| {
                        c.type_ == schema::NODE_BLOCKED_CONDITION
                            && c.status == "True"
                            && c.message.contains("come back from its reboot")
                    })
                    .map(|c| c.message)
            },
        )
        .await;
    assert!(message.contains(&node), "{message}");
    env.ctx
        .holds_for(
            "cordoned, no post-interrupt, in progress",
            Duration::from_secs(8),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                if n.spec.and_then(|s| s.unschedulable) != Some(true) {
                    return Err("the node was uncordoned in the boot that is ending".into());
                }
                let jobs = env.jobs_of(&name).await;
                if let Some(j) = jobs.iter().find(|j| stage_of(j) == "post-interrupt") {
                    return Err(format!("post-interrupt started: {}", j.name_any()));
                }
                let sk = env.skyhooks.get(&name).await.map_err(|e| e.to_string())?;
                match sk.status.and_then(|s| s.node_status.get(&node).copied()) {
                    Some(Status::InProgress) => Ok(()),
                    other => Err(format!("the node reads {other:?}")),
                }
            },
        )
        .await;
    // The node comes back in a new boot.
    let patch = json!({"status": {"nodeInfo": {"bootID": format!("{name}-new-boot")}}});
    env.node_api
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("a new boot id");
    env.wait_status(&name, Status::Complete, Duration::from_secs(90))
        .await;
    let jobs = env.jobs_of(&name).await;
    assert!(
        jobs.iter().any(|j| stage_of(j) == "post-interrupt"),
        "no post-interrupt"
    );
    env.ctx
        .wait_for("the node uncordoned", Duration::from_secs(30), || async {
            let n = env.node_api.get(&node).await.ok()?;
            (n.spec.and_then(|s| s.unschedulable) != Some(true)).then_some(())
        })
        .await;
    let out = env
        .ctx
        .kubectl(&["annotate", "node", &node, "skyhook.test/hold-boot-"]);
    assert!(out.status.success(), "{out:?}");
}
