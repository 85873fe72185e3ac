//! Status derivation (§3.13, §5.1, §5.2, §2.4). Every value is derived from the node states of
//! this pass and compared with what is stored, so an unchanged world writes nothing (condition
//! timestamps only move when a condition's status flips).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::condition::{kept_once_set, set_condition};
use super::upstream_conditions;
use crate::crd::{CompartmentStatus, Skyhook, SkyhookStatus};
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
    /// Nodes that gave their batch slot back for a fault of their own, worded for humans.
    pub released: &'a [String],
    pub blocked_nodes: Vec<String>,
    pub ignored_nodes: Vec<String>,
    /// Nodes whose interrupt waits for pods matching `podNonInterruptLabels`.
    pub non_interrupt_nodes: Vec<String>,
    /// Their waits, for [`schema::WAITING_FOR_PROTECTED_PODS_CONDITION`].
    pub protected_waits: Vec<ProtectedWaitRow>,
    /// NON_INTERRUPT_SLOT_RELEASE.
    pub slot_release: std::time::Duration,
    /// Nodes whose stored progress cannot be read: (node, message).
    pub unreadable: Vec<(String, String)>,
    /// Writes of the last pass that failed for good, one line each.
    pub write_failures: &'a [String],
    /// Evictions of the last pass a PodDisruptionBudget refused.
    pub drain_blocks: &'a [super::inputs::DrainBlock],
    /// The `deploymentPolicy` named but absent.
    pub missing_policy: Option<&'a str>,
    /// A Skyhook ordered before this one, with `sequencing: all`, not complete everywhere yet.
    pub waiting_on: Option<String>,
    /// `nodePriority` with this pass's picks (pruned into the status).
    pub node_priority: BTreeMap<String, Time>,
    /// Compartments halted by their failure threshold, one message each.
    pub stopped: Vec<String>,
    /// The compartments' statuses, taken after any reset; `None` keeps the stored ones.
    pub compartment_statuses: Option<BTreeMap<String, CompartmentStatus>>,
    pub now: Timestamp,
}

/// One node's wait for protected pods, as the condition names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedWaitRow {
    pub node: String,
    pub wait: schema::ProtectedWait,
    /// Past NON_INTERRUPT_SLOT_RELEASE: the node gave its batch slot back.
    pub released: bool,
}

/// `WaitingForProtectedPods` (this project's, beside upstream's `Blocked`): each waiting node
/// with its pods, since when, and whether it still holds its batch slot.
fn protected_waits_condition(list: &mut Vec<Condition>, f: &SkyhookFacts, generation: i64) {
    let present = (!f.protected_waits.is_empty()).then(|| {
        let release = jiff::SignedDuration::try_from(f.slot_release).unwrap_or_default();
        let lines = f.protected_waits.iter().map(|r| {
            let slot = if r.released {
                "its batch slot given back".to_string()
            } else {
                format!("holding its batch slot for up to {release:#}")
            };
            format!("node {} waits for {}, {slot}", r.node, r.wait.describe(None))
        });
        let message = format!(
            "{} node(s) wait for protected pods (podNonInterruptLabels) before their interrupt; they are never interrupted while those run: {}",
            f.protected_waits.len(),
            schema::short_list(lines.collect::<Vec<_>>(), 10, "; ")
        );
        (schema::NON_INTERRUPT_PODS_RUNNING_REASON, message)
    });
    super::condition::present_while(
        list,
        schema::WAITING_FOR_PROTECTED_PODS_CONDITION,
        present,
        generation,
        f.now,
    );
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
    if !f.invalid.is_empty() || f.missing_policy.is_some() {
        Status::Blocked
    } else if base == Status::Complete {
        base
    } else if f.disabled {
        Status::Disabled
    } else if f.paused {
        Status::Paused
    } else if f.waiting_on.is_some() {
        Status::Waiting
    } else {
        base
    }
}

