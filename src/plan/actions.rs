//! What a pass decides: the [`Plan`] the executor applies, in the order of its fields.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, NodeCondition, Taint};

use serde::{Deserialize, Serialize};

use super::census::Census;
use crate::crd::{BatchState, DeploymentBudget, SkyhookStatus};
use crate::jobs::PlannedJob;
use crate::schema;

/// A metadata change of one node: `None` values remove the key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePatch {
    pub node: String,
    pub annotations: BTreeMap<String, Option<String>>,
    pub labels: BTreeMap<String, Option<String>>,
    pub unschedulable: Option<bool>,
    /// The node's whole taint list, when it changes.
    pub taints: Option<Vec<Taint>>,
    /// The node goes from idle to working in this pass. Such patches are written after the
    /// others, so a node leaving the batch is stored as done before the next one is stored as
    /// working: the stored state never shows more nodes at work than the budget allows.
    pub starts: bool,
    /// The patch gives a new node the runtime-required taint (`autoTaintNewNodes`): when it is
    /// refused for good, the node is left out of every Skyhook until a retry succeeds
    /// (upstream's auto-taint failure isolation, delta D47).
    pub auto_taint: bool,
    /// The node's patches were refused for good before (it is left out of its batch): this one
    /// tells whether that is over, and its failing again holds no other node's start.
    pub probe: bool,
    /// The `resourceVersion` of the node this patch was computed from. The patch carries it as
    /// a precondition: the node-state annotation is one JSON value and the taints one list, so
    /// a patch computed from an older copy would write back whatever changed since (a
    /// `package rerun`, a `node reset`, an administrator's taint). The API server refuses it
    /// with 409 instead, and the next pass plans from the newer copy.
    pub resource_version: Option<String>,
}

impl NodePatch {
    pub fn new(node: &str) -> Self {
        NodePatch {
            node: node.to_string(),
            ..NodePatch::default()
        }
    }

    /// A patch of `node`, guarded by the resourceVersion of this copy of it.
    pub fn of(node: &super::NodeView) -> Self {
        NodePatch {
            resource_version: node.resource_version.clone(),
            ..NodePatch::new(&node.name)
        }
    }

    /// Nothing to write (`starts` alone is not a write).
    pub fn is_empty(&self) -> bool {
        self.annotations.is_empty()
            && self.labels.is_empty()
            && self.unschedulable.is_none()
            && self.taints.is_none()
    }
}

/// Operations on existing Jobs.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOp {
    /// End a Job whose pod can never start, recording why.
    Fail {
        job: String,
        reason: String,
        message: String,
    },
    Delete {
        job: String,
    },
    /// This failed attempt is counted in the node's `restarts`; it is kept (no TTL) until the
    /// planner prunes it.
    Counted {
        job: String,
    },
    /// Delete a package or interrupt pod the Go operator left in the operator namespace: its
    /// outcome is in the node state, or it is stale.
    DeleteGoPod {
        pod: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Skyhook,
    Node,
}

/// Which write of the pass an Event reports. An Event is published only if that write landed:
/// when it did not (the object changed since the pass read it), the next pass plans the same
/// change again and announces it then, so it is announced once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Reports {
    /// The pass as a whole.
    #[default]
    Pass,
    /// One node's work: its patch and what depends on it (Jobs, Job operations, evictions).
    Node(String),
    /// A change of the Skyhook's status.
    Status,
}

/// An Event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub target: Target,
    /// Node name for node events.
    pub node: Option<String>,
    pub warning: bool,
    pub reason: String,
    pub message: String,
    pub reports: Reports,
}

impl Note {
    pub fn skyhook(reason: &str, message: String) -> Self {
        Note {
            target: Target::Skyhook,
            node: None,
            warning: false,
            reason: reason.to_string(),
            message,
            reports: Reports::Pass,
        }
    }

    pub fn node(node: &str, reason: &str, message: String) -> Self {
        Note {
            target: Target::Node,
            node: Some(node.to_string()),
            reports: Reports::Node(node.to_string()),
            ..Note::skyhook(reason, message)
        }
    }

