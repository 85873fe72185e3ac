//! The copy of the world a dry run changes: each pass's writes applied as the API server would
//! store them, and each started Job ending when its package stage took as long as before.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeCondition, Pod};
use kube::ResourceExt;

use super::history::Durations;
use super::snapshot::Snapshot;
use crate::crd::{Skyhook, SkyhookStatus};
use crate::jobs::{JobView, Outcome};
use crate::node::NodeView;
use crate::plan::actions::{JobOp, NodePatch, Plan};
use crate::plan::drain::{Listing, PodInfo, soaking};
use crate::schema::{self, Api, Status};

pub(super) struct Sim {
    api: Api,
    namespace: String,
    pub skyhook: Skyhook,
    pub status: Option<SkyhookStatus>,
    nodes: BTreeMap<String, Node>,
    pub views: Vec<Arc<NodeView>>,
    pub jobs: Vec<Arc<JobView>>,
    /// When each running Job ends.
    due: BTreeMap<Arc<str>, Timestamp>,
    pub configmaps: Vec<Arc<ConfigMap>>,
    pub pods: BTreeMap<String, Vec<Pod>>,
    pub pods_on_nodes: BTreeMap<String, Vec<PodInfo>>,
    /// The last pass's requeue.
    pub requeue: Option<Duration>,
    version: u64,
}

