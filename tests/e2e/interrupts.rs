//! Interrupts across Skyhooks and under a reset (issue 13, acceptance 5 and 10). Interrupt pods
//! are kept running by [`SlowInterrupts`] (see there why).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use skyhook::schema::{self, Stage, State};

use crate::support::interrupts::{SlowInterrupts, finished, pod_done};
use crate::support::plugin::plugin_async;
use crate::support::{Env, jobs_per_attempt, label, pkg, setup, skyhook};

/// An interrupt Job as seen by the sampler.
#[derive(Debug, Clone)]
struct Seen {
    name: String,
    skyhook: String,
    package: String,
}

/// What the sampler saw over a rollout.
#[derive(Debug, Default)]
struct Samples {
    samples: usize,
    /// The most unfinished interrupt Jobs (being deleted included) on the node at once, and
    /// their names at that moment.
    max_jobs: usize,
    max_jobs_names: Vec<String>,
    /// The most interrupt pods on the node at once that had not finished (terminating included).
    max_pods: usize,
    max_pods_names: Vec<String>,
    /// Every interrupt Job seen, by UID.
    interrupts: BTreeMap<String, Seen>,
    /// `spec.unschedulable` of the node, each time it changed (the first sample included).
    cordons: Vec<bool>,
    /// Samples in which an unfinished interrupt Job and an unfinished Job of another Skyhook
    /// were on the node together: (interrupt, the other Job).
    overlaps: Vec<(String, String)>,
}

/// Samples the interrupt Jobs and pods of the test's namespace on `node` every 200 ms until
/// stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<Samples>,
}

impl Sampler {
    fn start(env: &Env, node: &str) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let jobs = env.jobs.clone();
        let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
        let nodes = env.node_api.clone();
        let node = node.to_string();
        let selector = format!(
            "{}={},{}={}",
            schema::INTERRUPT_LABEL,
            schema::INTERRUPT_LABEL_VALUE,
            schema::NODE_LABEL,
            schema::label_value(&node)
        );
        let flag = stop.clone();
        let handle = tokio::spawn(async move {
            let lp = ListParams::default().labels(&selector);
            let on_node = ListParams::default().labels(&format!(
                "{}={}",
                schema::NODE_LABEL,
                schema::label_value(&node)
            ));
            let mut s = Samples::default();
            // One more sample after the stop, so the last one sees the end of the rollout.
            loop {
                let last = flag.load(Ordering::SeqCst);
                if let (Ok(js), Ok(ps), Ok(n), Ok(all)) = (
                    jobs.list(&lp).await,
                    pods.list(&lp).await,
                    nodes.get(&node).await,
                    jobs.list(&on_node).await,
                ) {
                    s.samples += 1;
                    let live = |j: &&Job| !finished(j);
                    for i in all.items.iter().filter(live) {
                        if label(i, schema::STAGE_LABEL) != "interrupt" {
                            continue;
                        }
                        for o in all.items.iter().filter(live) {
                            if label(o, schema::NAME_LABEL) != label(i, schema::NAME_LABEL) {
                                s.overlaps.push((i.name_any(), o.name_any()));
                            }
                        }
                    }
                    let cordoned = n.spec.and_then(|s| s.unschedulable).unwrap_or(false);
                    if s.cordons.last() != Some(&cordoned) {
                        s.cordons.push(cordoned);
                    }
                    for j in &js.items {
                        s.interrupts
                            .entry(j.uid().unwrap_or_default())
                            .or_insert(Seen {
                                name: j.name_any(),
                                skyhook: label(j, schema::NAME_LABEL).to_string(),
                                package: label(j, schema::PACKAGE_LABEL).to_string(),
                            });
                    }
                    let running: Vec<String> = js
                        .items
                        .iter()
                        .filter(|j| !finished(j))
                        .map(|j| j.name_any())
                        .collect();
                    if running.len() > s.max_jobs {
                        s.max_jobs = running.len();
                        s.max_jobs_names = running;
                    }
                    let live: Vec<String> = ps
                        .items
                        .iter()
                        .filter(|p| !pod_done(p))
                        .map(|p| p.name_any())
                        .collect();
                    if live.len() > s.max_pods {
                        s.max_pods = live.len();
                        s.max_pods_names = live;
                    }
                }
                if last {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            s
        });
        Sampler { stop, handle }
    }

    async fn finish(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        let s = self.handle.await.expect("sampler");
        assert!(s.samples > 10, "the sampler hardly ran: {s:?}");
        assert!(
            s.max_jobs <= 1,
            "interrupt Jobs unfinished at once on the node: {:?}",
            s.max_jobs_names
        );
        assert!(
            s.max_pods <= 1,
            "interrupt pods live at once on the node: {:?}",
            s.max_pods_names
        );
        // Cordoned once, uncordoned once at the end: never lifted in between.
        assert_eq!(s.cordons, [false, true, false], "cordon changes");
        assert!(
            s.overlaps.is_empty(),
            "an interrupt ran beside another Skyhook's stage: {:?}",
            s.overlaps
        );
        s
    }
}

fn with_interrupt(interrupt: Value) -> Value {
    let mut p = pkg("1.0.0", json!([]));
    p["interrupt"] = interrupt;
    p
}

/// The running (unfinished, not being deleted) interrupt Job of `sk` on the node whose pod runs.
async fn running_interrupt(env: &Env, sk: &str) -> Option<Job> {
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    for j in env.jobs_of(sk).await {
        if label(&j, schema::STAGE_LABEL) != "interrupt"
            || finished(&j)
            || j.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let lp = ListParams::default().labels(&format!("job-name={}", j.name_any()));
        let running = pods.list(&lp).await.ok()?.items.iter().any(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        });
        if running {
            return Some(j);
        }
    }
    None
}

