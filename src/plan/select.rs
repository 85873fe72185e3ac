//! Node selection (§3.16, §3.14): which nodes a Skyhook targets, which of them it may not touch
//! (ignored, or a taint it does not tolerate) and which wait for a Skyhook ordered before it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

use crate::crd::Skyhook;
use crate::schema::{self, Status, TaintSpec};

/// Why a targeted node cannot be worked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Labelled `skyhook.nvidia.com/ignore=true`.
    Ignored,
    /// Carries a taint the package Jobs would not tolerate.
    Taint,
}

/// Whether `skyhook`'s `nodeSelectors` select `node` (an empty selector selects every node).
pub fn selects(skyhook: &Skyhook, node: &Node) -> bool {
    Selector::try_from(skyhook.spec.node_selectors.clone()).is_ok_and(|s| s.matches(node.labels()))
}

/// Targeted nodes, oldest first (§3.4), names breaking ties deterministically.
pub fn targeted<'a>(skyhook: &Skyhook, nodes: &'a [Arc<Node>]) -> Vec<&'a Arc<Node>> {
    let Ok(sel) = Selector::try_from(skyhook.spec.node_selectors.clone()) else {
        return Vec::new();
    };
    let mut out: Vec<&Arc<Node>> = nodes.iter().filter(|n| sel.matches(n.labels())).collect();
    out.sort_by_cached_key(|n| {
        (
            n.metadata.creation_timestamp.as_ref().map(|t| t.0),
            n.name_any(),
        )
    });
    out
}

/// Whether a pod with these tolerations ignores a cordon (the `unschedulable` NoSchedule taint),
/// as the scheduler decides it: a keyless `Exists` toleration tolerates every taint.
pub fn tolerates_cordon(tolerations: &[Toleration]) -> bool {
    let cordon = Taint {
        key: schema::UNSCHEDULABLE_TAINT_KEY.to_string(),
        effect: "NoSchedule".to_string(),
        ..Default::default()
    };
    tolerations.iter().any(|t| tolerates(t, &cordon))
}

/// The scheduler's toleration match.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect_ok = t
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key_ok = match t.key.as_deref() {
        None | Some("") => t.operator.as_deref() == Some("Exists"),
        Some(k) => k == taint.key,
    };
    let value_ok = match t.operator.as_deref() {
        Some("Exists") => true,
        _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
    };
    effect_ok && key_ok && value_ok
}

/// The tolerations of this Skyhook's Jobs: the cordon, `additionalTolerations`, and the
/// runtime-required taint when the Skyhook is runtime-required.
pub fn job_tolerations(sk: &Skyhook, runtime_taint: &TaintSpec) -> Vec<Toleration> {
    let mut out = vec![Toleration {
        key: Some(schema::UNSCHEDULABLE_TAINT_KEY.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoSchedule".to_string()),
        ..Default::default()
    }];
    out.extend(sk.spec.additional_tolerations.iter().cloned());
    if sk.spec.runtime_required {
        out.push(runtime_taint.to_toleration());
    }
    out
}

/// Why `node` cannot be worked on, if it cannot (§3.16).
pub fn block(node: &Node, tolerations: &[Toleration]) -> Option<Block> {
    if node.labels().get(schema::IGNORE_LABEL).map(String::as_str) == Some(schema::TRUE_VALUE) {
        return Some(Block::Ignored);
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let untolerated = taints
        .iter()
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)));
    untolerated.then_some(Block::Taint)
}

/// §3.14: every non-disabled Skyhook ordered before this one (priority, then name) that targets
/// the node must be complete there first.
pub fn gated(sk: &Skyhook, all: &[Arc<Skyhook>], node: &Node) -> bool {
    let key = |s: &Skyhook| (s.spec.priority, s.name_any());
    let mine = key(sk);
    all.iter().any(|other| {
        other.name_any() != sk.name_any()
            && key(other) < mine
            && !flag(other, schema::DISABLE_ANNOTATION)
            && selects(other, node)
            && annotation(node, &schema::status_annotation(&other.name_any()))
                != Some(Status::Complete.as_str())
    })
}

/// An annotation `key` of the Skyhook set to `true` (pause, disable).
pub fn flag(sk: &Skyhook, key: &str) -> bool {
    sk.annotations().get(key).map(String::as_str) == Some(schema::TRUE_VALUE)
}

pub(crate) fn annotation<'n>(node: &'n Node, key: &str) -> Option<&'n str> {
    node.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}
