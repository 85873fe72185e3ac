//! Long-running workloads (issue 51, item 2; upstream #543 and its design, PR #667): a node
//! whose reboot waits for a pod matching `podNonInterruptLabels` that runs for 120 s, one of
//! three nodes in batches of two, with NON_INTERRUPT_SLOT_RELEASE at 20 s. Within a pass the
//! Skyhook's condition and `kubectl skyhook node status` name the node, the pod and since when;
//! past 20 s the node gives its slot back and the third node goes ahead, so both other nodes
//! complete while the pod still runs; the waiting node's first Job starts only once the pod is
//! gone. Both cordon choices: at the start of the wait (the default, upstream's) and only once
//! the pods are gone (`skyhook.nvidia.com/non-interrupt-cordon: pods-gone`).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::plugin::plugin_async;
use crate::support::{Env, label, reboot_pkg, setup, skyhook};

/// How long the protected pod runs.
const WORKLOAD: Duration = Duration::from_secs(120);

/// The condition's message once it names `node`, `pod` and the words `want`.
async fn waiting_condition(env: &Env, sk: &str, node: &str, pod: &str, want: &str) -> String {
    env.ctx
        .wait_for(
            &format!("WaitingForProtectedPods naming {node}, {pod} and {want:?}"),
            Duration::from_secs(20),
            || async {
                let s = env.skyhooks.get(sk).await.ok()?;
                s.status?
                    .conditions
                    .into_iter()
                    .find(|c| {
                        c.type_ == schema::WAITING_FOR_PROTECTED_PODS_CONDITION
                            && c.status == "True"
                            && c.message.contains(&format!("node {node} waits for"))
                            && c.message.contains(pod)
                            && c.message.contains(" since ")
                            && c.message.contains(want)
                    })
                    .map(|c| c.message)
            },
        )
        .await
}

async fn long_running(test: &str, cordon: Option<&str>) {
    let env = setup(test, 3, &[("NON_INTERRUPT_SLOT_RELEASE", "20s")]).await;
    let name = env.ctx.name("sk");
    // The oldest node is in the first batch.
    let (held, others) = (env.nodes[0].clone(), env.nodes[1..].to_vec());
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let train = env.ctx.name("train");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": train, "labels": {"workload": "training"}},
        "spec": {"nodeName": held, "containers": [{"name": "train", "image": "example.com/train:1"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the protected pod");
    let pod_started = Instant::now();
    env.ctx
        .wait_for(
            "the protected pod Running",
            Duration::from_secs(30),
            || async {
                let p = pods.get(&train).await.ok()?;
                (p.status?.phase.as_deref() == Some("Running")).then_some(())
            },
        )
        .await;

    let mut sk = skyhook(
        &env.ctx,
        &name,
        json!({
            "podNonInterruptLabels": {"matchLabels": {"workload": "training"}},
            "interruptionBudget": {"count": 2},
            "packages": {"driver": reboot_pkg("1.0.0")},
        }),
    );
    if let Some(choice) = cordon {
        sk.metadata.annotations = Some(
            [(
                schema::NON_INTERRUPT_CORDON_ANNOTATION.to_string(),
                choice.to_string(),
            )]
            .into(),
        );
    }
    env.create(&sk).await;

    // Feedback within a pass of the first look at the node: the node, the pod, since when.
    let pod_ref = format!("{}/{train}", env.ctx.ns);
    waiting_condition(&env, &name, &held, &pod_ref, "holding its batch slot").await;
    let table = plugin_async(&env.ctx, &["node", "status", &held]).await;
    let table = table.ok();
    assert!(
        table.contains("WAITING-FOR-PROTECTED-PODS") && table.contains(&pod_ref),
        "node status does not name the pod:\n{table}"
    );
    let n = env.node_api.get(&held).await.expect("node");
    match cordon {
        None => assert!(
            crate::support::cordoned(&n),
            "not cordoned at the start of the wait"
        ),
        Some(_) => assert!(
            !crate::support::cordoned(&n),
            "cordoned while the protected pod runs"
        ),
    }

    // Past the slot release the third node goes ahead: both others complete while the pod
    // still runs.
    waiting_condition(&env, &name, &held, &pod_ref, "its batch slot given back").await;
    env.ctx
        .wait_for(
            "the other two nodes complete while the protected pod runs",
            WORKLOAD.saturating_sub(pod_started.elapsed()),
            || async {
                for n in &others {
                    if env.node_status(n, &name).await.as_deref() != Some(Status::Complete.as_str())
                    {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    let on_held = |jobs: &[k8s_openapi::api::batch::v1::Job]| {
        jobs.iter()
            .filter(|j| label(j, schema::NODE_LABEL) == held)
            .count()
    };
    assert_eq!(
        on_held(&env.jobs_of(&name).await),
        0,
        "a Job ran on the node while its protected pod runs"
    );
    let n = env.node_api.get(&held).await.expect("node");
    assert_eq!(
        crate::support::cordoned(&n),
        cordon.is_none(),
        "the cordon choice {cordon:?} while waiting"
    );

    // The workload ends: the node goes on, and its interrupt comes only now.
    tokio::time::sleep(WORKLOAD.saturating_sub(pod_started.elapsed())).await;
    pods.delete(&train, &Default::default())
        .await
        .expect("delete the protected pod");
    let gone = Instant::now();
    env.ctx
        .wait_for(
            "the protected pod gone",
            Duration::from_secs(30),
            || async {
                pods.get_opt(&train)
                    .await
                    .ok()
                    .and_then(|p| p.is_none().then_some(()))
            },
        )
        .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(120))
        .await;
    let jobs = env.jobs_of(&name).await;
    let interrupt = jobs
        .iter()
        .find(|j| {
            label(j, schema::NODE_LABEL) == held && label(j, schema::STAGE_LABEL) == "interrupt"
        })
        .expect("the held node's interrupt Job");
    let created = interrupt
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("created")
        .0;
    let deleted_at = jiff::Timestamp::now()
        - jiff::SignedDuration::try_from(gone.elapsed()).expect("elapsed")
        - jiff::SignedDuration::from_secs(1);
    assert!(
        created >= deleted_at,
        "the interrupt Job was created at {created}, before the protected pod was deleted ({deleted_at})"
    );
    let s = env.skyhooks.get(&name).await.expect("skyhook");
    assert!(
        !s.status
            .expect("status")
            .conditions
            .iter()
            .any(|c| c.type_ == schema::WAITING_FOR_PROTECTED_PODS_CONDITION),
        "the condition stays once nothing waits"
    );
    let n = env.node_api.get(&held).await.expect("node");
    assert!(
        !crate::support::cordoned(&n),
        "the node is still cordoned at the end"
    );
    assert!(
        !n.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(&schema::protected_wait_annotation(&name)),
        "the wait's clock stays on the node"
    );
}

/// Upstream's behaviour, the default: cordoned as the wait begins, so no new workload lands.
#[tokio::test]
async fn a_protected_pod_holds_its_node_not_the_rollout_cordoned_at_the_wait_start() {
    long_running("lr-early", None).await;
}

/// `pods-gone`: the node keeps taking work until its protected pods are gone.
#[tokio::test]
async fn a_protected_pod_holds_its_node_not_the_rollout_cordoned_once_it_is_gone() {
    long_running("lr-late", Some(schema::ProtectedCordon::PODS_GONE)).await;
}
