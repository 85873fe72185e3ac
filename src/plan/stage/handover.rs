//! Hand-over from the Go operator: the package and interrupt pods it left on a node are its work
//! in flight. Each is waited for and its outcome folded into the node state as its
//! `PodReconcile` would (§3.11); one that no longer matches what the node needs is deleted, as
//! its own validation would (§4.7). While such a pod is on the node, no Job runs its package
//! there, and an interrupt waits for it: two runs of one stage must never overlap on a host.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use super::input::RetryPolicy;
use super::observe::{set, succeed};
use super::outcome::{NodeAction, NodeNote, NodeOutcome};
use crate::crd::normalize_image;
use crate::jobs::{GoOutcome, GoPod};
use crate::plan::spec::SpecView;
use crate::schema::{self, NodeState, Stage, State};

/// What the Go operator's pods on a node hold back.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Packages (by name, any version) with a Go pod on the node: none of their stages starts.
    pub packages: BTreeSet<String>,
    /// A Go interrupt pod is there: nothing else starts, as with our own interrupt.
    pub interrupt: bool,
    /// Some Go pod is there: an interrupt waits for it.
    pub any: bool,
    /// Pods to delete only if the node may start work (failures and stale pods make way for
    /// our Jobs then); their deletions are among the outcome's actions.
    pub deferred: BTreeSet<String>,
}

/// The pass's view of one node's Go pods.
pub(super) struct GoPods<'a> {
    pub pods: &'a [GoPod],
    pub retry: RetryPolicy,
    pub now: Timestamp,
}

/// Folds what the Go pods say into `state`, and decides which of them to delete (those in
/// [`Held::deferred`] only if the node may start work).
pub(super) fn observe(
    spec: &SpecView,
    state: &mut NodeState,
    applied: &mut BTreeMap<String, String>,
    go: &GoPods,
    out: &mut NodeOutcome,
) -> Held {
    let mut held = Held::default();
    for p in go.pods {
        held.packages.insert(p.package.clone());
        held.interrupt |= p.stage == Stage::Interrupt;
        held.any = true;
        // Until it is gone its containers may still run on the host.
        out.active |= p.deleting || !p.failed();
        if p.deleting {
            continue;
        }
        if stale(spec, state, p).is_some() {
            held.deferred.insert(p.name.clone());
            delete(p, out);
            continue;
        }
        match &p.outcome {
            GoOutcome::Running => {}
            GoOutcome::Succeeded { restarts } => {
                completed(spec, state, applied, p, *restarts, out);
                // The reference deletes it once the node state says so (exec writes nodes first).
                delete(p, out);
            }
            GoOutcome::Failed { at, .. } => {
                let restarts = failed(state, p, out);
                // The kubelet would retry it in place for ever; instead it makes way for our
                // next attempt once the backoff of a failed Job would have passed.
                let due = *at + go.retry.delay(restarts.max(0) as u32);
                if go.now < due {
                    out.retry_at = Some(out.retry_at.map_or(due, |r| r.min(due)));
                } else {
                    held.deferred.insert(p.name.clone());
                    delete(p, out);
                }
            }
        }
    }
    held
}

/// Why a Go pod does not run what the node needs (`None`: it does). The reference invalidates
/// such pods itself (§4.7): package or version gone from the spec (uninstalls excepted), another
/// image, or a node state that is not at its stage (or has already recorded it).
pub(super) fn stale(spec: &SpecView, state: &NodeState, p: &GoPod) -> Option<String> {
    if p.invalid {
        return Some("invalidated by the Go operator".into());
    }
    if p.stage != Stage::Uninstall {
        let Some(want) = spec
            .packages
            .get(&p.package)
            .filter(|w| w.version == p.version)
        else {
            return Some(format!("{}:{} is not in the spec", p.package, p.version));
        };
        let sha = want.container_sha.as_deref().filter(|s| !s.is_empty());
        // Hand-made pods carry no image (§2.9): nothing to compare.
        let other_image = !p.image.is_empty()
            && (normalize_image(&p.image).0 != want.image || p.container_sha.as_deref() != sha);
        if other_image {
            return Some(format!("built from image {}", p.image));
        }
    }
    match state.get(&p.package, &p.version) {
        None => Some("the node state has no entry for it".into()),
        Some(e) if e.stage != p.stage => {
            Some(format!("the node state is at stage {}", e.stage.as_str()))
        }
        Some(e) if !matches!(e.state, Some(State::InProgress) | Some(State::Erroring)) => {
            Some("its stage is already recorded".into())
        }
        Some(_) => None,
    }
}

fn delete(p: &GoPod, out: &mut NodeOutcome) {
    out.actions.push(NodeAction::DeleteGoPod {
        pod: p.name.clone(),
    });
}

/// §3.11 step 3, with the restart count the reference records.
fn completed(
    spec: &SpecView,
    state: &mut NodeState,
    applied: &mut BTreeMap<String, String>,
    p: &GoPod,
    restarts: i32,
    out: &mut NodeOutcome,
) {
    let Some(e) = state.get(&p.package, &p.version).cloned() else {
        return;
    };
    succeed(spec, state, &e, restarts);
    // What a Go pod installed is not in our applied record (its spec hash is unknown); complete
    // packages without a record are taken as current, so only an uninstall must be noted.
    if p.stage == Stage::Uninstall {
        applied.remove(&schema::package_key(&p.package, &p.version));
    }
    out.notes.push(NodeNote::Completed {
        package: p.package.clone(),
        version: p.version.clone(),
        stage: p.stage,
    });
}

/// §3.11 step 4: `erroring`, counted once (a pass that sees the same failure again adds
/// nothing), with at least the kubelet's restart count, as the reference records it.
fn failed(state: &mut NodeState, p: &GoPod, out: &mut NodeOutcome) -> i32 {
    let GoOutcome::Failed {
        restarts: kubelet,
        reason,
        message,
        ..
    } = &p.outcome
    else {
        return 0;
    };
    let Some(e) = state.get(&p.package, &p.version).cloned() else {
        return 0;
    };
    if e.state == Some(State::Erroring) {
        let restarts = e.restarts.max(*kubelet);
        if restarts != e.restarts {
            set(state, &e, e.stage, State::Erroring, restarts);
        }
        return restarts;
    }
    let restarts = e.restarts.saturating_add(1).max(*kubelet);
    set(state, &e, e.stage, State::Erroring, restarts);
    out.notes.push(NodeNote::Failed {
        package: p.package.clone(),
        version: p.version.clone(),
        stage: p.stage,
        reason: reason.clone(),
        message: message.clone(),
        restarts,
    });
    restarts
}

#[cfg(test)]
#[path = "handover_tests.rs"]
mod tests;
