//! The health gate (issue 38): after its last stage a node is complete only once it is Ready,
//! the pods the gate selects on it are Ready and the node condition it names holds. Until then
//! it stays cordoned and at work in its batch; past the timeout it is `erroring` (a failed node
//! of its batch) and is still watched, so it completes once it recovers.
//!
//! The clock is the node annotation `healthGate_<sh>`, written when the node first waits and
//! removed when it passes or has work again.

use std::time::Duration;

use jiff::Timestamp;

use super::actions::{NodePatch, Note};
use super::drain::PodInfo;
use crate::crd::HealthGate;
use crate::jobs::{CheckRun, Outcome};
use crate::node::NodeView;
use crate::schema::{self, Status};

/// What the health gate says of one node this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// No gate applies: none is set, the node has work left, or it completed before.
    Free,
    /// It passed now, after waiting since `since`: the node completes in this pass.
    Passed { since: Timestamp },
    /// Still waiting, within the timeout.
    Holding { since: Timestamp, why: String },
    /// Past the timeout and still not healthy.
    Failed { since: Timestamp, why: String },
}

impl Health {
    /// The node waits for its gate (holding or failed): it is not complete.
    pub fn waits(&self) -> bool {
        matches!(self, Health::Holding { .. } | Health::Failed { .. })
    }

    /// When the node began to wait, for the clock annotation.
    pub fn since(&self) -> Option<Timestamp> {
        match self {
            Health::Free => None,
            Health::Passed { since }
            | Health::Holding { since, .. }
            | Health::Failed { since, .. } => Some(*since),
        }
    }

    /// The node status the gate gives a node that waits.
    pub fn status(&self) -> Option<Status> {
        match self {
            Health::Holding { .. } => Some(Status::InProgress),
            Health::Failed { .. } => Some(Status::Erroring),
            _ => None,
        }
    }
}

/// What the judgement of one node reads.
pub struct GateInput<'a> {
    pub skyhook: &'a str,
    pub gate: Option<&'a HealthGate>,
    pub node: &'a NodeView,
    /// Complete at every package with nothing drifted, before the gate.
    pub settled: bool,
    /// The node's pods as listed this pass (`None`: not listed yet).
    pub pods: Option<&'a [PodInfo]>,
    /// The node's health check Jobs (of every gate period).
    pub checks: &'a [CheckRun],
    pub now: Timestamp,
}

/// The gate's verdict on one node.
pub fn judge(inp: &GateInput) -> Health {
    let Some(gate) = inp.gate else {
        return Health::Free;
    };
    if !inp.settled {
        return Health::Free;
    }
    let stored = inp
        .node
        .annotation(&schema::health_gate_annotation(inp.skyhook));
    let completed_before =
        Status::from_annotation(inp.node.annotation(&schema::status_annotation(inp.skyhook)))
            == Status::Complete;
    if stored.is_none() && completed_before {
        return Health::Free;
    }
    let since = stored
        .and_then(|t| t.parse::<Timestamp>().ok())
        .unwrap_or(inp.now);
    match unhealthy(gate, inp, since) {
        None => Health::Passed { since },
        Some(why) => {
            let limit = gate.timeout();
            let waited = inp.now.duration_since(since).unsigned_abs();
            if waited >= limit {
                let why = format!(
                    "health gate not passed within {} (healthGate.timeout): {why}",
                    human(limit)
                );
                Health::Failed { since, why }
            } else {
                Health::Holding {
                    since,
                    why: format!("waiting for its health gate: {why}"),
                }
            }
        }
    }
}

/// The first check the node fails, in words; `None` when it passes all. The check Job comes
/// last: it starts only once everything else holds.
fn unhealthy(gate: &HealthGate, inp: &GateInput, since: Timestamp) -> Option<String> {
    if let Some(why) = unhealthy_before_check(gate, inp) {
        return Some(why);
    }
    gate.check.as_ref()?;
    let Some(run) = latest_run(inp.checks, since) else {
        return Some("starting its check Job".into());
    };
    match &run.outcome {
        Outcome::Running => Some(format!("check Job {} running", run.name)),
        Outcome::Failed {
            reason,
            message,
            at,
        } if run.attempt >= schema::MAX_JOB_ATTEMPT => {
            let key = schema::health_gate_annotation(inp.skyhook);
            Some(format!(
                "check Job {} failed ({reason}: {message}); the gate stopped checking at {at} after \
                 {} attempts; to restart it (from attempt 0), remove the node's annotation: \
                 kubectl annotate node {} {key}-",
                run.name,
                run.attempt + 1,
                inp.node.name
            ))
        }
        Outcome::Failed {
            reason,
            message,
            at,
        } => Some(format!(
            "check Job {} failed ({reason}: {message}); attempt {} of {} is retried at {}",
            run.name,
            run.attempt + 2,
            schema::MAX_JOB_ATTEMPT + 1,
            retry_at(*at, run.attempt)
        )),
        Outcome::Complete { .. } => None,
    }
}

/// The newest check attempt of the gate that began at `since`.
fn latest_run(runs: &[CheckRun], since: Timestamp) -> Option<&CheckRun> {
    runs.iter()
        .filter(|r| r.since.parse::<Timestamp>().ok() == Some(since))
        .max_by_key(|r| r.attempt)
}

/// When the attempt after a failed one (that failed at `at`) starts.
fn retry_at(at: Timestamp, attempt: u32) -> Timestamp {
    let delay = jiff::SignedDuration::try_from(check_retry_delay(attempt)).unwrap_or_default();
    at.checked_add(delay).unwrap_or(at)
}

