//! `package rerun`: edit one package's entry in the node state so the operator runs it again,
//! from the start (entry removed) or from a stage (`{stage: <s>, state: in_progress}`).

use std::io::{BufRead, Write};

use serde_json::{Value, json};
use skyhook::schema::{self, NodeState, PackageStatus, Stage, State};

use crate::app::Ctx;
use crate::app::access::{Change, Need, proceed};
use crate::app::error::CliError;
use crate::app::kube::Kube;
use crate::app::nodes::{check_patterns, select_nodes};
use crate::app::packages::spec_version;

/// Attempts at the read-modify-write of one node's state before giving up: the operator may be
/// writing the same annotation.
const WRITE_ATTEMPTS: u32 = 5;

/// The pause before re-reading after attempt `n` conflicted: the operator writes a node in
/// short bursts (its patch, then its conditions), so a moment later it is usually quiet.
fn pause(n: u32) -> std::time::Duration {
    std::time::Duration::from_millis(100 * u64::from(n))
}

/// What `package rerun` resets.
pub struct Target<'a> {
    pub package: &'a str,
    pub skyhook: &'a str,
    pub patterns: &'a [String],
    pub stage: Option<Stage>,
}

/// Applies the rerun to a parsed state. Returns `false` when the entry is not there.
pub fn edit(state: &mut NodeState, package: &str, version: &str, stage: Option<Stage>) -> bool {
    match stage {
        None => state.remove(package, version).is_some(),
        Some(stage) => match state.get(package, version).cloned() {
            Some(mut entry) => {
                entry.stage = stage;
                entry.state = Some(State::InProgress);
                state.upsert(entry);
                true
            }
            None => false,
        },
    }
}

/// The merge patch writing `state` back, guarded by `resource_version` so a concurrent write
/// by the operator makes the API server refuse it (409) instead of being overwritten. An empty
/// state removes the annotation, as the reference does.
pub fn state_patch(key: &str, state: &NodeState, resource_version: &str) -> Value {
    let value = if state.is_empty() {
        Value::Null
    } else {
        Value::String(state.to_annotation())
    };
    json!({ "metadata": { "resourceVersion": resource_version, "annotations": { key: value } } })
}

/// Re-reads and edits one node until the write lands or the entry is gone.
async fn rerun_on(
    kube: &Kube,
    node: &str,
    key: &str,
    target: &Target<'_>,
    version: &str,
) -> Result<(), CliError> {
    for n in 0..WRITE_ATTEMPTS {
        if n > 0 {
            tokio::time::sleep(pause(n)).await;
        }
        let (annotations, resource_version) = kube.node_annotations(node).await?;
        let raw = annotations.get(key).ok_or_else(|| CliError::Api {
            action: format!("updating node {node:?}"),
            message: "the node state disappeared meanwhile".to_string(),
        })?;
        let mut state = NodeState::parse(raw).map_err(|e| CliError::Api {
            action: format!("reading {key} on node {node:?}"),
            message: e.to_string(),
        })?;
        if !edit(&mut state, target.package, version, target.stage) {
            return Err(CliError::Api {
                action: format!("updating node {node:?}"),
                message: format!("package {:?} left the node state meanwhile", target.package),
            });
        }
        let patch = state_patch(key, &state, &resource_version);
        if kube.merge_patch_node_unless_changed(node, &patch).await? {
            return Ok(());
        }
    }
    Err(CliError::Api {
        action: format!("updating node {node:?}"),
        message: format!(
            "the node kept changing while the package state was being written ({WRITE_ATTEMPTS} \
             writes refused with 409 Conflict); nothing was changed on it, run the command again"
        ),
    })
}

