//! What a pass decides: the [`Plan`] the executor applies, in the order of its fields.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, NodeCondition, Taint};

use serde::{Deserialize, Serialize};

use crate::crd::{BatchState, DeploymentBudget, SkyhookStatus};

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
}

impl NodePatch {
    pub fn new(node: &str) -> Self {
        NodePatch {
            node: node.to_string(),
            ..NodePatch::default()
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
    /// Folded into the node state; `ttl` lets the TTL controller collect a successful Job.
    Record {
        job: String,
        ttl: Option<u64>,
    },
    /// End a Job whose pod can never start, recording why.
    Fail {
        job: String,
        reason: String,
        message: String,
    },
    Delete {
        job: String,
    },
    /// This failed attempt is counted in the node's `restarts`.
    Counted {
        job: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Skyhook,
    Node,
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
}

impl Note {
    pub fn skyhook(reason: &str, message: String) -> Self {
        Note {
            target: Target::Skyhook,
            node: None,
            warning: false,
            reason: reason.to_string(),
            message,
        }
    }

    pub fn node(node: &str, reason: &str, message: String) -> Self {
        Note {
            target: Target::Node,
            node: Some(node.to_string()),
            ..Note::skyhook(reason, message)
        }
    }

    pub fn warning(self) -> Self {
        Note {
            warning: true,
            ..self
        }
    }
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
    pub create_jobs: Vec<Job>,
    /// Jobs due this pass but left to the next one ([`super::launch::MAX_JOB_CREATES_PER_PASS`]).
    pub deferred_jobs: usize,
    pub job_ops: Vec<JobOp>,
    /// Pods to evict through the Eviction API (namespace, name).
    pub evictions: Vec<(String, String)>,
    /// Delete every Job and ConfigMap this Skyhook owns (deletion).
    pub delete_owned: bool,
    pub node_patches: Vec<NodePatch>,
    /// Conditions to set (by type) and condition types to remove, per node.
    pub node_conditions: Vec<(String, Vec<NodeCondition>, Vec<String>)>,
    pub status: Option<SkyhookStatus>,
    pub events: Vec<Note>,
    pub requeue_after: Option<Duration>,
    /// The compartments of this pass: the rollout metrics and `deployment-policy preview`.
    pub compartments: Vec<CompartmentPlan>,
    /// The metrics' `policy_name`: the policy, or `legacy`.
    pub policy_label: String,
}
