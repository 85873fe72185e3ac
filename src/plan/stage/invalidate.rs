//! Running Jobs the node state no longer asks for (§4.7): the state was reset under them (a
//! `node reset`, the reference's CLI) or moved to another stage (a `package rerun --stage`).
//! Their work is no longer wanted: they are deleted, and the stage starts again only once
//! they are gone.

use crate::jobs::JobView;
use crate::schema::{NodeState, Stage};

/// The running Jobs to delete. A Job is judged only against a node copy at least as new as the
/// one its stage was stored in ([`crate::schema::NODE_VERSION_ANNOTATION`]): an older copy is a
/// cache that has not yet seen the Job's own node write, not a reset. Uninstalls always run to
/// the end, as in the reference.
pub(super) fn orphaned<'j>(
    state: &NodeState,
    node_version: Option<u64>,
    jobs: &[&'j JobView],
) -> Vec<&'j JobView> {
    let Some(seen) = node_version else {
        return Vec::new();
    };
    jobs.iter()
        .copied()
        .filter(|j| {
            !j.finished()
                && !j.deleting
                && j.stage != Stage::Uninstall
                && j.node_version.is_some_and(|v| v <= seen)
                && state
                    .get(&j.package, &j.version)
                    .is_none_or(|e| e.stage != j.stage)
        })
        .collect()
}
