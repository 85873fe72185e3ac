//! Folding finished Jobs into the node state (§3.11): success moves a package on, a failure
//! marks it erroring with its reason, a pod that can never start fails its Job now.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::input::Host;
use super::outcome::fresh_entry;
use super::outcome::{NodeAction, NodeNote, NodeOutcome};
use super::reboot::{self, Reboot};
use crate::jobs::{JobView, Outcome};
use crate::plan::spec::{SpecView, config_part, install_part};
use crate::schema::{self, NodeState, PackageStatus, Stage, State};

/// The failure reason of a reboot interrupt whose node kept its boot id.
pub const REBOOT_NOT_SEEN: &str = "RebootNotSeen";

/// §7.1: pre-v0.5 entries are keyed by bare name and lack an image.
pub(super) fn migrate_legacy(spec: &SpecView, state: &mut NodeState) {
    let legacy: Vec<(String, PackageStatus)> = state
        .legacy_entries()
        .map(|(k, e)| (k.to_string(), e.clone()))
        .collect();
    for (key, mut entry) in legacy {
        state.remove_key(&key);
        if let Some(p) = spec
            .packages
            .get(entry.name.as_str())
            .filter(|p| p.version == entry.version)
        {
            entry.image = p.image.as_str().into();
            state.upsert(entry);
        }
    }
}

/// Jobs of `stage` for (name, version) not yet folded into the state, oldest attempt first.
pub(super) fn current<'j>(
    jobs: &[&'j JobView],
    name: &str,
    version: &str,
    stage: Stage,
) -> Vec<&'j JobView> {
    let mut v: Vec<&JobView> = jobs
        .iter()
        .copied()
        .filter(|j| j.package == name && j.version == version && j.stage == stage && !j.recorded)
        .collect();
    v.sort_by_key(|j| j.attempt);
    v
}

pub(super) fn failures(jobs: &[&JobView]) -> usize {
    jobs.iter()
        .filter(|j| matches!(j.outcome, Outcome::Failed { .. }))
        .count()
}

pub(super) fn observe(
    spec: &SpecView,
    state: &mut NodeState,
    applied: &mut BTreeMap<String, String>,
    jobs: &[&JobView],
    (host, now): (&Host, Timestamp),
    out: &mut NodeOutcome,
) {
    let entries: Vec<PackageStatus> = state.iter().map(|(_, e)| e.clone()).collect();
    for e in entries {
        // An earlier entry's outcome may have removed or moved this one (a finished upgrade drops
        // the other versions): folding its stale copy would put it back.
        if state.get(&e.name, &e.version) != Some(&e) {
            continue;
        }
        if !matches!(e.state, Some(State::InProgress) | Some(State::Erroring)) {
            continue;
        }
        let run = current(jobs, &e.name, &e.version, e.stage);
        let Some(latest) = run.last() else { continue };
        if let Some(done) = run
            .iter()
            .find(|j| matches!(j.outcome, Outcome::Complete { .. }))
        {
            finished(spec, state, applied, (&e, &run, done), (host, now), out);
            continue;
        }
        // `restarts` is the persisted count of failed attempts of this run: it goes up by one
        // when an attempt's failure is first folded, so it keeps growing after old failed Jobs
        // are pruned. The Job is then marked counted (after the node state is written), so a
        // pass that sees it again, or a retry whose Job was never created, counts nothing.
        let counted = e.restarts.saturating_add(1);
        match &latest.outcome {
            Outcome::Running => match latest.stuck.as_deref() {
                Some((container, reason, message)) => {
                    out.actions.push(NodeAction::FailNow {
                        job: latest.name.to_string(),
                        reason: reason.clone(),
                        message: format!("container {container}: {message}"),
                    });
                    if e.state != Some(State::Erroring) {
                        set(state, &e, e.stage, State::Erroring, counted);
                        let message = format!("container {container}: {message}");
                        out.notes.push(failed_note(&e, reason, message, counted));
                    }
                }
                None if e.state != Some(State::InProgress) => {
                    set(state, &e, e.stage, State::InProgress, e.restarts);
                }
                None => {}
            },
            Outcome::Failed {
                reason, message, ..
            } => {
                if latest.counted {
                    if e.state != Some(State::Erroring) {
                        set(state, &e, e.stage, State::Erroring, e.restarts);
                    }
                } else {
                    if e.state != Some(State::Erroring) {
                        set(state, &e, e.stage, State::Erroring, counted);
                        out.notes
                            .push(failed_note(&e, reason, message.clone(), counted));
                    }
                    out.actions.push(NodeAction::Counted {
                        job: latest.name.to_string(),
                    });
                }
            }
            Outcome::Complete { .. } => {}
        }
    }
}

/// A successful Job `done` of `e`'s stage: folded as complete, unless it is a reboot whose new
/// boot the node has not reported yet ([`reboot::judge`]).
fn finished(
    spec: &SpecView,
    state: &mut NodeState,
    applied: &mut BTreeMap<String, String>,
    (e, run, done): (&PackageStatus, &[&JobView], &JobView),
    (host, now): (&Host, Timestamp),
    out: &mut NodeOutcome,
) {
    match reboot::judge(done, host, now) {
        Reboot::Seen => completed(spec, state, applied, e, run, done, out),
        Reboot::Awaited { why, until } => {
            if e.state != Some(State::InProgress) {
                set(state, e, e.stage, State::InProgress, e.restarts);
            }
            out.awaiting_reboot = true;
            out.blocked = Some(why);
            out.retry_at = Some(out.retry_at.map_or(until, |r| r.min(until)));
        }
        // Folded as a failure: the next pass runs the interrupt again (agent v7 finds its
        // pending reboot in the same boot and reboots once more).
        Reboot::NotSeen(why) => {
            let counted = e.restarts.saturating_add(1);
            set(state, e, e.stage, State::Erroring, counted);
            out.notes
                .push(failed_note(e, REBOOT_NOT_SEEN, why, counted));
            for j in run {
                schema::fold(&mut out.folded, &j.package, &j.version, j.stage, j.attempt);
            }
        }
    }
}