/// How long after a failed check attempt the next starts: 10 s, doubling, at most 5 minutes.
fn check_retry_delay(attempt: u32) -> Duration {
    let secs = 10u64.saturating_mul(1u64 << attempt.min(5));
    Duration::from_secs(secs.min(300))
}

/// The check attempt to start this pass, if any: the first once the gate's clock is stored and
/// every other check holds; the next once the last failed and its retry delay passed (also past
/// the timeout, so a node that recovers still completes).
pub fn check_to_start(inp: &GateInput, h: &Health) -> Option<(Timestamp, u32)> {
    let gate = inp.gate?;
    gate.check.as_ref()?;
    if !h.waits() {
        return None;
    }
    let since = h.since()?;
    let stored = inp
        .node
        .annotation(&schema::health_gate_annotation(inp.skyhook))?;
    if stored.parse::<Timestamp>().ok() != Some(since)
        || unhealthy_before_check(gate, inp).is_some()
    {
        return None;
    }
    match latest_run(inp.checks, since) {
        None => Some((since, 0)),
        Some(r) => match &r.outcome {
            Outcome::Failed { at, .. } => {
                let due =
                    inp.now.duration_since(*at).unsigned_abs() >= check_retry_delay(r.attempt);
                due.then_some((since, r.attempt + 1))
            }
            _ => None,
        },
    }
}

/// The node fails its gate's pods or node condition now (pods not listed are not held against
/// it): a node of a soaking batch in this state fails the batch.
pub fn sick(inp: &GateInput) -> bool {
    let Some(gate) = inp.gate else { return false };
    if inp.pods.is_none() && gate.node_condition.is_none() {
        return false;
    }
    let gate = HealthGate {
        pods: gate.pods.clone().filter(|_| inp.pods.is_some()),
        ..gate.clone()
    };
    unhealthy_before_check(&gate, inp).is_some()
}

/// The checks before the check Job, in words; `None` when they all hold.
fn unhealthy_before_check(gate: &HealthGate, inp: &GateInput) -> Option<String> {
    if inp.node.not_ready {
        return Some("the node is not Ready".into());
    }
    if let Some(c) = &gate.node_condition {
        let have = inp.node.other_condition(&c.type_);
        if have != Some(c.status.as_str()) {
            return Some(format!(
                "node condition {} is {} (healthGate.nodeCondition wants {})",
                c.type_,
                have.unwrap_or("absent"),
                c.status
            ));
        }
    }
    if let Some(pods) = &gate.pods {
        let Some(listed) = inp.pods else {
            return Some("listing the pods on the node".into());
        };
        let selected: Vec<&PodInfo> = listed.iter().filter(|p| p.health.is_some()).collect();
        let where_ = pods
            .namespace
            .as_deref()
            .map_or(String::new(), |ns| format!(" in namespace {ns}"));
        if selected.is_empty() {
            return Some(format!(
                "no pod matching healthGate.pods.selector{where_} runs on the node"
            ));
        }
        let not_ready: Vec<String> = selected
            .iter()
            .filter(|p| p.health == Some(false))
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        if !not_ready.is_empty() {
            return Some(format!("pod(s) {} not Ready", not_ready.join(", ")));
        }
    }
    None
}

/// The clock annotation as the verdict leaves it: started when the node first waits, removed
/// once it passes or has work again.
pub fn clock(skyhook: &str, node: &NodeView, h: &Health, patch: &mut NodePatch) {
    let key = schema::health_gate_annotation(skyhook);
    let stored = node.annotation(&key);
    match h.since() {
        Some(t) if h.waits() && stored.is_none() => {
            patch.annotations.insert(key, Some(t.to_string()));
        }
        Some(_) if h.waits() => {}
        _ if stored.is_some() => {
            patch.annotations.insert(key, None);
        }
        _ => {}
    }
}

/// The Events of a verdict: a node begins to wait (Normal), fails at the timeout (Warning, on
/// the node and the Skyhook), passes after waiting (Normal).
pub fn notes(skyhook: &str, node: &NodeView, h: &Health, now: Timestamp) -> Vec<Note> {
    let n = node.name.as_str();
    let stored_clock = node.annotation(&schema::health_gate_annotation(skyhook));
    let stored_status =
        Status::from_annotation(node.annotation(&schema::status_annotation(skyhook)));
    match h {
        Health::Holding { why, .. } if stored_clock.is_none() => {
            let msg = format!("node {n} finished Skyhook {skyhook}'s stages and is {why}");
            vec![Note::node(n, schema::HEALTH_GATE_HOLDING_REASON, msg)]
        }
        Health::Failed { why, .. } if stored_status != Status::Erroring => {
            let msg =
                format!("node {n}: {why}; it stays cordoned and counts as failed in its batch");
            vec![
                Note::node(n, schema::HEALTH_GATE_FAILED_REASON, msg.clone()).warning(),
                Note::skyhook(schema::HEALTH_GATE_FAILED_REASON, msg)
                    .warning()
                    .about(n),
            ]
        }
        Health::Passed { since } if stored_clock.is_some() => {
            let waited = human(now.duration_since(*since).unsigned_abs());
            let msg = format!("node {n} passed Skyhook {skyhook}'s health gate after {waited}");
            vec![Note::node(n, schema::HEALTH_GATE_PASSED_REASON, msg)]
        }
        _ => Vec::new(),
    }
}

/// A duration as people write it (`90s`, `10m`, `1h30m`).
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}
