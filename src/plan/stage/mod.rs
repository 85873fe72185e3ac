//! The per-node package state machine (§3.2, §3.3, §3.6, §3.7, §3.10, §3.11) over Jobs: fold
//! finished Jobs (and the Go operator's pods, `handover.rs`) into the node state, then decide
//! which stage Jobs to start.

pub(super) mod frontier;
mod handover;
mod input;
mod invalidate;
mod observe;
mod outcome;
mod reboot;
mod start;
mod versions;

use std::collections::BTreeMap;

use input::Machine;
pub use input::{Host, NodeInput, RetryPolicy};
pub use outcome::{NodeAction, NodeNote, NodeOutcome};

use super::drain::{self, Readiness};
use super::interrupt::{self, Turn};
use super::spec::SpecView;
use jiff::Timestamp;

use crate::jobs::JobView;
use crate::schema::{self, Folded, NodeState, Stage, State};

/// A node's finished work folded into its state, before the machine decides anything. A pass
/// folds each node once, chooses the batch from what the folds say, then advances each node
/// that may start work once.
pub struct FoldedNode<'a> {
    spec: &'a SpecView<'a>,
    host: Host<'a>,
    jobs: &'a [&'a JobView],
    /// The Jobs (by index) whose outcome the stored state holds, seen as recorded. Indices,
    /// not copies: a pass keeps every node's fold until the node is decided, and at a thousand
    /// nodes copies of their finished Jobs were megabytes.
    known: Vec<usize>,
    unwanted: invalidate::Unwanted,
    held: handover::Held,
    retry: RetryPolicy,
    now: Timestamp,
    out: NodeOutcome,
}

/// Folds the node's finished Jobs (and the Go operator's pods) into its state.
pub fn fold(input: NodeInput) -> FoldedNode {
    #[cfg(test)]
    counts::FOLDS.with(|n| n.set(n.get() + 1));
    let NodeInput {
        spec,
        mut state,
        mut applied,
        folded,
        host,
        jobs,
        retry,
        failed_jobs_kept,
        now,
    } = input;
    let mut out = NodeOutcome {
        folded,
        ..NodeOutcome::default()
    };
    observe::migrate_legacy(spec, &mut state);
    // Jobs whose outcome the stored state holds are seen as recorded (earlier versions of the
    // operator marked the Job itself).
    let known_jobs: Vec<usize> = (0..jobs.len())
        .filter(|&i| !jobs[i].recorded && covered(&out.folded, jobs[i]))
        .collect();
    let known_copies = recorded_copies(jobs, &known_jobs);
    let known = overlay(jobs, &known_copies);
    // Judged against the state as stored; what folding does next never concerns these Jobs
    // (it reads only the Jobs of each entry's own stage, and prunes only failed ones).
    let unwanted = invalidate::find(&state, host.node_version, &known);
    observe::observe(
        spec,
        &mut state,
        &mut applied,
        &known,
        (&host, now),
        &mut out,
    );
    observe::prune_failed(&known, failed_jobs_kept, &mut out);
    // A Job being deleted (Foreground) may still have its pod on the host: it counts.
    out.active = known.iter().any(|j| !j.finished());
    let go = handover::GoPods {
        pods: host.go_pods,
        retry,
        now,
    };
    let held = handover::observe(spec, &mut state, &mut applied, &go, &mut out);
    adopt_unrecorded(spec, &state, &mut applied);
    out.state = state;
    out.applied = applied;
    FoldedNode {
        spec,
        host,
        jobs,
        known: known_jobs,
        unwanted,
        held,
        retry,
        now,
        out,
    }
}

impl FoldedNode<'_> {
    /// The node as folded: its state, what it completed, whether work of ours runs on it.
    pub fn outcome(&self) -> &NodeOutcome {
        &self.out
    }

    /// Nothing new starts on the node: its running work is observed, and only what folding
    /// needs is done (Jobs marked counted or failed, failed Jobs pruned, recorded Go pods
    /// deleted).
    pub fn rest(self) -> NodeOutcome {
        let mut out = self.out;
        let deferred = &self.held.deferred;
        out.actions
            .retain(|a| !matches!(a, NodeAction::DeleteGoPod { pod } if deferred.contains(pod)));
        retain_folded(&mut out.folded, self.jobs);
        out
    }

    /// The machine's step for a node that may start work: Jobs the state no longer asks for
    /// go, version changes, a gone interrupt and drift reset what they invalidate, and the
    /// next stages start.
    pub fn advance(&self) -> NodeOutcome {
        #[cfg(test)]
        counts::ADVANCES.with(|n| n.set(n.get() + 1));
        let mut out = self.out.clone();
        let (deletions, marks) = self.unwanted.apply(&mut out.folded);
        // The deletions of unwanted Jobs come first: they are judged on the state as stored.
        out.actions.splice(0..0, deletions);
        let known_copies = recorded_copies(self.jobs, &self.known);
        let known = overlay(self.jobs, &known_copies);
        let marked = overlay(&known, &marks);
        let mut state = std::mem::take(&mut out.state);
        versions::version_changes(self.spec, &mut state);
        versions::uninstall_requests(self.spec, &mut state, &marked);
        versions::interrupt_gone(self.spec, &mut state);
        versions::drift(self.spec, &mut state, &out.applied);
        let m = Machine {
            spec: self.spec,
            jobs: &marked,
            retry: self.retry,
            now: self.now,
        };
        run_work(&m, self.host, &self.held, &mut state, &mut out);
        out.state = state;
        retain_folded(&mut out.folded, self.jobs);
        out
    }
}

