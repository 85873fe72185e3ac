//! The per-node package state machine (§3.2, §3.3, §3.6, §3.7, §3.10, §3.11) over Jobs: fold
//! finished Jobs (and the Go operator's pods, `handover.rs`) into the node state, then decide
//! which stage Jobs to start.

pub(super) mod frontier;
mod handover;
mod input;
mod invalidate;
mod observe;
mod outcome;
mod start;
mod versions;

use std::collections::BTreeMap;

use input::Machine;
pub use input::{Host, RetryPolicy, StepInput};
pub use outcome::{NodeAction, NodeNote, NodeOutcome};

use super::drain::{self, Readiness};
use super::interrupt::{self, Turn};
use super::spec::SpecView;
use crate::jobs::JobView;
use crate::schema::{self, Folded, NodeState, Stage, State};

/// Folds the node's Jobs into its state and decides the next Jobs.
pub fn step(input: StepInput) -> NodeOutcome {
    let StepInput {
        spec,
        mut state,
        mut applied,
        folded,
        host,
        jobs,
        may_start,
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
    let known: Vec<JobView> = jobs
        .iter()
        .filter(|j| !j.recorded && covered(&out.folded, j))
        .map(|j| JobView {
            recorded: true,
            ..(*j).clone()
        })
        .collect();
    let known = overlay(jobs, &known);
    let unwanted = if may_start {
        invalidate::invalidate(&state, host.node_version, &known, &mut out)
    } else {
        Vec::new()
    };
    let marked = overlay(&known, &unwanted);
    let jobs = marked.as_slice();
    observe::observe(spec, &mut state, &mut applied, jobs, &mut out);
    observe::prune_failed(jobs, failed_jobs_kept, &mut out);
    // A Job being deleted (Foreground) may still have its pod on the host: it counts.
    out.active = jobs.iter().any(|j| !j.finished());
    let go = handover::GoPods {
        pods: host.go_pods,
        may_start,
        retry,
        now,
    };
    let held = handover::observe(spec, &mut state, &mut applied, &go, &mut out);
    adopt_unrecorded(spec, &state, &mut applied);
    if may_start {
        versions::version_changes(spec, &mut state);
        versions::interrupt_gone(spec, &mut state);
        versions::drift(spec, &mut state, &applied);
        let m = Machine {
            spec,
            jobs,
            retry,
            now,
        };
        run_work(&m, host, &held, &mut state, &mut out);
    }
    // An entry with no Job left judges nothing (and the next attempt numbers from 0 again).
    out.folded.retain(|k, _| {
        jobs.iter()
            .any(|j| schema::is_folded_key(k, &j.package, &j.version, j.stage))
    });
    out.state = state;
    out.applied = applied;
    out
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
/// bookkeeping existed) are taken as current rather than re-run.
fn adopt_unrecorded(spec: &SpecView, state: &NodeState, applied: &mut BTreeMap<String, String>) {
    for p in spec.packages.values() {
        let key = schema::package_key(&p.name, &p.version);
        if spec.package_complete(state, p) && !applied.contains_key(&key) {
            applied.insert(key, spec.hash_of(&p.name).to_string());
        }
    }
    applied.retain(|k, _| state.contains_key(k));
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
    let mut interrupting = held.interrupt
        || m.jobs
            .iter()
            .any(|j| j.stage == Stage::Interrupt && !j.finished());
    let merged = interrupt::merged(m.spec, state);
    for (pkg, stage) in frontier::wanted(m.spec, state) {
        // The Go operator's pod of this package runs, or must go, first.
        if held.packages.contains(&pkg.name) {
            continue;
        }
        let adopting = observe::current(m.jobs, &pkg.name, &pkg.version, stage)
            .last()
            .is_some_and(|j| !j.finished());
        if stage == Stage::Interrupt && !adopting {
            // Stages started earlier in this pass count as running.
            let busy = out.active || host.other_busy || started(out) || held.any;
            match interrupt::turn(merged.as_ref(), &pkg.name, busy) {
                Turn::Run(_) if interrupting => {}
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
        if interrupting && !adopting {
            continue;
        }
        // Cordon and drain before the stages that lead to an interrupt (a config re-run whose
        // keys match a configInterrupt included: §3.9.1 step 5).
        let needs_drain = matches!(stage, Stage::Apply | Stage::Upgrade | Stage::Config)
            && m.spec.has_interrupt(&pkg);
        if needs_drain && !adopting && !ready(host, out) {
            continue;
        }
        start::start(m, state, &pkg, stage, None, out);
    }
}

/// Applies the drain decision to the outcome; true when the node is ready for the interrupt.
fn ready(host: Host, out: &mut NodeOutcome) -> bool {
    match drain::readiness(host.cordoned, host.pods) {
        Readiness::Ready => true,
        Readiness::Cordon => {
            out.cordon = true;
            false
        }
        Readiness::Listing => {
            out.blocked = Some("listing the pods on the node".into());
            false
        }
        Readiness::Protected(pods) => {
            out.held = true;
            out.blocked = Some(format!(
                "waiting for protected pod(s) {} (podNonInterruptLabels) to finish",
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
