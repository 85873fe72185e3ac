//! The operator's imperative shell: a driver over rooms, each named for what it does.
//!
//! One pass of one Skyhook is a pipeline, and this module only runs it:
//!
//! 1. [`snapshot`]: the caches (and a listing of the pods on cordoned nodes) as the planner's
//!    [`Inputs`](crate::plan::Inputs);
//! 2. [`plan::plan`] (or [`plan::plan_delete`]): the writes, decided without I/O;
//! 3. [`write`]: the executor applies them (node state first, the status last), hands new Jobs
//!    to the background creations, and queues the Events;
//! 4. the metrics of the pass, and [`pacing`] (when the next pass may start, and the Skyhook as
//!    the status write stored it).
//!
//! Around it: [`watch`] (reflectors, decoding, caches and the change streams that trigger
//! passes), [`api`] (the HTTP client, request counting, retries) and [`process`] (start-up,
//! leadership, the metrics and probe server, the DeploymentPolicy finalizer). Each room takes
//! the handles it needs; none imports from this module.

pub mod api;
mod ctx;
mod error;
mod handover;
pub mod outbound;
pub mod pacing;
pub mod process;
pub mod snapshot;
pub mod watch;
pub mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::runtime::controller::{self, Action, Controller};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, error, info, warn};

pub use ctx::Ctx;
use ctx::Engines;
pub use error::Error;
use pacing::Pacing;
use process::around::{
    beside, mark_ready_when_synced, mirror_sides, notifications_task, policy_finalizer_task,
    prepare,
};
use process::leader::supervise;
use process::startup;
use snapshot::Snapshot;
use watch::caches::{Caches, owner_of, skyhooks_selecting, skyhooks_using};
use watch::streams::NoPause;
use write::event_queue::EventSink;
use write::event_series::{Publisher, reporter};
use write::job_creations::JobCreations;

use crate::crd::{DeploymentPolicy, Skyhook};
use crate::metrics::Metrics;
use crate::plan;
use crate::schema::Api;
use crate::settings::Config;

/// Run until `shutdown` resolves.
pub async fn run(
    client: Client,
    config: Config,
    version: String,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    let shutdown = shutdown.shared();
    // Poll it at once: the signal handlers are installed on the first poll, and as PID 1 a
    // SIGTERM that arrives before them would be ignored until the kubelet's SIGKILL.
    tokio::spawn(shutdown.clone());
    let ns = config.namespace.clone();
    let apis: Vec<Api> = config.serve_apis.apis().collect();
    let engines = Caches::start(&client, &ns, config.skyhook_selector.clone(), &apis);
    let events = Arc::new(EventSink::start(Publisher::new(client.clone(), reporter())));
    let http = outbound::http::Outbound::new()?;
    let notifier = notifications_task(&client, &config, http.clone());
    let metrics = Arc::new(Metrics::default());
    let alerts = Arc::new(outbound::alerts::AlertSources::new(
        outbound::http::Outbound::guarded()?,
        config.alert_egress.clone(),
    ));
    let refusals = process::mirror::Refusals::default();
    let mut ctxs = Vec::new();
    let mut parts = Vec::new();
    let stores: Vec<_> = engines
        .iter()
        .map(|(c, _)| (c.api, c.skyhooks.clone()))
        .collect();
    for (caches, triggers) in engines {
        let peer = stores
            .iter()
            .find(|(api, _)| *api != caches.api)
            .map(|(_, s)| s.clone());
        let (creations, created_again) =
            JobCreations::new(client.clone(), ns.clone(), events.clone());
        let ctx = Arc::new(Ctx {
            client: client.clone(),
            config: config.clone(),
            version: version.clone(),
            events: events.clone(),
            api: caches.api,
            caches,
            ready: AtomicBool::new(false),
            standby: AtomicBool::new(false),
            metrics: metrics.clone(),
            creations,
            pacing: Pacing::default(),
            started: Instant::now(),
            alerts: alerts.clone(),
            serving: AtomicBool::new(false),
            peer,
            waiting: std::sync::Mutex::new(BTreeSet::new()),
            unapplied: std::sync::Mutex::new(BTreeMap::new()),
            mirror_refusals: refusals.clone(),
        });
        ctxs.push(ctx.clone());
        parts.push((ctx, triggers, created_again));
    }
    let engines = Engines(ctxs);
    let Some(leadership) = prepare(&engines, &client, shutdown.clone()).await? else {
        return Ok(());
    };
    info!(namespace = %ns, apis = ?apis, "skyhook operator starting");
    warn_priority_class(&config);
    let mut running = Vec::new();
    running.push(alerts.clone().run(client.clone(), ns.clone()).boxed());
    if let Some(sides) = mirror_sides(&engines, &config) {
        running.push(process::mirror::run(client.clone(), events.clone(), sides).boxed());
    }
    for (ctx, triggers, created_again) in parts {
        running.push(policy_finalizer_task(&ctx).boxed());
        let down = shutdown.clone();
        running.push(served_engine(ctx, triggers, created_again, client.clone(), down).boxed());
    }
    let all = futures::future::select_all(running).map(drop);
    supervise(beside(all, notifier), leadership).await?;
    info!("skyhook operator stopped");
    Ok(())
}

