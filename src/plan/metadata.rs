//! Node metadata (§2.1–§2.4, §3.17): the one place that decides the annotations, labels,
//! cordon, taints and conditions this Skyhook writes on a node.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::NodePatch;
use super::facts::{NodeFacts, Switches};
use super::select::{annotation, selects};
use super::stage::NodeOutcome;
use crate::crd::Skyhook;
use crate::schema::{self, NodeState, State, Status, TaintSpec};

/// One node's status for one Skyhook.
pub fn node_status(sw: Switches, f: &NodeFacts, settled: bool, o: &NodeOutcome) -> Status {
    if sw.disabled {
        Status::Disabled
    } else if sw.paused {
        Status::Paused
    } else if settled {
        Status::Complete
    } else if f.block.is_some() || f.gated || o.held {
        Status::Blocked
    } else if o.any_state(State::InProgress) {
        Status::InProgress
    } else if o.any_state(State::Erroring) || o.any_state(State::Unknown) {
        Status::Erroring
    } else {
        Status::Waiting
    }
}

/// Everything the metadata step reads besides the node.
pub struct MetaInput<'a> {
    pub skyhook: &'a Skyhook,
    pub skyhooks: &'a [Arc<Skyhook>],
    pub runtime_taint: &'a TaintSpec,
    pub operator_version: &'a str,
}

/// The node write of one pass: state, status, version, label, cordon, applied record and the
/// runtime-required taint.
pub fn node_patch(
    m: &MetaInput,
    f: &NodeFacts,
    o: &NodeOutcome,
    status: Status,
    settled: bool,
) -> NodePatch {
    let name = m.skyhook.name_any();
    let mut patch = progress(&name, f.node, &o.state, status, m.operator_version);
    if o.cordon {
        // Persisted before any Job of an interrupt package; an administrator's own cordon
        // (already unschedulable) is never marked as ours, so it is never lifted.
        patch.unschedulable = Some(true);
        patch.annotations.insert(
            schema::cordon_annotation(&name),
            Some(schema::TRUE_VALUE.to_string()),
        );
    } else if settled && f.holds_cordon {
        patch.unschedulable = Some(false);
        patch
            .annotations
            .insert(schema::cordon_annotation(&name), None);
    }
    runtime_required(m, f.node, settled, &mut patch);
    if o.applied != f.applied {
        let value =
            (!o.applied.is_empty()).then(|| serde_json::to_string(&o.applied).unwrap_or_default());
        patch
            .annotations
            .insert(schema::applied_annotation(&name), value);
    }
    patch
}

/// Annotation and label writes that bring `node` to `state` and `status`.
pub fn progress(
    skyhook: &str,
    node: &Node,
    state: &NodeState,
    status: Status,
    operator_version: &str,
) -> NodePatch {
    let mut p = NodePatch::new(&node.name_any());
    let annotations = node.annotations();
    let mut want = |key: String, value: Option<String>| {
        if annotations.get(&key) != value.as_ref() {
            p.annotations.insert(key, value);
        }
    };
    let encoded = (!state.is_empty()).then(|| state.to_annotation());
    // Keep an equivalent annotation written by someone else (e.g. the Go operator) byte for byte.
    let same = annotations
        .get(&schema::node_state_annotation(skyhook))
        .and_then(|a| NodeState::parse(a).ok())
        .is_some_and(|s| &s == state);
    if !same {
        want(schema::node_state_annotation(skyhook), encoded);
    }
    want(
        schema::status_annotation(skyhook),
        Some(status.as_str().to_string()),
    );
    want(
        schema::node_version_annotation(skyhook),
        Some(operator_version.to_string()),
    );
    let label = schema::status_label(skyhook);
    if node.labels().get(&label).map(String::as_str) != Some(status.as_str()) {
        p.labels.insert(label, Some(status.as_str().to_string()));
    }
    p
}

/// §3.17: with `runtimeRequired`, new nodes get the runtime-required taint (`autoTaintNewNodes`)
/// and lose it once every runtime-required Skyhook that targets them is complete there.
fn runtime_required(m: &MetaInput, node: &Node, settled: bool, patch: &mut NodePatch) {
    let sk = m.skyhook;
    if !sk.spec.runtime_required {
        return;
    }
    let taint = m.runtime_taint;
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let tainted = taints.iter().any(|t| taint.matches(t));
    let touched = node.annotations().keys().any(|k| schema::is_skyhook_key(k));
    if !tainted && sk.spec.auto_taint_new_nodes && !touched {
        let mut next = taints;
        next.push(taint.to_taint());
        patch.taints = Some(next);
        patch.annotations.insert(
            schema::auto_taint_annotation(&taint.key),
            Some(schema::TRUE_VALUE.to_string()),
        );
        return;
    }
    if !tainted || !settled {
        return;
    }
    let me = sk.name_any();
    let others_done = m.skyhooks.iter().all(|o| {
        o.name_any() == me
            || !o.spec.runtime_required
            || !selects(o, node)
            || annotation(node, &schema::status_annotation(&o.name_any()))
                == Some(Status::Complete.as_str())
    });
    if others_done {
        patch.taints = Some(taints.into_iter().filter(|t| !taint.matches(t)).collect());
    }
}

/// The two node conditions of §2.4, when they need writing.
pub fn node_conditions(
    skyhook: &str,
    node: &Node,
    state: &NodeState,
    complete: bool,
    now: Timestamp,
) -> Option<Vec<NodeCondition>> {
    let erroring = state
        .iter()
        .any(|(_, e)| matches!(e.state, Some(State::Erroring) | Some(State::Unknown)));
    let want = [
        (
            schema::node_not_ready_condition(skyhook),
            if complete { "False" } else { "True" },
            if complete {
                schema::NOT_READY_REASON_COMPLETE
            } else {
                schema::NOT_READY_REASON_INCOMPLETE
            },
            schema::node_not_ready_message(skyhook),
        ),
        (
            schema::node_erroring_condition(skyhook),
            if erroring { "True" } else { "False" },
            if erroring {
                schema::ERRORING_REASON_ERRORING
            } else {
                schema::ERRORING_REASON_NOT_ERRORING
            },
            schema::node_erroring_message(skyhook),
        ),
    ];
    let existing = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let current = |t: &str| existing.iter().find(|c| c.type_ == t);
    let up_to_date = want.iter().all(|(t, s, r, _)| {
        current(t).is_some_and(|c| c.status == *s && c.reason.as_deref() == Some(*r))
    });
    if up_to_date {
        return None;
    }
    Some(
        want.into_iter()
            .map(|(t, s, r, m)| {
                let since = current(&t)
                    .filter(|c| c.status == s)
                    .and_then(|c| c.last_transition_time.clone())
                    .unwrap_or(Time(now));
                NodeCondition {
                    type_: t,
                    status: s.to_string(),
                    reason: Some(r.to_string()),
                    message: Some(m),
                    last_heartbeat_time: Some(Time(now)),
                    last_transition_time: Some(since),
                }
            })
            .collect(),
    )
}
