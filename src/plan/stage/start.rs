//! Starting a stage (§3.10): adopt a running Job, replace a stale one, wait out the backoff
//! after a failure, or create the next attempt.

use jiff::Timestamp;

use super::input::Machine;
use super::observe::{current, failures};
use super::outcome::fresh_entry;
use super::outcome::{NodeAction, NodeNote, NodeOutcome};
use crate::crd::Package;
use crate::jobs::{JobView, Outcome};
use crate::schema::{self, Interrupt, NodeState, PackageStatus, Stage, State};

#[allow(clippy::too_many_arguments)]
pub(super) fn start(
    m: &Machine,
    state: &mut NodeState,
    p: &Package,
    stage: Stage,
    interrupt: Option<&Interrupt>,
    out: &mut NodeOutcome,
) {
    let hash = if stage.is_uninstall() {
        String::new()
    } else {
        m.spec.hash_of(&p.name).to_string()
    };
    let run = current(m.jobs, &p.name, &p.version, stage);
    // Failed attempts of this run, as persisted on the node (never fewer than the failed Jobs
    // still around, for state written before the count was kept). A stage erroring without a
    // Job of ours failed in the Go operator's pod: the run goes on, and so does its count.
    let entry = state.get(&p.name, &p.version);
    let prior = entry.map_or(0, |e| e.restarts);
    let failed_before = entry.is_some_and(|e| e.stage == stage && e.state == Some(State::Erroring));
    let restarts = if run.is_empty() && !failed_before {
        0
    } else {
        prior.max(failures(&run) as i32)
    };
    if let Some(latest) = run.last() {
        match judge(m, stage, latest, &hash, restarts.max(0) as u32) {
            Latest::Replace => {
                if !latest.deleting {
                    out.actions.push(NodeAction::Delete {
                        job: latest.name.to_string(),
                    });
                }
                mark(state, p, stage, State::InProgress, restarts);
                return;
            }
            Latest::Adopt => {
                mark(state, p, stage, State::InProgress, restarts);
                return;
            }
            Latest::Hold => return,
            Latest::GaveUp(limit) => {
                out.blocked = Some(gave_up(p, stage, restarts, limit));
                return;
            }
            Latest::Wait(due) => {
                out.retry_at = Some(out.retry_at.map_or(due, |r: Timestamp| r.min(due)));
                return;
            }
            Latest::Retry => {}
        }
    }
    let attempt = next_attempt(m, p, stage, out);
    if attempt > schema::MAX_JOB_ATTEMPT {
        return;
    }
    mark(state, p, stage, State::InProgress, restarts);
    out.notes.push(NodeNote::Started {
        package: p.name.clone(),
        version: p.version.clone(),
        stage,
    });
    out.actions.push(NodeAction::Run {
        package: Box::new(p.clone()),
        stage,
        attempt,
        spec_hash: hash,
        interrupt: interrupt.cloned(),
    });
}

/// The number of the next attempt: after every Job of the stage still around and every one the
/// node state holds.
fn next_attempt(m: &Machine, p: &Package, stage: Stage, out: &NodeOutcome) -> u32 {
    m.jobs
        .iter()
        .filter(|j| j.package == p.name && j.version == p.version && j.stage == stage)
        .map(|j| j.attempt + 1)
        .chain(
            out.folded
                .get(&schema::folded_key(&p.name, &p.version, stage))
                .map(|a| a + 1),
        )
        .max()
        .unwrap_or(0)
}

/// Why a stage past JOB_BACKOFF_LIMIT is not retried, and what starts it again.
fn gave_up(p: &Package, stage: Stage, restarts: i32, limit: u32) -> String {
    format!(
        "{} {stage} failed {} times, more than JOB_BACKOFF_LIMIT={limit} allows: it is not retried until `kubectl skyhook package rerun {}` or a spec change",
        p.name,
        restarts.max(0),
        p.name
    )
}

/// What to do about the newest attempt of a stage (`failed`: the run's failed attempts).
enum Latest {
    /// Built from an older spec while running: delete it, then start anew (the reference
    /// invalidates such pods, §4.7).
    Replace,
    /// Running (or just created): adopt it, never start a twin.
    Adopt,
    /// Complete, or being failed this pass because its pod cannot start.
    Hold,
    /// Failed more often than JOB_BACKOFF_LIMIT allows (upstream v0.18, delta D26): parked
    /// `erroring` until a rerun, a reset or a spec change.
    GaveUp(u32),
    /// Failed: the next attempt is due then.
    Wait(Timestamp),
    /// Failed and due (or built from an older spec): start the next attempt.
    Retry,
}

fn judge(m: &Machine, stage: Stage, latest: &JobView, hash: &str, failed: u32) -> Latest {
    let stale = !stage.is_uninstall() && latest.spec_hash != hash;
    match &latest.outcome {
        Outcome::Running if stale => Latest::Replace,
        Outcome::Running if latest.stuck.is_some() => Latest::Hold,
        Outcome::Running => Latest::Adopt,
        Outcome::Complete { .. } => Latest::Hold,
        Outcome::Failed { .. } if !stale && m.retry.limit.is_some_and(|l| failed > l) => {
            Latest::GaveUp(m.retry.limit.unwrap_or_default())
        }
        Outcome::Failed { at, .. } => {
            let due = *at + m.retry.delay(failed);
            if !stale && m.now < due {
                Latest::Wait(due)
            } else {
                Latest::Retry
            }
        }
    }
}

pub(super) fn mark(state: &mut NodeState, p: &Package, stage: Stage, s: State, restarts: i32) {
    let mut e = state
        .get(&p.name, &p.version)
        .cloned()
        // An uninstall keeps no digest of the package; the others take it below.
        .unwrap_or_else(|| PackageStatus {
            container_sha: None,
            ..fresh_entry(p, stage, None)
        });
    e.stage = stage;
    e.state = Some(s);
    e.restarts = restarts;
    if stage != Stage::Uninstall {
        e.image = p.image.as_str().into();
        e.container_sha = p.container_sha.clone();
    }
    state.upsert(e);
}
