//! Everything the planner reads: one snapshot of the world for one Skyhook.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;

use super::drain::PodInfo;
use crate::crd::{DeploymentPolicy, Skyhook, SkyhookStatus};
use crate::jobs::{CheckRun, GoPod, JobView};
use crate::node::NodeView;
use crate::schema::Stage;
use crate::settings::Config;

/// Everything the planner reads.
pub struct Inputs<'a> {
    /// The Skyhook being reconciled, normalised (its `status` is not read: see `status`).
    pub skyhook: &'a Skyhook,
    /// Its status as stored. Apart from the Skyhook: a normalised copy of the whole object
    /// would copy every node's state on every pass (megabytes at a thousand nodes).
    pub status: Option<&'a SkyhookStatus>,
    pub skyhooks: &'a [Arc<Skyhook>],
    /// The objects of the other served API: priority, `sequencing: all` and the
    /// runtime-required taint are decided over both (`fleet`).
    pub peers: super::fleet::Peers<'a>,
    pub policies: &'a [Arc<DeploymentPolicy>],
    pub nodes: &'a [Arc<NodeView>],
    /// This Skyhook's Jobs.
    /// Shared with the Job cache: a pass copies none of them.
    pub jobs: &'a [Arc<JobView>],
    /// This Skyhook's package ConfigMaps as they are in the cluster.
    pub configmaps: &'a [Arc<ConfigMap>],
    /// Pods on the nodes that are cordoned (listed on demand for the drain).
    pub pods_on_nodes: &'a BTreeMap<String, Vec<PodInfo>>,
    /// Nodes where a Job of another Skyhook is running (or a pod of the Go operator for one).
    pub busy_nodes: &'a BTreeSet<String>,
    /// Of those, the nodes where another Skyhook's interrupt runs: nothing of ours starts there.
    pub interrupting_nodes: &'a BTreeSet<String>,
    /// This Skyhook's package and interrupt pods left by the Go operator, by node.
    pub go_pods: &'a BTreeMap<String, Vec<GoPod>>,
    /// Problems the operator-side validation found (empty when valid).
    pub invalid: &'a [String],
    /// Writes of the last pass that failed for good, one line each (`<kind> <name>: <reason>`):
    /// the status says so while they keep failing.
    pub write_failures: &'a [String],
    /// Evictions the last pass sent that a PodDisruptionBudget refused.
    pub drain_blocks: &'a [DrainBlock],
    /// Nodes whose auto-taint was refused for good: left out (upstream's D47), their taint
    /// retried.
    pub refused_auto_taints: &'a BTreeSet<String>,
    /// Nodes whose patches by this Skyhook were refused for good, and no patch of it went
    /// through since: they give their batch slot back (their Jobs still count), start nothing,
    /// and their patch is retried each pass.
    pub refused_nodes: &'a BTreeSet<String>,
    /// This Skyhook's health check Jobs, by node (listed while nodes wait for the gate).
    pub health_checks: &'a BTreeMap<String, Vec<CheckRun>>,
    /// What the policy's alert gate source says (`None`: no alert gate).
    pub alerts: Option<&'a super::alerts::AlertReading>,
    pub config: &'a Config,
    pub operator_version: &'a str,
    pub now: Timestamp,
    /// When set, a status that only reports progress (no [`super::status::news`]) is held
    /// back this long: the last status write was slow, and the next pass writes it.
    pub status_hold: Option<Duration>,
    /// Jobs this pass may create: [`launch::MAX_JOB_CREATES_PER_PASS`] less those still being
    /// created from earlier passes.
    pub create_room: usize,
}

impl<'a> Inputs<'a> {
    /// The objects of both APIs, as the rules over shared nodes read them.
    pub fn fleet(&self) -> super::fleet::Fleet<'a> {
        super::fleet::Fleet {
            own: self.skyhooks,
            peers: self.peers,
        }
    }
}

/// No node: the default of [`Inputs::refused_auto_taints`].
pub static NO_NODES: BTreeSet<String> = BTreeSet::new();
/// No health check: the default of [`Inputs::health_checks`].
pub static NO_CHECKS: BTreeMap<String, Vec<CheckRun>> = BTreeMap::new();

/// Where other Skyhooks are at work, for [`Inputs::busy_nodes`] and
/// [`Inputs::interrupting_nodes`]: their running Jobs (and the Go operator's pods for them).
#[derive(Debug, Default)]
pub struct Elsewhere {
    pub busy: BTreeSet<String>,
    pub interrupting: BTreeSet<String>,
}

impl Elsewhere {
    /// Another Skyhook's `stage` runs on `node`.
    pub fn add(&mut self, node: &str, stage: Stage) {
        if stage.is_interrupt() {
            self.interrupting.insert(node.to_string());
        }
        self.busy.insert(node.to_string());
    }
}

/// An eviction a PodDisruptionBudget refused (HTTP 429): the node drained, the pod
/// (`namespace/name`) and the API server's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainBlock {
    pub node: String,
    pub pod: String,
    pub message: String,
}
