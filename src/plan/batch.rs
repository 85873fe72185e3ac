//! The batch (§6.4 rules 2 and 3): nodes already at work keep going; when none is, the next
//! `size` eligible nodes start, fresh nodes before ones that failed.

use std::collections::BTreeSet;

use super::facts::NodeFacts;
use super::stage::NodeOutcome;
use crate::schema::State;

/// What a look at one node without starting anything says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub name: String,
    /// Work of this Skyhook runs or is pending on the node, or it holds our cordon.
    pub busy: bool,
    /// Complete at every package with nothing drifted.
    pub settled: bool,
    pub erroring: bool,
    /// Neither blocked nor gated.
    pub eligible: bool,
}

impl Seen {
    pub fn of(f: &NodeFacts, o: &NodeOutcome, settled: bool) -> Self {
        Seen {
            name: f.name.clone(),
            busy: o.active || f.holds_cordon || o.any_state(State::InProgress),
            settled,
            erroring: o.any_state(State::Erroring),
            eligible: f.eligible(),
        }
    }
}

/// The nodes that may start new work this pass.
pub fn allowed(seen: &[Seen], size: usize, can_run: bool) -> BTreeSet<String> {
    let busy: BTreeSet<String> = seen
        .iter()
        .filter(|s| s.busy)
        .map(|s| s.name.clone())
        .collect();
    if !can_run || !busy.is_empty() {
        return busy;
    }
    let mut candidates: Vec<&Seen> = seen.iter().filter(|s| !s.settled && s.eligible).collect();
    // Stable sort: oldest node first within each group (§6.4's waiting/unknown before erroring).
    candidates.sort_by_key(|s| s.erroring);
    candidates
        .into_iter()
        .take(size)
        .map(|s| s.name.clone())
        .collect()
}
