//! What one pass reads, as the planner's [`Inputs`]: the caches (this Skyhook's Jobs with those
//! still being created, the nodes other Skyhooks keep busy, the Go operator's pods, its
//! ConfigMaps), the pods on its cordoned nodes (listed on demand), and what validation finds
//! wrong with the Skyhook and its policy.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api as KubeApi;
use kube::{Client, ResourceExt};

use super::error::Error;
use super::outbound::alerts::AlertSources;
use super::watch::caches::Caches;
use super::write::job_creations::JobCreations;
use crate::crd::{self, DeploymentPolicy, Skyhook};
use crate::jobs::{CheckRun, GoPod, JobView};
use crate::node::NodeView;
use crate::plan::alerts::AlertReading;
use crate::plan::{self, Elsewhere, Inputs};
use crate::schema::{self, Api};
use crate::settings::Config;

/// The objects one pass plans from, owned, so that [`Inputs`] can borrow them.
pub struct Snapshot {
    /// The Skyhook, normalised, without its status (the planner reads the stored one).
    pub skyhook: Skyhook,
    pub skyhooks: Vec<Arc<Skyhook>>,
    /// The objects of the other served API, and which it is.
    pub peers: (Api, Vec<Arc<Skyhook>>),
    pub policies: Vec<Arc<DeploymentPolicy>>,
    pub nodes: Vec<Arc<NodeView>>,
    pub jobs: Vec<Arc<JobView>>,
    pub configmaps: Vec<Arc<ConfigMap>>,
    pub pods_on_nodes: BTreeMap<String, Vec<plan::PodInfo>>,
    pub busy_nodes: BTreeSet<String>,
    pub interrupting_nodes: BTreeSet<String>,
    pub go_pods: BTreeMap<String, Vec<GoPod>>,
    pub invalid: Vec<String>,
    /// Its health check Jobs, by node, listed while a node waits for a gate with a check.
    pub health_checks: BTreeMap<String, Vec<CheckRun>>,
    /// What the alert gate's source says, when the Skyhook's policy has one.
    pub alerts: Option<AlertReading>,
}

impl Snapshot {
    /// Reads the caches for `sk`, and lists the pods on its cordoned nodes.
    pub async fn take(
        api: Api,
        caches: &Caches,
        creations: &JobCreations,
        client: &Client,
        namespace: &str,
        alerts: &AlertSources,
        sk: &Skyhook,
    ) -> Result<Snapshot, Error> {
        let name = sk.name_any();
        let mut normalized = Skyhook {
            metadata: sk.metadata.clone(),
            spec: sk.spec.clone(),
            status: None,
        };
        crd::normalize(&mut normalized);
        let policies = caches.policies.state();
        // In the canonical keys, without the other API's (shared, for the legacy API).
        let nodes: Vec<Arc<NodeView>> = caches.nodes.all().iter().map(|n| n.in_api(api)).collect();
        let soaking = plan::drain::soaking(sk.status.as_ref());
        let pods_on_nodes = drain_view(client, namespace, &normalized, &nodes, &soaking).await?;
        let health_checks = health_checks(client, namespace, api, &normalized, &nodes).await?;
        let gate = normalized
            .spec
            .deployment_policy
            .as_deref()
            .and_then(|p| policies.iter().find(|x| x.name_any() == p))
            .and_then(|p| p.spec.alert_gate.clone());
        let alert_reading = match &gate {
            Some(g) => Some(alerts.read(g).await),
            None => None,
        };
        let elsewhere = elsewhere(caches, creations, api, &name);
        let label = api.local(schema::NAME_LABEL);
        Ok(Snapshot {
            invalid: crd::validate::problems(&normalized, &policies),
            skyhooks: caches.skyhooks.state(),
            peers: (api.other(), Vec::new()),
            jobs: explain_failures(client, namespace, job_views(caches, creations, api, &name))
                .await,
            configmaps: caches
                .configmaps
                .state()
                .into_iter()
                .filter(|c| c.labels().get(label.as_ref()) == Some(&name))
                .map(|c| canonical_configmap(c, api))
                .collect(),
            busy_nodes: elsewhere.busy,
            interrupting_nodes: elsewhere.interrupting,
            go_pods: match api {
                Api::Skyhook => go_pods(caches, &name),
                // The Go operator before v0.18 ran Skyhooks only.
                Api::NodeWright => BTreeMap::new(),
            },
            skyhook: normalized,
            policies,
            nodes,
            pods_on_nodes,
            health_checks,
            alerts: alert_reading,
        })
    }

