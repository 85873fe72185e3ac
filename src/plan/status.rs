//! Status derivation (§3.13, §5.1, §5.2, §2.4). Every value is derived from the node states of
//! this pass and compared with what is stored, so an unchanged world writes nothing (condition
//! timestamps only move when a condition's status flips).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use super::NodePatch;
use crate::crd::{Skyhook, SkyhookStatus};
use crate::schema::{self, NodeState, State, Status};

pub struct NodeFacts<'a> {
    pub disabled: bool,
    pub paused: bool,
    pub complete: bool,
    pub blocked: bool,
    pub gated: bool,
    /// Held back by a protected pod or a drain that cannot finish.
    pub held: bool,
    pub state: &'a NodeState,
}

/// One node's status for one Skyhook.
pub fn node_status(f: &NodeFacts) -> Status {
    let any = |s: State| f.state.iter().any(|(_, e)| e.state == Some(s));
    if f.disabled {
        Status::Disabled
    } else if f.paused {
        Status::Paused
    } else if f.complete {
        Status::Complete
    } else if f.blocked || f.held {
        Status::Blocked
    } else if any(State::InProgress) {
        Status::InProgress
    } else if any(State::Erroring) || any(State::Unknown) {
        Status::Erroring
    } else {
        Status::Waiting
    }
}

/// Annotation and label writes that bring `node` to `state` and `status`.
pub fn node_patch(
    skyhook: &str,
    node: &Node,
    state: &NodeState,
    status: Status,
    operator_version: &str,
) -> NodePatch {
    let mut p = NodePatch {
        node: node.name_any(),
        ..NodePatch::default()
    };
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

pub struct SkyhookFacts<'a> {
    pub skyhook: &'a Skyhook,
    pub prior: &'a SkyhookStatus,
    pub node_states: BTreeMap<String, NodeState>,
    pub node_statuses: BTreeMap<String, Status>,
    pub paused: bool,
    pub disabled: bool,
    pub invalid: &'a [String],
    /// (package, version, node) of Jobs started this pass.
    pub started: &'a [(String, String, String)],
    /// Failures seen this pass, worded for humans.
    pub failures: &'a [String],
    /// Why interrupt work is held on some nodes (protected pods, drains), worded for humans.
    pub held: &'a [String],
    pub blocked_nodes: &'a [&'a str],
    pub ignored_nodes: &'a [&'a str],
    pub now: Timestamp,
}

/// §3.13 aggregate status.
pub fn aggregate(f: &SkyhookFacts) -> Status {
    let incomplete: Vec<Status> = f
        .node_statuses
        .values()
        .copied()
        .filter(|s| *s != Status::Complete)
        .collect();
    let base = if incomplete.is_empty() {
        Status::Complete
    } else if incomplete.contains(&Status::InProgress) {
        Status::InProgress
    } else if incomplete.iter().all(|s| *s == incomplete[0]) {
        incomplete[0]
    } else if incomplete.contains(&Status::Erroring) {
        Status::Erroring
    } else {
        Status::Waiting
    };
    if !f.invalid.is_empty() {
        Status::Blocked
    } else if base == Status::Complete {
        base
    } else if f.disabled {
        Status::Disabled
    } else if f.paused {
        Status::Paused
    } else {
        base
    }
}

fn set_condition(
    list: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: i64,
    now: Timestamp,
) {
    let status = if status { "True" } else { "False" }.to_string();
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = Time(now);
        }
        c.status = status;
        c.reason = reason.to_string();
        c.message = message;
        c.observed_generation = Some(generation);
    } else {
        list.push(Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message,
            observed_generation: Some(generation),
            last_transition_time: Time(now),
        });
    }
}