impl Sim {
    pub fn new(snap: &Snapshot) -> Sim {
        let version = snap
            .nodes
            .iter()
            .filter_map(|n| n.resource_version()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let mut sim = Sim {
            api: snap.api,
            namespace: snap.namespace.clone(),
            skyhook: snap.skyhook.clone(),
            status: snap.status.clone(),
            nodes: snap
                .nodes
                .iter()
                .map(|n| (n.name_any(), n.clone()))
                .collect(),
            views: Vec::new(),
            jobs: snap.jobs.clone(),
            due: BTreeMap::new(),
            configmaps: snap.configmaps.clone(),
            pods: snap.pods.clone(),
            pods_on_nodes: BTreeMap::new(),
            requeue: None,
            version,
        };
        sim.views = sim.nodes.values().map(|n| sim.view(n)).collect();
        sim.list_pods();
        sim
    }

    fn view(&self, n: &Node) -> Arc<NodeView> {
        Arc::new(NodeView::from(n.clone())).in_api(self.api)
    }

    /// The pods the drain would list now, as the controller lists them before a pass.
    fn list_pods(&mut self) {
        let soaking = soaking(self.status.as_ref());
        let listing = Listing::of(&self.skyhook, &self.views, &soaking, &self.namespace);
        self.pods_on_nodes = listing
            .nodes
            .iter()
            .map(|n| {
                let pods = self.pods.get(n).map(Vec::as_slice).unwrap_or_default();
                (n.clone(), listing.read(pods))
            })
            .collect();
    }

    /// Stores what `plan` writes; whether it wrote anything.
    pub fn apply(&mut self, plan: Plan, now: Timestamp, durations: &Durations) -> bool {
        let mut wrote = false;
        if plan.add_finalizer {
            self.skyhook
                .finalizers_mut()
                .push(schema::FINALIZER.to_string());
            wrote = true;
        }
        if let Some(v) = plan.version_annotation {
            self.skyhook
                .annotations_mut()
                .insert(schema::VERSION_ANNOTATION.to_string(), v);
            wrote = true;
        }
        for cm in plan.configmaps {
            let name = cm.name_any();
            self.configmaps.retain(|c| c.name_any() != name);
            self.configmaps.push(Arc::new(cm));
            wrote = true;
        }
        for name in &plan.stale_configmaps {
            self.configmaps.retain(|c| &c.name_any() != name);
            wrote = true;
        }
        let mut started: Vec<usize> = Vec::new();
        for job in plan.create_jobs {
            let mut view = job.view;
            view.created = Some(now);
            view.outcome = Outcome::Running;
            let took = durations.estimate(&view.package, &view.version, view.stage);
            self.due.insert(view.name.clone(), now + took.seconds());
            started.push(self.jobs.len());
            self.jobs.push(Arc::new(view));
            wrote = true;
        }
        for (_, op) in &plan.job_ops {
            self.job_op(op, now);
            wrote = true;
        }
        for e in &plan.evictions {
            if let Some(pods) = self.pods.get_mut(&e.node) {
                pods.retain(|p| {
                    !(p.name_any() == e.pod && p.namespace().as_deref() == Some(&e.namespace))
                });
            }
            wrote = true;
        }
        for patch in &plan.node_patches {
            wrote |= self.patch(patch);
        }
        for (node, set, remove) in &plan.node_conditions {
            self.conditions(node, set, remove);
            wrote = true;
        }
        for i in started {
            let node = self.jobs[i].node.to_string();
            let version = self
                .nodes
                .get(&node)
                .and_then(|n| n.resource_version()?.parse().ok());
            Arc::make_mut(&mut self.jobs[i]).node_version = version;
        }
        if let Some(status) = plan.status.or(plan.held_status)
            && self.status.as_ref() != Some(&status)
        {
            self.status = Some(status);
            wrote = true;
        }
        self.requeue = plan.requeue_after;
        self.views = self.nodes.values().map(|n| self.view(n)).collect();
        self.list_pods();
        wrote
    }

    fn job_op(&mut self, op: &JobOp, now: Timestamp) {
        fn find<'j>(jobs: &'j mut [Arc<JobView>], name: &str) -> Option<&'j mut JobView> {
            jobs.iter_mut()
                .find(|j| &*j.name == name)
                .map(Arc::make_mut)
        }
        match op {
            JobOp::Fail {
                job,
                reason,
                message,
            } => {
                if let Some(j) = find(&mut self.jobs, job) {
                    j.outcome = Outcome::Failed {
                        at: now,
                        reason: reason.clone(),
                        message: message.clone(),
                    };
                }
                self.due.remove(job.as_str());
            }
            JobOp::Delete { job } => {
                self.jobs.retain(|j| &*j.name != job);
                self.due.remove(job.as_str());
            }
            JobOp::Counted { job } => {
                if let Some(j) = find(&mut self.jobs, job) {
                    j.counted = true;
                }
            }
            JobOp::DeleteGoPod { .. } => {}
        }
    }

    /// A merge patch of one node, in the object's own keys; whether it changed the node.
    fn patch(&mut self, p: &NodePatch) -> bool {
        if p.is_empty() {
            return false;
        }
        let api = self.api;
        let Some(node) = self.nodes.get_mut(&p.node) else {
            return false;
        };
        let mut annotations = p.annotations.clone();
        let mut labels = p.labels.clone();
        api.localize(&mut annotations);
        api.localize(&mut labels);
        merge(node.annotations_mut(), annotations);
        merge(node.labels_mut(), labels);
        let spec = node.spec.get_or_insert_default();
        if let Some(u) = p.unschedulable {
            spec.unschedulable = Some(u);
        }
        if let Some(t) = &p.taints {
            spec.taints = Some(t.clone());
        }
        self.version += 1;
        node.metadata.resource_version = Some(self.version.to_string());
        true
    }

    fn conditions(&mut self, node: &str, set: &[NodeCondition], remove: &[String]) {
        let api = self.api;
        let Some(node) = self.nodes.get_mut(node) else {
            return;
        };
        let list = node
            .status
            .get_or_insert_default()
            .conditions
            .get_or_insert_default();
        let gone: Vec<String> = remove.iter().map(|t| api.local(t).into_owned()).collect();
        list.retain(|c| !gone.contains(&c.type_));
        for c in set {
            let c = NodeCondition {
                type_: api.local(&c.type_).into_owned(),
                ..c.clone()
            };
            list.retain(|x| x.type_ != c.type_);
            list.push(c);
        }
    }

    /// When the next running Job ends.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.due.values().min().copied()
    }

    /// Every Job due by `now` completes.
    pub fn finish_due(&mut self, now: Timestamp) {
        let done: Vec<Arc<str>> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(n, _)| n.clone())
            .collect();
        let mut rebooted = false;
        for name in done {
            self.due.remove(&name);
            if let Some(j) = self.jobs.iter_mut().find(|j| j.name == name) {
                let j = Arc::make_mut(j);
                j.outcome = Outcome::Complete { at: now };
                // A reboot ends with the node in a new boot, which the planner waits to see.
                if let Some(boot) = &j.boot_id
                    && let Some(node) = self.nodes.get_mut(&*j.node)
                {
                    let info = node
                        .status
                        .get_or_insert_default()
                        .node_info
                        .get_or_insert_default();
                    info.boot_id = format!("{}-after-{}", &**boot, j.name);
                    rebooted = true;
                }
            }
        }
        if rebooted {
            self.views = self.nodes.values().map(|n| self.view(n)).collect();
        }
    }

    /// Every selected node is complete, as the status says.
    pub fn complete(&self, selected: &[String]) -> bool {
        let Some(status) = &self.status else {
            return selected.is_empty();
        };
        selected
            .iter()
            .all(|n| status.node_status.get(n) == Some(&Status::Complete))
    }

    /// What holds the rollout: the status's conditions that hold, and the nodes not complete.
    pub fn holding(&self, selected: &[String]) -> Vec<String> {
        let Some(status) = &self.status else {
            return vec!["the operator wrote no status".to_string()];
        };
        let mut out: Vec<String> = status
            .conditions
            .iter()
            .filter(|c| c.status == "True" && !c.message.is_empty())
            .map(|c| format!("{}: {}", c.type_, c.message))
            .collect();
        for n in selected {
            let s = status.node_status.get(n).copied().unwrap_or_default();
            if s != Status::Complete {
                out.push(format!("node {n} is {}", s.as_str()));
            }
        }
        out
    }
}

fn merge(into: &mut BTreeMap<String, String>, from: BTreeMap<String, Option<String>>) {
    for (k, v) in from {
        match v {
            Some(v) => into.insert(k, v),
            None => into.remove(&k),
        };
    }
}