    /// With the objects of the other served API (`Ctx::peers`): the rules over shared nodes
    /// read both (`plan::fleet`).
    pub fn with_peers(self, peers: (Api, Vec<Arc<Skyhook>>)) -> Snapshot {
        Snapshot { peers, ..self }
    }

    /// The planner's view of this snapshot.
    pub fn inputs<'a>(
        &'a self,
        status: Option<&'a crd::SkyhookStatus>,
        config: &'a Config,
        operator_version: &'a str,
        now: Timestamp,
        create_room: usize,
    ) -> Inputs<'a> {
        Inputs {
            skyhook: &self.skyhook,
            status,
            skyhooks: &self.skyhooks,
            peers: plan::fleet::Peers {
                api: self.peers.0,
                objects: &self.peers.1,
            },
            policies: &self.policies,
            nodes: &self.nodes,
            jobs: &self.jobs,
            configmaps: &self.configmaps,
            pods_on_nodes: &self.pods_on_nodes,
            busy_nodes: &self.busy_nodes,
            interrupting_nodes: &self.interrupting_nodes,
            go_pods: &self.go_pods,
            invalid: &self.invalid,
            write_failures: &[],
            drain_blocks: &[],
            refused_auto_taints: &crate::plan::inputs::NO_NODES,
            refused_nodes: &crate::plan::inputs::NO_NODES,
            health_checks: &self.health_checks,
            alerts: self.alerts.as_ref(),
            config,
            operator_version,
            now,
            status_hold: None,
            create_room,
        }
    }
}

/// This Skyhook's Jobs, each running one with its pod's stuck container (a wait the Job cannot
/// see).
fn job_views(
    caches: &Caches,
    creations: &JobCreations,
    api: Api,
    skyhook: &str,
) -> Vec<Arc<JobView>> {
    let pods = caches.pods.all();
    let stuck: HashMap<&str, &(String, String, String)> = pods
        .iter()
        .filter_map(|p| Some((p.job.as_deref()?, p.stuck.as_ref()?)))
        .collect();
    let mut views: Vec<Arc<JobView>> = caches
        .jobs
        .all()
        .into_iter()
        .filter(|j| j.api == api && j.skyhook == skyhook)
        .map(|j| match stuck.get(&*j.name) {
            // Only a running Job with a stuck pod is copied, to carry the pod's reason.
            Some(s) if !j.finished() => Arc::new(JobView {
                stuck: Some(Box::new((*s).clone())),
                ..JobView::clone(&j)
            }),
            _ => j,
        })
        .collect();
    let on_the_way = creations.unseen(|name| caches.jobs.get(name).is_some());
    views.extend(
        on_the_way
            .into_iter()
            .filter(|v| v.api == api && v.skyhook == skyhook)
            .map(Arc::new),
    );
    views
}

/// The most failed Jobs whose pods one pass reads, newest failure first.
const FAILURES_EXPLAINED_PER_PASS: usize = 16;

/// How long after its failure a Job not yet folded has its pods read. A failure is folded within
/// a pass or two of being seen; Jobs that nothing folds (an old version's, a node's that left the
/// selector) are not read beyond this.
const EXPLAIN_WITHIN: jiff::SignedDuration = jiff::SignedDuration::from_mins(10);

/// Failed Jobs not yet folded, with the reason the kubelet refused their pod: the pod watch
/// follows pods only while `Pending` (memory at scale), and a pod refused at admission
/// (`OutOfcpu`) goes from `Pending` straight to `Failed`. The list is served from the API
/// server's cache; a read that fails leaves the Job controller's reason.
async fn explain_failures(
    client: &Client,
    namespace: &str,
    mut views: Vec<Arc<JobView>>,
) -> Vec<Arc<JobView>> {
    let since = Timestamp::now() - EXPLAIN_WITHIN;
    let pods: KubeApi<Pod> = KubeApi::namespaced(client.clone(), namespace);
    let mut unexplained: Vec<usize> = (0..views.len())
        .filter(|&i| views[i].failure_unexplained(since))
        .collect();
    unexplained.sort_by_key(|&i| std::cmp::Reverse(views[i].failed_at()));
    unexplained.truncate(FAILURES_EXPLAINED_PER_PASS);
    for i in unexplained {
        let lp = kube::api::ListParams::default()
            .labels(&format!("{}={}", schema::JOB_NAME_LABEL, views[i].name))
            .match_any();
        match pods.list(&lp).await {
            Ok(mut list) => {
                // The newest pod's refusal: the one the Job failed on.
                list.items
                    .sort_by_key(|p| std::cmp::Reverse(p.metadata.creation_timestamp.clone()));
                if let Some(why) = list.items.iter().find_map(crate::jobs::view::refusal) {
                    views[i] = Arc::new(views[i].explained(why));
                }
            }
            Err(e) => {
                tracing::debug!(job = %views[i].name, error = %e, "reading a failed Job's pod")
            }
        }
    }
    views
}