async fn cordoned(env: &Env, node: &str) -> bool {
    let n = env.node_api.get(node).await.expect("node");
    n.spec.and_then(|s| s.unschedulable).unwrap_or(false)
}

/// Acceptance 5: two Skyhooks, each with an interrupt package of the same name and version, on
/// one node. B (`b-svc`, a service restart) starts alone; while its interrupt runs, A (`a-rbt`,
/// a reboot, ordered first by name at the same priority) is created. A starts nothing while B's
/// interrupt runs (issue 35: a stage under another Skyhook's reboot), then runs its stages and
/// its interrupt; B, gated behind A, finishes only after A completes. Never two interrupts at
/// once, never an interrupt beside another Skyhook's stage, one interrupt Job per Skyhook, each
/// labelled with its own Skyhook.
#[tokio::test]
async fn two_skyhooks_never_interrupt_one_node_at_once() {
    let env = setup("intr-two", 1, &[]).await;
    let node = env.nodes[0].clone();
    let slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "10").await;
    let a = env.ctx.name("a-rbt");
    let b = env.ctx.name("b-svc");
    let sampler = Sampler::start(&env, &node);
    let started = Instant::now();

    env.create(&skyhook(
        &env.ctx,
        &b,
        json!({"packages": {"kernel": with_interrupt(json!({"type": "service", "services": ["containerd"]}))}}),
    ))
    .await;
    let b_job = env
        .ctx
        .wait_for("B's interrupt Job to run", Duration::from_secs(60), || {
            running_interrupt(&env, &b)
        })
        .await;
    env.create(&skyhook(
        &env.ctx,
        &a,
        json!({"packages": {"kernel": with_interrupt(json!({"type": "reboot"}))}}),
    ))
    .await;
    // A is seen (its node status written) while B's interrupt still runs: the case under test.
    env.ctx
        .wait_for(
            "A to reach the node while B's interrupt runs",
            Duration::from_secs(30),
            || async {
                let n = env.node_api.get(&node).await.ok()?;
                n.labels()
                    .contains_key(&schema::status_label(&a))
                    .then_some(())
            },
        )
        .await;
    let b_still = env.jobs.get(&b_job.name_any()).await.expect("B's Job");
    assert!(
        !finished(&b_still),
        "B's interrupt finished before A reached the node: nothing was exercised"
    );
    env.wait_status(&a, schema::Status::Complete, Duration::from_secs(60))
        .await;
    env.wait_status(&b, schema::Status::Complete, Duration::from_secs(60))
        .await;
    let samples = sampler.finish().await;
    drop(slow);

    let mut names = Vec::new();
    let mut jobs_of = Vec::new();
    for (sk, kind) in [(&a, "node_restart"), (&b, "service_restart")] {
        let jobs: Vec<Job> = env
            .jobs_of(sk)
            .await
            .into_iter()
            .filter(|j| label(j, schema::STAGE_LABEL) == "interrupt")
            .collect();
        assert_eq!(jobs.len(), 1, "one interrupt Job of {sk} on the node");
        let j = &jobs[0];
        // The node state of this Skyhook recorded the package's interrupt, and the Job says it
        // is this Skyhook's package.
        let (_, s) = env.node_state(&node, sk).await.expect("state");
        let e = s.get("kernel", "1.0.0").expect("kernel entry");
        assert_eq!(
            (e.stage, e.state),
            (Stage::PostInterrupt, Some(State::Complete))
        );
        assert_eq!(label(j, schema::NAME_LABEL), sk.as_str());
        assert_eq!(label(j, schema::PACKAGE_LABEL), "kernel-1.0.0");
        assert_eq!(label(j, schema::NODE_LABEL), schema::label_value(&node));
        let annotation: Value = serde_json::from_str(
            j.annotations()
                .get(schema::PACKAGE_ANNOTATION)
                .expect("package annotation"),
        )
        .expect("json");
        assert_eq!(annotation["skyhook"], json!(sk));
        assert_eq!(annotation["name"], json!("kernel"));
        let attempt: u32 = j.annotations()[schema::ATTEMPT_ANNOTATION]
            .parse()
            .expect("attempt");
        let folded = env.folded(&node, sk).await;
        assert!(
            schema::is_folded(&folded, "kernel", "1.0.0", Stage::Interrupt, attempt),
            "{} not in the node's folded record {folded:?}",
            j.name_any()
        );
        assert!(finished(j));
        let arg = j
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers[0].args.as_ref())
            .and_then(|a| a.last())
            .expect("interrupt arg");
        let arg: Value = serde_json::from_slice(
            &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, arg)
                .expect("base64"),
        )
        .expect("json");
        assert_eq!(arg["type"], json!(kind), "{}", j.name_any());
        names.push(j.name_any());
        jobs_of.push(j.clone());
    }
    // A started nothing before B's interrupt had completed.
    let b_interrupt_done = env
        .jobs
        .get(&b_job.name_any())
        .await
        .expect("B's interrupt Job")
        .status
        .and_then(|s| s.completion_time)
        .expect("B's interrupt completion time")
        .0;
    for j in env.jobs_of(&a).await {
        let created = j.metadata.creation_timestamp.as_ref().expect("created").0;
        assert!(
            created >= b_interrupt_done,
            "A's {} created at {created}, under B's interrupt (done at {b_interrupt_done})",
            j.name_any()
        );
    }
    // A's interrupt Job was created only once B's had completed.
    let b_done = jobs_of[1]
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .expect("B's completion time")
        .0;
    let a_created = jobs_of[0]
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("A's creation time")
        .0;
    assert!(
        a_created >= b_done,
        "A's interrupt created at {a_created}, before B's completed at {b_done}"
    );
    assert_ne!(
        names[0], names[1],
        "the two Skyhooks' interrupt Jobs share a name"
    );
    // Every interrupt Job the sampler saw is one of the two, labelled with its own Skyhook.
    let seen: Vec<&Seen> = samples.interrupts.values().collect();
    assert_eq!(seen.len(), 2, "interrupt Jobs seen: {seen:?}");
    for s in seen {
        let want = if s.name == names[0] { &a } else { &b };
        assert!(names.contains(&s.name), "{s:?}");
        assert_eq!((&s.skyhook, s.package.as_str()), (want, "kernel-1.0.0"));
    }
    for sk in [&a, &b] {
        for ((package, stage, node, attempt), n) in jobs_per_attempt(&env.jobs_of(sk).await) {
            assert_eq!(
                n, 1,
                "{sk}: {package} {stage} {node} attempt {attempt}: {n} Jobs"
            );
        }
    }
    assert!(!cordoned(&env, &node).await, "node left cordoned");
    eprintln!(
        "two Skyhooks: {} samples, at most {} interrupt Job(s) at once, {:.0?}",
        samples.samples,
        samples.max_jobs,
        started.elapsed()
    );
}

