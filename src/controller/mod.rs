//! The operator's imperative shell: scoped watches feeding reflector caches, one queue keyed by
//! Skyhook, and a reconcile that snapshots the caches, asks the planner what to do and hands the
//! plan to the executor.

mod api_client;
pub mod api_counter;
mod bodies;
mod creating;
mod events;
pub mod exec;
mod guard;
mod large_watch;
pub mod leader;
mod lean;
mod passes;
mod recorder;
mod records;
mod retry;
pub mod server;
pub mod start;
mod status_patch;
mod views;
mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use creating::Creating;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::Api;
use kube::core::{Selector, SelectorExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use leader::{Leadership, lead, supervise};
use lean::{LeanJob, LeanPod};
use passes::Passes;
use records::{Records, recorded};
use thiserror::Error;
use tracing::{debug, error, info, warn};
use views::{busy_elsewhere, go_pods, job_record, job_views};
use watch::{
    NoPause, labelled_events, node_watch, owned_watch, pod_events, pod_triggers, policy_watch,
    prune_meta, skyhook_watch,
};

use crate::crd::{self, DeploymentPolicy, Skyhook};
use crate::jobs::{JobView, PodView};
use crate::metrics::Metrics;
use crate::plan::{self, Inputs, NodeView};
use crate::schema;
use crate::settings::Config;

#[derive(Debug, Error)]
pub enum Error {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot encode an object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the watch caches did not fill within {0:?}; is the API server reachable?")]
    NotReady(Duration),
    #[error("cannot load kubeconfig {0}: {1}")]
    Kubeconfig(String, String),
    #[error("SKYHOOK_SELECTOR {0:?} was refused by the API server: {1}")]
    Selector(String, kube::Error),
    #[error(
        "the API server does not serve skyhooks.skyhook.nvidia.com after {0:?}: install the CRDs \
         (kubectl apply -f deploy/crds/) and start the operator again"
    )]
    CrdMissing(Duration),
    #[error(
        "the API server refused to list Skyhooks ({0}): grant the operator's ServiceAccount the \
         ClusterRole in deploy/rbac-operator.yaml"
    )]
    Forbidden(String),
    #[error("{0}")]
    JobNameTaken(String),
    #[error("leadership lost ({0}); exiting so that the new leader works alone")]
    LostLeadership(String),
    #[error("cannot serve {what} on {addr}: {source}")]
    Serve {
        what: &'static str,
        addr: String,
        source: std::io::Error,
    },
}

/// Shared by every reconcile.
pub struct Ctx {
    pub client: Client,
    pub config: Config,
    pub version: String,
    pub events: events::EventSink,
    pub skyhooks: Store<Skyhook>,
    pub nodes: Records<NodeView>,
    pub jobs: Records<JobView>,
    /// Our Jobs' pods while Pending (stuck containers).
    pub pods: Records<PodView>,
    /// The Go operator's pods.
    pub go_pods: Records<PodView>,
    pub policies: Store<DeploymentPolicy>,
    pub configmaps: Store<ConfigMap>,
    pub ready: AtomicBool,
    /// Waiting to lead: ready (as a follower), not reconciling.
    pub standby: AtomicBool,
    pub metrics: Metrics,
    /// Jobs handed to the API server by earlier passes and not yet in the Job cache.
    pub creating: Creating,
    pub passes: Passes,
    /// When the operator started (the caches' deadline counts from here).
    pub started: Instant,
}

impl Ctx {
    /// Resolves once every cache holds its first list.
    async fn caches_filled(&self) {
        self.nodes.wait_until_ready().await;
        self.jobs.wait_until_ready().await;
        self.pods.wait_until_ready().await;
        self.go_pods.wait_until_ready().await;
        let _ = self.policies.wait_until_ready().await;
        let _ = self.configmaps.wait_until_ready().await;
    }