/// Nodes where a Job of another Skyhook (or NodeWright) runs, or a pod of the Go operator for
/// another Skyhook (unless it failed: it waits for that Skyhook's pass to replace it).
fn elsewhere(caches: &Caches, creations: &JobCreations, api: Api, skyhook: &str) -> Elsewhere {
    let mut at_work = Elsewhere::default();
    let jobs = caches.jobs.all();
    let on_the_way = creations.unseen(|name| caches.jobs.get(name).is_some());
    let running = jobs.iter().map(|j| &**j).filter(|j| !j.finished());
    for j in running
        .chain(&on_the_way)
        .filter(|j| j.api != api || j.skyhook != skyhook)
    {
        at_work.add(&j.node, j.stage);
    }
    let go_pods = caches.go_pods.all();
    let go = go_pods
        .iter()
        .filter(|p| api != Api::Skyhook || p.skyhook != skyhook)
        .filter_map(|p| p.go.as_ref())
        .filter(|p| p.deleting || !p.failed());
    for p in go {
        at_work.add(&p.node, p.stage);
    }
    at_work
}

/// This Skyhook's pods left by the Go operator (package and interrupt pods in the operator
/// namespace, by the reference's labels), by node.
fn go_pods(caches: &Caches, skyhook: &str) -> BTreeMap<String, Vec<GoPod>> {
    let mut by_node: BTreeMap<String, Vec<GoPod>> = BTreeMap::new();
    let pods = caches.go_pods.all();
    let ours = pods.iter().filter(|p| p.skyhook == skyhook);
    for p in ours.filter_map(|p| p.go.clone()) {
        by_node.entry(p.node.clone()).or_default().push(p);
    }
    by_node
}

/// Pods on this Skyhook's cordoned nodes, listed as the planner's drain asks.
async fn drain_view(
    client: &Client,
    namespace: &str,
    sk: &Skyhook,
    nodes: &[Arc<NodeView>],
    soaking: &[String],
) -> Result<BTreeMap<String, Vec<plan::PodInfo>>, Error> {
    let listing = plan::drain::Listing::of(sk, nodes, soaking, namespace);
    let pods: KubeApi<Pod> = KubeApi::all(client.clone());
    let mut out = BTreeMap::new();
    for node in &listing.nodes {
        let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
        let list = pods.list(&lp).await?;
        out.insert(node.clone(), listing.read(&list.items));
    }
    Ok(out)
}

/// This Skyhook's health check Jobs, by node: listed (one request) only while one of its nodes
/// waits for a gate that has a check, so the Job cache keeps package stages alone.
async fn health_checks(
    client: &Client,
    namespace: &str,
    api: Api,
    sk: &Skyhook,
    nodes: &[Arc<NodeView>],
) -> Result<BTreeMap<String, Vec<CheckRun>>, Error> {
    let mut out: BTreeMap<String, Vec<CheckRun>> = BTreeMap::new();
    let has_check = sk
        .spec
        .health_gate
        .as_ref()
        .is_some_and(|g| g.check.is_some());
    let clock = schema::health_gate_annotation(&sk.name_any());
    if !has_check || !nodes.iter().any(|n| n.annotations.contains_key(&clock)) {
        return Ok(out);
    }
    let jobs: KubeApi<k8s_openapi::api::batch::v1::Job> =
        KubeApi::namespaced(client.clone(), namespace);
    let lp = kube::api::ListParams::default().labels(&format!(
        "{}={},{}={}",
        api.local(schema::NAME_LABEL),
        sk.name_any(),
        api.local(schema::STAGE_LABEL),
        schema::HEALTH_CHECK_STAGE
    ));
    let mut listed = jobs.list(&lp).await?.items;
    for job in &mut listed {
        api.canonicalize(&mut job.metadata.labels);
        api.canonicalize(&mut job.metadata.annotations);
    }
    for run in listed.iter().filter_map(CheckRun::from_job) {
        out.entry(run.node.clone()).or_default().push(run);
    }
    Ok(out)
}

/// A ConfigMap of ours in the canonical keys (shared, for the legacy API).
fn canonical_configmap(cm: Arc<ConfigMap>, api: Api) -> Arc<ConfigMap> {
    if api == Api::Skyhook {
        return cm;
    }
    let mut cm = ConfigMap::clone(&cm);
    api.canonicalize(&mut cm.metadata.labels);
    api.canonicalize(&mut cm.metadata.annotations);
    Arc::new(cm)
}
