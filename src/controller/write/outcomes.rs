//! What the writes of one pass met, beside success: nodes that changed since the pass read
//! them (a 409: their work waits for the next pass, which follows within a second), and writes
//! refused for good (a quota, an admission policy, an object over its size limit: recorded, so
//! that the next pass's status says so, instead of the whole Skyhook stopping).

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tracing::warn;

use crate::plan::inputs::DrainBlock;

/// The longest reason kept per failure: a condition message is bounded, and the object's name
/// is what matters most.
const MAX_REASON: usize = 300;

#[derive(Default)]
pub(super) struct Outcomes {
    /// Nodes whose patch met a 409 in this pass.
    conflicts: Mutex<BTreeSet<String>>,
    /// Nodes whose patch failed for good in this pass.
    failed_nodes: Mutex<BTreeSet<String>>,
    /// Writes that failed for good, one line each (`<kind> <name>: <reason>`).
    failures: Mutex<Vec<String>>,
    /// Evictions a PodDisruptionBudget refused.
    drain_blocks: Mutex<Vec<DrainBlock>>,
    /// Nodes whose auto-taint patch was refused for good, and nodes it tainted.
    auto_taints: Mutex<(Vec<String>, Vec<String>)>,
}

/// A poisoned lock only means a writer panicked mid-insert; the set is still usable.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Outcomes {
    pub(super) fn conflict(&self, node: &str) {
        locked(&self.conflicts).insert(node.to_string());
    }

    pub(super) fn take_conflicts(&self) -> BTreeSet<String> {
        std::mem::take(&mut *locked(&self.conflicts))
    }

    /// A node's patch was refused for good: recorded, and the node's work waits.
    pub(super) fn node_failed(&self, skyhook: &str, node: &str, e: &dyn std::fmt::Display) {
        self.failed(skyhook, format!("Node {node}"), e);
        locked(&self.failed_nodes).insert(node.to_string());
    }

    pub(super) fn failed_nodes(&self) -> BTreeSet<String> {
        locked(&self.failed_nodes).clone()
    }

    /// A write refused for good: logged, and reported by the next pass's status (condition
    /// `WriteFailed`), a Warning Event and the `skyhook_write_failures` metric.
    pub(super) fn failed(&self, skyhook: &str, what: String, e: &dyn std::fmt::Display) {
        warn!(skyhook, object = %what, error = %e, "write failed; the next pass retries it");
        let mut reason = e.to_string();
        if reason.len() > MAX_REASON {
            let cut = (0..=MAX_REASON)
                .rev()
                .find(|&i| reason.is_char_boundary(i))
                .unwrap_or(0);
            reason.truncate(cut);
            reason.push('…');
        }
        locked(&self.failures).push(format!("{what}: {reason}"));
    }

    pub(super) fn take_failures(&self) -> Vec<String> {
        std::mem::take(&mut *locked(&self.failures))
    }

    /// A PodDisruptionBudget refused an eviction: the next pass's status says so (condition
    /// `DrainBlocked`).
    pub(super) fn blocked_eviction(&self, block: DrainBlock) {
        locked(&self.drain_blocks).push(block);
    }

    /// An auto-taint patch of `node` was refused for good (`refused`) or went through.
    pub(super) fn auto_taint(&self, node: &str, refused: bool) {
        let mut a = locked(&self.auto_taints);
        let list = if refused { &mut a.0 } else { &mut a.1 };
        list.push(node.to_string());
    }

    /// (refused, tainted) nodes of this pass's auto-taint patches.
    pub(super) fn take_auto_taints(&self) -> (Vec<String>, Vec<String>) {
        std::mem::take(&mut *locked(&self.auto_taints))
    }

    pub(super) fn take_drain_blocks(&self) -> Vec<DrainBlock> {
        std::mem::take(&mut *locked(&self.drain_blocks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_name_the_object_and_a_bounded_reason() {
        let o = Outcomes::default();
        o.node_failed("sk", "n1", &"denied by policy");
        o.failed("sk", "ConfigMap ns/cm".into(), &"é".repeat(400));
        assert_eq!(o.failed_nodes(), BTreeSet::from(["n1".to_string()]));
        let f = o.take_failures();
        assert_eq!(f[0], "Node n1: denied by policy");
        assert!(
            f[1].starts_with("ConfigMap ns/cm: é") && f[1].ends_with('…'),
            "{}",
            f[1]
        );
        assert!(f[1].len() < 330, "{}", f[1].len());
        assert!(o.take_failures().is_empty());
    }
}