    /// For the readiness probe: waits for the caches, at most [`CACHE_WAIT`].
    async fn wait_ready(&self) -> Result<(), Error> {
        if self.ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        tokio::time::timeout(CACHE_WAIT, self.caches_filled())
            .await
            .map_err(|_| Error::NotReady(CACHE_WAIT))?;
        self.ready.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// For a pass: whether the caches are filled, without waiting. A pass never waits for them
    /// itself: it would hold the controller's one worker while the caches it waits for are
    /// filled by the same controller's streams, and passes now start at the first event.
    fn caches_ready(&self) -> Result<bool, Error> {
        if self.ready.load(Ordering::Relaxed) || self.caches_filled().now_or_never().is_some() {
            self.ready.store(true, Ordering::Relaxed);
            return Ok(true);
        }
        if self.started.elapsed() > CACHE_WAIT {
            return Err(Error::NotReady(CACHE_WAIT));
        }
        Ok(false)
    }
}

/// How long the caches may take to fill before the operator says so.
const CACHE_WAIT: Duration = Duration::from_secs(60);

fn owner_of<K: Resource>(o: &K) -> Option<ObjectRef<Skyhook>> {
    o.meta()
        .labels
        .as_ref()?
        .get(schema::NAME_LABEL)
        .map(|n| ObjectRef::new(n))
}

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
    let managed = format!("{}={}", schema::MANAGED_BY_LABEL, schema::MANAGED_BY_VALUE);

    let (nodes, node_stream) = node_watch(&client);
    let (jobs, job_events) = recorded(
        labelled_events(Api::<LeanJob>::namespaced(client.clone(), &ns), &managed)
            .map_ok(lean::full::<LeanJob, Job>),
        job_record,
    );
    let job_stream = job_events.touched_objects();
    let [pending, go] = pod_events(&Api::<LeanPod>::namespaced(client.clone(), &ns));
    let (pods, pending) = recorded(pending, |p, _| PodView::from_pod(p));
    let (go_pods, go) = recorded(go, |p, _| PodView::from_pod(p));
    let pod_stream = futures::stream::select(pod_triggers(pending), pod_triggers(go));
    let (configmaps, cm_events) = owned_watch(
        Api::<ConfigMap>::namespaced(client.clone(), &ns),
        schema::NAME_LABEL,
        prune_meta,
    );
    let cm_stream = cm_events.touched_objects();
    let (policies, policy_stream) = policy_watch(&client);

    let (skyhooks, sk_stream) = skyhook_watch(&client, config.skyhook_selector.clone());
    // Each watch pauses on its own after an error (`watch::paced`); kube's default pause of all
    // triggers at once froze every cache for minutes after an API server restart.
    let controller = Controller::for_stream(sk_stream, skyhooks.clone()).trigger_backoff(NoPause);
    let caches = Caches {
        skyhooks: skyhooks.clone(),
        nodes,
        jobs,
        pods,
        go_pods,
        policies,
        configmaps,
    };
    let (creating, created_again) = Creating::new();
    let ctx = new_ctx(client.clone(), config, version, caches, creating);
    let Some(leadership) = prepare(&ctx, &client, shutdown.clone()).await? else {
        return Ok(());
    };

    let for_nodes = skyhooks.clone();
    let for_policies = skyhooks.clone();
    let guard_ctx = ctx.clone();
    info!(namespace = %ns, "skyhook operator starting");
    let reconciling = controller
        .watches_stream(node_stream, move |node: Node| {
            skyhooks_selecting(&for_nodes, &node)
        })
        .watches_stream(job_stream, |job: Job| owner_of(&job))
        .watches_stream(pod_stream, |pod: Pod| owner_of(&pod))
        .watches_stream(cm_stream, |cm: ConfigMap| owner_of(&cm))
        .watches_stream(policy_stream, move |p: DeploymentPolicy| {
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
        });
    supervise(with_guard(reconciling, guard_ctx, &client), leadership).await?;
    info!("skyhook operator stopped");
    Ok(())
}

/// Reconciling, with the DeploymentPolicy guard beside it until reconciling ends.
fn with_guard(
    reconciling: impl std::future::Future<Output = ()>,
    ctx: Arc<Ctx>,
    client: &Client,
) -> impl std::future::Future<Output = ()> {
    let guarding = guard::run(ctx, guard::recorder(client));
    async move {
        tokio::select! {
            _ = reconciling => {}
            _ = guarding => {}
        }
    }
}

