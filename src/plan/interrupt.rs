//! Interrupt grouping (§3.9.4, §3.9.5): one merged interrupt per node, owned by one package of
//! the dependency frontier, run alone on the node.

use crate::plan::spec::SpecView;
use crate::schema::{self, Interrupt, NodeState};

use super::stage::frontier::frontier;

/// The node's merged interrupt and the package that owns it. The merge spans every incomplete
/// package at the frontier, including those already `skipped` at the interrupt stage.
pub fn merged(spec: &SpecView, state: &NodeState) -> Option<(Interrupt, String)> {
    let candidates: Vec<(String, Vec<Interrupt>)> = frontier(spec, state)
        .into_iter()
        .map(|p| (p.name.clone(), spec.interrupts(p)))
        .collect();
    schema::merge_interrupts(candidates.iter().map(|(n, i)| (n.as_str(), i.iter())))
        .map(|(i, owner)| (i, owner.to_string()))
}

/// What the interrupt stage of one package does on a node this pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// This package owns the merged interrupt and nothing else runs: start it.
    Run(Interrupt),
    /// This package owns it, but other Jobs run on the node (ours or another Skyhook's).
    WaitAlone,
    /// Another package owns the merged interrupt (or there is none): mark this one skipped.
    Skip,
}

/// Decides the interrupt stage of `package` given the node's merged interrupt.
pub fn turn(merged: Option<&(Interrupt, String)>, package: &str, others_running: bool) -> Turn {
    match merged {
        Some((interrupt, owner)) if owner == package => {
            if others_running {
                Turn::WaitAlone
            } else {
                Turn::Run(interrupt.clone())
            }
        }
        _ => Turn::Skip,
    }
}
