//! The operator's imperative shell: scoped watches feeding reflector caches, one queue keyed by
//! Skyhook, and a reconcile that snapshots the caches, asks the planner what to do and hands the
//! plan to the executor.

pub mod api_counter;
pub mod exec;
pub mod leader;
pub mod server;
pub mod start;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Node, NodeSystemInfo, Pod};
use kube::api::Api;
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use thiserror::Error;
use tracing::{error, info, warn};

use crate::crd::{self, DeploymentPolicy, Skyhook};
use crate::jobs::JobView;
use crate::metrics::Metrics;
use crate::plan::{self, Inputs};
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
    pub recorder: Recorder,
    pub skyhooks: Store<Skyhook>,
    pub nodes: Store<Node>,
    pub jobs: Store<Job>,
    pub pods: Store<Pod>,
    pub policies: Store<DeploymentPolicy>,
    pub configmaps: Store<ConfigMap>,
    pub ready: AtomicBool,
    /// Waiting to lead: ready (as a follower), not reconciling.
    pub standby: AtomicBool,
    pub metrics: Metrics,
}

impl Ctx {
    async fn wait_ready(&self) -> Result<(), Error> {
        if self.ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        let limit = Duration::from_secs(60);
        let all = async {
            let _ = self.nodes.wait_until_ready().await;
            let _ = self.jobs.wait_until_ready().await;
            let _ = self.pods.wait_until_ready().await;
            let _ = self.policies.wait_until_ready().await;
            let _ = self.configmaps.wait_until_ready().await;
        };
        tokio::time::timeout(limit, all)
            .await
            .map_err(|_| Error::NotReady(limit))?;
        self.ready.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// Node objects keep what the planner reads (labels, annotations, taints, unschedulable,
/// conditions, boot id); images, volumes, addresses and capacities are most of a Node's bytes.
fn prune_node(n: &mut Node) {
    n.metadata.managed_fields = None;
    if let Some(spec) = n.spec.as_mut() {
        spec.pod_cidr = None;
        spec.pod_cidrs = None;
        spec.provider_id = None;
    }
    if let Some(s) = n.status.as_mut() {
        s.images = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
        s.config = None;
        s.addresses = None;
        s.allocatable = None;
        s.capacity = None;
        s.daemon_endpoints = None;
        s.features = None;
        s.runtime_handlers = None;
        s.node_info = s.node_info.take().map(|i| NodeSystemInfo {
            boot_id: i.boot_id,
            ..NodeSystemInfo::default()
        });
    }
}

/// A Job is read for its labels, annotations and conditions only ([`JobView`]); its pod
/// template is most of its bytes, and there are nodes × packages × stages of them.
fn prune_job(j: &mut Job) {
    j.metadata.managed_fields = None;
    j.spec = None;
    if let Some(s) = j.status.as_mut() {
        s.uncounted_terminated_pods = None;
    }
}

/// A stage pod is read for its Job label and its containers' waiting reasons only.
fn prune_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    p.spec = None;
    if let Some(s) = p.status.as_mut() {
        let keep = |list: &mut Option<Vec<ContainerStatus>>| {
            if let Some(list) = list.as_mut() {
                for c in list.iter_mut() {
                    *c = ContainerStatus {
                        name: std::mem::take(&mut c.name),
                        state: c.state.take(),
                        ..ContainerStatus::default()
                    };
                }
            }
        };
        keep(&mut s.init_container_statuses);
        keep(&mut s.container_statuses);
        s.ephemeral_container_statuses = None;
        s.conditions = None;
        s.host_ips = None;
        s.pod_ips = None;
    }
}

/// What of a node the planner reads, hashed: a kubelet or kwok heartbeat changes none of it, so
/// it starts no pass (at a thousand nodes heartbeats alone would keep the queue full).
fn node_fingerprint(n: &Node) -> Option<u64> {
    let mut h = DefaultHasher::new();
    n.metadata.labels.hash(&mut h);
    n.metadata.annotations.hash(&mut h);
    if let Some(spec) = &n.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.value, &t.effect).hash(&mut h);
        }
    }
    if let Some(status) = &n.status {
        status.node_info.as_ref().map(|i| &i.boot_id).hash(&mut h);
        for c in status.conditions.iter().flatten() {
            (&c.type_, &c.status, &c.reason).hash(&mut h);
        }
    }
    Some(h.finish())
}