/// [`engine`] once its API is served (at once for a required API; for `SERVE_APIS=auto`'s
/// NodeWrights, once their CRD is installed).
async fn served_engine(
    ctx: Arc<Ctx>,
    triggers: watch::caches::Triggers,
    created_again: impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<Skyhook>>
    + Send
    + 'static,
    client: Client,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    if !ctx.config.serve_apis.required(ctx.api) {
        startup::wait_until_served(&client, ctx.api).await;
    }
    ctx.serving.store(true, Ordering::Relaxed);
    mark_ready_when_synced(&ctx);
    engine(ctx, triggers, created_again, shutdown).await;
}

/// The reconcile loop of one API's objects, until `shutdown`.
async fn engine(
    ctx: Arc<Ctx>,
    triggers: watch::caches::Triggers,
    created_again: impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<Skyhook>>
    + Send
    + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api = ctx.api;
    let skyhooks = ctx.caches.skyhooks.clone();
    let (for_nodes, for_policies) = (skyhooks.clone(), skyhooks.clone());
    // Each watch pauses on its own after an error (`watch::streams::paced`); kube's default
    // pause of all triggers at once froze every cache for minutes after an API server restart.
    Controller::for_stream(triggers.skyhooks, skyhooks)
        .trigger_backoff(NoPause)
        .watches_stream(triggers.nodes, move |node: Node| {
            skyhooks_selecting(&for_nodes, &node)
        })
        .watches_stream(triggers.jobs, move |job: Job| owner_of(api, &job))
        .watches_stream(triggers.pods, move |pod: Pod| owner_of(api, &pod))
        .watches_stream(triggers.configmaps, move |cm: ConfigMap| owner_of(api, &cm))
        .watches_stream(triggers.policies, move |p: DeploymentPolicy| {
            skyhooks_using(&for_policies, &p)
        })
        .reconcile_on(created_again)
        .with_config(queue_config())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                warn!(error = %e, "reconcile failed");
            }
        })
        .await
}

/// One Skyhook at a time, with no debounce: kube's debounce postpones a pass again with every
/// event that arrives within it, and a rollout over a thousand nodes never pauses for 300 ms,
/// so passes waited for a lull (10 s and more) while stages finished. Events that arrive during
/// a pass make one pass after it; [`Pacing`] spaces passes instead, by requeueing, so that one
/// Skyhook's wait never holds the others' passes back.
fn queue_config() -> controller::Config {
    controller::Config::default().concurrency(1)
}