/// The kernel and tools Jobs of `sk` by stage, as (package label, stage) → Jobs.
async fn jobs_by_stage(env: &Env, sk: &str) -> BTreeMap<(String, String), usize> {
    let mut m = BTreeMap::new();
    for j in env.jobs_of(sk).await {
        let key = (
            label(&j, schema::PACKAGE_LABEL).to_string(),
            label(&j, schema::STAGE_LABEL).to_string(),
        );
        *m.entry(key).or_default() += 1;
    }
    m
}

/// Waits until the interrupt Job `old` is gone (or replaced by a Job of the same name with
/// another UID), then until an interrupt Job of `sk` runs again.
async fn interrupt_replaced(env: &Env, sk: &str, old: &Job, round: &str) -> Job {
    let uid = old.uid();
    env.ctx
        .wait_for(
            &format!("{round}: the interrupt Job running at the reset to be deleted"),
            Duration::from_secs(30),
            || async {
                match env.jobs.get_opt(&old.name_any()).await.ok()? {
                    Some(j) if j.uid() == uid => None,
                    _ => Some(()),
                }
            },
        )
        .await;
    env.ctx
        .wait_for(
            &format!("{round}: the rollout to reach the interrupt again"),
            Duration::from_secs(45),
            || async {
                let j = running_interrupt(env, sk).await?;
                (j.uid() != uid).then_some(j)
            },
        )
        .await
}

