//! Status derivation (§3.13, §5.1, §5.2, §2.4). Every value is derived from the node states of
//! this pass and compared with what is stored, so an unchanged world writes nothing (condition
//! timestamps only move when a condition's status flips).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::{Skyhook, SkyhookStatus};
use crate::schema::{self, NodeState, State, Status};

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
    pub blocked_nodes: Vec<String>,
    pub ignored_nodes: Vec<String>,
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
    let generation = f.skyhook.metadata.generation.unwrap_or(0);
    let mut s = f.prior.clone();
    progress(&mut s, f);
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
    work_conditions(&mut s.conditions, f, generation);
    node_conditions(&mut s.conditions, f, generation);
    s
}

/// Per-node maps and counters.
fn progress(s: &mut SkyhookStatus, f: &SkyhookFacts) {
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
    let mut packages: Vec<String> = f
        .skyhook
        .spec
        .packages
        .values()
        .map(|p| format!("{}:{}", p.name, p.version))
        .collect();
    packages.sort();
    s.package_list = packages.join(",");
}

/// Conditions about the work itself: the last package started, validity, erroring packages.
fn work_conditions(list: &mut Vec<Condition>, f: &SkyhookFacts, generation: i64) {
    if let Some((pkg, ver, node)) = f.started.last() {
        set_condition(
            list,
            schema::APPLY_PACKAGE_CONDITION,
            true,
            schema::APPLY_PACKAGE_REASON,
            schema::apply_package_message(pkg, ver, node),
            generation,
            f.now,
        );
    }
    let (valid, reason, message) = if f.invalid.is_empty() {
        (true, schema::VALID_REASON, "the spec is valid".to_string())
    } else {
        let problems = f.invalid.join("; ");
        let message = format!("the Skyhook is not acted upon until fixed: {problems}");
        (false, schema::INVALID_SPEC_REASON, message)
    };
    set_condition(
        list,
        schema::VALID_CONDITION,
        valid,
        reason,
        message,
        generation,
        f.now,
    );
    let erroring = f
        .node_states
        .values()
        .any(|st| st.iter().any(|(_, e)| e.state == Some(State::Erroring)));
    if let Some(latest) = f.failures.last() {
        set_condition(
            list,
            schema::PACKAGE_ERRORING_CONDITION,
            true,
            schema::PACKAGE_ERRORING_REASON,
            latest.clone(),
            generation,
            f.now,
        );
    } else if !erroring {
        set_condition(
            list,
            schema::PACKAGE_ERRORING_CONDITION,
            false,
            schema::NO_PACKAGE_ERRORING_REASON,
            "no package is erroring".to_string(),
            generation,
            f.now,
        );
    }
}

/// Conditions about nodes that cannot proceed: held back, untolerated taints, ignored.
fn node_conditions(list: &mut Vec<Condition>, f: &SkyhookFacts, generation: i64) {
    let (held, reason, message) = if f.held.is_empty() {
        let message = "no node is held back".to_string();
        (false, schema::NOT_BLOCKED_REASON, message)
    } else {
        (true, schema::DRAIN_BLOCKED_REASON, f.held.join("; "))
    };
    set_condition(
        list,
        schema::NODE_BLOCKED_CONDITION,
        held,
        reason,
        message,
        generation,
        f.now,
    );
    set_condition(
        list,
        schema::TAINT_NOT_TOLERABLE_CONDITION,
        !f.blocked_nodes.is_empty(),
        schema::TAINT_NOT_TOLERABLE_REASON,
        schema::taint_not_tolerable_message(&refs(&f.blocked_nodes)),
        0,
        f.now,
    );
    set_condition(
        list,
        schema::NODES_IGNORED_CONDITION,
        !f.ignored_nodes.is_empty(),
        schema::NODES_IGNORED_REASON,
        schema::nodes_ignored_message(&refs(&f.ignored_nodes)),
        0,
        f.now,
    );
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
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
