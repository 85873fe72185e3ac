//! What the planner knows about each targeted node before deciding anything: its stored
//! progress, its cordon and pods, whether it may be touched at all, and its boot.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use kube::ResourceExt;

use super::inputs::Inputs;
use super::select::{self, Block};
use super::stage::Host;
use crate::crd::Skyhook;
use crate::node::NodeView;
use crate::schema::{self, Folded, NodeState};

/// The Skyhook's switches for this pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switches {
    pub paused: bool,
    pub disabled: bool,
    /// The spec passed validation; an invalid Skyhook is never acted upon.
    pub valid: bool,
}

impl Switches {
    pub fn of(sk: &Skyhook, valid: bool) -> Self {
        Switches {
            paused: select::flag(sk, schema::PAUSE_ANNOTATION),
            disabled: select::flag(sk, schema::DISABLE_ANNOTATION),
            valid,
        }
    }

    /// New work may start.
    pub fn can_run(&self) -> bool {
        self.valid && !self.paused && !self.disabled
    }
}

/// One targeted node, as read at the start of the pass.
pub struct NodeFacts<'a> {
    pub node: &'a NodeView,
    pub name: String,
    /// The node state of this Skyhook (empty when the node rebooted and REAPPLY_ON_REBOOT is set).
    pub prior: NodeState,
    /// `<pkg>|<ver>` → spec hash the node completed.
    pub applied: BTreeMap<String, String>,
    /// Which Job attempts the node state already holds.
    pub folded: Folded,
    pub host: Host<'a>,
    /// The node carries this Skyhook's cordon mark (so the cordon is ours to lift).
    pub holds_cordon: bool,
    pub block: Option<Block>,
    /// Waits for a Skyhook ordered before this one (§3.14).
    pub gated: bool,
    pub boot_id: Option<String>,
    /// A new boot id and REAPPLY_ON_REBOOT: the node starts over (§3.18).
    pub rebooted: bool,
    /// Why the stored progress cannot be read: such a node is left untouched.
    pub unreadable: Option<String>,
}

impl NodeFacts<'_> {
    /// Drops the parsed progress once the node is decided: the rest of the pass reads only its
    /// name and boot, and at a thousand nodes every node's parsed progress beside its new state
    /// was the largest part of a pass's memory.
    pub fn release_progress(&mut self) {
        self.prior = NodeState::default();
        self.applied = BTreeMap::new();
        self.folded = Folded::new();
    }

    /// Neither blocked nor gated: new work may start here when the batch allows.
    pub fn eligible(&self) -> bool {
        self.block.is_none() && !self.gated
    }
}

/// Facts of every targeted node, oldest node first.
/// `held_back`: a `sequencing: all` predecessor gates every node ([`select::waiting_on`]).
pub fn gather<'a>(
    inp: &Inputs<'a>,
    tolerations: &[Toleration],
    held_back: bool,
) -> Vec<NodeFacts<'a>> {
    select::targeted(inp.skyhook, inp.nodes)
        .into_iter()
        .map(|n| read(inp, n, tolerations, held_back))
        .collect()
}

/// One node's facts; `held_back`: a `sequencing: all` predecessor gates every node.
fn read<'a>(
    inp: &Inputs<'a>,
    node: &'a NodeView,
    tolerations: &[Toleration],
    held_back: bool,
) -> NodeFacts<'a> {
    let sk = inp.skyhook;
    let skyhook = sk.name_any();
    let name = node.name.clone();
    let boot_id = Some(node.boot_id.clone()).filter(|b| !b.is_empty());
    let prior_boot = inp.status.and_then(|s| s.node_boot_ids.get(&name));
    let rebooted = inp.config.reapply_on_reboot
        && boot_id
            .as_ref()
            .is_some_and(|b| prior_boot.is_some_and(|p| p != b));
    let (prior, applied, unreadable) = if rebooted {
        (NodeState::default(), BTreeMap::new(), None)
    } else {
        match stored_progress(node, &name, &skyhook) {
            Ok((prior, applied)) => (prior, applied, None),
            Err(why) => (NodeState::default(), BTreeMap::new(), Some(why)),
        }
    };
    // Kept through a reboot's fresh start: it judges the Jobs that are still there.
    let (folded, unreadable) = match stored_json(node, &name, &schema::folded_annotation(&skyhook))
    {
        Ok(folded) => (folded, unreadable),
        Err(why) => (Folded::new(), unreadable.or(Some(why))),
    };
    NodeFacts {
        host: Host {
            cordoned: node.unschedulable || inp.config.planted.skip_cordon,
            // The planted bug's node was never listed (it is not cordoned): nothing to drain.
            pods: (inp.pods_on_nodes.get(&name).map(Vec::as_slice)).or(inp
                .config
                .planted
                .skip_cordon
                .then_some(&[])),
            other_busy: inp.busy_nodes.contains(&name),
            other_interrupting: inp.interrupting_nodes.contains(&name),
            go_pods: inp.go_pods.get(&name).map_or(&[], Vec::as_slice),
            node_version: node.version_number(),
            drain_started: node
                .annotation(&schema::drain_start_annotation(&skyhook))
                .and_then(|t| t.parse().ok()),
            drain_timeout: super::drain::DrainRules::of(sk.spec.drain_config.as_ref()).timeout,
            protected_since: protected_wait(node, &skyhook).map(|w| w.since),
            cordon_when_pods_gone: super::drain::protected_cordon(sk)
                == schema::ProtectedCordon::PodsGone,
            boot_id: Some(node.boot_id.as_str()).filter(|b| !b.is_empty()),
            reboot_confirm: inp.config.reboot_confirm_timeout,
        },
        holds_cordon: node
            .annotations
            .contains_key(&schema::cordon_annotation(&skyhook)),
        block: select::block(node, tolerations),
        gated: held_back || select::gated(sk, &inp.fleet(), node),
        node,
        name,
        prior,
        applied,
        folded,
        boot_id,
        rebooted,
        unreadable,
    }
}

/// The node's stored wait for protected pods of `skyhook`, if any.
pub fn protected_wait(node: &NodeView, skyhook: &str) -> Option<schema::ProtectedWait> {
    schema::ProtectedWait::parse(node.annotation(&schema::protected_wait_annotation(skyhook)))
}

/// The node state and applied record of `skyhook` on `node` (empty when absent), or why one of
/// them cannot be read: writing over a value we cannot read would erase progress.
fn stored_progress(
    node: &NodeView,
    node_name: &str,
    skyhook: &str,
) -> Result<(NodeState, BTreeMap<String, String>), String> {
    let state_key = schema::node_state_annotation(skyhook);
    let state = match node.annotation(&state_key) {
        None => NodeState::default(),
        Some(raw) => NodeState::parse(raw).map_err(|e| {
            schema::node_state_unreadable_message(node_name, &state_key, &e.to_string(), raw)
        })?,
    };
    let applied = stored_json(node, node_name, &schema::applied_annotation(skyhook))?;
    Ok((state, applied))
}

/// One of our JSON annotations (its default when absent), or why it cannot be read.
fn stored_json<T: serde::de::DeserializeOwned + Default>(
    node: &NodeView,
    node_name: &str,
    key: &str,
) -> Result<T, String> {
    match node.annotation(key) {
        None => Ok(T::default()),
        Some(raw) => serde_json::from_str(raw).map_err(|e| {
            schema::node_state_unreadable_message(node_name, key, &e.to_string(), raw)
        }),
    }
}
