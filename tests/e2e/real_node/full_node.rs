//! Package pods on a node that is already full (issue 51 item 4, upstream's
//! `PACKAGE_PRIORITY_CLASS_NAME`). Package pods are bound to their node and never meet the
//! scheduler, so only the kubelet decides: it refuses a pod that does not fit (`OutOfcpu`), unless
//! the pod is critical, in which case it evicts workloads of lower priority to admit it. kwok has
//! no kubelet: this needs the real node.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use skyhook::schema::{self, State, Status};

use super::{ROLLOUT, create, setup, shellscript};
use crate::support::real::images;

/// Millicores of a CPU quantity as the kubelet reports it ("2", "1500m").
fn millicores(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().expect("millicores"),
        None => q.parse::<i64>().expect("whole cores") * 1000,
    }
}

fn reason(p: &Pod) -> (Option<String>, Option<String>) {
    let s = p.status.as_ref();
    (
        s.and_then(|s| s.phase.clone()),
        s.and_then(|s| s.reason.clone()),
    )
}

#[tokio::test]
async fn a_full_node_refuses_package_pods_until_they_are_critical() {
    let (mut env, node) = setup("rn-full", &[]).await;
    let ctx = &env.ctx;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);

    // A workload that takes all but 50m of the node's CPU.
    let allocatable = Api::<Node>::all(ctx.client.clone())
        .get(&node)
        .await
        .expect("the real node")
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get("cpu").cloned())
        .expect("allocatable cpu");
    // Less what pods already on the node ask for (none today: the node is the test's own).
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let requested: i64 = Api::<Pod>::all(ctx.client.clone())
        .list(&on_node)
        .await
        .expect("pods on the node")
        .items
        .iter()
        .filter(|p| !matches!(reason(p).0.as_deref(), Some("Succeeded" | "Failed")))
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu").cloned())
        .map(|q| millicores(&q.0))
        .sum();
    let filler_cpu = millicores(&allocatable.0) - requested - 50;
    let filler = ctx.name("filler");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": filler},
        "spec": {"nodeName": node, "containers": [{
            "name": "app", "image": images(ctx).pause,
            "resources": {"requests": {"cpu": format!("{filler_cpu}m")}},
        }]},
    }))
    .expect("filler pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the filler pod");
    ctx.wait_for("the filler Running", Duration::from_secs(90), || async {
        let p = pods.get(&filler).await.ok()?;
        (reason(&p).0.as_deref() == Some("Running")).then_some(())
    })
    .await;

    // A package asking for 100m: without a priority class the kubelet refuses its pod.
    let sk = ctx.name("full");
    let pkg = shellscript(
        ctx,
        json!({"apply.sh": "#!/bin/bash\necho applied\n"}),
        json!({"resources": {
            "cpuRequest": "100m", "cpuLimit": "500m",
            "memoryRequest": "64Mi", "memoryLimit": "256Mi",
        }}),
    );
    create(&env, &sk, json!({"fits": pkg})).await;
    let by_skyhook = ListParams::default().labels(&format!("{}={sk}", schema::NAME_LABEL));
    let refused = ctx
        .wait_for("a package pod refused OutOfcpu", ROLLOUT, || async {
            let list = pods.list(&by_skyhook).await.ok()?;
            list.items
                .into_iter()
                .find(|p| reason(p) == (Some("Failed".into()), Some("OutOfcpu".into())))
        })
        .await;
    // What the Job controller says of it: only its generic reason, which the operator replaces.
    let job_name = refused
        .labels()
        .get(schema::JOB_NAME_LABEL)
        .cloned()
        .expect("the refused pod's Job");
    let job_reason = ctx
        .wait_for("the refused pod's Job failed", ROLLOUT, || async {
            let job = Api::<Job>::namespaced(ctx.client.clone(), &ctx.ns)
                .get(&job_name)
                .await
                .ok()?;
            job.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "Failed" && c.status == "True")?
                .reason
        })
        .await;
    println!("the refused pod's Job failed with {job_reason}");
    assert!(
        ["BackoffLimitExceeded", "PodFailurePolicy"].contains(&job_reason.as_str()),
        "the Job failed with {job_reason}"
    );
    assert_eq!(
        refused
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.clone()),
        None,
        "no class by default"
    );
    ctx.wait_for("the package erroring on the node", ROLLOUT, || async {
        let (_, state) = env.node_state(&node, &sk).await?;
        state
            .iter()
            .any(|(_, e)| e.state == Some(State::Erroring))
            .then_some(())
    })
    .await;
    // The refusal is named where an SRE looks, with the setting that makes room.
    let event = env
        .wait_event("a Warning naming OutOfcpu", &sk, |e| {
            e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("OutOfcpu")
        })
        .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("Node didn't have enough resource: cpu")
            && message.contains("PACKAGE_PRIORITY_CLASS_NAME=system-node-critical"),
        "{message}"
    );
    let p = pods.get(&filler).await.expect("the filler");
    assert_eq!(
        reason(&p).0.as_deref(),
        Some("Running"),
        "a refused package pod evicts nothing"
    );

    // With the class, the next attempt preempts the workload and the package runs.
    let agent = images(&env.ctx).agent;
    env.op.restart_with(
        &env.ctx,
        &[
            ("AGENT_IMAGE", agent.as_str()),
            ("PACKAGE_PRIORITY_CLASS_NAME", "system-node-critical"),
        ],
    );
    env.wait_status(&sk, Status::Complete, ROLLOUT).await;
    let ctx = &env.ctx;
    let admitted = pods
        .list(&by_skyhook)
        .await
        .expect("package pods")
        .items
        .into_iter()
        .filter(|p| reason(p).0.as_deref() == Some("Succeeded"))
        .collect::<Vec<_>>();
    assert!(!admitted.is_empty(), "no package pod succeeded");
    for p in &admitted {
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        assert_eq!(spec.priority, Some(2_000_001_000), "the class's priority");
    }
    // The kubelet's critical-pod admission stops the pod it evicts and says so in a condition;
    // seen here with phase Succeeded and no reason (the pause container exits 0 on the TERM).
    ctx.wait_for(
        "the filler preempted by the kubelet",
        Duration::from_secs(60),
        || async {
            let p = pods.get(&filler).await.ok()?;
            let conditions = p.status?.conditions?;
            conditions
                .iter()
                .any(|c| {
                    c.type_ == "DisruptionTarget"
                        && c.status == "True"
                        && c.reason.as_deref() == Some("TerminationByKubelet")
                        && c.message
                            .as_deref()
                            .is_some_and(|m| m.contains("critical pod"))
                })
                .then_some(())
        },
    )
    .await;
}
