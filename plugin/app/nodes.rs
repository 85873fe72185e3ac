//! Node lookups several commands share: the Skyhooks with state on a node, its parsed node
//! state, and node selection by pattern.

use std::collections::BTreeSet;

use skyhook::schema::{self, NodePattern, NodeState, State};

use super::Ctx;
use super::error::CliError;
use super::kube::{Kube, NodeMeta};

/// Every `(skyhook, raw nodeState)` annotation of a node.
pub fn skyhook_states(node: &NodeMeta) -> impl Iterator<Item = (&str, &str)> {
    node.annotations
        .iter()
        .filter_map(|(k, v)| schema::skyhook_of_node_state_annotation(k).map(|sh| (sh, v.as_str())))
}

/// The Skyhooks a node has a row for in `node status`: each with its raw node state, then each
/// whose interrupt waits for protected pods before any stage ran (no state yet, but that wait is
/// what its user asks about).
pub fn skyhook_rows(node: &NodeMeta) -> Vec<(&str, Option<&str>)> {
    let mut rows: Vec<(&str, Option<&str>)> = skyhook_states(node)
        .map(|(sh, raw)| (sh, Some(raw)))
        .collect();
    let waiting: Vec<&str> = node
        .annotations
        .keys()
        .filter_map(|k| schema::skyhook_of_protected_wait_annotation(k))
        .filter(|sh| !rows.iter().any(|(s, _)| s == sh))
        .collect();
    rows.extend(waiting.into_iter().map(|sh| (sh, None)));
    rows
}

/// The node's wait for protected pods of `skyhook` (this project's extension): the pods, since
/// when and for how long.
pub fn protected_wait(node: &NodeMeta, skyhook: &str) -> Option<String> {
    let raw = node
        .annotations
        .get(&schema::protected_wait_annotation(skyhook));
    schema::ProtectedWait::parse(raw.map(String::as_str))
        .map(|w| w.describe(Some(jiff::Timestamp::now())))
}

/// Parses one node-state annotation; unreadable ones are skipped (with a warning under `-v`).
pub fn parse_state(ctx: &Ctx, node: &str, skyhook: Option<&str>, raw: &str) -> Option<NodeState> {
    match NodeState::parse(raw) {
        Ok(state) => Some(state),
        Err(e) => {
            match skyhook {
                Some(sh) => ctx.warn(&format!(
                    "skipping node {node:?} skyhook {sh:?} - invalid annotation: {e}"
                )),
                None => ctx.warn(&format!("skipping node {node:?} - invalid annotation: {e}")),
            }
            None
        }
    }
}

/// Fails on the first bad pattern, before any request is made.
/// A node whose packages are all complete but which waits for its health gate is not complete:
/// in progress while it waits, erroring once the operator says it failed.
pub fn health_gate(node: &NodeMeta, skyhook: &str, status: State) -> (State, Option<String>) {
    let Some(since) = node
        .annotations
        .get(&schema::health_gate_annotation(skyhook))
    else {
        return (status, None);
    };
    let failed = node
        .annotations
        .get(&schema::status_annotation(skyhook))
        .is_some_and(|s| s == schema::Status::Erroring.as_str());
    let held = if failed {
        State::Erroring
    } else {
        State::InProgress
    };
    let status = if status == State::Complete {
        held
    } else {
        status
    };
    let words = if failed {
        format!("failed (waiting since {since})")
    } else {
        format!("waiting since {since}")
    };
    (status, Some(words))
}

pub fn check_patterns(patterns: &[String]) -> Result<(), CliError> {
    for p in patterns {
        NodePattern::new(p)?;
    }
    Ok(())
}

/// The patterns checked, then every node listed and the names the patterns select.
pub async fn list_selected(
    ctx: &Ctx,
    patterns: &[String],
) -> Result<(Kube, Vec<NodeMeta>, BTreeSet<String>), CliError> {
    check_patterns(patterns)?;
    let kube = ctx.kube().await?;
    let nodes = kube.nodes().await?;
    let selected = select_nodes(patterns, nodes.iter().map(|n| n.name.as_str()))?;
    Ok((kube, nodes, selected))
}

/// The nodes the patterns select; `None` (every node) without a pattern.
pub fn select_named(
    patterns: &[String],
    nodes: &[NodeMeta],
) -> Result<Option<BTreeSet<String>>, CliError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    select_nodes(patterns, nodes.iter().map(|n| n.name.as_str())).map(Some)
}

/// The node names the patterns select. Every pattern must match at least one node, so a typo
/// is an error rather than an empty result.
pub fn select_nodes<'a>(
    patterns: &[String],
    names: impl Iterator<Item = &'a str> + Clone,
) -> Result<BTreeSet<String>, CliError> {
    let mut selected = BTreeSet::new();
    for p in patterns {
        let pattern = NodePattern::new(p)?;
        let mut any = false;
        for name in names.clone().filter(|n| pattern.matches(n)) {
            any = true;
            selected.insert(name.to_string());
        }
        if !any {
            return Err(if pattern.is_regex() {
                CliError::NoNodeMatches(p.clone())
            } else {
                CliError::NodeNotFound(p.clone())
            });
        }
    }
    Ok(selected)
}

// ----- node list -----
