//! Nodes this Skyhook no longer targets: relabelled by another controller, or dropped by an
//! edit of `nodeSelectors` mid-rollout, or deleted. A pass looks only at the nodes it targets,
//! so without this step such a node would keep our cordon (and the runtime-required taint)
//! forever, and the budget would count a slot free while our Job still runs there.
//!
//! A node that left is let go once none of our Jobs runs on it: a running stage or interrupt is
//! waited for, never cut short (and, meanwhile, no new node starts anywhere: the slot it holds
//! is still taken). Then our cordon key goes (the cordon with it unless another Skyhook holds
//! one), the runtime-required taint goes once no other runtime-required Skyhook selecting the
//! node is short of complete, and an Event says why. The node's package state stays, so a node
//! that comes back resumes where it was. A node that no longer exists has its Jobs deleted at
//! once: their pods can never run.

use std::collections::{BTreeMap, BTreeSet};

use super::actions::{JobOp, NodePatch, Note};
use super::metadata::{MetaInput, lift_runtime_taint};
use crate::jobs::JobView;
use crate::node::NodeView;
use crate::schema;

/// What a pass does about the nodes it no longer targets.
#[derive(Debug, Default, PartialEq)]
pub struct Release {
    pub patches: Vec<NodePatch>,
    /// (node, operation), as [`super::Plan::job_ops`].
    pub job_ops: Vec<(String, JobOp)>,
    pub notes: Vec<Note>,
    /// A Job of ours still runs on a node that left: no new node starts until it ends.
    pub holds_budget: bool,
}

/// `targeted`: the nodes the pass plans for; `by_node`: this Skyhook's Jobs by node.
pub fn release(
    m: &MetaInput,
    nodes: &[std::sync::Arc<NodeView>],
    targeted: &BTreeSet<&str>,
    by_node: &BTreeMap<&str, Vec<&JobView>>,
) -> Release {
    let name = kube::ResourceExt::name_any(m.skyhook);
    let cordon = schema::cordon_annotation(&name);
    let touched = schema::status_annotation(&name);
    let mut r = Release::default();
    let mut present = BTreeSet::new();
    for n in nodes {
        present.insert(n.name.as_str());
        if targeted.contains(n.name.as_str()) {
            continue;
        }
        let running = by_node
            .get(n.name.as_str())
            .is_some_and(|jobs| jobs.iter().any(|j| !j.finished()));
        if running {
            r.holds_budget = true;
            continue;
        }
        let mut patch = NodePatch::of(n);
        for clock in [
            schema::drain_start_annotation(&name),
            schema::health_gate_annotation(&name),
            schema::protected_wait_annotation(&name),
        ] {
            if n.annotations.contains_key(&clock) {
                patch.annotations.insert(clock, None);
            }
        }
        if n.annotations.contains_key(&cordon) {
            patch.annotations.insert(cordon.clone(), None);
            if !n.cordon_kept_by_others(&name) {
                patch.unschedulable = Some(false);
            }
        }
        if m.skyhook.spec.runtime_required && n.annotations.contains_key(&touched) {
            lift_runtime_taint(m, n, &mut patch);
        }
        // No longer at work here: if it comes back it waits for a batch choice, as any node,
        // rather than rejoining the batch at work beside a full budget (found by the fault
        // campaign, issue 52). Its package state stays, so it resumes where it was.
        let at_work = matches!(
            schema::Status::from_annotation(n.annotation(&touched)),
            schema::Status::InProgress | schema::Status::Erroring
        ) && n.annotations.contains_key(&touched);
        if at_work {
            let waiting = Some(schema::Status::Waiting.to_string());
            patch.annotations.insert(touched.clone(), waiting.clone());
            patch.labels.insert(touched.clone(), waiting);
        }
        if !patch.is_empty() {
            let msg = schema::node_released_message(&name, &n.name);
            r.notes
                .push(Note::node(&n.name, schema::RELEASED_REASON, msg.clone()));
            r.notes
                .push(Note::skyhook(schema::RELEASED_REASON, msg).about(&n.name));
            r.patches.push(patch);
        }
    }
    for (node, jobs) in by_node {
        if present.contains(node) {
            continue;
        }
        let live: Vec<&&JobView> = jobs.iter().filter(|j| !j.deleting).collect();
        if live.is_empty() {
            continue;
        }
        let msg = schema::node_gone_message(node, live.len());
        r.notes.push(Note::skyhook(schema::RELEASED_REASON, msg));
        r.job_ops.extend(live.iter().map(|j| {
            let op = JobOp::Delete {
                job: j.name.to_string(),
            };
            (node.to_string(), op)
        }));
    }
    r
}

#[cfg(test)]
mod tests;