/// A stage pod matters to a pass only through its containers' waiting reasons (a stuck image
/// pull); its Job reports everything else.
fn pod_fingerprint(p: &Pod) -> Option<u64> {
    let mut h = DefaultHasher::new();
    p.metadata.deletion_timestamp.is_some().hash(&mut h);
    if let Some(s) = &p.status {
        let all = s.init_container_statuses.iter().flatten();
        for c in all.chain(s.container_statuses.iter().flatten()) {
            let waiting = c.state.as_ref().and_then(|st| st.waiting.as_ref());
            (&c.name, waiting.and_then(|w| w.reason.as_ref())).hash(&mut h);
        }
    }
    Some(h.finish())
}

fn prune_meta<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

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
    let ns = config.namespace.clone();
    let managed = format!("{}={}", schema::MANAGED_BY_LABEL, schema::MANAGED_BY_VALUE);
    let owned = schema::NAME_LABEL.to_string();

    let (nodes, node_stream) = node_watch(&client);
    let (jobs, job_events) = owned_watch(
        Api::<Job>::namespaced(client.clone(), &ns),
        &managed,
        prune_job,
    );
    let job_stream = job_events.touched_objects();
    let (pods, pod_events) = owned_watch(
        Api::<Pod>::namespaced(client.clone(), &ns),
        &owned,
        prune_pod,
    );
    let pod_stream = pod_events.applied_objects();
    let pod_stream = pod_stream.predicate_filter(pod_fingerprint, PredicateConfig::default());
    let (configmaps, cm_events) = owned_watch(
        Api::<ConfigMap>::namespaced(client.clone(), &ns),
        &owned,
        prune_meta,
    );
    let cm_stream = cm_events.touched_objects();
    let (policies, policy_w) = reflector::store();
    let policy_stream = watcher(Api::all(client.clone()), watch_config())
        .default_backoff()
        .reflect(policy_w)
        .touched_objects();

    let sk_cfg = config
        .skyhook_selector
        .as_deref()
        .map_or_else(watch_config, |sel| watch_config().labels(sel));
    let controller = Controller::new(Api::<Skyhook>::all(client.clone()), sk_cfg);
    let skyhooks = controller.store();
    let caches = Caches {
        skyhooks: skyhooks.clone(),
        nodes,
        jobs,
        pods,
        policies,
        configmaps,
    };
    let ctx = new_ctx(client.clone(), config, version, caches);
    // Probes first: a liveness probe must not kill an operator that waits for its API.
    server::spawn(ctx.clone()).await?;
    let selector = ctx.config.skyhook_selector.as_deref();
    start::wait_for_skyhook_api(&client, selector, CRD_WAIT).await?;

    let mut elector = match ctx.config.leader {
        Some(timings) => {
            let mut e = leader::Elector::new(client.clone(), &ns, leader::identity(), timings);
            ctx.standby.store(true, Ordering::Relaxed);
            tokio::select! {
                _ = e.acquire() => {}
                _ = shutdown.clone() => return Ok(()),
            }
            ctx.standby.store(false, Ordering::Relaxed);
            Some(e)
        }
        None => None,
    };
    ctx.metrics.leader.set(1);
    mark_ready_when_synced(&ctx);

    let for_nodes = skyhooks.clone();
    let for_policies = skyhooks.clone();
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
        .with_config(queue_config())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                warn!(error = %e, "reconcile failed");
            }
        });
    match elector.as_mut() {
        None => reconciling.await,
        Some(e) => {
            // Losing the Lease drops the reconcile loop at once: no write after that.
            tokio::select! {
                _ = reconciling => e.release().await,
                why = e.hold() => return Err(Error::LostLeadership(why)),
            }
        }
    }
    info!("skyhook operator stopped");
    Ok(())
}

/// How long start-up waits for the Skyhook CRD to be served (it may be being installed beside
/// the operator) before saying it is missing.
const CRD_WAIT: Duration = Duration::from_secs(120);

/// One Skyhook at a time; bursts of events within 300 ms make one pass.
fn queue_config() -> controller::Config {
    controller::Config::default()
        .concurrency(1)
        .debounce(Duration::from_millis(300))
}

/// Every node, pruned, with the events that change what the planner reads.
fn node_watch(
    client: &Client,
) -> (
    Store<Node>,
    impl futures::Stream<Item = Result<Node, watcher::Error>> + Send + use<>,
) {
    let (nodes, writer) = reflector::store();
    let stream = watcher(Api::<Node>::all(client.clone()), watch_config())
        .default_backoff()
        .modify(prune_node)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(node_fingerprint, PredicateConfig::default());
    (nodes, stream)
}

/// Watches start from any cached version (`resourceVersion=0`): fine for reflector stores.
fn watch_config() -> watcher::Config {
    watcher::Config::default().any_semantic()
}