/// `prior` without the per-node maps every pass rebuilds (`nodeState`, `nodeStatus`). They are
/// most of a large Skyhook's status (about 1 MiB at a thousand nodes): a pass that copied them
/// only to replace them held two more copies of every node's state at its peak.
pub fn carried(prior: &SkyhookStatus) -> SkyhookStatus {
    let SkyhookStatus {
        observed_generation,
        status,
        node_state: _,
        node_status: _,
        conditions,
        node_boot_ids,
        node_priority,
        node_order_offset,
        config_updates,
        compartment_statuses,
        nodes_in_progress,
        complete_nodes,
        package_list,
    } = prior;
    SkyhookStatus {
        observed_generation: *observed_generation,
        status: *status,
        node_state: BTreeMap::new(),
        node_status: BTreeMap::new(),
        conditions: conditions.clone(),
        node_boot_ids: node_boot_ids.clone(),
        node_priority: node_priority.clone(),
        node_order_offset: *node_order_offset,
        config_updates: config_updates.clone(),
        compartment_statuses: compartment_statuses.clone(),
        nodes_in_progress: *nodes_in_progress,
        complete_nodes: complete_nodes.clone(),
        package_list: package_list.clone(),
    }
}

/// The whole desired `.status`. The node states of `f` move into it.
pub fn skyhook_status(mut f: SkyhookFacts) -> SkyhookStatus {
    let generation = f.skyhook.metadata.generation.unwrap_or(0);
    let mut s = carried(f.prior);
    progress(&mut s, &mut f);
    if let Some(compartments) = f.compartment_statuses.take() {
        s.compartment_statuses = compartments;
    }
    let f = &f;
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
    let (now, statuses) = (f.now, &f.node_statuses);
    upstream_conditions::ready(&mut s.conditions, statuses, status, generation, now);
    let erroring = s
        .node_state
        .values()
        .any(|st| st.iter().any(|(_, e)| e.state == Some(State::Erroring)));
    work_conditions(&mut s.conditions, f, erroring, generation);
    node_conditions(&mut s.conditions, f, generation);
    unreadable_condition(&mut s.conditions, f, generation);
    let unreadable: Vec<&str> = f.unreadable.iter().map(|(n, _)| n.as_str()).collect();
    upstream_conditions::malformed(&mut s.conditions, &unreadable, generation, now);
    let held: Vec<&str> = f.non_interrupt_nodes.iter().map(String::as_str).collect();
    upstream_conditions::non_interrupt(&mut s.conditions, &held, generation, now);
    protected_waits_condition(&mut s.conditions, f, generation);
    let total = statuses.len();
    upstream_conditions::drain_blocked(&mut s.conditions, f.drain_blocks, total, generation, now);
    write_failed_condition(&mut s.conditions, f, generation);
    policy_condition(&mut s.conditions, f, generation);
    stopped_condition(&mut s.conditions, f, generation);
    s
}

/// `True` while a compartment is halted; Skyhooks never halted do not carry it.
fn stopped_condition(list: &mut Vec<Condition>, f: &SkyhookFacts, generation: i64) {
    let kind = schema::ROLLOUT_STOPPED_CONDITION;
    let known = list.iter().any(|c| c.type_ == kind);
    if f.stopped.is_empty() && !known {
        return;
    }
    let (reason, message) = if f.stopped.is_empty() {
        (
            schema::ROLLOUT_RUNNING_REASON,
            "no compartment is stopped".to_string(),
        )
    } else {
        (schema::ROLLOUT_STOPPED_REASON, f.stopped.join("; "))
    };
    set_condition(
        list,
        kind,
        !f.stopped.is_empty(),
        reason,
        message,
        generation,
        f.now,
    );
}

/// A compartment stopped in this pass (its Event is due): the condition's message.
pub fn newly_stopped(prior: &SkyhookStatus, desired: &SkyhookStatus) -> Option<String> {
    newly_said(prior, desired, schema::ROLLOUT_STOPPED_CONDITION)
}

/// The message of condition `kind` while it is `True`.
fn true_message<'a>(s: &'a SkyhookStatus, kind: &str) -> Option<&'a str> {
    s.conditions
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
        .map(|c| c.message.as_str())
}

