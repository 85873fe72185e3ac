//! D36 and D37: the drain before an interrupt is done only when the evicted pods are gone (a
//! pod still terminating, here held by a finalizer as a long preStop hook would hold it, keeps
//! the interrupt back), and the node's cordon is written before the first eviction.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Stage, Status};

use crate::support::{Env, reboot_pkg, setup, skyhook};

/// One sample of what the drain is doing.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    cordoned: bool,
    /// The workload pod has a deletionTimestamp, or is gone.
    evicted: bool,
    gone: bool,
    interrupt_job: bool,
}

async fn sample(env: &Env, sk: &str, pods: &Api<Pod>, web: &str) -> Option<Sample> {
    let node = env.node_api.get(&env.nodes[0]).await.ok()?;
    let pod = pods.get_opt(web).await.ok()?;
    let jobs = env.jobs_of(sk).await;
    Some(Sample {
        cordoned: node.spec.and_then(|s| s.unschedulable).unwrap_or(false),
        evicted: pod
            .as_ref()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        gone: pod.is_none(),
        interrupt_job: jobs
            .iter()
            .any(|j| crate::support::label(j, schema::STAGE_LABEL) == Stage::Interrupt.as_str()),
    })
}

#[tokio::test]
async fn the_interrupt_waits_for_evicted_pods_to_be_gone_and_the_cordon_comes_first() {
    let env = setup("up-drain", 1, &[]).await;
    let node = env.nodes[0].clone();
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let web = env.ctx.name("web");
    let hold = "e2e.skyhook.test/hold";
    env.run_workload(&web, &node, json!({"finalizers": [hold]}))
        .await;

    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;

    // D37: the first sample that sees the pod evicted already sees the node cordoned, and a
    // sample before it saw the cordon without the eviction.
    let mut cordoned_first = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let evicted = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the workload was not evicted"
        );
        if let Some(s) = sample(&env, &sk, &pods, &web).await {
            if s.evicted {
                break s;
            }
            cordoned_first |= s.cordoned;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        evicted.cordoned && cordoned_first,
        "evicted before the cordon: {evicted:?}"
    );

    // D36: while the evicted pod is still terminating there is no interrupt Job, and the
    // Skyhook says what the node waits for.
    for _ in 0..20 {
        let s = sample(&env, &sk, &pods, &web).await.expect("sample");
        assert!(
            !s.interrupt_job,
            "the interrupt started under a terminating pod: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let why =
        env.ctx
            .wait_for(
                "the held node reported",
                Duration::from_secs(30),
                || async {
                    let sk = env.skyhooks.get(&sk).await.ok()?;
                    let c = sk.status?.conditions.into_iter().find(|c| {
                        c.type_ == schema::NODE_BLOCKED_CONDITION && c.status == "True"
                    })?;
                    c.message.contains("to terminate").then_some(c.message)
                },
            )
            .await;
    assert!(why.contains(&web), "{why}");

    // The pod goes: the interrupt follows, and only then.
    pods.patch(
        &web,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the workload pod");
    let started = env
        .ctx
        .wait_for("the interrupt Job", Duration::from_secs(60), || async {
            let s = sample(&env, &sk, &pods, &web).await?;
            s.interrupt_job.then_some(s)
        })
        .await;
    assert!(
        started.gone,
        "the interrupt started before the pod was gone: {started:?}"
    );
    env.wait_status(&sk, Status::Complete, Duration::from_secs(90))
        .await;
    let leftover = pods.get_opt(&web).await.expect("get");
    assert!(leftover.is_none(), "{:?}", leftover.map(|p| p.name_any()));
}
