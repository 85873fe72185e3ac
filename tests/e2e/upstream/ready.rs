//! D15: the bare `Ready` condition (and its `skyhook.nvidia.com/Ready` copy), so that
//! `kubectl wait --for=condition=Ready skyhook/<name>` waits for a rollout, with upstream's
//! reason and a message that counts nodes as upstream's does.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema::{self, Status};

use crate::support::{pkg, setup, skyhook, sleep};

fn condition(sk: &Skyhook, kind: &str) -> Option<Condition> {
    sk.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .cloned()
}

#[tokio::test]
async fn kubectl_wait_for_ready_returns_when_the_rollout_completes() {
    let env = setup("up-ready", 2, &[]).await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"tool": pkg("1.0.0", sleep("3"))}}),
    ))
    .await;
    // While the rollout runs, Ready is False and says why.
    let progressing = env
        .ctx
        .wait_for(
            "Ready=False while in progress",
            Duration::from_secs(60),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                let c = condition(&sk, schema::READY_CONDITION)?;
                (c.status == "False" && c.reason == "Progressing").then_some(c)
            },
        )
        .await;
    assert!(
        progressing.message.contains("in progress"),
        "{progressing:?}"
    );
    let target = format!("skyhook/{name}");
    let wait = env
        .ctx
        .kubectl(&["wait", "--for=condition=Ready", "--timeout=120s", &target]);
    assert!(
        wait.status.success(),
        "kubectl wait: {}",
        String::from_utf8_lossy(&wait.stderr)
    );
    let sk = env.skyhooks.get(&name).await.expect("get");
    let status = sk.status.as_ref().expect("status");
    assert_eq!(
        status.status,
        Some(Status::Complete),
        "Ready before complete"
    );
    let ready = condition(&sk, schema::READY_CONDITION).expect("Ready");
    let mut nodes = env.nodes.clone();
    nodes.sort();
    assert_eq!(
        ready.message,
        format!("2/2 nodes complete ({})", nodes.join(", "))
    );
    assert_eq!(ready.reason, "NodesConverged");
    assert_eq!(ready.observed_generation, sk.metadata.generation);
    let legacy = condition(&sk, schema::LEGACY_READY_CONDITION).expect("legacy Ready");
    assert_eq!(
        (&legacy.status, &legacy.reason, &legacy.message),
        (&ready.status, &ready.reason, &ready.message)
    );
    // The v0.13 Transition condition keeps its meaning.
    let transition = condition(&sk, schema::TRANSITION_CONDITION).expect("Transition");
    assert!(
        transition.message.starts_with("Transitioned ["),
        "{transition:?}"
    );
}

/// A node whose taint the Skyhook does not tolerate: `Ready=False`, reason `Blocked`, and the
/// message names the node (D15's acceptance).
#[tokio::test]
async fn an_untolerated_node_keeps_ready_false_naming_it() {
    let env = setup("up-ready-blocked", 2, &[]).await;
    let tainted = env.nodes[1].clone();
    env.node_api
        .patch(
            &tainted,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": [
                {"key": "e2e-dedicated", "value": "x", "effect": "NoSchedule"}]}})),
        )
        .await
        .expect("taint the node");
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    let ready = env
        .ctx
        .wait_for("Ready=False, Blocked", Duration::from_secs(90), || async {
            let sk = env.skyhooks.get(&name).await.ok()?;
            let c = condition(&sk, schema::READY_CONDITION)?;
            (c.status == "False" && c.reason == "Blocked").then_some(c)
        })
        .await;
    assert_eq!(
        ready.message,
        format!(
            "1/2 nodes complete ({}), 1 blocked ({tainted})",
            env.nodes[0]
        )
    );
}