/// Condition `kind` turned `True` in this pass: its message.
pub(super) fn newly_true(
    prior: &SkyhookStatus,
    desired: &SkyhookStatus,
    kind: &str,
) -> Option<String> {
    let now = true_message(desired, kind)?;
    true_message(prior, kind).is_none().then(|| now.to_string())
}

/// Condition `kind` is `True` and says something it did not say before this pass: its message.
fn newly_said(prior: &SkyhookStatus, desired: &SkyhookStatus, kind: &str) -> Option<String> {
    let now = true_message(desired, kind)?;
    (true_message(prior, kind) != Some(now)).then(|| now.to_string())
}

/// §5.2: `DeploymentPolicyNotFound` is `True` while the named policy is absent and removed once
/// it exists.
fn policy_condition(list: &mut Vec<Condition>, f: &SkyhookFacts, generation: i64) {
    let kind = schema::DEPLOYMENT_POLICY_NOT_FOUND_CONDITION;
    match f.missing_policy {
        Some(name) => set_condition(
            list,
            kind,
            true,
            schema::DEPLOYMENT_POLICY_NOT_FOUND_REASON,
            schema::deployment_policy_not_found_message(name),
            generation,
            f.now,
        ),
        None => list.retain(|c| c.type_ != kind),
    }
}

/// The named policy went missing in this pass (its Event is due).
pub fn newly_missing_policy(prior: &SkyhookStatus, desired: &SkyhookStatus) -> Option<String> {
    newly_true(
        prior,
        desired,
        schema::DEPLOYMENT_POLICY_NOT_FOUND_CONDITION,
    )
}

/// Per-node maps and counters.
fn progress(s: &mut SkyhookStatus, f: &mut SkyhookFacts) {
    let targeted = f.node_statuses.len();
    let count = |want: Status| f.node_statuses.values().filter(|x| **x == want).count();
    s.node_state = std::mem::take(&mut f.node_states);
    s.node_state.retain(|_, st| !st.is_empty());
    s.node_status = f.node_statuses.clone();
    s.node_boot_ids
        .retain(|n, _| f.node_statuses.contains_key(n));
    s.node_priority = std::mem::take(&mut f.node_priority);
    super::node_order::prune(
        &mut s.node_priority,
        &mut s.node_order_offset,
        &f.node_statuses,
    );
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
fn work_conditions(list: &mut Vec<Condition>, f: &SkyhookFacts, erroring: bool, generation: i64) {
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
    let all = || f.held.iter().chain(f.released).cloned().collect::<Vec<_>>();
    let (held, reason, message) = if !f.held.is_empty() {
        (true, schema::DRAIN_BLOCKED_REASON, all().join("; "))
    } else if !f.released.is_empty() {
        (true, schema::SLOT_RELEASED_REASON, all().join("; "))
    } else {
        let message = "no node is held back".to_string();
        (false, schema::NOT_BLOCKED_REASON, message)
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
    let listed = [
        (
            schema::TAINT_NOT_TOLERABLE_CONDITION,
            schema::TAINT_NOT_TOLERABLE_REASON,
            &f.blocked_nodes,
            schema::taint_not_tolerable_message as fn(&[&str]) -> String,
        ),
        (
            schema::NODES_IGNORED_CONDITION,
            schema::NODES_IGNORED_REASON,
            &f.ignored_nodes,
            schema::nodes_ignored_message,
        ),
    ];
    for (type_, reason, nodes, message) in listed {
        let message = message(&refs(nodes));
        set_condition(list, type_, !nodes.is_empty(), reason, message, 0, f.now);
    }
}

/// `True` while some node's stored progress cannot be read. Skyhooks that never had such a node
/// do not carry the condition at all.
fn unreadable_condition(list: &mut Vec<Condition>, f: &SkyhookFacts, generation: i64) {
    // (Events beyond the shown nodes are aggregated by the recorder.)
    let why = f.unreadable.iter().map(|(_, why)| why.as_str());
    let holding =
        (!f.unreadable.is_empty()).then(|| (schema::NODE_STATE_UNREADABLE_REASON, bounded(why)));
    let clear = (
        schema::NODE_STATE_READABLE_REASON,
        "every node's stored state can be read",
    );
    let kind = schema::NODE_STATE_UNREADABLE_CONDITION;
    kept_once_set(list, kind, holding, clear, generation, f.now);
}

/// Pods matching `podNonInterruptLabels` began holding a node in this pass: the message.
pub fn newly_blocked_by_non_interrupt_pods(
    prior: &SkyhookStatus,
    desired: &SkyhookStatus,
) -> Option<String> {
    newly_true(prior, desired, schema::BLOCKED_CONDITION)
}

/// `True` while writes keep failing; Skyhooks that never had one do not carry the condition.
fn write_failed_condition(list: &mut Vec<Condition>, f: &SkyhookFacts, generation: i64) {
    let holding = (!f.write_failures.is_empty())
        .then(|| (schema::WRITE_FAILED_REASON, bounded(f.write_failures)));
    let clear = (
        schema::WRITES_SUCCEEDED_REASON,
        "every write of the last pass succeeded",
    );
    let kind = schema::WRITE_FAILED_CONDITION;
    kept_once_set(list, kind, holding, clear, generation, f.now);
}

/// The first lines joined, then how many more: the CRD caps a condition message, and a status
/// the API server refuses would stop every status update.
fn bounded<I>(lines: I) -> String
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    const SHOWN: usize = 10;
    schema::short_list(lines, SHOWN, "; ")
}

/// The write failures the stored status does not report yet (each gets a Warning Event).
pub fn new_write_failures<'a>(prior: &SkyhookStatus, failures: &'a [String]) -> Vec<&'a String> {
    let reported = prior
        .conditions
        .iter()
        .find(|c| c.type_ == schema::WRITE_FAILED_CONDITION && c.status == "True");
    failures
        .iter()
        .filter(|f| reported.is_none_or(|c| !c.message.contains(f.as_str())))
        .collect()
}

