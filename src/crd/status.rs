//! `Skyhook.status`: the operator's report of the rollout.
//!
//! Serialisation follows Go's `encoding/json` with the Go types' `omitempty` tags (empty maps,
//! zero counters and `false` flags disappear), so status written by this operator looks like
//! status written by the Go one to anything that reads it (CLI, dashboards, `kubectl wait`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::go_int::GoInt;
use crate::schema::{NodeState, Status};

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Default of `status.completeNodes`.
pub const DEFAULT_COMPLETE_NODES: &str = "0/0";

fn default_complete_nodes() -> String {
    DEFAULT_COMPLETE_NODES.to_owned()
}

/// Observed state of a Skyhook.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkyhookStatus {
    /// metadata.generation at the last transition to complete.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub observed_generation: i64,

    /// Aggregate status over all targeted nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,

    /// Mirror of each node's package state: node -> `<pkg>|<version>` -> state.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_state: BTreeMap<String, NodeState>,

    /// Mirror of each node's status for this Skyhook.
    // The upstream schema leaves these values unconstrained strings; `Status` reads unknown
    // spellings as `unknown`, so one odd value cannot make the object unreadable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub node_status: BTreeMap<String, Status>,

    /// Conditions of the Skyhook, keyed by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// Last seen boot id of each node, to detect reboots.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_boot_ids: BTreeMap<String, String>,

    /// When each node was picked into a batch; a node leaves the list once complete.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_priority: BTreeMap<String, Time>,

    /// How many nodes have left `nodePriority`: added to a node's place in it to make its
    /// `SKYHOOK_NODE_ORDER` (upstream v0.15).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(with = "GoInt")]
    pub node_order_offset: i64,

    /// Per package, the configMap keys changed in the pending or last config rollout.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_updates: BTreeMap<String, Vec<String>>,

    /// Per compartment (`__default__` for the default/legacy one), rollout progress.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub compartment_statuses: BTreeMap<String, CompartmentStatus>,

    /// Number of nodes in progress or erroring.
    #[serde(default)]
    #[schemars(with = "GoInt")]
    pub nodes_in_progress: i64,

    /// `<complete>/<targeted>` node counts.
    #[serde(default = "default_complete_nodes")]
    pub complete_nodes: String,

    /// Sorted, comma-joined `<name>:<version>` of the spec's packages.
    #[serde(default)]
    pub package_list: String,
}

impl Default for SkyhookStatus {
    fn default() -> Self {
        Self {
            observed_generation: 0,
            status: None,
            node_state: BTreeMap::new(),
            node_status: BTreeMap::new(),
            conditions: Vec::new(),
            node_boot_ids: BTreeMap::new(),
            node_priority: BTreeMap::new(),
            node_order_offset: 0,
            config_updates: BTreeMap::new(),
            compartment_statuses: BTreeMap::new(),
            nodes_in_progress: 0,
            complete_nodes: default_complete_nodes(),
            package_list: String::new(),
        }
    }
}

/// Rollout progress of one compartment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompartmentStatus {
    /// Nodes in the compartment.
    #[schemars(with = "GoInt")]
    pub matched: i64,
    /// Budget ceiling for the matched nodes.
    #[schemars(with = "GoInt")]
    pub ceiling: i64,
    /// Nodes in progress.
    #[schemars(with = "GoInt")]
    pub in_progress: i64,
    /// Nodes complete.
    #[schemars(with = "GoInt")]
    pub completed: i64,
    /// completed * 100 / matched.
    #[schemars(with = "GoInt")]
    pub progress_percent: i64,
    /// Batch bookkeeping (only for compartments with a strategy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_state: Option<BatchState>,
}

/// Batch bookkeeping of a compartment. Every field is omitted when zero/false, as in Go.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchState {
    /// Current batch number (starts at 1).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(with = "GoInt")]
    pub current_batch: i64,
    /// Failed batches in a row.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(with = "GoInt")]
    pub consecutive_failures: i64,
    /// Checkpoint: complete nodes at the last evaluation.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(with = "GoInt")]
    pub completed_nodes: i64,
    /// Checkpoint: erroring nodes at the last evaluation.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(with = "GoInt")]
    pub failed_nodes: i64,
    /// Rollout halted by the failure threshold.
    #[serde(default, skip_serializing_if = "is_false")]
    pub should_stop: bool,
    /// Size of the last evaluated batch.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(with = "GoInt")]
    pub last_batch_size: i64,
    /// Whether the last batch failed its threshold.
    #[serde(default, skip_serializing_if = "is_false")]
    pub last_batch_failed: bool,
    /// Until when the last finished batch soaks (RFC 3339; this project's extension): no batch
    /// starts before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_until: Option<String>,
    /// The nodes of the soaking batch: one going NotReady fails the batch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub soak_nodes: Vec<String>,
}

impl BatchState {
    /// The state a rollout starts from: batch 1, every counter cleared.
    pub fn fresh() -> BatchState {
        BatchState {
            current_batch: 1,
            ..BatchState::default()
        }
    }

    /// [`BatchState::fresh`] with every field spelled out. A JSON merge patch of the Go-style
    /// serialisation (zeros omitted) would leave stale counters and `shouldStop: true` behind
    /// (reference bug, spec §8.5), so resets send this form.
    pub fn fresh_explicit() -> serde_json::Value {
        serde_json::json!({
            "currentBatch": 1,
            "consecutiveFailures": 0,
            "completedNodes": 0,
            "failedNodes": 0,
            "shouldStop": false,
            "lastBatchSize": 0,
            "lastBatchFailed": false,
            // A merge patch removes with null and replaces lists whole.
            "soakUntil": null,
            "soakNodes": [],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_fresh_batch_state_names_every_field() {
        let busy = BatchState {
            current_batch: 4,
            consecutive_failures: 2,
            completed_nodes: 9,
            failed_nodes: 3,
            should_stop: true,
            last_batch_size: 8,
            last_batch_failed: true,
            soak_until: Some("2026-11-28T12:00:00Z".into()),
            soak_nodes: vec!["n1".into()],
        };
        let busy = serde_json::to_value(&busy).unwrap();
        let fresh = BatchState::fresh_explicit();
        let busy_keys: Vec<&String> = busy.as_object().unwrap().keys().collect();
        let fresh_keys: Vec<&String> = fresh.as_object().unwrap().keys().collect();
        assert_eq!(busy_keys, fresh_keys);
        let decoded: BatchState = serde_json::from_value(fresh).unwrap();
        assert_eq!(decoded, BatchState::fresh());
    }
}