/// Acceptance 10: a reset while the node is in its interrupt stage (the interrupt Job running,
/// the node cordoned and drained) ends in a defined state: the interrupt Job is deleted, the
/// node stays cordoned by this Skyhook while the packages run again from apply, the interrupt
/// runs again, and at the end the node is uncordoned and the Skyhook complete. First with
/// `node reset`, then with `reset` of the whole Skyhook.
#[tokio::test]
async fn reset_during_the_interrupt_reruns_from_the_start() {
    let env = setup("intr-reset", 1, &[]).await;
    let node = env.nodes[0].clone();
    let slow = SlowInterrupts::install(&env.ctx, "HANG", "true").await;
    let sk = env.ctx.name("sk");
    let sampler = Sampler::start(&env, &node);
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {
            "kernel": with_interrupt(json!({"type": "reboot"})),
            "tools": pkg("1.0.0", json!([])),
        }}),
    ))
    .await;
    let in_interrupt = || async {
        let (_, s) = env.node_state(&node, &sk).await?;
        let e = s.get("kernel", "1.0.0")?;
        ((e.stage, e.state) == (Stage::Interrupt, Some(State::InProgress))).then_some(())
    };
    let first = env
        .ctx
        .wait_for("the interrupt Job to run", Duration::from_secs(60), || {
            running_interrupt(&env, &sk)
        })
        .await;
    env.ctx
        .wait_for(
            "kernel at interrupt, in progress",
            Duration::from_secs(10),
            in_interrupt,
        )
        .await;
    assert!(cordoned(&env, &node).await, "not cordoned at the interrupt");

    // Round 1: `node reset`.
    let ran = plugin_async(&env.ctx, &["node", "reset", &node, "--skyhook", &sk, "-y"]).await;
    assert!(
        ran.ok()
            .contains(&format!("Successfully reset 1 node(s) for Skyhook {sk:?}")),
        "{ran:?}"
    );
    let second = interrupt_replaced(&env, &sk, &first, "node reset").await;
    env.ctx
        .wait_for(
            "node reset: kernel at interrupt again",
            Duration::from_secs(10),
            in_interrupt,
        )
        .await;
    assert!(
        cordoned(&env, &node).await,
        "not cordoned at the second interrupt"
    );
    let by_stage = jobs_by_stage(&env, &sk).await;
    for (package, stage) in [
        ("kernel-1.0.0", "apply"),
        ("kernel-1.0.0", "config"),
        ("tools-1.0.0", "apply"),
        ("tools-1.0.0", "config"),
    ] {
        assert_eq!(
            by_stage.get(&(package.to_string(), stage.to_string())),
            Some(&2),
            "node reset: {package} {stage} did not run again: {by_stage:?}"
        );
    }

    // Round 2: `reset` of the whole Skyhook; new interrupt pods run normally from now on.
    slow.remove(&env.ctx).await;
    let ran = plugin_async(&env.ctx, &["reset", &sk, "-y"]).await;
    assert!(
        ran.ok()
            .contains(&format!("Successfully reset 1 node(s) for Skyhook {sk:?}")),
        "{ran:?}"
    );
    let uid = second.uid();
    env.ctx
        .wait_for(
            "reset: the interrupt Job running at the reset to be deleted",
            Duration::from_secs(30),
            || async {
                match env.jobs.get_opt(&second.name_any()).await.ok()? {
                    Some(j) if j.uid() == uid => None,
                    _ => Some(()),
                }
            },
        )
        .await;
    env.wait_status(&sk, schema::Status::Complete, Duration::from_secs(60))
        .await;
    let samples = sampler.finish().await;

    // The defined end: complete, uncordoned, our cordon annotation gone, every package ran
    // three times from apply, and the interrupt Job of each round was a different Job.
    let (_, s) = env.node_state(&node, &sk).await.expect("state");
    let at = |p: &str| s.get(p, "1.0.0").map(|e| (e.stage, e.state));
    assert_eq!(
        at("kernel"),
        Some((Stage::PostInterrupt, Some(State::Complete)))
    );
    assert_eq!(at("tools"), Some((Stage::Config, Some(State::Complete))));
    let n = env.node_api.get(&node).await.expect("node");
    assert!(
        !n.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        "node left cordoned"
    );
    assert!(
        !n.annotations()
            .contains_key(&schema::cordon_annotation(&sk)),
        "cordon annotation left behind"
    );
    let by_stage = jobs_by_stage(&env, &sk).await;
    let want: BTreeMap<(String, String), usize> = [
        (("kernel-1.0.0", "apply"), 3),
        (("kernel-1.0.0", "config"), 3),
        (("kernel-1.0.0", "interrupt"), 1),
        (("kernel-1.0.0", "post-interrupt"), 1),
        (("tools-1.0.0", "apply"), 3),
        (("tools-1.0.0", "config"), 3),
    ]
    .into_iter()
    .map(|((p, st), n)| ((p.to_string(), st.to_string()), n))
    .collect();
    assert_eq!(by_stage, want);
    let interrupts: Vec<&Seen> = samples.interrupts.values().collect();
    assert_eq!(
        interrupts.len(),
        3,
        "one interrupt Job per round: {interrupts:?}"
    );
    for ((package, stage, node, attempt), n) in jobs_per_attempt(&env.jobs_of(&sk).await) {
        assert_eq!(n, 1, "{package} {stage} {node} attempt {attempt}: {n} Jobs");
    }
}