/// The stored status already reports this unreadable value (its Event was published then).
pub fn already_unreadable(prior: &SkyhookStatus, why: &str) -> bool {
    prior.conditions.iter().any(|c| {
        c.type_ == schema::NODE_STATE_UNREADABLE_CONDITION
            && c.status == "True"
            && c.message.contains(why)
    })
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

/// `desired` says something new about the Skyhook as a whole, not only how far its nodes have
/// got: its aggregate status, a condition appearing, going or flipping (or changing its
/// reason), a new generation observed. Condition messages that count nodes are progress.
pub fn news(prior: &SkyhookStatus, desired: &SkyhookStatus) -> bool {
    fn marks(s: &SkyhookStatus) -> Vec<(&str, &str, &str)> {
        let mut m: Vec<(&str, &str, &str)> = s
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect();
        m.sort_unstable();
        m
    }
    // A batch's evaluation is the rollout's accounting, not a display: the next pass counts
    // the nodes finished since the stored one. Held back while the next batch starts, two
    // batches would be counted as one (seen under load: `currentBatch` 4 after five batches).
    fn batches(s: &SkyhookStatus) -> Vec<(&String, Option<&crate::crd::BatchState>)> {
        s.compartment_statuses
            .iter()
            .map(|(k, c)| (k, c.batch_state.as_ref()))
            .collect()
    }
    prior.status != desired.status
        || prior.observed_generation != desired.observed_generation
        || marks(prior) != marks(desired)
        || batches(prior) != batches(desired)
}

/// A node is newly held back (or held for a new reason): worth a Warning Event.
pub fn newly_held(prior: &SkyhookStatus, desired: &SkyhookStatus) -> Option<String> {
    newly_said(prior, desired, schema::NODE_BLOCKED_CONDITION)
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::fixtures::{condition, entry, node_state, package, skyhook, status_with, t};
    use crate::schema::Stage;

    /// Skyhook `sh` at generation 3 with packages `(name, version)`.
    fn with_packages(packages: &[(&str, &str)]) -> Skyhook {
        packages
            .iter()
            .fold(skyhook("sh").generation(3), |sk, (n, v)| {
                sk.package(package(n).version(v).image("img"))
            })
            .build()
    }

    fn statuses(list: &[Status]) -> BTreeMap<String, Status> {
        list.iter()
            .enumerate()
            .map(|(i, s)| (format!("n{i}"), *s))
            .collect()
    }

    fn skyhook_facts<'a>(
        sk: &'a Skyhook,
        prior: &'a SkyhookStatus,
        list: &[Status],
    ) -> SkyhookFacts<'a> {
        SkyhookFacts {
            skyhook: sk,
            prior,
            node_states: BTreeMap::new(),
            node_statuses: statuses(list),
            paused: false,
            disabled: false,
            invalid: &[],
            started: &[],
            failures: &[],
            held: &[],
            released: &[],
            blocked_nodes: Vec::new(),
            ignored_nodes: Vec::new(),
            non_interrupt_nodes: Vec::new(),
            protected_waits: Vec::new(),
            slot_release: std::time::Duration::from_secs(600),
            unreadable: Vec::new(),
            write_failures: &[],
            drain_blocks: &[],
            missing_policy: None,
            waiting_on: None,
            node_priority: BTreeMap::new(),
            stopped: Vec::new(),
            compartment_statuses: None,
            now: t(0),
        }
    }

    #[test]
    fn aggregate_table() {
        use Status::*;
        // (case, node statuses, paused, disabled, invalid, aggregate)
        let cases: &[(&str, &[Status], bool, bool, bool, Status)] = &[
            (
                "all complete",
                &[Complete, Complete],
                false,
                false,
                false,
                Complete,
            ),
            ("no targeted node", &[], false, false, false, Complete),
            (
                "any in progress",
                &[Complete, Erroring, InProgress, Waiting],
                false,
                false,
                false,
                InProgress,
            ),
            (
                "all the same: waiting",
                &[Waiting, Waiting],
                false,
                false,
                false,
                Waiting,
            ),
            (
                "all remaining blocked",
                &[Complete, Blocked, Blocked],
                false,
                false,
                false,
                Blocked,
            ),
            (
                "all remaining erroring",
                &[Erroring, Complete],
                false,
                false,
                false,
                Erroring,
            ),
            (
                "mixed with erroring",
                &[Waiting, Erroring, Blocked],
                false,
                false,
                false,
                Erroring,
            ),
            (
                "mixed without erroring",
                &[Waiting, Blocked, Complete],
                false,
                false,
                false,
                Waiting,
            ),
            (
                "invalid is blocked",
                &[InProgress],
                false,
                false,
                true,
                Blocked,
            ),
            (
                "invalid is blocked even when complete",
                &[Complete],
                false,
                false,
                true,
                Blocked,
            ),
            (
                "invalid wins over disabled",
                &[Waiting],
                true,
                true,
                true,
                Blocked,
            ),
            (
                "paused when not complete",
                &[InProgress],
                true,
                false,
                false,
                Paused,
            ),
            (
                "paused but complete",
                &[Complete],
                true,
                false,
                false,
                Complete,
            ),
            (
                "disabled when not complete",
                &[Waiting],
                false,
                true,
                false,
                Disabled,
            ),
            (
                "disabled beats paused",
                &[Waiting],
                true,
                true,
                false,
                Disabled,
            ),
            (
                "disabled but complete",
                &[Complete],
                false,
                true,
                false,
                Complete,
            ),
        ];
        let sk = with_packages(&[]);
        let prior = SkyhookStatus::default();
        let problems = ["bad".to_string()];
        for &(name, list, paused, disabled, invalid, want) in cases {
            let mut f = skyhook_facts(&sk, &prior, list);
            f.paused = paused;
            f.disabled = disabled;
            if invalid {
                f.invalid = &problems;
            }
            assert_eq!(aggregate(&f), want, "case: {name}");
        }
    }

    #[test]
    fn skyhook_status_counters() {
        use Status::*;
        // (case, node statuses, packages, completeNodes, nodesInProgress, packageList)
        let cases: &[(&str, &[Status], &[(&str, &str)], &str, i64, &str)] = &[
            ("no node", &[], &[], "0/0", 0, ""),
            (
                "one of three complete, in progress and erroring count",
                &[Complete, InProgress, Erroring],
                &[("p", "1.0.0")],
                "1/3",
                2,
                "p:1.0.0",
            ),
            (
                "waiting, blocked, paused do not count as in progress",
                &[Waiting, Blocked, Paused, Complete],
                &[],
                "1/4",
                0,
                "",
            ),
            ("all complete", &[Complete, Complete], &[], "2/2", 0, ""),
            (
                "package list sorted as name:version strings",
                &[Waiting],
                &[("zeta", "1.0.0"), ("a", "2.0.0"), ("a-b", "0.1.0")],
                "0/1",
                0,
                "a-b:0.1.0,a:2.0.0,zeta:1.0.0",
            ),
        ];
        for &(name, list, packages, complete, in_progress, package_list) in cases {
            let sk = with_packages(packages);
            let prior = SkyhookStatus::default();
            let s = skyhook_status(skyhook_facts(&sk, &prior, list));
            assert_eq!(s.complete_nodes, complete, "case: {name}");
            assert_eq!(s.nodes_in_progress, in_progress, "case: {name}");
            assert_eq!(s.package_list, package_list, "case: {name}");
            assert_eq!(s.node_status, statuses(list), "case: {name}");
        }
    }

    #[test]
    fn skyhook_status_maps_follow_the_targeted_nodes() {
        let sk = with_packages(&[("p", "1.0.0")]);
        let prior = SkyhookStatus {
            node_boot_ids: BTreeMap::from([
                ("n0".to_string(), "b0".to_string()),
                ("gone".to_string(), "bg".to_string()),
            ]),
            node_priority: BTreeMap::from([("gone".to_string(), Time(t(0)))]),
            ..SkyhookStatus::default()
        };
        let state = node_state([entry("p", Stage::Apply, State::InProgress)]);
        let mut f = skyhook_facts(&sk, &prior, &[Status::InProgress, Status::Waiting]);
        f.node_states = BTreeMap::from([
            ("n0".to_string(), state.clone()),
            ("n1".to_string(), NodeState::default()),
        ]);
        let s = skyhook_status(f);
        // (case, got, want)
        let cases: Vec<(&str, Vec<String>, Vec<&str>)> = vec![
            (
                "nodeState keeps non-empty states only",
                s.node_state.keys().cloned().collect(),
                vec!["n0"],
            ),
            (
                "nodeBootIds of targeted nodes only",
                s.node_boot_ids.keys().cloned().collect(),
                vec!["n0"],
            ),
            (
                "nodePriority of targeted nodes only",
                s.node_priority.keys().cloned().collect(),
                vec![],
            ),
            (
                "nodeStatus of every targeted node",
                s.node_status.keys().cloned().collect(),
                vec!["n0", "n1"],
            ),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "case: {name}");
        }
        assert_eq!(s.node_state["n0"], state);
        assert_eq!(s.status, Some(Status::InProgress));
    }

    /// One pass's inputs that matter to the conditions.
    #[derive(Clone, Copy)]
    struct Pass {
        statuses: &'static [Status],
        held: &'static [&'static str],
        blocked: &'static [&'static str],
        ignored: &'static [&'static str],
        invalid: &'static [&'static str],
        failures: &'static [&'static str],
    }

    const BASE: Pass = Pass {
        statuses: &[Status::InProgress],
        held: &[],
        blocked: &[],
        ignored: &[],
        invalid: &[],
        failures: &[],
    };

    fn run(sk: &Skyhook, prior: &SkyhookStatus, p: Pass, now: Timestamp) -> SkyhookStatus {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let held = owned(p.held);
        let invalid = owned(p.invalid);
        let failures = owned(p.failures);
        let mut f = skyhook_facts(sk, prior, p.statuses);
        f.held = &held;
        f.invalid = &invalid;
        f.failures = &failures;
        f.blocked_nodes = owned(p.blocked);
        f.ignored_nodes = owned(p.ignored);
        f.now = now;
        skyhook_status(f)
    }

    #[test]
    fn condition_times_move_only_when_their_status_flips() {
        use schema::*;
        // (case, first pass, second pass, condition types whose transition time moves)
        let cases: Vec<(&str, Pass, Pass, Vec<&str>)> = vec![
            ("nothing changed", BASE, BASE, vec![]),
            (
                "a node held back",
                BASE,
                Pass {
                    held: &["node n0: draining"],
                    ..BASE
                },
                vec![NODE_BLOCKED_CONDITION],
            ),
            (
                "held for another reason: message only",
                Pass {
                    held: &["node n0: a"],
                    ..BASE
                },
                Pass {
                    held: &["node n0: b"],
                    ..BASE
                },
                vec![],
            ),
            (
                "no longer held",
                Pass {
                    held: &["node n0: a"],
                    ..BASE
                },
                BASE,
                vec![NODE_BLOCKED_CONDITION],
            ),
            (
                "a node with an untolerated taint",
                BASE,
                Pass {
                    blocked: &["n0"],
                    ..BASE
                },
                vec![TAINT_NOT_TOLERABLE_CONDITION],
            ),
            (
                "a node ignored",
                BASE,
                Pass {
                    ignored: &["n0"],
                    ..BASE
                },
                vec![NODES_IGNORED_CONDITION],
            ),
            (
                "spec became invalid (and the aggregate blocked)",
                BASE,
                Pass {
                    invalid: &["bad"],
                    ..BASE
                },
                vec![VALID_CONDITION, TRANSITION_CONDITION],
            ),
            (
                "a package failed",
                BASE,
                Pass {
                    failures: &["boom"],
                    ..BASE
                },
                vec![PACKAGE_ERRORING_CONDITION],
            ),
            (
                "rollout complete",
                BASE,
                Pass {
                    statuses: &[Status::Complete],
                    ..BASE
                },
                vec![
                    TRANSITION_CONDITION,
                    READY_CONDITION,
                    LEGACY_READY_CONDITION,
                ],
            ),
        ];
        let sk = with_packages(&[("p", "1.0.0")]);
        for (name, first, second, moved) in cases {
            let prior = run(&sk, &SkyhookStatus::default(), first, t(0));
            let next = run(&sk, &prior, second, t(60));
            if moved.is_empty() && first.held == second.held {
                assert_eq!(
                    next, prior,
                    "case: {name}: an unchanged world writes nothing"
                );
            }
            for c in &next.conditions {
                let want = if moved.contains(&c.type_.as_str()) {
                    t(60)
                } else {
                    t(0)
                };
                assert_eq!(
                    c.last_transition_time,
                    Time(want),
                    "case: {name}: {}",
                    c.type_
                );
            }
            for ty in moved {
                assert!(
                    next.conditions.iter().any(|c| c.type_ == ty),
                    "case: {name}: {ty} missing"
                );
            }
        }
    }

    #[test]
    fn transition_table() {
        use Status::*;
        let cases: &[(
            &str,
            Option<Status>,
            Option<Status>,
            Option<(Status, Status)>,
        )] = &[
            ("first status ever", None, Some(InProgress), None),
            ("unchanged", Some(InProgress), Some(InProgress), None),
            (
                "changed",
                Some(InProgress),
                Some(Complete),
                Some((InProgress, Complete)),
            ),
            ("status dropped", Some(Complete), None, None),
        ];
        for &(name, a, b, want) in cases {
            assert_eq!(
                transition(&status_with(a, vec![]), &status_with(b, vec![])),
                want,
                "case: {name}"
            );
        }
    }

    #[test]
    fn newly_held_table() {
        let nb = schema::NODE_BLOCKED_CONDITION;
        let cases: Vec<(&str, Vec<Condition>, Vec<Condition>, Option<&str>)> = vec![
            (
                "newly held",
                vec![],
                vec![condition(nb, "True", "a")],
                Some("a"),
            ),
            (
                "held before as False",
                vec![condition(nb, "False", "none")],
                vec![condition(nb, "True", "a")],
                Some("a"),
            ),
            (
                "same reason",
                vec![condition(nb, "True", "a")],
                vec![condition(nb, "True", "a")],
                None,
            ),
            (
                "new reason",
                vec![condition(nb, "True", "a")],
                vec![condition(nb, "True", "b")],
                Some("b"),
            ),
            (
                "released",
                vec![condition(nb, "True", "a")],
                vec![condition(nb, "False", "none")],
                None,
            ),
            ("no condition", vec![], vec![], None),
            (
                "another condition type",
                vec![],
                vec![condition(schema::VALID_CONDITION, "True", "a")],
                None,
            ),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(
                newly_held(&status_with(None, a), &status_with(None, b)).as_deref(),
                want,
                "case: {name}"
            );
        }
    }

    #[test]
    fn newly_invalid_table() {
        let v = schema::VALID_CONDITION;
        let cases: Vec<(&str, Vec<Condition>, Vec<Condition>, bool)> = vec![
            (
                "newly invalid",
                vec![],
                vec![condition(v, "False", "x")],
                true,
            ),
            (
                "was valid",
                vec![condition(v, "True", "ok")],
                vec![condition(v, "False", "x")],
                true,
            ),
            (
                "still invalid, same problems",
                vec![condition(v, "False", "x")],
                vec![condition(v, "False", "x")],
                false,
            ),
            (
                "still invalid, other problems",
                vec![condition(v, "False", "x")],
                vec![condition(v, "False", "y")],
                true,
            ),
            (
                "fixed",
                vec![condition(v, "False", "x")],
                vec![condition(v, "True", "ok")],
                false,
            ),
            (
                "valid all along",
                vec![condition(v, "True", "ok")],
                vec![condition(v, "True", "ok")],
                false,
            ),
            ("no condition", vec![], vec![], false),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(
                newly_invalid(&status_with(None, a), &status_with(None, b)),
                want,
                "case: {name}"
            );
        }
    }

    #[test]
    fn news_is_what_the_skyhook_as_a_whole_says_not_progress() {
        use Status::*;
        let base = || {
            let mut s = status_with(Some(InProgress), vec![condition("A", "True", "1/10 nodes")]);
            s.complete_nodes = "1/10".into();
            s.observed_generation = 2;
            let rack = s.compartment_statuses.entry("rack".into()).or_default();
            rack.batch_state = Some(crate::crd::BatchState::fresh());
            s
        };
        let cases: [(&str, fn(&mut SkyhookStatus), bool); 10] = [
            ("nothing changed", |_| {}, false),
            (
                "more nodes complete",
                |s| s.complete_nodes = "5/10".into(),
                false,
            ),
            (
                "a node's state moved",
                |s| {
                    s.node_status.insert("n1".into(), Complete);
                },
                false,
            ),
            (
                "a condition's message counts nodes",
                |s| s.conditions[0].message = "4/10 nodes".into(),
                false,
            ),
            (
                "the aggregate status changed",
                |s| s.status = Some(Complete),
                true,
            ),
            (
                "a condition flipped",
                |s| s.conditions[0].status = "False".into(),
                true,
            ),
            (
                "a condition appeared",
                |s| s.conditions.push(condition("B", "True", "")),
                true,
            ),
            (
                "a new generation observed",
                |s| s.observed_generation = 3,
                true,
            ),
            (
                "a compartment's node counts moved",
                |s| {
                    let c = s.compartment_statuses.entry("rack".into()).or_default();
                    c.completed = 3;
                },
                false,
            ),
            (
                "a batch was evaluated (the next pass counts from it)",
                |s| {
                    let c = s.compartment_statuses.entry("rack".into()).or_default();
                    c.batch_state = Some(crate::crd::BatchState {
                        current_batch: 2,
                        ..crate::crd::BatchState::fresh()
                    });
                },
                true,
            ),
        ];
        for (case, change, want) in cases {
            let mut desired = base();
            change(&mut desired);
            assert_eq!(news(&base(), &desired), want, "{case}");
        }
    }
}
