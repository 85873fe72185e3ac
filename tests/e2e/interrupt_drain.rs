//! An interrupt (a reboot) starts only on a node that is cordoned and drained, whatever led to
//! it (issue 35, acceptance 2): a re-run of the interrupt stage alone on a node that was
//! uncordoned after its rollout, and an engineer uncordoning a node whose interrupt is erroring.
//! A sampler watches the node, a workload pod on it and the interrupt Jobs; the first sample that
//! sees a new interrupt Job must already see the node cordoned and the workload gone.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Stage, State};

use crate::support::interrupts::SlowInterrupts;
use crate::support::plugin::plugin_async;
use crate::support::{Env, reboot_pkg, setup, skyhook};

/// What the sampler saw when a new interrupt Job first showed up.
#[derive(Debug, Clone)]
struct AtStart {
    job: String,
    cordoned: bool,
    /// The workload pod was gone or terminating.
    workload_gone: bool,
    /// Samples before it in which the node was cordoned (after the sampler started).
    cordoned_before: usize,
}

/// Polls every 100 ms until the first interrupt Job not in `known` appears.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<Option<AtStart>>,
}

impl Sampler {
    fn start(env: &Env, sk: &str, workload: Option<&str>, known: BTreeSet<String>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let jobs = env.jobs.clone();
        let nodes = env.node_api.clone();
        let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
        let node = env.nodes[0].clone();
        let workload = workload.map(str::to_string);
        let lp = ListParams::default().labels(&format!(
            "{}={sk},{}={}",
            schema::NAME_LABEL,
            schema::STAGE_LABEL,
            Stage::Interrupt
        ));
        let flag = stop.clone();
        let handle = tokio::spawn(async move {
            let mut cordoned_before = 0;
            while !flag.load(Ordering::SeqCst) {
                // Jobs first: whatever the node and pod show afterwards is no earlier than the
                // Job's creation, so a cordon seen here was in place by then at the latest.
                if let Ok(js) = jobs.list(&lp).await
                    && let Ok(n) = nodes.get(&node).await
                {
                    let cordoned = n.spec.and_then(|s| s.unschedulable).unwrap_or(false);
                    let new = js.items.iter().find(|j| !known.contains(&j.name_any()));
                    if let Some(j) = new {
                        // The node was read after the Job list: only a cordon seen in an
                        // earlier sample proves it preceded the Job.
                        let workload_gone = match &workload {
                            Some(w) => pods
                                .get_opt(w)
                                .await
                                .ok()
                                .flatten()
                                .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
                            None => true,
                        };
                        return Some(AtStart {
                            job: j.name_any(),
                            cordoned,
                            workload_gone,
                            cordoned_before,
                        });
                    }
                    if cordoned {
                        cordoned_before += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None
        });
        Sampler { stop, handle }
    }

    /// What it saw at the new Job's start; fails if no new interrupt Job came in `timeout`.
    async fn at_start(self, timeout: Duration) -> AtStart {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.handle.is_finished() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .await
            .expect("sampler")
            .expect("no new interrupt Job was created")
    }
}

async fn interrupt_jobs(env: &Env, sk: &str) -> BTreeSet<String> {
    env.jobs_of(sk)
        .await
        .iter()
        .filter(|j| crate::support::label(j, schema::STAGE_LABEL) == "interrupt")
        .map(|j| j.name_any())
        .collect()
}

async fn unschedulable(env: &Env) -> bool {
    let n = env.node_api.get(&env.nodes[0]).await.expect("node");
    n.spec.and_then(|s| s.unschedulable).unwrap_or(false)
}

/// `package rerun --stage interrupt` on a node uncordoned after its rollout: the node is
/// cordoned and the workload on it evicted before the interrupt Job exists.
#[tokio::test]
async fn a_rerun_interrupt_cordons_and_drains_first() {
    let env = setup("intr-rerun", 1, &[]).await;
    let node = env.nodes[0].clone();
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    env.wait_status(&sk, schema::Status::Complete, Duration::from_secs(90))
        .await;
    assert!(
        !unschedulable(&env).await,
        "left cordoned after the rollout"
    );

    let web = env.ctx.name("web");
    env.run_workload(&web, &node, json!({})).await;

    let sampler = Sampler::start(&env, &sk, Some(&web), interrupt_jobs(&env, &sk).await);
    plugin_async(
        &env.ctx,
        &[
            "package",
            "rerun",
            "kernel",
            "--skyhook",
            &sk,
            "--node",
            &node,
            "--stage",
            "interrupt",
            "--confirm",
        ],
    )
    .await
    .ok();
    let seen = sampler.at_start(Duration::from_secs(60)).await;
    assert!(
        seen.cordoned && seen.cordoned_before > 0 && seen.workload_gone,
        "the interrupt Job {} started before the cordon and drain: {seen:?}",
        seen.job
    );
    env.wait_status(&sk, schema::Status::Complete, Duration::from_secs(90))
        .await;
    assert!(!unschedulable(&env).await, "left cordoned after the re-run");
    let (_, state) = env.node_state(&node, &sk).await.expect("state");
    let e = state.get("kernel", "1.0.0").expect("kernel");
    assert_eq!(
        (e.stage, e.state),
        (Stage::PostInterrupt, Some(State::Complete))
    );
}

/// An engineer uncordons a node whose interrupt failed and waits to retry: the operator cordons
/// it again before the retry's Job.
#[tokio::test]
async fn an_uncordoned_erroring_interrupt_is_cordoned_again_before_its_retry() {
    let env = setup("intr-uncordon", 1, &[("RETRY_BASE", "20s")]).await;
    let node = env.nodes[0].clone();
    let sk = env.ctx.name("sk");
    let failing = SlowInterrupts::install(&env.ctx, "EXIT_CODE", "1").await;
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    env.ctx
        .wait_for(
            "the interrupt erroring",
            Duration::from_secs(90),
            || async {
                let (_, s) = env.node_state(&node, &sk).await?;
                let e = s.get("kernel", "1.0.0")?;
                ((e.stage, e.state) == (Stage::Interrupt, Some(State::Erroring))).then_some(())
            },
        )
        .await;
    let failed = interrupt_jobs(&env, &sk).await;
    failing.remove(&env.ctx).await;
    env.node_api
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .expect("uncordon");
    let sampler = Sampler::start(&env, &sk, None, failed);
    let seen = sampler.at_start(Duration::from_secs(90)).await;
    assert!(
        seen.cordoned && seen.cordoned_before > 0,
        "the interrupt was retried ({}) on the uncordoned node: {seen:?}",
        seen.job
    );
    env.wait_status(&sk, schema::Status::Complete, Duration::from_secs(90))
        .await;
    assert!(!unschedulable(&env).await, "left cordoned after the retry");
}

/// Deleting a Skyhook while its interrupt pod runs (issue 35, acceptance 6): the node stays
/// cordoned until the pod is gone (a finalizer of the test's keeps it terminating), and with
/// another Skyhook's cordon key on the node it stays cordoned even then.
#[tokio::test]
async fn deleting_mid_interrupt_keeps_the_cordon_until_the_pod_is_gone() {
    let env = setup("intr-delete", 1, &[]).await;
    let node = env.nodes[0].clone();
    let sk = env.ctx.name("sk");
    let _hang = SlowInterrupts::install(&env.ctx, "HANG", "true").await;
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"kernel": reboot_pkg("1.0.0")}}),
    ))
    .await;
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let interrupt_pods = ListParams::default().labels(&format!(
        "{}={sk},{}",
        schema::NAME_LABEL,
        schema::INTERRUPT_LABEL
    ));
    let pod = env
        .ctx
        .wait_for(
            "the interrupt pod Running",
            Duration::from_secs(90),
            || async {
                pods.list(&interrupt_pods)
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            },
        )
        .await;
    let pod_name = pod.name_any();
    let hold = "example.com/hold";
    pods.patch(
        &pod_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [hold]}})),
    )
    .await
    .expect("hold the pod");
    let other = schema::cordon_annotation("another-skyhook");
    env.node_api
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {other.clone(): "true"}}})),
        )
        .await
        .expect("another Skyhook's cordon key");
    assert!(unschedulable(&env).await, "not cordoned for the interrupt");

    env.skyhooks
        .delete(&sk, &Default::default())
        .await
        .expect("delete the Skyhook");
    env.ctx
        .holds_for(
            "the cordon while the interrupt pod terminates",
            Duration::from_secs(8),
            || async {
                let p = pods.get(&pod_name).await.map_err(|e| e.to_string())?;
                if p.metadata.deletion_timestamp.is_none() {
                    return Ok(()); // not deleted yet: nothing to judge
                }
                if unschedulable(&env).await {
                    Ok(())
                } else {
                    Err("uncordoned while the interrupt pod is still there".into())
                }
            },
        )
        .await;
    let terminating = pods.get(&pod_name).await.expect("pod");
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "the interrupt pod was not deleted with its Skyhook"
    );

    // The pod goes: our cordon key goes with the Skyhook, theirs keeps the node cordoned.
    pods.patch(
        &pod_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the pod");
    env.ctx
        .wait_for("the Skyhook gone", Duration::from_secs(60), || async {
            env.skyhooks
                .get_opt(&sk)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    let n = env.node_api.get(&node).await.expect("node");
    let annotations = n.annotations();
    assert!(
        !annotations.contains_key(&schema::cordon_annotation(&sk)),
        "our cordon key left behind: {annotations:?}"
    );
    assert!(annotations.contains_key(&other), "{annotations:?}");
    assert!(
        unschedulable(&env).await,
        "uncordoned under another Skyhook's cordon"
    );
}