/// Acceptance 10, the other half of the interrupt stage: the interrupt Job has just ended but
/// its outcome is not yet folded into the node state when the reset lands (here the operator is
/// down meanwhile; a pass that comes a moment too late is the same). That Job belongs to the
/// run that was reset: the packages run again from apply, the interrupt too, and the Skyhook
/// completes with the node uncordoned.
#[tokio::test]
async fn reset_after_an_unrecorded_interrupt_reruns_from_the_start() {
    let mut env = setup("intr-reset-done", 1, &[]).await;
    let node = env.nodes[0].clone();
    let slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "4").await;
    let sk = env.ctx.name("sk");
    let sampler = Sampler::start(&env, &node);
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {
            "kernel": with_interrupt(json!({"type": "reboot"})),
            "tools": pkg("1.0.0", json!([])),
        }}),
    ))
    .await;
    let first = env
        .ctx
        .wait_for("the interrupt Job to run", Duration::from_secs(60), || {
            running_interrupt(&env, &sk)
        })
        .await;
    env.op.kill();
    env.ctx
        .wait_for(
            "the interrupt Job to complete while the operator is down",
            Duration::from_secs(30),
            || async {
                let j = env.jobs.get(&first.name_any()).await.ok()?;
                finished(&j).then_some(j)
            },
        )
        .await;
    let (_, s) = env.node_state(&node, &sk).await.expect("state");
    let e = s.get("kernel", "1.0.0").expect("kernel");
    assert_eq!(
        (e.stage, e.state),
        (Stage::Interrupt, Some(State::InProgress))
    );
    slow.remove(&env.ctx).await;
    let ran = plugin_async(&env.ctx, &["node", "reset", &node, "--skyhook", &sk, "-y"]).await;
    assert!(
        ran.ok()
            .contains(&format!("Successfully reset 1 node(s) for Skyhook {sk:?}")),
        "{ran:?}"
    );
    env.op.restart(&env.ctx);
    env.wait_status(&sk, schema::Status::Complete, Duration::from_secs(60))
        .await;
    let samples = sampler.finish().await;

    let (_, s) = env.node_state(&node, &sk).await.expect("state");
    let at = |p: &str| s.get(p, "1.0.0").map(|e| (e.stage, e.state));
    assert_eq!(
        at("kernel"),
        Some((Stage::PostInterrupt, Some(State::Complete)))
    );
    assert_eq!(at("tools"), Some((Stage::Config, Some(State::Complete))));
    assert!(!cordoned(&env, &node).await, "node left cordoned");
    let by_stage = jobs_by_stage(&env, &sk).await;
    let want: BTreeMap<(String, String), usize> = [
        (("kernel-1.0.0", "apply"), 2),
        (("kernel-1.0.0", "config"), 2),
        (("kernel-1.0.0", "interrupt"), 2),
        (("kernel-1.0.0", "post-interrupt"), 1),
        (("tools-1.0.0", "apply"), 2),
        (("tools-1.0.0", "config"), 2),
    ]
    .into_iter()
    .map(|((p, st), n)| ((p.to_string(), st.to_string()), n))
    .collect();
    assert_eq!(by_stage, want);
    assert_eq!(samples.interrupts.len(), 2, "{:?}", samples.interrupts);
    for ((package, stage, node, attempt), n) in jobs_per_attempt(&env.jobs_of(&sk).await) {
        assert_eq!(n, 1, "{package} {stage} {node} attempt {attempt}: {n} Jobs");
    }
}