    pub fn warning(self) -> Self {
        Note {
            warning: true,
            ..self
        }
    }

    /// This Event reports `node`'s work (a Skyhook Event about one node).
    pub fn about(self, node: &str) -> Self {
        Note {
            reports: Reports::Node(node.to_string()),
            ..self
        }
    }

    /// This Event reports a change of the Skyhook's status.
    pub fn of_status(self) -> Self {
        Note {
            reports: Reports::Status,
            ..self
        }
    }
}

/// A pod to evict through the Eviction API, for the drain of `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub node: String,
    pub namespace: String,
    pub pod: String,
    /// Delete the pod instead of evicting it (`drainConfig.disableEviction`).
    pub delete: bool,
    /// `drainConfig.gracePeriod` in seconds; `None`: the pod's own.
    pub grace_seconds: Option<i64>,
}

/// One compartment as this pass sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompartmentPlan {
    pub name: String,
    /// `fixed`, `linear`, `exponential`, or `unknown` (none: the ceiling is the batch).
    pub strategy: String,
    pub budget: DeploymentBudget,
    pub ceiling: i64,
    /// Its nodes, oldest first.
    pub nodes: Vec<String>,
    /// Its maintenance windows now (issue 38): `open`, `closed until <time>`; none without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// After this pass's evaluation of a finished batch.
    pub batch_state: BatchState,
    /// The nodes of the batch: at work, or starting in this pass.
    pub batch: Vec<String>,
}

/// Everything the executor must write, in this order: finalizer, ConfigMaps, Jobs, Job
/// operations, evictions, owned objects, nodes, node conditions, status, events.
#[derive(Debug, Default)]
pub struct Plan {
    pub add_finalizer: bool,
    /// The Skyhook's `skyhook.nvidia.com/version` annotation, when it must change.
    pub version_annotation: Option<String>,
    pub remove_finalizer: bool,
    pub configmaps: Vec<ConfigMap>,
    /// Package ConfigMaps of versions no longer in the spec (names), deleted after the Jobs.
    pub stale_configmaps: Vec<String>,
    pub create_jobs: Vec<PlannedJob>,
    /// Health check Jobs to create (an existing one of the same name is the same attempt).
    pub health_check_jobs: Vec<k8s_openapi::api::batch::v1::Job>,
    /// Notifications of this pass's status changes, put in the outbox before the status.
    pub notifications: Vec<super::notify::Notification>,
    /// Jobs due this pass but left to the next one ([`super::launch::MAX_JOB_CREATES_PER_PASS`]).
    pub deferred_jobs: usize,
    /// Each with the node whose work it is.
    pub job_ops: Vec<(String, JobOp)>,
    pub evictions: Vec<Eviction>,
    /// Delete every Job and ConfigMap this Skyhook owns (deletion).
    pub delete_owned: bool,
    pub node_patches: Vec<NodePatch>,
    /// Conditions to set (by type) and condition types to remove, per node.
    pub node_conditions: Vec<(String, Vec<NodeCondition>, Vec<String>)>,
    pub status: Option<SkyhookStatus>,
    /// The boot ids the stored status had: a node whose patch fails for good keeps its old
    /// one, so a reboot whose state reset was not stored is found again (delta D19).
    pub boot_ids_before: BTreeMap<String, String>,
    /// The status this pass holds back rather than writes ([`Inputs::status_hold`]): the
    /// metrics still report it.
    ///
    /// [`Inputs::status_hold`]: super::Inputs::status_hold
    pub held_status: Option<SkyhookStatus>,
    /// Node counts of this pass over every targeted node (the status may list only some).
    pub census: Option<Census>,
    pub events: Vec<Note>,
    pub requeue_after: Option<Duration>,
    /// The compartments of this pass: the rollout metrics and `deployment-policy preview`.
    pub compartments: Vec<CompartmentPlan>,
    /// The metrics' `policy_name`: the policy, or `legacy`.
    pub policy_label: String,
}

