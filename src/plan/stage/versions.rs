//! Spec changes seen on a node: version changes and removals (§3.6), and drift of a complete
//! package whose spec hash changed since the node applied it.

use std::collections::BTreeMap;

use super::observe::set;
use super::outcome::fresh_entry;
use crate::jobs::JobView;
use crate::plan::spec::{SpecView, install_part};
use crate::schema::{self, NodeState, PackageStatus, Stage, State};

/// §3.6 per node: removals and downgrades become uninstalls, upgrades an `upgrade` stage.
pub(super) fn version_changes(spec: &SpecView, state: &mut NodeState) {
    let entries: Vec<PackageStatus> = state.iter().map(|(_, e)| e.clone()).collect();
    for e in entries {
        match spec.packages.get(e.name.as_str()) {
            // A requested uninstall ran; its interrupt went from the spec with the package, so
            // it cannot run: the package is gone.
            None if e.stage == Stage::UninstallInterrupt => {
                state.remove(&e.name, &e.version);
            }
            None if e.stage != Stage::Uninstall => {
                let mut n = e.clone();
                n.stage = Stage::Uninstall;
                n.state = Some(State::InProgress);
                n.restarts = 0;
                n.container_sha = None;
                state.upsert(n);
            }
            Some(p) if p.version != e.version => {
                match schema::semver_compare(&p.version, &e.version) {
                    std::cmp::Ordering::Greater => {
                        // Once the new version has an entry past the uninstall bookkeeping,
                        // its upgrade has run or runs: starting it over would repeat it.
                        let already = state
                            .get(&p.name, &p.version)
                            .is_some_and(|x| x.stage != Stage::Uninstall);
                        if !already && e.stage != Stage::Uninstall {
                            state.upsert(fresh_entry(p, Stage::Upgrade, Some(State::InProgress)));
                        }
                    }
                    _ if e.stage != Stage::Uninstall => {
                        let mut old = e.clone();
                        old.stage = Stage::Uninstall;
                        old.state = Some(State::InProgress);
                        old.restarts = 0;
                        state.upsert(old);
                        if state.get(&p.name, &p.version).is_none() {
                            state.upsert(fresh_entry(p, Stage::Uninstall, Some(State::Skipped)));
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

/// Upstream v0.16's `uninstall` block (delta D12): with `enabled` and `apply`, the package's entry
/// goes to `uninstall` (a stage already running finishes first); an entry of this version that
/// was never installed (a downgrade's placeholder) is dropped. `apply` back to false cancels an
/// uninstall that has not started (or failed): the package is installed again from `apply`.
/// `uninstall-interrupt` is never cancelled. Packages without the block keep v0.13's meaning.
pub(super) fn uninstall_requests(spec: &SpecView, state: &mut NodeState, jobs: &[&JobView]) {
    for p in spec.packages.values() {
        let Some(e) = state.get(&p.name, &p.version).cloned() else {
            continue;
        };
        let running = jobs
            .iter()
            .any(|j| j.package == p.name && j.version == p.version && !j.finished());
        let started = matches!(e.state, Some(State::InProgress) | Some(State::Erroring));
        if p.uninstall_requested() {
            match e.stage {
                Stage::Uninstall if !started => {
                    state.remove(&p.name, &p.version);
                }
                Stage::Uninstall | Stage::UninstallInterrupt => {}
                _ if running => {}
                _ => set(state, &e, Stage::Uninstall, State::InProgress, 0),
            }
        } else if p.uninstall.is_some() && e.stage == Stage::Uninstall && started && !running {
            set(state, &e, Stage::Apply, State::InProgress, 0);
        }
    }
}

/// A complete package whose spec changed since the node completed it runs again: from `apply`
/// when the image, env or resources changed, only `config` when only the configMap did.
pub(super) fn drift(spec: &SpecView, state: &mut NodeState, applied: &BTreeMap<String, String>) {
    for p in spec.packages.values() {
        let key = schema::package_key(&p.name, &p.version);
        let Some(e) = state.get(&p.name, &p.version).cloned() else {
            continue;
        };
        let settled = e.state == Some(State::Complete)
            && matches!(
                e.stage,
                Stage::Config | Stage::Interrupt | Stage::PostInterrupt
            );
        let (Some(done), true) = (applied.get(&key), settled) else {
            continue;
        };
        let want = spec.hash_of(&p.name);
        if *done == want {
            continue;
        }
        let install_changed = install_part(done) != install_part(want);
        let stage = if install_changed {
            Stage::Apply
        } else {
            Stage::Config
        };
        set(state, &e, stage, State::InProgress, 0);
    }
}

/// A package at the interrupt or post-interrupt stage that has no interrupt now (removed from
/// the spec, or a config rollout whose keys match none of its configInterrupts) finished at
/// config: without this it would wait for an interrupt that never comes.
pub(super) fn interrupt_gone(spec: &SpecView, state: &mut NodeState) {
    for p in spec.packages.values() {
        let Some(e) = state.get(&p.name, &p.version).cloned() else {
            continue;
        };
        if matches!(e.stage, Stage::Interrupt | Stage::PostInterrupt) && !spec.has_interrupt(p) {
            set(state, &e, Stage::Config, State::Complete, e.restarts);
        }
    }
}
