//! Jobs the node state no longer asks for (§4.7): the state was reset under them (a
//! `node reset`, the reference's CLI) or moved to another stage (a `package rerun --stage`).
//! Their work is no longer wanted: running ones are deleted, and the stage starts again only
//! once they are gone; finished ones whose outcome was never folded (the reset landed between
//! the Job's end and the pass that would have folded it, or while the operator was down) are
//! set aside, recorded without touching the state, so that the stage runs again as a new
//! attempt instead of waiting for ever on an outcome nothing will fold.

use super::outcome::{NodeAction, NodeOutcome};
use crate::jobs::JobView;
use crate::schema::{self, NodeState, Stage};

/// Deletes the running Jobs the stored state no longer asks for and sets aside (records as
/// folded) the finished ones nobody folded. Returns them as the rest of the step must see
/// them: being deleted (nothing adopts them; their stage starts again once they are gone), or
/// folded (their stage starts anew).
pub(super) fn invalidate(
    state: &NodeState,
    node_version: Option<u64>,
    jobs: &[&JobView],
    out: &mut NodeOutcome,
) -> Vec<JobView> {
    let mut seen = Vec::new();
    for j in orphaned(state, node_version, jobs) {
        out.actions.push(NodeAction::Delete {
            job: j.name.to_string(),
        });
        seen.push(JobView {
            deleting: true,
            ..j.clone()
        });
    }
    for j in set_aside(state, node_version, jobs) {
        schema::fold(&mut out.folded, &j.package, &j.version, j.stage, j.attempt);
        seen.push(JobView {
            recorded: true,
            ..j.clone()
        });
    }
    seen
}

/// The running Jobs to delete. A Job is judged only against a node copy at least as new as the
/// one its stage was stored in ([`crate::schema::NODE_VERSION_ANNOTATION`]): an older copy is a
/// cache that has not yet seen the Job's own node write, not a reset. Uninstalls always run to
/// the end, as in the reference.
fn orphaned<'j>(
    state: &NodeState,
    node_version: Option<u64>,
    jobs: &[&'j JobView],
) -> Vec<&'j JobView> {
    unwanted(state, node_version, jobs)
        .filter(|j| !j.finished())
        .collect()
}

/// The finished Jobs to set aside: not yet recorded, of a stage the state no longer asks for,
/// judged as [`orphaned`] judges running ones.
fn set_aside<'j>(
    state: &NodeState,
    node_version: Option<u64>,
    jobs: &[&'j JobView],
) -> Vec<&'j JobView> {
    unwanted(state, node_version, jobs)
        .filter(|j| j.finished() && !j.recorded)
        .collect()
}

fn unwanted<'s, 'j>(
    state: &'s NodeState,
    node_version: Option<u64>,
    jobs: &'s [&'j JobView],
) -> impl Iterator<Item = &'j JobView> + 's {
    jobs.iter().copied().filter(move |j| {
        node_version.is_some_and(|seen| {
            !j.deleting
                && j.stage != Stage::Uninstall
                && j.node_version.is_some_and(|v| v <= seen)
                && state
                    .get(&j.package, &j.version)
                    .is_none_or(|e| e.stage != j.stage)
        })
    })
}