impl Plan {
    /// Leaves out every write that depends on the patches of `nodes`, which did not land (the
    /// node changed after this pass read it): their conditions, Job operations, new Jobs and
    /// evictions, and the Events reporting them. A Job is never created, nor a finished Job
    /// marked recorded, nor a pod evicted, unless the node state that accounts for it (and the
    /// cordon before a drain) is stored. The status goes too: it describes every node as
    /// planned, and its batch state counts them, so writing it would store a view that the
    /// nodes do not, and the next pass could evaluate the same batch twice. A deletion keeps
    /// its finalizer until every node is clean. The next pass, from the newer copies, plans
    /// all of it again.
    pub fn drop_work_of(&mut self, nodes: &BTreeSet<String>) {
        if nodes.is_empty() {
            return;
        }
        self.drop_node_work(nodes);
        self.drop_status();
    }

    /// The work that depends on these nodes' patches (a write that failed for good): their Job
    /// operations, Jobs, evictions, conditions and Events. The status is still written, so that
    /// it can say what failed.
    pub fn drop_node_work(&mut self, nodes: &BTreeSet<String>) {
        if nodes.is_empty() {
            return;
        }
        let kept = |node: &str| !nodes.contains(node);
        self.node_conditions.retain(|(n, _, _)| kept(n));
        self.job_ops.retain(|(n, _)| kept(n));
        self.create_jobs.retain(|j| kept(j.node()));
        self.evictions.retain(|e| kept(&e.node));
        self.events.retain(|e| match &e.reports {
            Reports::Node(n) => kept(n),
            Reports::Pass | Reports::Status => true,
        });
        self.remove_finalizer = false;
        if let Some(status) = &mut self.status {
            for n in nodes {
                match self.boot_ids_before.get(n) {
                    Some(before) => status.node_boot_ids.insert(n.clone(), before.clone()),
                    None => status.node_boot_ids.remove(n),
                };
            }
        }
    }

    /// The status is not written this pass: nor are the Events announcing its changes (the
    /// next pass finds the same changes and announces them with the write).
    pub fn drop_status(&mut self) {
        self.status = None;
        self.events.retain(|e| e.reports != Reports::Status);
    }

    /// Like [`Plan::drop_status`], keeping the status this pass would have written for the
    /// metrics.
    pub fn hold_status(&mut self) {
        self.held_status = self.status.take();
        self.drop_status();
    }

    /// The status as this pass sees it: written or held back.
    pub fn desired_status(&self) -> Option<&SkyhookStatus> {
        self.status.as_ref().or(self.held_status.as_ref())
    }
}

