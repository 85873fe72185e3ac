//! The bare Skyhook conditions of upstream v0.16 to v0.20, written beside this project's own
//! (`../shared/reference/nodewright-delta.md`): `Ready` (D15), `NodeStateMalformed` (D16),
//! `DrainBlocked` (D41) and `Blocked` with `NonInterruptPodsRunning` (D42). Their words are
//! upstream's ([`crate::schema`]); this module says when each is present.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::condition::{present_while, set_condition};
use super::inputs::DrainBlock;
use crate::schema::{self, Status};

/// `Ready` and `skyhook.nvidia.com/Ready`: `True` once every targeted node is complete, the
/// reason from the aggregate `status`.
pub fn ready(
    list: &mut Vec<Condition>,
    nodes: &BTreeMap<String, Status>,
    status: Status,
    generation: i64,
    now: Timestamp,
) {
    let ready = nodes.values().all(|s| *s == Status::Complete);
    let message = schema::ready_message(nodes.iter().map(|(n, s)| (n.as_str(), *s)));
    for kind in [schema::READY_CONDITION, schema::LEGACY_READY_CONDITION] {
        let reason = schema::ready_reason(status);
        set_condition(list, kind, ready, reason, message.clone(), generation, now);
    }
}

/// `NodeStateMalformed` while some node's state cannot be read (beside our
/// `NodeStateUnreadable`, which says why for each).
pub fn malformed(list: &mut Vec<Condition>, nodes: &[&str], generation: i64, now: Timestamp) {
    let present = (!nodes.is_empty()).then(|| {
        let message = schema::node_state_malformed_message(nodes);
        (schema::NODE_STATE_MALFORMED_REASON, message)
    });
    present_while(
        list,
        schema::NODE_STATE_MALFORMED_CONDITION,
        present,
        generation,
        now,
    );
}

/// `Blocked` while pods matching `podNonInterruptLabels` hold the interrupt of `nodes`.
pub fn non_interrupt(list: &mut Vec<Condition>, nodes: &[&str], generation: i64, now: Timestamp) {
    let present = (!nodes.is_empty()).then(|| {
        let message = schema::non_interrupt_pods_message(nodes);
        (schema::NON_INTERRUPT_PODS_RUNNING_REASON, message)
    });
    present_while(list, schema::BLOCKED_CONDITION, present, generation, now);
}

/// `DrainBlocked` while PodDisruptionBudgets refuse evictions (`total`: the targeted nodes).
pub fn drain_blocked(
    list: &mut Vec<Condition>,
    blocks: &[DrainBlock],
    total: usize,
    generation: i64,
    now: Timestamp,
) {
    let present = (!blocks.is_empty()).then(|| {
        let blocks: Vec<(&str, &str, &str)> = blocks
            .iter()
            .map(|b| (b.node.as_str(), b.pod.as_str(), b.message.as_str()))
            .collect();
        let message = schema::drain_blocked_message(&blocks, total);
        (schema::PDB_REASON, message)
    });
    present_while(
        list,
        schema::DRAIN_BLOCKED_CONDITION,
        present,
        generation,
        now,
    );
}