/// Everything between building the caches and reconciling: probes and metrics first (a
/// liveness probe must not kill an operator that waits), the API and its CRDs, then leadership.
/// `None` when shut down while waiting to lead.
async fn prepare(
    ctx: &Arc<Ctx>,
    client: &Client,
    shutdown: impl std::future::Future<Output = ()> + Clone,
) -> Result<Option<Leadership>, Error> {
    server::spawn(ctx.clone()).await?;
    let selector = ctx.config.skyhook_selector.as_deref();
    tokio::select! {
        waited = start::wait_for_skyhook_api(client, selector, CRD_WAIT) => waited?,
        _ = shutdown.clone() => return Ok(None),
    }
    let Some(leadership) = lead(ctx, client, shutdown).await else {
        return Ok(None);
    };
    ctx.metrics.leader.set(1);
    mark_ready_when_synced(ctx);
    Ok(Some(leadership))
}

/// How long start-up waits for the Skyhook CRD to be served (it may be being installed beside
/// the operator) before saying it is missing.
const CRD_WAIT: Duration = Duration::from_secs(120);

/// One Skyhook at a time, with no debounce: kube's debounce postpones a pass again with every
/// event that arrives within it, and a rollout over a thousand nodes never pauses for 300 ms,
/// so passes waited for a lull (10 s and more) while stages finished. Events that arrive during
/// a pass make one pass after it; [`Passes`] spaces passes instead, by requeueing, so that one
/// Skyhook's wait never holds the others' passes back.
fn queue_config() -> controller::Config {
    controller::Config::default().concurrency(1)
}

/// Marks the operator ready once the caches have filled, whether or not any Skyhook exists to
/// reconcile (the caches fill once the reconcile loop runs).
fn mark_ready_when_synced(ctx: &Arc<Ctx>) {
    let readiness = ctx.clone();
    tokio::spawn(async move {
        while let Err(e) = readiness.wait_ready().await {
            warn!(error = %e, "caches not ready");
        }
    });
}

/// The reflector stores a [`Ctx`] reads.
struct Caches {
    skyhooks: Store<Skyhook>,
    nodes: Records<NodeView>,
    jobs: Records<JobView>,
    pods: Records<PodView>,
    go_pods: Records<PodView>,
    policies: Store<DeploymentPolicy>,
    configmaps: Store<ConfigMap>,
}

fn new_ctx(
    client: Client,
    config: Config,
    version: String,
    caches: Caches,
    creating: Creating,
) -> Arc<Ctx> {
    Arc::new(Ctx {
        events: events::EventSink::start(recorder::Publisher::new(
            client.clone(),
            recorder::reporter(),
        )),
        client,
        config,
        version,
        skyhooks: caches.skyhooks,
        nodes: caches.nodes,
        jobs: caches.jobs,
        pods: caches.pods,
        go_pods: caches.go_pods,
        policies: caches.policies,
        configmaps: caches.configmaps,
        ready: AtomicBool::new(false),
        standby: AtomicBool::new(false),
        metrics: Metrics::default(),
        creating,
        passes: Passes::default(),
        started: Instant::now(),
    })
}

/// A node event concerns every Skyhook that selects the node.
fn skyhooks_selecting(skyhooks: &Store<Skyhook>, node: &Node) -> Vec<ObjectRef<Skyhook>> {
    skyhooks
        .state()
        .iter()
        .filter(|sk| {
            Selector::try_from(sk.spec.node_selectors.clone())
                .is_ok_and(|s| s.matches(node.labels()))
        })
        .map(|sk| ObjectRef::from(sk.as_ref()))
        .collect()
}

/// A DeploymentPolicy event concerns every Skyhook that names the policy.
fn skyhooks_using(skyhooks: &Store<Skyhook>, policy: &DeploymentPolicy) -> Vec<ObjectRef<Skyhook>> {
    let name = policy.name_any();
    skyhooks
        .state()
        .iter()
        .filter(|sk| sk.spec.deployment_policy.as_deref() == Some(name.as_str()))
        .map(|sk| ObjectRef::from(sk.as_ref()))
        .collect()
}