/// The node a Job of ours runs on, from its node annotation.
pub fn job_node(job: &Job) -> Option<&str> {
    job.metadata
        .annotations
        .as_ref()?
        .get(schema::NODE_ANNOTATION)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing to drop changes nothing: a deletion pass whose node writes all succeeded still
    /// releases the finalizer (a regression caught by every deletion e2e test).
    #[test]
    fn dropping_no_node_keeps_the_finalizer_release() {
        let mut p = Plan {
            remove_finalizer: true,
            ..Plan::default()
        };
        p.drop_node_work(&BTreeSet::new());
        p.drop_work_of(&BTreeSet::new());
        assert!(p.remove_finalizer);
        p.drop_node_work(&BTreeSet::from(["n".to_string()]));
        assert!(!p.remove_finalizer);
    }

    /// Delta D19: a node whose patch (a reboot's state reset) failed for good keeps the boot id
    /// the status had, so the next pass sees the reboot again.
    #[test]
    fn a_node_whose_patch_failed_keeps_its_old_boot_id() {
        let mut status = SkyhookStatus::default();
        for (n, b) in [("a", "new"), ("b", "new"), ("c", "first")] {
            status.node_boot_ids.insert(n.into(), b.into());
        }
        let mut p = Plan {
            status: Some(status),
            boot_ids_before: BTreeMap::from([
                ("a".to_string(), "old".to_string()),
                ("b".to_string(), "old".to_string()),
            ]),
            ..Plan::default()
        };
        p.drop_node_work(&BTreeSet::from(["a".to_string(), "c".to_string()]));
        let ids = &p.status.expect("status").node_boot_ids;
        assert_eq!(ids.get("a").map(String::as_str), Some("old"));
        assert_eq!(ids.get("b").map(String::as_str), Some("new"));
        assert_eq!(ids.get("c"), None);
    }
    use serde_json::json;

    fn job_on(node: &str) -> PlannedJob {
        let job = crate::jobs::minimal_job(&format!("j-{node}"), node, json!({}));
        PlannedJob::new(&job).expect("one of ours")
    }

    fn plan() -> Plan {
        let note = |reports: Reports| Note {
            reports,
            ..Note::skyhook("R", "m".into())
        };
        Plan {
            remove_finalizer: true,
            create_jobs: vec![job_on("a"), job_on("b")],
            job_ops: vec![
                ("a".into(), JobOp::Delete { job: "x".into() }),
                ("b".into(), JobOp::Delete { job: "y".into() }),
            ],
            evictions: ["a", "b"]
                .map(|n| Eviction {
                    node: n.into(),
                    namespace: "ns".into(),
                    pod: format!("p-{n}"),
                    delete: false,
                    grace_seconds: None,
                })
                .to_vec(),
            node_conditions: vec![
                ("a".into(), Vec::new(), Vec::new()),
                ("b".into(), Vec::new(), Vec::new()),
            ],
            status: Some(SkyhookStatus::default()),
            events: vec![
                note(Reports::Pass),
                note(Reports::Status),
                Note::node("a", "R", "m".into()),
                Note::skyhook("R", "m".into()).about("b"),
            ],
            ..Plan::default()
        }
    }

    #[test]
    fn dropping_a_nodes_work_keeps_the_others_and_drops_the_status() {
        // (case, nodes dropped, nodes whose work remains, status and finalizer kept, Events kept)
        let cases: &[(&str, &[&str], &[&str], bool, usize)] = &[
            ("no conflict changes nothing", &[], &["a", "b"], true, 4),
            ("a", &["a"], &["b"], false, 2),
            ("both", &["a", "b"], &[], false, 1),
            ("a node without work", &["c"], &["a", "b"], false, 3),
        ];
        for (case, dropped, remain, kept, events) in cases {
            let mut p = plan();
            p.drop_work_of(&dropped.iter().map(|n| n.to_string()).collect());
            let nodes: Vec<&str> = p.job_ops.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(&nodes, remain, "{case}: Job operations");
            let nodes: Vec<&str> = p.create_jobs.iter().map(PlannedJob::node).collect();
            assert_eq!(&nodes, remain, "{case}: Jobs");
            let nodes: Vec<&str> = p.evictions.iter().map(|e| e.node.as_str()).collect();
            assert_eq!(&nodes, remain, "{case}: evictions");
            let nodes: Vec<&str> = p.node_conditions.iter().map(|c| c.0.as_str()).collect();
            assert_eq!(&nodes, remain, "{case}: conditions");
            assert_eq!(p.status.is_some(), *kept, "{case}: status");
            assert_eq!(p.remove_finalizer, *kept, "{case}: finalizer");
            assert_eq!(p.events.len(), *events, "{case}: {:?}", p.events);
            assert_eq!(p.events[0].reports, Reports::Pass, "{case}");
        }
    }

    #[test]
    fn a_patch_of_a_node_is_guarded_by_that_copys_resource_version() {
        let node = crate::plan::fixtures::node("n1")
            .resource_version("7")
            .build();
        let p = NodePatch::of(&node);
        assert_eq!(
            (p.node.as_str(), p.resource_version.as_deref()),
            ("n1", Some("7"))
        );
        assert!(p.is_empty(), "a precondition alone is not a write");
    }
}