/// Issue 35, acceptance 3, the other way round: B (`b-tools`, no interrupt) has a long apply
/// running when A (`a-rbt`, a reboot, ordered first by name) arrives. A's own stages may run
/// beside B's, but A's interrupt waits until B's apply has finished.
#[tokio::test]
async fn an_interrupt_waits_for_another_skyhooks_running_stage() {
    let env = setup("intr-wait", 1, &[]).await;
    let node = env.nodes[0].clone();
    let a = env.ctx.name("a-rbt");
    let b = env.ctx.name("b-tools");
    let sampler = Sampler::start(&env, &node);
    env.create(&skyhook(
        &env.ctx,
        &b,
        json!({"packages": {"tools": pkg("1.0.0", crate::support::sleep("12"))}}),
    ))
    .await;
    let apply_of_b = env
        .ctx
        .wait_for("B's apply to run", Duration::from_secs(60), || async {
            env.jobs_of(&b)
                .await
                .into_iter()
                .find(|j| label(j, schema::STAGE_LABEL) == "apply" && !finished(j))
        })
        .await;
    env.create(&skyhook(
        &env.ctx,
        &a,
        json!({"packages": {"kernel": with_interrupt(json!({"type": "reboot"}))}}),
    ))
    .await;
    env.ctx
        .wait_for(
            "A's config complete while B's apply runs",
            Duration::from_secs(30),
            || async {
                let (_, s) = env.node_state(&node, &a).await?;
                let e = s.get("kernel", "1.0.0")?;
                ((e.stage, e.state) == (Stage::Config, Some(State::Complete))).then_some(())
            },
        )
        .await;
    let b_still = env.jobs.get(&apply_of_b.name_any()).await.expect("B's Job");
    assert!(
        !finished(&b_still),
        "B's apply finished before A was ready for its interrupt: nothing was exercised"
    );
    env.wait_status(&a, schema::Status::Complete, Duration::from_secs(90))
        .await;
    env.wait_status(&b, schema::Status::Complete, Duration::from_secs(60))
        .await;
    let samples = sampler.finish().await;
    let b_done = env
        .jobs
        .get(&apply_of_b.name_any())
        .await
        .expect("B's apply Job")
        .status
        .and_then(|s| s.completion_time)
        .expect("B's apply completion time")
        .0;
    let a_interrupt = env
        .jobs_of(&a)
        .await
        .into_iter()
        .find(|j| label(j, schema::STAGE_LABEL) == "interrupt")
        .expect("A's interrupt Job");
    let created = a_interrupt.metadata.creation_timestamp.expect("created").0;
    assert!(
        created >= b_done,
        "A's interrupt created at {created}, while B's apply ran (done at {b_done})"
    );
    assert_eq!(samples.interrupts.len(), 1, "{:?}", samples.interrupts);
}