pub async fn run(
    ctx: &Ctx,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    target: &Target<'_>,
    confirm: bool,
) -> Result<(), CliError> {
    check_patterns(target.patterns)?;
    let kube = ctx.kube().await?;
    let sk = kube.skyhook(target.skyhook).await?;
    let version = spec_version(&sk, target.skyhook, target.package)?;
    let nodes = kube.nodes().await?;
    let selected = select_nodes(target.patterns, nodes.iter().map(|n| n.name.as_str()))?;
    let key = schema::node_state_annotation(target.skyhook);
    let mut found = Vec::new();
    for node in nodes.iter().filter(|n| selected.contains(&n.name)) {
        let Some(raw) = node.annotations.get(&key) else {
            continue;
        };
        let Some(state) =
            crate::app::nodes::parse_state(ctx, &node.name, Some(target.skyhook), raw)
        else {
            continue;
        };
        if let Some(entry) = state.get(target.package, &version) {
            found.push((node.name.clone(), entry.clone()));
        }
    }
    if found.is_empty() {
        return Err(CliError::NoPackageState {
            package: target.package.to_string(),
            version,
            skyhook: target.skyhook.to_string(),
        });
    }
    plan_summary(out, target, &version, &found)?;
    let first = match target.stage {
        Some(stage) => format!("\nThis will reset package state to re-run from the '{stage}' stage."),
        None => "\nThis will remove package state from node annotations and cause the package to re-run from the beginning.".to_string(),
    };
    let prompt = [first];
    let action = format!("re-running package {:?}", target.package);
    let change = Change::new(action, &[Need::PATCH_NODES], confirm, &prompt);
    if !proceed(ctx, &kube, &change, out, input).await? {
        return Ok(());
    }
    let mut errors = Vec::new();
    for (node, _) in &found {
        if let Err(e) = rerun_on(&kube, node, &key, target, &version).await {
            errors.push(format!("{node}: {e}"));
        }
    }
    report(out, target, found.len(), errors)
}

/// What will be reset, before asking.
fn plan_summary(
    out: &mut dyn Write,
    target: &Target<'_>,
    version: &str,
    found: &[(String, PackageStatus)],
) -> Result<(), CliError> {
    writeln!(out, "Package: {} (version {version})", target.package)?;
    writeln!(out, "Skyhook: {}", target.skyhook)?;
    if let Some(stage) = target.stage {
        writeln!(out, "Re-run from stage: {stage}")?;
    }
    writeln!(out, "Nodes to reset ({}):", found.len())?;
    for (node, entry) in found {
        let state = entry.state.map_or("", State::as_str);
        writeln!(
            out,
            "  - {node} (current state: {state}, stage: {})",
            entry.stage
        )?;
    }
    Ok(())
}

/// Successes and failures; a partial failure is an error (exit 1).
fn report(
    out: &mut dyn Write,
    target: &Target<'_>,
    total: usize,
    errors: Vec<String>,
) -> Result<(), CliError> {
    let done = total - errors.len();
    if done > 0 {
        writeln!(
            out,
            "\nSuccessfully reset package {:?} on {done} node(s)",
            target.package
        )?;
    }
    if errors.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nErrors updating some nodes:")?;
    for e in &errors {
        writeln!(out, "  - {e}")?;
    }
    Err(CliError::PartialFailure {
        failed: errors.len(),
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATE: &str = r#"{"a|1.0":{"name":"a","version":"1.0","image":"img","stage":"config","state":"complete","restarts":2},"b|2.0":{"name":"b","version":"2.0","image":"img","stage":"apply","state":"erroring"}}"#;

    #[test]
    fn rerun_from_a_stage_keeps_the_rest_of_the_entry() {
        let mut state = NodeState::parse(STATE).unwrap();
        assert!(edit(&mut state, "a", "1.0", Some(Stage::Config)));
        let a = state.get("a", "1.0").unwrap();
        assert_eq!(
            (a.stage, a.state, a.restarts),
            (Stage::Config, Some(State::InProgress), 2)
        );
        assert!(state.get("b", "2.0").is_some());
        assert!(!edit(&mut state, "a", "9.9", Some(Stage::Apply)));
    }

    #[test]
    fn rerun_from_the_start_removes_the_entry_and_an_empty_state_the_annotation() {
        let mut state = NodeState::parse(STATE).unwrap();
        assert!(edit(&mut state, "b", "2.0", None));
        let patch = state_patch("k", &state, "42");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert!(
            patch["metadata"]["annotations"]["k"]
                .as_str()
                .unwrap()
                .contains("\"a|1.0\"")
        );
        assert!(edit(&mut state, "a", "1.0", None));
        assert_eq!(
            state_patch("k", &state, "43")["metadata"]["annotations"]["k"],
            Value::Null
        );
    }
}