/// How often this thread folded and advanced a node, for the tests that count them.
#[cfg(test)]
pub(crate) mod counts {
    use std::cell::Cell;

    thread_local! {
        pub(crate) static FOLDS: Cell<usize> = const { Cell::new(0) };
        pub(crate) static ADVANCES: Cell<usize> = const { Cell::new(0) };
    }

    /// (folds, advances) since the last call.
    pub(crate) fn take() -> (usize, usize) {
        (
            FOLDS.with(|n| n.replace(0)),
            ADVANCES.with(|n| n.replace(0)),
        )
    }
}

/// Copies of `jobs[i]` for each index, marked recorded.
fn recorded_copies(jobs: &[&JobView], indices: &[usize]) -> Vec<JobView> {
    indices
        .iter()
        .map(|&i| JobView {
            recorded: true,
            ..jobs[i].clone()
        })
        .collect()
}

/// An entry with no Job left judges nothing (and the next attempt numbers from 0 again).
fn retain_folded(folded: &mut Folded, jobs: &[&JobView]) {
    folded.retain(|k, _| {
        jobs.iter()
            .any(|j| schema::is_folded_key(k, &j.package, &j.version, j.stage))
    });
}

fn covered(folded: &Folded, j: &JobView) -> bool {
    schema::is_folded(folded, &j.package, &j.version, j.stage, j.attempt)
}

/// `jobs`, with the views in `over` in place of the Jobs of the same name.
fn overlay<'j>(jobs: &[&'j JobView], over: &'j [JobView]) -> Vec<&'j JobView> {
    jobs.iter()
        .map(|j| over.iter().find(|o| o.name == j.name).unwrap_or(j))
        .collect()
}

/// Complete packages with no record (state written by the Go operator, or before this
/// bookkeeping existed) are taken as current rather than re-run. A package completed by its own
/// interrupt rule gets the installed mark, kept while its state entry is.
fn adopt_unrecorded(spec: &SpecView, state: &NodeState, applied: &mut BTreeMap<String, String>) {
    for p in spec.packages.values() {
        let key = schema::package_key(&p.name, &p.version);
        if spec.package_complete(state, p) && !applied.contains_key(&key) {
            applied.insert(key, spec.hash_of(&p.name).to_string());
        }
        if super::spec::installed(state, applied, p) {
            applied.insert(schema::installed_key(&p.name, &p.version), "true".into());
        }
    }
    applied.retain(|k, _| {
        let base = k.strip_suffix("|installed").unwrap_or(k);
        state.contains_key(base)
    });
}

fn run_work(
    m: &Machine,
    host: Host,
    held: &handover::Held,
    state: &mut NodeState,
    out: &mut NodeOutcome,
) {
    let started = |out: &NodeOutcome| {
        out.actions
            .iter()
            .any(|a| matches!(a, NodeAction::Run { .. }))
    };
    // An interrupt runs alone: while one runs (or its Job is still being deleted), or once one
    // starts in this pass, no other stage starts on the node. The packages that merged into it
    // are still marked `skipped`, to complete with it.
    // A reboot whose agent exited 0 in the boot that is ending is still under way.
    let mut interrupting = held.interrupt
        || out.awaiting_reboot
        || m.jobs
            .iter()
            .any(|j| j.stage.is_interrupt() && !j.finished());
    let merged = interrupt::merged(m.spec, state);
    for (pkg, stage) in frontier::wanted(m.spec, state) {
        // The Go operator's pod of this package runs, or must go, first.
        if held.packages.contains(&pkg.name) {
            continue;
        }
        let adopting = observe::current(m.jobs, &pkg.name, &pkg.version, stage)
            .last()
            .is_some_and(|j| !j.finished());
        // Another Skyhook's interrupt may be rebooting the node: nothing of ours starts under
        // it (what already runs is adopted, never stopped).
        if host.other_interrupting && !adopting {
            out.blocked =
                Some("waiting for another Skyhook's interrupt on the node to finish".into());
            continue;
        }
        if stage == Stage::Interrupt && !adopting {
            // Stages started earlier in this pass count as running.
            let busy = out.active || host.other_busy || started(out) || held.any;
            match interrupt::turn(merged.as_ref(), &pkg.name, busy) {
                Turn::Run(_) if interrupting => {}
                // The drain before apply is not enough: the interrupt alone may be re-run, an
                // engineer may uncordon a node whose interrupt waits to retry, or another
                // Skyhook may lift the cordon. Every start and retry checks it again.
                Turn::Run(_) if !ready(m.now, host, out) => {}
                Turn::Run(i) => {
                    start::start(m, state, &pkg, stage, Some(&i), out);
                    interrupting = started(out);
                }
                Turn::WaitAlone => {
                    out.blocked = Some(
                        "waiting for other stages on the node to finish before the interrupt"
                            .into(),
                    );
                }
                Turn::Skip => start::mark(state, &pkg, Stage::Interrupt, State::Skipped, 0),
            }
            continue;
        }
        if stage == Stage::UninstallInterrupt && !adopting {
            let busy = out.active || host.other_busy || started(out) || held.any;
            if interrupting || busy {
                out.blocked = Some(
                    "waiting for other stages on the node to finish before the uninstall interrupt"
                        .into(),
                );
            } else if ready(m.now, host, out) {
                start::start(m, state, &pkg, stage, pkg.interrupt.as_ref(), out);
                interrupting = started(out);
            }
            continue;
        }
        if interrupting && !adopting {
            continue;
        }
        // `serial`: one stage Job of this Skyhook at a time on the node (upstream v0.20 runs one
        // package per node per pass, delta D43; the reference ignored the field in effect).
        if m.spec.serial && !adopting && (started(out) || m.jobs.iter().any(|j| !j.finished())) {
            continue;
        }
        // Cordon and drain before the stages that lead to an interrupt (a config re-run whose
        // keys match a configInterrupt included: §3.9.1 step 5).
        // A requested uninstall of a package with an interrupt is drained before too (upstream
        // v0.16): its interrupt follows it.
        let needs_drain = (matches!(stage, Stage::Apply | Stage::Upgrade | Stage::Config)
            && m.spec.has_interrupt(&pkg))
            || (stage == Stage::Uninstall && pkg.uninstall_requested() && pkg.interrupt.is_some());
        if needs_drain && !adopting && !ready(m.now, host, out) {
            continue;
        }
        start::start(m, state, &pkg, stage, None, out);
    }
}