fn error_policy(sk: Arc<Skyhook>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    error!(skyhook = %sk.name_any(), error = %err, "reconcile error; retrying in 5s");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(sk: Arc<Skyhook>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !ctx.caches_ready()? {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    if let Some(instead) = handover::turn(&sk, &ctx).await? {
        return Ok(instead);
    }
    let name = sk.name_any();
    if let Some(left) = ctx.pacing.wait_left(&name) {
        return Ok(Action::requeue(left));
    }
    ctx.pacing.starting(&name);
    let started = Instant::now();
    let sk = ctx.pacing.newest(sk);
    let (action, stored, failures) = match pass(&sk, &ctx).await {
        Ok(p) => (Ok(p.action), p.stored, Some((p.failures, p.drain_blocks))),
        Err(e) => (Err(e), None, None),
    };
    // A deleted Skyhook's entry goes with it (`forget`); its last passes need no spacing.
    if sk.meta().deletion_timestamp.is_none() {
        ctx.pacing.ended(&name, started, stored);
        if let Some((failures, blocks)) = failures {
            ctx.metrics.write_failures(&name, failures.len());
            ctx.pacing.failed_writes(&name, failures);
            ctx.pacing.blocked_drains(&name, blocks);
        }
    }
    action
}

/// What a pass leaves: the action for the controller, the Skyhook as its status write stored
/// it, and the writes that failed for good (the next pass's status reports them).
struct Passed {
    action: Action,
    stored: Option<(Skyhook, Duration)>,
    failures: Vec<String>,
    drain_blocks: Vec<plan::inputs::DrainBlock>,
}

impl Passed {
    /// A pass that ended before planning (a deletion, a write of the hand-over).
    fn early(action: Action, failures: Vec<String>) -> Passed {
        Passed {
            action,
            stored: None,
            failures,
            drain_blocks: Vec::new(),
        }
    }
}

/// How soon a pass follows one whose writes failed for good: soon enough that the status
/// reports them within seconds, not so soon that a refusing API server is hammered.
const WRITE_FAILED_RETRY: Duration = Duration::from_secs(10);

/// One pass: snapshot → plan → write → metrics.
async fn pass(sk: &Arc<Skyhook>, ctx: &Arc<Ctx>) -> Result<Passed, Error> {
    if sk.meta().deletion_timestamp.is_some() {
        return Ok(Passed::early(deletion_pass(sk, ctx).await?, Vec::new()));
    }
    let started = Instant::now();
    let name = sk.name_any();
    let cleanup_due = match handover::before_planning(sk, ctx).await? {
        Ok(due) => due,
        Err((action, failures)) => return Ok(Passed::early(action, failures)),
    };
    let snapshot = Snapshot::take(
        ctx.api,
        &ctx.caches,
        &ctx.creations,
        &ctx.client,
        &ctx.config.namespace,
        &ctx.alerts,
        sk,
    )
    .await?
    .with_peers(ctx.peers());
    let room = plan::launch::MAX_JOB_CREATES_PER_PASS.saturating_sub(ctx.creations.in_flight());
    let stored = sk.status.as_ref();
    let mut inputs = snapshot.inputs(
        stored,
        &ctx.config,
        &ctx.version,
        jiff::Timestamp::now(),
        room,
    );
    inputs.status_hold = ctx.pacing.status_hold(&name);
    let failed_before = ctx.write_failures(&name);
    inputs.write_failures = &failed_before;
    let blocked_before = ctx.pacing.drain_blocks(&name);
    inputs.drain_blocks = &blocked_before;
    let refused_taints = ctx.pacing.refused_auto_taints();
    inputs.refused_auto_taints = &refused_taints;
    let refused_nodes = ctx.pacing.refused_nodes(&name);
    inputs.refused_nodes = &refused_nodes;
    let plan = plan::plan(&inputs);
    observe(ctx, &snapshot.skyhook, stored, &plan);
    let requeue = match (plan.requeue_after, cleanup_due) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let planned = Instant::now();
    let (creates, patches) = (plan.create_jobs.len(), plan.node_patches.len());
    let create = |jobs| ctx.creations.start(sk, jobs);
    let written = write::execute(ctx.target(), sk, plan, create).await;
    let (plan_s, write_s) = (planned - started, planned.elapsed());
    ctx.metrics.pass_phase("plan", plan_s.as_secs_f64());
    ctx.metrics.pass_phase("write", write_s.as_secs_f64());
    debug!(skyhook = %name, nodes = snapshot.nodes.len(), jobs = snapshot.jobs.len(), creates,
        node_patches = patches, plan_ms = plan_s.as_millis() as u64,
        write_ms = write_s.as_millis() as u64, "pass");
    let done = written?;
    ctx.pacing
        .auto_taints(&done.auto_taints.0, &done.auto_taints.1);
    let (refused, patched) = &done.node_writes;
    ctx.pacing.node_writes(&name, refused, patched);
    let soon = match done.written {
        write::Written::All if done.failures.is_empty() => None,
        write::Written::All => Some(WRITE_FAILED_RETRY),
        write::Written::Conflict => Some(CONFLICT_REQUEUE),
    };
    let action = match (requeue, soon) {
        (Some(r), Some(s)) => Action::requeue(r.min(s)),
        (r, s) => r.or(s).map_or_else(Action::await_change, Action::requeue),
    };
    Ok(Passed {
        action,
        stored: done.stored,
        failures: done.failures,
        drain_blocks: done.drain_blocks,
    })
}

/// The metrics of one pass: node counts from its census (every node), the rest from the status
/// it writes or holds back, or the stored one when it has none.
fn observe(ctx: &Ctx, sk: &Skyhook, stored: Option<&crate::crd::SkyhookStatus>, plan: &plan::Plan) {
    if let (Some(status), Some(census)) = (plan.desired_status().or(stored), &plan.census) {
        let (policy, compartments) = (&plan.policy_label, &plan.compartments);
        ctx.metrics
            .observe(sk, status, census, policy, compartments);
    }
}

/// A pass of a deleted Skyhook: its marks come off the nodes, its Jobs and ConfigMaps go, and
/// the finalizer last.
async fn deletion_pass(sk: &Skyhook, ctx: &Ctx) -> Result<Action, Error> {
    if handover::before_deletion(sk, ctx).await? {
        return Ok(Action::requeue(CONFLICT_REQUEUE));
    }
    let name = sk.name_any();
    ctx.metrics.forget(&name);
    ctx.pacing.forget(&name);
    let jobs_on: BTreeSet<String> = ctx
        .caches
        .jobs
        .all()
        .iter()
        .filter(|j| j.api == ctx.api && j.skyhook == name)
        .map(|j| j.node.to_string())
        .collect();
    let waiting = !jobs_on.is_empty();
    let nodes: Vec<_> = ctx
        .caches
        .nodes
        .all()
        .iter()
        .map(|n| n.in_api(ctx.api))
        .collect();
    let plan = plan::plan_delete(sk, &nodes, &jobs_on);
    let done = write::execute(ctx.target(), sk, plan, |_| {}).await?;
    Ok(match done.written {
        write::Written::Conflict => Action::requeue(CONFLICT_REQUEUE),
        // The Jobs' removal wakes the next pass; the requeue is the fallback.
        write::Written::All if waiting => Action::requeue(JOBS_GONE_RECHECK),
        write::Written::All => Action::await_change(),
    })
}

/// How soon a Skyhook being deleted looks again for its Jobs to be gone.
const JOBS_GONE_RECHECK: Duration = Duration::from_secs(5);

/// The next pass after a write met a 409 (an object changed after the pass read it). Not the
/// error policy's 5 s: nothing failed, and the watch usually delivers the newer copy within
/// milliseconds (its event often schedules the pass sooner). Not at once either, so that a
/// cache that lags for longer is not hammered.
const CONFLICT_REQUEUE: Duration = Duration::from_secs(1);

/// A `PACKAGE_PRIORITY_CLASS_NAME` the kubelet does not act on is accepted, and said at start-up.
fn warn_priority_class(config: &Config) {
    if let Some(class) = config
        .package_priority_class_name
        .as_deref()
        .filter(|c| !crate::settings::PRIORITY_CLASSES_WITH_EFFECT.contains(c))
    {
        warn!(
            class,
            "PACKAGE_PRIORITY_CLASS_NAME names a class the kubelet does not preempt for: package \
         pods are bound to their node, so only system-node-critical and \
         system-cluster-critical let a stage start on a full node"
        );
    }
}
