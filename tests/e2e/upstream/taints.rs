//! Taints and tolerations upstream changed:
//! * D31: nodes provisioned for upstream v0.18+ carry `nodewright.nvidia.com=runtime-required`;
//!   a runtime-required Skyhook tolerates it and lifts it like this project's own key.
//! * D35: stage and interrupt pods tolerate `not-ready` and `unreachable` for good (a node
//!   rebooted by its interrupt goes NotReady; an evicted interrupt pod would be replaced, and
//!   reboot again), and the interrupt container gets 256Mi.
//! * D47: a node whose auto-taint a policy refuses is left out of the Skyhook until the taint
//!   can be added.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Taint};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::interrupts::SlowInterrupts;
use crate::support::{Env, pkg, setup, skyhook};

async fn set_taints(env: &Env, node: &str, taints: serde_json::Value) {
    env.node_api
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": taints}})),
        )
        .await
        .expect("set the node's taints");
}

async fn taints(env: &Env, node: &str) -> Vec<Taint> {
    let n = env.node_api.get(node).await.expect("node");
    n.spec.and_then(|s| s.taints).unwrap_or_default()
}

#[tokio::test]
async fn upstreams_runtime_required_taint_is_tolerated_and_lifted() {
    let env = setup("up-nw-taint", 1, &[]).await;
    let node = env.nodes[0].clone();
    set_taints(
        &env,
        &node,
        json!([{"key": "nodewright.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}]),
    )
    .await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"runtimeRequired": true, "packages": {"tool": pkg("1.0.0", json!([]))}}),
    ))
    .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(120))
        .await;
    env.ctx
        .wait_for(
            "the taint to be lifted",
            Duration::from_secs(30),
            || async {
                taints(&env, &node)
                    .await
                    .iter()
                    .all(|t| t.key != "nodewright.nvidia.com")
                    .then_some(())
            },
        )
        .await;
}

#[tokio::test]
async fn an_interrupt_pod_tolerates_its_node_going_unreachable_for_good() {
    let env = setup("up-unreachable", 1, &[]).await;
    let _hang = SlowInterrupts::install(&env.ctx, "HANG", "true").await;
    let name = env.ctx.name("sk");
    let mut p = pkg("1.0.0", json!([]));
    p["interrupt"] = json!({"type": "service", "services": ["containerd"]});
    env.create(&skyhook(&env.ctx, &name, json!({"packages": {"svc": p}})))
        .await;
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let lp = ListParams::default().labels(schema::INTERRUPT_LABEL);
    let pod = env
        .ctx
        .wait_for(
            "the interrupt pod to run",
            Duration::from_secs(90),
            || async {
                let list = pods.list(&lp).await.ok()?;
                list.items
                    .into_iter()
                    .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            },
        )
        .await;
    let spec = pod.spec.clone().expect("spec");
    let memory = &spec.containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .expect("limits")["memory"];
    assert_eq!(memory.0, "256Mi");
    // The API server's DefaultTolerationSeconds admission gives every pod that does not
    // tolerate them itself `not-ready` and `unreachable` for 300 s: the taint manager would
    // evict the pod of an interrupt whose node stays NotReady for 5 minutes (a long reboot).
    // The operator's own tolerations have no limit, so the admission adds none.
    let tolerations = spec.tolerations.unwrap_or_default();
    for key in [schema::NOT_READY_TAINT_KEY, schema::UNREACHABLE_TAINT_KEY] {
        let matching: Vec<_> = tolerations
            .iter()
            .filter(|t| t.key.as_deref() == Some(key))
            .collect();
        assert_eq!(matching.len(), 1, "{key}: {tolerations:?}");
        assert_eq!(matching[0].effect.as_deref(), Some("NoExecute"));
        assert_eq!(
            matching[0].toleration_seconds, None,
            "{key} is tolerated for a limited time only: {tolerations:?}"
        );
    }
}

/// D47: a policy refuses the runtime-required taint on one node. That node gets a Warning
/// `AutoTaint` Event and is left out (the Skyhook completes on the other node, `1/1`); once the
/// policy goes, the retried taint lands and the node is rolled out too.
#[tokio::test]
async fn a_node_whose_auto_taint_is_refused_is_left_out_until_it_can_be_tainted() {
    let env = setup("up-autotaint", 2, &[]).await;
    let (refused_node, other) = (env.nodes[0].clone(), env.nodes[1].clone());
    let expression = format!(
        "object.metadata.name != '{refused_node}' || !has(object.spec.taints) || !object.spec.taints.exists(t, t.key == 'skyhook.nvidia.com')"
    );
    let probe = || async {
        let patch = json!({"spec": {"taints": [
            {"key": "skyhook.nvidia.com", "value": "probe", "effect": "NoSchedule"}]}});
        let dry = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        env.node_api
            .patch(&refused_node, &dry, &Patch::Merge(&patch))
            .await
            .is_err()
    };
    let refusal = crate::support::refusal::Refusal::install(
        &env.ctx,
        "nodes",
        false,
        &expression,
        "e2e policy refuses the runtime-required taint",
        probe,
    )
    .await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"runtimeRequired": true, "autoTaintNewNodes": true,
               "packages": {"tool": pkg("1.0.0", json!([]))}}),
    ))
    .await;
    env.wait_event("an AutoTaint Warning", &refused_node, |e| {
        e.reason.as_deref() == Some(schema::AUTO_TAINT_REASON)
            && e.type_.as_deref() == Some("Warning")
    })
    .await;
    let sk = env
        .wait_status(&name, Status::Complete, Duration::from_secs(120))
        .await;
    let status = sk.status.expect("status");
    assert_eq!(status.complete_nodes, "1/1");
    assert!(!status.node_status.contains_key(&refused_node));
    assert!(env.node_state(&refused_node, &name).await.is_none());
    assert!(env.node_state(&other, &name).await.is_some());

    assert!(refusal.remove(), "removing the admission policy failed");
    env.ctx
        .wait_for(
            "the left-out node rolled out",
            Duration::from_secs(120),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                let s = sk.status?;
                (s.complete_nodes == "2/2" && s.status == Some(Status::Complete)).then_some(())
            },
        )
        .await;
    assert!(
        taints(&env, &refused_node).await.is_empty(),
        "the taint stayed after the node completed"
    );
}