/// The whole desired `.status`.
pub fn skyhook_status(f: &SkyhookFacts) -> SkyhookStatus {
    let sk = f.skyhook;
    let generation = sk.metadata.generation.unwrap_or(0);
    let mut s = f.prior.clone();
    let targeted = f.node_statuses.len();
    let count = |want: Status| f.node_statuses.values().filter(|x| **x == want).count();
    s.node_state = f
        .node_states
        .iter()
        .filter(|(_, st)| !st.is_empty())
        .map(|(n, st)| (n.clone(), st.clone()))
        .collect();
    s.node_status = f.node_statuses.clone();
    s.node_boot_ids
        .retain(|n, _| f.node_statuses.contains_key(n));
    s.node_priority
        .retain(|n, _| f.node_statuses.contains_key(n));
    s.complete_nodes = format!("{}/{}", count(Status::Complete), targeted);
    s.nodes_in_progress = (count(Status::InProgress) + count(Status::Erroring)) as i64;
    let mut packages: Vec<String> = sk
        .spec
        .packages
        .values()
        .map(|p| format!("{}:{}", p.name, p.version))
        .collect();
    packages.sort();
    s.package_list = packages.join(",");
    let status = aggregate(f);
    if status == Status::Complete && s.status != Some(Status::Complete) {
        s.observed_generation = generation;
    }
    if status == Status::Complete {
        s.observed_generation = s.observed_generation.max(generation);
    }
    if let Some(old) = s.status.filter(|old| *old != status) {
        set_condition(
            &mut s.conditions,
            schema::TRANSITION_CONDITION,
            status == Status::Complete,
            status.as_str(),
            schema::transition_message(old, status),
            generation,
            f.now,
        );
    }
    s.status = Some(status);
    if let Some((pkg, ver, node)) = f.started.last() {
        set_condition(
            &mut s.conditions,
            schema::APPLY_PACKAGE_CONDITION,
            true,
            schema::APPLY_PACKAGE_REASON,
            schema::apply_package_message(pkg, ver, node),
            generation,
            f.now,
        );
    }
    if f.invalid.is_empty() {
        set_condition(
            &mut s.conditions,
            schema::VALID_CONDITION,
            true,
            schema::VALID_REASON,
            "the spec is valid".to_string(),
            generation,
            f.now,
        );
    } else {
        set_condition(
            &mut s.conditions,
            schema::VALID_CONDITION,
            false,
            schema::INVALID_SPEC_REASON,
            format!(
                "the Skyhook is not acted upon until fixed: {}",
                f.invalid.join("; ")
            ),
            generation,
            f.now,
        );
    }
    let erroring = f
        .node_states
        .values()
        .any(|st| st.iter().any(|(_, e)| e.state == Some(State::Erroring)));
    if let Some(latest) = f.failures.last() {
        set_condition(
            &mut s.conditions,
            schema::PACKAGE_ERRORING_CONDITION,
            true,
            schema::PACKAGE_ERRORING_REASON,
            latest.clone(),
            generation,
            f.now,
        );
    } else if !erroring {
        set_condition(
            &mut s.conditions,
            schema::PACKAGE_ERRORING_CONDITION,
            false,
            schema::NO_PACKAGE_ERRORING_REASON,
            "no package is erroring".to_string(),
            generation,
            f.now,
        );
    }
    if f.held.is_empty() {
        set_condition(
            &mut s.conditions,
            schema::NODE_BLOCKED_CONDITION,
            false,
            schema::NOT_BLOCKED_REASON,
            "no node is held back".to_string(),
            generation,
            f.now,
        );
    } else {
        set_condition(
            &mut s.conditions,
            schema::NODE_BLOCKED_CONDITION,
            true,
            schema::DRAIN_BLOCKED_REASON,
            f.held.join("; "),
            generation,
            f.now,
        );
    }
    set_condition(
        &mut s.conditions,
        schema::TAINT_NOT_TOLERABLE_CONDITION,
        !f.blocked_nodes.is_empty(),
        schema::TAINT_NOT_TOLERABLE_REASON,
        schema::taint_not_tolerable_message(f.blocked_nodes),
        0,
        f.now,
    );
    set_condition(
        &mut s.conditions,
        schema::NODES_IGNORED_CONDITION,
        !f.ignored_nodes.is_empty(),
        schema::NODES_IGNORED_REASON,
        schema::nodes_ignored_message(f.ignored_nodes),
        0,
        f.now,
    );
    s
}

/// The aggregate status changed (and there was one before).
pub fn transition(prior: &SkyhookStatus, desired: &SkyhookStatus) -> Option<(Status, Status)> {
    match (prior.status, desired.status) {
        (Some(a), Some(b)) if a != b => Some((a, b)),
        _ => None,
    }
}

/// A node is newly held back (or held for a new reason): worth a Warning Event.
pub fn newly_held(prior: &SkyhookStatus, desired: &SkyhookStatus) -> Option<String> {
    let find = |s: &SkyhookStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == schema::NODE_BLOCKED_CONDITION && c.status == "True")
            .map(|c| c.message.clone())
    };
    let now = find(desired)?;
    (find(prior).as_ref() != Some(&now)).then_some(now)
}

/// The spec just became invalid (or its problems changed): worth a Warning Event.
pub fn newly_invalid(prior: &SkyhookStatus, desired: &SkyhookStatus) -> bool {
    let find = |s: &SkyhookStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == schema::VALID_CONDITION)
            .map(|c| (c.status.clone(), c.message.clone()))
    };
    let now = find(desired);
    now.as_ref().is_some_and(|(st, _)| st == "False") && find(prior) != now
}
