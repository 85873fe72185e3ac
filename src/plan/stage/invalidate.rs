//! Jobs the node state no longer asks for (§4.7): the state was reset under them (a
//! `node reset`, the reference's CLI) or moved to another stage (a `package rerun --stage`).
//! Their work is no longer wanted: running ones are deleted, and the stage starts again only
//! once they are gone; finished ones whose outcome was never folded (the reset landed between
//! the Job's end and the pass that would have folded it, or while the operator was down) are
//! set aside, recorded without touching the state, so that the stage runs again as a new
//! attempt instead of waiting for ever on an outcome nothing will fold.

use super::outcome::NodeAction;
use crate::jobs::JobView;
use crate::schema::{self, Folded, NodeState};

/// The Jobs the stored state no longer asks for, judged against the state as stored (before
/// anything is folded into it), as the rest of the step must see them once the node may work:
/// running ones being deleted (nothing adopts them; their stage starts again once they are
/// gone), finished ones nobody folded recorded (their stage starts anew).
#[derive(Debug, Default)]
pub(super) struct Unwanted {
    orphaned: Vec<JobView>,
    set_aside: Vec<JobView>,
}

pub(super) fn find(state: &NodeState, node_version: Option<u64>, jobs: &[&JobView]) -> Unwanted {
    let (mut orphaned, mut set_aside) = (Vec::new(), Vec::new());
    for j in unwanted(state, node_version, jobs) {
        let mut seen = j.clone();
        if !j.finished() {
            seen.deleting = true;
            orphaned.push(seen);
        } else if !j.recorded {
            seen.recorded = true;
            set_aside.push(seen);
        }
    }
    Unwanted {
        orphaned,
        set_aside,
    }
}

impl Unwanted {
    /// Sets aside (records in `folded`) the finished Jobs; returns the deletions of the
    /// running ones, and all of them as the rest of the step must see them.
    pub(super) fn apply(&self, folded: &mut Folded) -> (Vec<NodeAction>, Vec<JobView>) {
        for j in &self.set_aside {
            schema::fold(folded, &j.package, &j.version, j.stage, j.attempt);
        }
        let deletions = self.orphaned.iter().map(|j| NodeAction::Delete {
            job: j.name.to_string(),
        });
        let seen = self.orphaned.iter().chain(&self.set_aside).cloned();
        (deletions.collect(), seen.collect())
    }
}

/// The Jobs of a stage the state no longer asks for. A Job is judged only against a node copy
/// at least as new as the one its stage was stored in
/// ([`crate::schema::NODE_VERSION_ANNOTATION`]): an older copy is a cache that has not yet seen
/// the Job's own node write, not a reset. Uninstalls always run to the end, as in the
/// reference.
fn unwanted<'s, 'j>(
    state: &'s NodeState,
    node_version: Option<u64>,
    jobs: &'s [&'j JobView],
) -> impl Iterator<Item = &'j JobView> + 's {
    jobs.iter().copied().filter(move |j| {
        node_version.is_some_and(|seen| {
            !j.deleting
                && !j.stage.is_uninstall()
                && j.node_version.is_some_and(|v| v <= seen)
                && state
                    .get(&j.package, &j.version)
                    .is_none_or(|e| e.stage != j.stage)
        })
    })
}