/// Pods on this Skyhook's cordoned nodes, classified by the planner's drain step. Only cordoned
/// nodes are listed, on demand: the operator never caches every pod in the cluster.
async fn drain_view(
    ctx: &Ctx,
    sk: &Skyhook,
    nodes: &[Arc<NodeView>],
) -> Result<BTreeMap<String, Vec<plan::PodInfo>>, Error> {
    let mut out = BTreeMap::new();
    let cordoned = plan::targeted(sk, nodes)
        .into_iter()
        .filter(|n| n.unschedulable);
    let protected = plan::drain::protection(&sk.spec.pod_non_interrupt_labels);
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    for n in cordoned {
        let node = n.name.clone();
        let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
        let list = pods.list(&lp).await?;
        out.insert(node, plan::drain::classify(&list.items, protected.as_ref()));
    }
    Ok(out)
}

fn error_policy(sk: Arc<Skyhook>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    error!(skyhook = %sk.name_any(), error = %err, "reconcile error; retrying in 5s");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(sk: Arc<Skyhook>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !ctx.caches_ready()? {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let name = sk.name_any();
    if let Some(left) = ctx.passes.wait_left(&name) {
        return Ok(Action::requeue(left));
    }
    ctx.passes.starting(&name);
    let started = Instant::now();
    let sk = ctx.passes.newest(sk);
    let (action, stored) = match pass(&sk, &ctx).await {
        Ok((action, stored)) => (Ok(action), stored),
        Err(e) => (Err(e), None),
    };
    // A deleted Skyhook's entry goes with it (`forget`); its last passes need no spacing.
    if sk.meta().deletion_timestamp.is_none() {
        ctx.passes.ended(&name, started, stored);
    }
    action
}

/// One pass: the action for the controller, and the Skyhook as the pass's status write
/// stored it.
async fn pass(
    sk: &Arc<Skyhook>,
    ctx: &Arc<Ctx>,
) -> Result<(Action, Option<(Skyhook, Duration)>), Error> {
    let started = Instant::now();
    let name = sk.name_any();
    let nodes = ctx.nodes.all();
    if sk.meta().deletion_timestamp.is_some() {
        return deletion_pass(sk, ctx, &nodes).await.map(|a| (a, None));
    }
    let mut normalized = Skyhook {
        metadata: sk.metadata.clone(),
        spec: sk.spec.clone(),
        status: None,
    };
    crd::normalize(&mut normalized);
    let skyhooks = ctx.skyhooks.state();
    let policies = ctx.policies.state();
    let invalid = problems(&normalized, &policies);
    let views = job_views(ctx, &name);
    let configmaps: Vec<Arc<ConfigMap>> = ctx
        .configmaps
        .state()
        .into_iter()
        .filter(|c| c.labels().get(schema::NAME_LABEL) == Some(&name))
        .collect();
    let pods_on_nodes = drain_view(ctx, &normalized, &nodes).await?;
    let busy_nodes = busy_elsewhere(ctx, &name);
    let go_pods = go_pods(ctx, &name);
    let mut plan = plan::plan(&Inputs {
        skyhook: &normalized,
        status: sk.status.as_ref(),
        skyhooks: &skyhooks,
        policies: &policies,
        nodes: &nodes,
        jobs: &views,
        configmaps: &configmaps,
        pods_on_nodes: &pods_on_nodes,
        busy_nodes: &busy_nodes,
        go_pods: &go_pods,
        invalid: &invalid,
        config: &ctx.config,
        operator_version: &ctx.version,
        now: jiff::Timestamp::now(),
        create_room: plan::launch::MAX_JOB_CREATES_PER_PASS.saturating_sub(ctx.creating.len()),
    });
    observe(ctx, &normalized, sk.status.as_ref(), &plan);
    hold_status(ctx, &name, sk.status.as_ref(), &mut plan);
    let requeue = plan.requeue_after;
    let planned = Instant::now();
    let (creates, patches) = (plan.create_jobs.len(), plan.node_patches.len());
    let create = |jobs| Creating::start(ctx, sk, jobs);
    let written = exec::execute(
        &ctx.client,
        &ctx.events,
        &ctx.config.namespace,
        sk,
        plan,
        create,
    )
    .await;
    let (plan_s, write_s) = (planned - started, planned.elapsed());
    ctx.metrics.pass_phase("plan", plan_s.as_secs_f64());
    ctx.metrics.pass_phase("write", write_s.as_secs_f64());
    debug!(skyhook = %name, nodes = nodes.len(), jobs = views.len(), creates, node_patches = patches,
        plan_ms = plan_s.as_millis() as u64, write_ms = write_s.as_millis() as u64, "pass");
    let done = written?;
    let action = match done.written {
        exec::Written::All => requeue.map_or_else(Action::await_change, Action::requeue),
        exec::Written::Conflict => {
            Action::requeue(requeue.map_or(CONFLICT_REQUEUE, |r| r.min(CONFLICT_REQUEUE)))
        }
    };
    Ok((action, done.stored))
}

/// A status held back after a slow one ([`Passes::status_hold`]) is written by the first pass
/// after the hold, which the requeue makes sure of; like a status write that met a 409, its
/// Events wait for it. Only progress waits: news about the Skyhook as a whole (its aggregate
/// status, a condition, a generation observed) is written at once.
/// The metrics of one pass: node counts from its census (every node), the rest from the status
/// it writes, or the stored one when it writes none.
fn observe(ctx: &Ctx, sk: &Skyhook, stored: Option<&crd::SkyhookStatus>, plan: &plan::Plan) {
    if let (Some(status), Some(census)) = (plan.status.as_ref().or(stored), &plan.census) {
        let (policy, compartments) = (&plan.policy_label, &plan.compartments);
        ctx.metrics
            .observe(sk, status, census, policy, compartments);
    }
}

fn hold_status(ctx: &Ctx, name: &str, stored: Option<&crd::SkyhookStatus>, plan: &mut plan::Plan) {
    let Some(desired) = plan.status.as_ref() else {
        return;
    };
    if stored.is_none_or(|s| plan::status::news(s, desired)) {
        return;
    }
    if let Some(hold) = ctx.passes.status_hold(name) {
        plan.drop_status();
        plan.requeue_after = Some(plan.requeue_after.map_or(hold, |r| r.min(hold)));
    }
}

/// A pass of a deleted Skyhook: its marks come off the nodes, its Jobs and ConfigMaps go, and
/// the finalizer last.
async fn deletion_pass(sk: &Skyhook, ctx: &Ctx, nodes: &[Arc<NodeView>]) -> Result<Action, Error> {
    let name = sk.name_any();
    ctx.metrics.forget(&name);
    ctx.passes.forget(&name);
    let plan = plan::plan_delete(sk, nodes);
    let ns = &ctx.config.namespace;
    let done = exec::execute(&ctx.client, &ctx.events, ns, sk, plan, |_| {}).await?;
    Ok(match done.written {
        exec::Written::All => Action::await_change(),
        exec::Written::Conflict => Action::requeue(CONFLICT_REQUEUE),
    })
}

/// The next pass after a write met a 409 (an object changed after the pass read it). Not the
/// error policy's 5 s: nothing failed, and the watch usually delivers the newer copy within
/// milliseconds (its event often schedules the pass sooner). Not at once either, so that a
/// cache that lags for longer is not hammered.
const CONFLICT_REQUEUE: Duration = Duration::from_secs(1);

/// What the operator-side validation finds wrong with the Skyhook and the policy it names (the
/// policy has no status of its own, so its problems show on the Skyhooks that use it).
fn problems(sk: &Skyhook, policies: &[Arc<DeploymentPolicy>]) -> Vec<String> {
    let mut invalid: Vec<String> = match crd::validate_skyhook(sk) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    };
    let policy = sk
        .spec
        .deployment_policy
        .as_deref()
        .and_then(|p| policies.iter().find(|x| x.name_any() == p));
    if let Some(policy) = policy
        && let Err(errs) = crd::validate_deployment_policy(policy)
    {
        let name = policy.name_any();
        invalid.extend(
            errs.iter()
                .map(|e| format!("deploymentPolicy {name:?}: {e}")),
        );
    }
    invalid
}