/// A drain started at `start` is past `drainConfig.timeout`: the outcome says so (nothing more
/// is evicted, the node reads `erroring`). Also for a node not judged this pass (its slot given
/// back), so that it reads the same.
pub fn overdue(
    now: Timestamp,
    start: Timestamp,
    timeout: Option<std::time::Duration>,
    out: &mut NodeOutcome,
) -> bool {
    let Some(limit) = timeout.filter(|l| now.duration_since(start).unsigned_abs() >= *l) else {
        return false;
    };
    out.held = true;
    out.drain_timed_out = true;
    out.blocked = Some(format!(
        "drain timed out after {limit:?} (drainConfig.timeout): nothing more is evicted; the node stays cordoned until its pods are gone"
    ));
    true
}

/// Applies the drain decision to the outcome; true when the node is ready for the interrupt.
fn ready(now: Timestamp, host: Host, out: &mut NodeOutcome) -> bool {
    out.relies_on_cordon |= host.cordoned;
    let readiness = drain::readiness(host.cordoned, host.pods, host.cordon_when_pods_gone);
    // The protected pods' wait is over once anything else is next (a pass that only lists the
    // pods leaves it as it is).
    if !matches!(readiness, Readiness::Protected(_) | Readiness::Listing) {
        out.protected_since = Some(None);
    }
    let draining = matches!(
        readiness,
        Readiness::Evict(_) | Readiness::Unmovable(_) | Readiness::Terminating(_)
    );
    if draining {
        // The clock starts at the first pass that drains; `podNonInterruptLabels` waits
        // before it, as upstream's timeout does not cover them.
        let start = host.drain_started.unwrap_or(now);
        out.drain_start = Some(Some(start));
        if overdue(now, start, host.drain_timeout, out) {
            return false;
        }
    }
    match readiness {
        Readiness::Ready => {
            out.drain_start = Some(None);
            true
        }
        Readiness::Cordon => {
            out.cordon = true;
            false
        }
        Readiness::Listing => {
            // In progress, so that the next pass lists the pods of a node not yet cordoned.
            out.held = true;
            out.blocked = Some("listing the pods on the node".into());
            false
        }
        Readiness::Protected(pods) => {
            out.held = true;
            out.protected_pods.clone_from(&pods);
            let since = host.protected_since.unwrap_or(now);
            out.protected_since = Some(Some(since));
            let cordon = if host.cordoned {
                ""
            } else {
                ", not cordoned until they are gone"
            };
            let wait = schema::ProtectedWait { since, pods };
            out.blocked = Some(wait.blocked_message(cordon));
            false
        }
        Readiness::Unmovable(pods) => {
            out.held = true;
            out.blocked = Some(format!("draining: cannot drain {}", pods.join("; ")));
            false
        }
        Readiness::Terminating(pods) => {
            out.held = true;
            out.blocked = Some(format!(
                "draining: waiting for evicted pod(s) {} to terminate",
                pods.join(", ")
            ));
            false
        }
        Readiness::Evict(pods) => {
            let names: Vec<String> = pods.iter().map(|(n, p)| format!("{n}/{p}")).collect();
            out.held = true;
            out.blocked = Some(format!("draining: evicting {}", names.join(", ")));
            for e in pods {
                if !out.evict.contains(&e) {
                    out.evict.push(e);
                }
            }
            false
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod uninstall_tests;
