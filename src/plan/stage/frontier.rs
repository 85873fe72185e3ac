//! What to run next on a node: uninstalls first, then the `dependsOn` frontier (§3.7) at each
//! package's next stage (§3.3).

use std::collections::{BTreeMap, BTreeSet};

use crate::crd::Package;
use crate::plan::spec::SpecView;
use crate::schema::{NodeState, PackageStatus, Stage, State};

/// The (package, stage) pairs to run now: uninstalls first, then the dependency frontier
/// (packages whose dependencies are all complete and that are not complete themselves).
pub(crate) fn wanted(spec: &SpecView, state: &NodeState) -> Vec<(Package, Stage)> {
    let mut out = Vec::new();
    for (_, e) in state.iter() {
        if !matches!(e.state, Some(State::InProgress) | Some(State::Erroring)) {
            continue;
        }
        match e.stage {
            Stage::Uninstall => out.push((uninstall_package(spec, e), Stage::Uninstall)),
            Stage::UninstallInterrupt => {
                if let Some(p) = requested(spec, e) {
                    out.push((p.clone(), Stage::UninstallInterrupt));
                }
            }
            _ => {}
        }
    }
    let complete = complete(spec, state);
    for p in spec.packages.values() {
        // Being uninstalled on request: nothing installs it (its dependents wait).
        if complete.contains(p.name.as_str()) || p.uninstall_requested() {
            continue;
        }
        let deps_done = p.depends_on.keys().all(|d| complete.contains(d.as_str()));
        // An uninstall of another version of this package goes first (downgrades).
        let uninstalling = state.iter().any(|(_, e)| {
            e.name == p.name && e.version != p.version && e.stage == Stage::Uninstall
        });
        if !deps_done || uninstalling {
            continue;
        }
        // An uninstall of this very version is already listed above (state left by a writer
        // that uninstalls in place); listing it twice would start two Jobs for one stage.
        let listed = |stage: Stage| {
            out.iter().any(|(q, s): &(Package, Stage)| {
                q.name == p.name && q.version == p.version && *s == stage
            })
        };
        if let Some(stage) = next_stage(spec, state, p).filter(|s| !listed(*s)) {
            out.push((p.clone(), stage));
        }
    }
    out
}

/// Spec packages whose dependencies are complete and that are not complete themselves.
pub(crate) fn frontier<'a>(spec: &'a SpecView, state: &NodeState) -> Vec<&'a Package> {
    let complete = complete(spec, state);
    spec.packages
        .values()
        .filter(|p| !complete.contains(p.name.as_str()))
        .filter(|p| p.depends_on.keys().all(|d| complete.contains(d.as_str())))
        .collect()
}

/// The names of the spec packages complete on this node.
fn complete<'a>(spec: &'a SpecView, state: &NodeState) -> BTreeSet<&'a str> {
    spec.packages
        .values()
        .filter(|p| spec.package_complete(state, p))
        .map(|p| p.name.as_str())
        .collect()
}

/// The stage package `p` should be in next on this node, if any.
pub(crate) fn next_stage(spec: &SpecView, state: &NodeState, p: &Package) -> Option<Stage> {
    let Some(e) = state.get(&p.name, &p.version) else {
        return Some(Stage::Apply);
    };
    match e.state {
        Some(State::Complete) => e.stage.next(spec.has_interrupt(p)),
        Some(State::Skipped) => None,
        _ => Some(e.stage),
    }
}

/// The spec package of this entry's version when it has the `uninstall` block (upstream v0.16).
fn requested<'a>(spec: &'a SpecView, e: &PackageStatus) -> Option<&'a Package> {
    spec.packages
        .get(e.name.as_str())
        .filter(|p| p.version == e.version && p.uninstall.as_ref().is_some_and(|u| u.enabled))
}

/// Uninstalls run with the old version's identity only (§3.6): no env, configMap or resources;
/// an uninstall the `uninstall` block asks for runs with the whole package, as upstream's does.
pub(crate) fn uninstall_package(spec: &SpecView, e: &PackageStatus) -> Package {
    if let Some(p) = requested(spec, e) {
        return p.clone();
    }
    let mut p = spec
        .packages
        .get(e.name.as_str())
        .cloned()
        .unwrap_or_default();
    p.name = e.name.to_string();
    p.version = e.version.to_string();
    p.image = e.image.to_string();
    p.container_sha = None;
    p.env = Vec::new();
    p.config_map = BTreeMap::new();
    p.resources = None;
    p.interrupt = None;
    p.config_interrupts = BTreeMap::new();
    p.depends_on = BTreeMap::new();
    p
}