/// A reflector store of the objects of `api` carrying `labels`, and its stream of watch events
/// (objects stored as `prune` leaves them).
fn owned_watch<K>(
    api: Api<K>,
    labels: &str,
    prune: fn(&mut K),
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, watch_config().labels(labels))
        .default_backoff()
        .modify(prune)
        .reflect(writer);
    (store, events)
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
    nodes: Store<Node>,
    jobs: Store<Job>,
    pods: Store<Pod>,
    policies: Store<DeploymentPolicy>,
    configmaps: Store<ConfigMap>,
}

fn new_ctx(client: Client, config: Config, version: String, caches: Caches) -> Arc<Ctx> {
    let reporter = Reporter {
        controller: schema::EVENT_COMPONENT.to_string(),
        instance: std::env::var("POD_NAME").ok(),
    };
    Arc::new(Ctx {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        config,
        version,
        skyhooks: caches.skyhooks,
        nodes: caches.nodes,
        jobs: caches.jobs,
        pods: caches.pods,
        policies: caches.policies,
        configmaps: caches.configmaps,
        ready: AtomicBool::new(false),
        standby: AtomicBool::new(false),
        metrics: Metrics::default(),
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
    nodes: &[Arc<Node>],
) -> Result<BTreeMap<String, Vec<plan::PodInfo>>, Error> {
    let mut out = BTreeMap::new();
    let cordoned = plan::targeted(sk, nodes).into_iter().filter(|n| {
        n.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    });
    let protected = plan::drain::protection(&sk.spec.pod_non_interrupt_labels);
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    for n in cordoned {
        let node = n.name_any();
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
    ctx.wait_ready().await?;
    let name = sk.name_any();
    let nodes = ctx.nodes.state();
    if sk.meta().deletion_timestamp.is_some() {
        ctx.metrics.forget(&name);
        let plan = plan::plan_delete(&sk, &nodes);
        exec::execute(&ctx.client, &ctx.recorder, &ctx.config.namespace, &sk, plan).await?;
        return Ok(Action::await_change());
    }
    let mut normalized = (*sk).clone();
    crd::normalize(&mut normalized);
    let skyhooks = ctx.skyhooks.state();
    let policies = ctx.policies.state();
    let invalid = problems(&normalized, &policies);
    let views = job_views(&ctx, &name);
    let configmaps: Vec<Arc<ConfigMap>> = ctx
        .configmaps
        .state()
        .into_iter()
        .filter(|c| c.labels().get(schema::NAME_LABEL) == Some(&name))
        .collect();
    let pods_on_nodes = drain_view(&ctx, &normalized, &nodes).await?;
    let busy_nodes = busy_elsewhere(&ctx, &name);
    let plan = plan::plan(&Inputs {
        skyhook: &normalized,
        skyhooks: &skyhooks,
        policies: &policies,
        nodes: &nodes,
        jobs: &views,
        configmaps: &configmaps,
        pods_on_nodes: &pods_on_nodes,
        busy_nodes: &busy_nodes,
        invalid: &invalid,
        config: &ctx.config,
        operator_version: &ctx.version,
        now: jiff::Timestamp::now(),
    });
    let requeue = plan.requeue_after;
    let targeted = plan::targeted(&normalized, &nodes).len();
    let ceiling = plan::rollout::batch_size(&normalized, &policies, targeted);
    if let Some(status) = plan.status.as_ref().or(sk.status.as_ref()) {
        ctx.metrics.observe(&normalized, status, ceiling);
    }
    exec::execute(&ctx.client, &ctx.recorder, &ctx.config.namespace, &sk, plan).await?;
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

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

/// This Skyhook's Jobs, each with its pod (for waiting reasons the Job cannot see).
fn job_views(ctx: &Ctx, skyhook: &str) -> Vec<JobView> {
    let mut pod_by_job: HashMap<String, Arc<Pod>> = HashMap::new();
    for p in ctx.pods.state() {
        if let Some(j) = p.labels().get("batch.kubernetes.io/job-name") {
            pod_by_job.insert(j.clone(), p.clone());
        }
    }
    ctx.jobs
        .state()
        .iter()
        .filter(|j| j.labels().get(schema::NAME_LABEL).map(String::as_str) == Some(skyhook))
        .filter_map(|j| JobView::from_job(j, pod_by_job.get(&j.name_any()).map(|p| p.as_ref())))
        .collect()
}

/// Nodes where a Job of another Skyhook runs.
fn busy_elsewhere(ctx: &Ctx, skyhook: &str) -> BTreeSet<String> {
    ctx.jobs
        .state()
        .iter()
        .filter(|j| j.labels().get(schema::NAME_LABEL).map(String::as_str) != Some(skyhook))
        .filter_map(|j| JobView::from_job(j, None))
        .filter(|v| !v.finished())
        .map(|v| v.node)
        .collect()
}