fn failed_note(e: &PackageStatus, reason: &str, message: String, restarts: i32) -> NodeNote {
    NodeNote::Failed {
        package: e.name.to_string(),
        version: e.version.to_string(),
        stage: e.stage,
        reason: reason.to_string(),
        message,
        restarts,
    }
}

/// A stage of `e` succeeded in Job `done`: move the package on, record what the node now has,
/// and mark every attempt of the stage folded.
fn completed(
    spec: &SpecView,
    state: &mut NodeState,
    applied: &mut BTreeMap<String, String>,
    e: &PackageStatus,
    run: &[&JobView],
    done: &JobView,
    out: &mut NodeOutcome,
) {
    succeed(spec, state, e, e.restarts);
    let key = schema::package_key(&e.name, &e.version);
    record(applied, key, e.stage, &done.spec_hash);
    out.notes.push(NodeNote::Completed {
        package: e.name.to_string(),
        version: e.version.to_string(),
        stage: e.stage,
    });
    for j in run {
        schema::fold(&mut out.folded, &j.package, &j.version, j.stage, j.attempt);
    }
}

/// What a node has applied, updated as each stage succeeds: `apply`/`upgrade` install the whole
/// spec; later stages only deliver the config (so an install change after `apply` still shows).
pub(super) fn record(
    applied: &mut BTreeMap<String, String>,
    key: String,
    stage: Stage,
    job_hash: &str,
) {
    match stage {
        Stage::Uninstall | Stage::UninstallInterrupt => {
            applied.remove(&key);
        }
        Stage::Apply | Stage::Upgrade => {
            applied.insert(key, job_hash.to_string());
        }
        _ => {
            let install = applied
                .get(&key)
                .map_or_else(|| install_part(job_hash), |h| install_part(h))
                .to_string();
            applied.insert(key, format!("{install}.{}", config_part(job_hash)));
        }
    }
}

pub(super) fn set(state: &mut NodeState, e: &PackageStatus, stage: Stage, s: State, restarts: i32) {
    let mut n = e.clone();
    n.stage = stage;
    n.state = Some(s);
    n.restarts = restarts;
    state.upsert(n);
}

/// §3.11 step 3: what a successful stage means for the node state.
pub(super) fn succeed(spec: &SpecView, state: &mut NodeState, e: &PackageStatus, restarts: i32) {
    match e.stage {
        Stage::Interrupt => {
            let skipped: Vec<PackageStatus> = state
                .iter()
                .map(|(_, x)| x.clone())
                .filter(|x| x.stage == Stage::Interrupt && x.state == Some(State::Skipped))
                .filter(|x| {
                    spec.packages
                        .get(x.name.as_str())
                        .is_some_and(|p| spec.has_interrupt(p))
                })
                .collect();
            for x in skipped {
                set(state, &x, Stage::Interrupt, State::Complete, x.restarts);
            }
            set(state, e, Stage::Interrupt, State::Complete, restarts);
        }
        Stage::Upgrade => {
            let others: Vec<String> = state
                .iter()
                .filter(|(_, x)| x.name == e.name && x.version != e.version)
                .map(|(_, x)| x.version.to_string())
                .collect();
            for v in others {
                state.remove(&e.name, &v);
            }
            set(state, e, Stage::Upgrade, State::Complete, restarts);
        }
        Stage::UninstallInterrupt => {
            state.remove(&e.name, &e.version);
        }
        Stage::Uninstall => {
            let requested = spec
                .packages
                .get(e.name.as_str())
                .filter(|p| p.version == e.version && p.uninstall_requested());
            if requested.is_some_and(|p| p.interrupt.is_some()) {
                set(state, e, Stage::UninstallInterrupt, State::InProgress, 0);
                return;
            }
            if let Some(p) = spec
                .packages
                .get(e.name.as_str())
                .filter(|p| p.version != e.version)
            {
                let mut next = state
                    .get(&p.name, &p.version)
                    .cloned()
                    .unwrap_or_else(|| fresh_entry(p, Stage::Uninstall, None));
                next.stage = Stage::Uninstall;
                next.state = Some(State::Complete);
                state.upsert(next);
            }
            state.remove(&e.name, &e.version);
        }
        stage => set(state, e, stage, State::Complete, restarts),
    }
}

/// Keep only the newest `kept` failed, recorded-or-not Jobs per (package, version, stage).
pub(super) fn prune_failed(jobs: &[&JobView], kept: usize, out: &mut NodeOutcome) {
    let mut groups: BTreeMap<(&str, &str, &str), Vec<&JobView>> = BTreeMap::new();
    for j in jobs
        .iter()
        .filter(|j| matches!(j.outcome, Outcome::Failed { .. }) && !j.deleting)
    {
        groups
            .entry((j.package.as_str(), j.version.as_str(), j.stage.as_str()))
            .or_default()
            .push(j);
    }
    for (_, mut g) in groups {
        g.sort_by_key(|j| std::cmp::Reverse(j.attempt));
        for j in g.into_iter().skip(kept) {
            out.actions.push(NodeAction::Delete {
                job: j.name.to_string(),
            });
        }
    }
}
