//! `reset`, `node reset` and `deployment-policy reset`: make a Skyhook's packages run again by
//! removing its state from nodes, and start a DeploymentPolicy rollout over from batch 1.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};

use k8s_openapi::api::batch::v1::Job;
use kube::api::ListParams;
use serde_json::{Map, Value, json};
use skyhook::crd::{BatchState, Skyhook};
use skyhook::jobs::JobView;
use skyhook::schema::{self, NodeState};

use crate::app::Ctx;
use crate::app::access::{Change, Need, proceed};
use crate::app::error::CliError;
use crate::app::kube::{Kube, NodeMeta};
use crate::app::nodes::list_selected;
use crate::cli::ResetArgs;

/// A node that has state for the Skyhook, and how many package entries it holds (`None` when
/// the annotation cannot be read: it is reset all the same, which is what an unreadable
/// state needs).
struct Target<'a> {
    node: &'a NodeMeta,
    packages: Option<usize>,
}

fn targets<'a>(
    ctx: &Ctx,
    nodes: &'a [NodeMeta],
    skyhook: &str,
    selected: Option<&BTreeSet<String>>,
) -> Vec<Target<'a>> {
    let key = schema::node_state_annotation(skyhook);
    nodes
        .iter()
        .filter(|n| selected.is_none_or(|s| s.contains(&n.name)))
        .filter_map(|node| {
            let raw = node.annotations.get(&key)?;
            let packages = match NodeState::parse(raw) {
                Ok(state) => Some(state.len()),
                Err(e) => {
                    ctx.warn(&format!(
                        "node {:?}: unreadable {key} annotation, resetting it: {e}",
                        node.name
                    ));
                    None
                }
            };
            Some(Target { node, packages })
        })
        .collect()
}

fn summary(out: &mut dyn Write, skyhook: &str, targets: &[Target<'_>]) -> Result<(), CliError> {
    writeln!(out, "Skyhook: {skyhook}")?;
    writeln!(out, "Nodes to reset ({}):", targets.len())?;
    for t in targets {
        match t.packages {
            Some(k) => writeln!(out, "  - {} ({k} packages)", t.node.name)?,
            None => writeln!(out, "  - {} (unreadable state)", t.node.name)?,
        }
    }
    Ok(())
}

/// The merge patch that forgets a Skyhook on a node: its package state, our record of applied
/// specs, and the status and version keys the operator rewrites on its next pass. One patch, so
/// a failure leaves the node as it was.
///
/// `cordon_<sh>` stays: the reference removes it but leaves the node cordoned, so nobody would
/// uncordon it (spec §8.4). Kept, the operator still owns its cordon and lifts it when the node
/// completes again.
pub fn forget_patch(skyhook: &str) -> Value {
    let annotations: Map<String, Value> = [
        schema::node_state_annotation(skyhook),
        schema::applied_annotation(skyhook),
        schema::status_annotation(skyhook),
        schema::node_version_annotation(skyhook),
    ]
    .into_iter()
    .map(|k| (k, Value::Null))
    .collect();
    json!({ "metadata": {
        "annotations": annotations,
        "labels": { schema::status_label(skyhook): null },
    }})
}

/// Applies [`forget_patch`] to every target; prints the outcome and returns the failures.
///
/// Unlike `package rerun`, this write carries no resourceVersion precondition: it only removes
/// keys and computes nothing from what it read, so whatever the operator wrote before it is
/// meant to go, and a precondition would only make it retry. The operator's own node patches
/// are guarded, so an operator pass planned before the reset cannot write the state back.
async fn forget(
    kube: &Kube,
    out: &mut dyn Write,
    skyhook: &str,
    targets: &[Target<'_>],
) -> Result<usize, CliError> {
    let patch = forget_patch(skyhook);
    let mut errors = Vec::new();
    for t in targets {
        if let Err(e) = kube.merge_patch_node(&t.node.name, &patch).await {
            errors.push(format!(
                "{}: failed to remove nodeState annotation: {e}",
                t.node.name
            ));
        }
    }
    let done = targets.len() - errors.len();
    if !errors.is_empty() {
        writeln!(out, "\nErrors resetting some nodes:")?;
        for e in &errors {
            writeln!(out, "  - {e}")?;
        }
    }
    if done > 0 {
        writeln!(
            out,
            "\nSuccessfully reset {done} node(s) for Skyhook {skyhook:?}"
        )?;
    }
    Ok(errors.len())
}

/// Nothing on the nodes and no such Skyhook is a typo, not a no-op.
async fn no_state(kube: &Kube, out: &mut dyn Write, skyhook: &str) -> Result<(), CliError> {
    if kube.skyhook_exists(skyhook).await == Some(false) {
        return Err(CliError::SkyhookNotFound(skyhook.to_string()));
    }
    writeln!(out, "No nodes have state for Skyhook {skyhook:?}")?;
    Ok(())
}

/// `node reset <pattern...> --skyhook S`.
pub async fn nodes(
    ctx: &Ctx,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    patterns: &[String],
    skyhook: &str,
    confirm: bool,
) -> Result<(), CliError> {
    let (kube, nodes, selected) = list_selected(ctx, patterns).await?;
    let targets = targets(ctx, &nodes, skyhook, Some(&selected));
    if targets.is_empty() {
        return no_state(&kube, out, skyhook).await;
    }
    summary(out, skyhook, &targets)?;
    let mut prompt = vec![
        format!("\nThis will remove ALL package state for Skyhook {skyhook:?} on these nodes."),
        "All packages will re-run from the beginning.".to_string(),
    ];
    prompt.extend(stopping(ctx, &kube, skyhook, &targets).await);
    let action = format!("resetting skyhook {skyhook:?} on nodes");
    let change = Change::new(action, &[Need::PATCH_NODES], confirm, &prompt);
    if !proceed(ctx, &kube, &change, out, input).await? {
        return Ok(());
    }
    match forget(&kube, out, skyhook, &targets).await? {
        0 => Ok(()),
        failed => Err(CliError::PartialFailure {
            failed,
            total: targets.len(),
        }),
    }
}

/// `reset S [--skip-batch-reset]`: every node, then the batch state.
pub async fn skyhook(
    ctx: &Ctx,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    args: &ResetArgs,
) -> Result<(), CliError> {
    let name = &args.name;
    let kube = ctx.kube().await?;
    let nodes = kube.nodes().await?;
    let targets = targets(ctx, &nodes, name, None);
    if targets.is_empty() {
        return no_state(&kube, out, name).await;
    }
    summary(out, name, &targets)?;
    if !args.skip_batch_reset {
        writeln!(
            out,
            "\nBatch state will also be reset (use --skip-batch-reset to preserve)"
        )?;
    }
    let mut prompt = vec![
        format!(
            "\nThis will remove ALL package state for Skyhook {name:?} on {} node(s).",
            targets.len()
        ),
        "All packages will re-run from the beginning.".to_string(),
    ];
    if !args.skip_batch_reset {
        prompt.push("Batch state will be reset to start from batch 1.".to_string());
    }
    prompt.extend(stopping(ctx, &kube, name, &targets).await);
    let mut needs = vec![Need::PATCH_NODES];
    if !args.skip_batch_reset {
        needs.push(Need::PATCH_SKYHOOK_STATUS);
    }
    let action = format!("resetting skyhook {name:?}");
    let change = Change::new(action, &needs, args.confirm, &prompt);
    if !proceed(ctx, &kube, &change, out, input).await? {
        return Ok(());
    }
    // The batch state first: if a node write then fails, the nodes still holding state are
    // exactly what running the command again resets (a reset batch state is not found again).
    if !args.skip_batch_reset {
        match kube.skyhook(name).await {
            Ok(sk) if has_compartments(&sk) => {
                kube.patch_skyhook_status(name, &batch_reset_patch(&sk))
                    .await?;
                writeln!(out, "Batch state reset for Skyhook {name:?}")?;
            }
            Ok(_) => {}
            Err(e) => eprintln!("Warning: failed to get skyhook for batch reset: {e}"),
        }
    }
    let failed = forget(&kube, out, name, &targets).await?;
    match failed {
        0 => Ok(()),
        failed => Err(CliError::PartialFailure {
            failed,
            total: targets.len(),
        }),
    }
}

/// Prompt lines naming the running stage Jobs of `skyhook` on the targets: once their node
/// state is gone, the operator deletes them (their pods are stopped mid-stage).
async fn stopping(ctx: &Ctx, kube: &Kube, skyhook: &str, targets: &[Target<'_>]) -> Vec<String> {
    let ns = &ctx.global.namespace;
    let lp =
        ListParams::default().labels(&kube.selector(&format!("{}={skyhook}", schema::NAME_LABEL)));
    let jobs: Vec<Job> = match kube.list_in(ns, &lp, "jobs").await {
        Ok(jobs) => jobs,
        Err(e) => {
            ctx.warn(&format!("cannot list the Jobs this reset would stop: {e}"));
            return Vec::new();
        }
    };
    let on: BTreeSet<&str> = targets.iter().map(|t| t.node.name.as_str()).collect();
    let running: Vec<String> = jobs
        .iter()
        .filter_map(|j| JobView::from_job(j, None))
        .filter(|v| !v.finished() && on.contains(&*v.node))
        .map(|v| format!("  - {} (node {})", v.name, v.node))
        .collect();
    if running.is_empty() {
        return running;
    }
    let mut lines = vec![format!(
        "These {} running stage Job(s) will be stopped by the operator:",
        running.len()
    )];
    lines.extend(running);
    lines
}

fn has_compartments(sk: &Skyhook) -> bool {
    sk.status
        .as_ref()
        .is_some_and(|s| !s.compartment_statuses.is_empty())
}

/// Status merge patch giving every compartment a fresh batch state, every counter explicit.
pub fn batch_reset_patch(sk: &Skyhook) -> Value {
    let compartments: Map<String, Value> = sk
        .status
        .iter()
        .flat_map(|s| s.compartment_statuses.keys())
        .map(|c| {
            (
                c.clone(),
                json!({ "batchState": BatchState::fresh_explicit() }),
            )
        })
        .collect();
    json!({ "status": { "compartmentStatuses": compartments } })
}

/// `deployment-policy reset S`.
pub async fn batch_state(
    ctx: &Ctx,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    name: &str,
    confirm: bool,
) -> Result<(), CliError> {
    let kube = ctx.kube().await?;
    let sk = kube.skyhook(name).await?;
    let Some(status) = sk.status.as_ref().filter(|_| has_compartments(&sk)) else {
        writeln!(out, "Skyhook {name:?} has no compartment statuses to reset")?;
        return Ok(());
    };
    let with_batch: Vec<(&String, &BatchState)> = status
        .compartment_statuses
        .iter()
        .filter_map(|(c, s)| s.batch_state.as_ref().map(|b| (c, b)))
        .collect();
    writeln!(out, "Skyhook: {name}")?;
    writeln!(
        out,
        "Compartments: {} total, {} with batch state",
        status.compartment_statuses.len(),
        with_batch.len()
    )?;
    if !with_batch.is_empty() {
        writeln!(out, "\nCurrent batch state:")?;
        for (c, b) in &with_batch {
            let stop = if b.should_stop { ", stopped" } else { "" };
            writeln!(
                out,
                "  - {c}: batch {}, {} completed, {} failed{stop}",
                b.current_batch, b.completed_nodes, b.failed_nodes
            )?;
        }
    }
    if ctx.global.dry_run {
        writeln!(out, "\n[dry-run] Would reset batch state to:")?;
        writeln!(out, "  - CurrentBatch: 1")?;
        writeln!(out, "  - ConsecutiveFailures: 0")?;
        writeln!(out, "  - CompletedNodes: 0")?;
        writeln!(out, "  - FailedNodes: 0")?;
        writeln!(out, "  - ShouldStop: false")?;
    }
    let prompt = [
        format!("\nThis will reset the batch state for Skyhook {name:?}."),
        "The next reconciliation will start from batch 1.".to_string(),
    ];
    let action = format!("resetting the batch state of skyhook {name:?}");
    let change = Change::new(action, &[Need::PATCH_SKYHOOK_STATUS], confirm, &prompt);
    if !proceed(ctx, &kube, &change, out, input).await? {
        return Ok(());
    }
    kube.patch_skyhook_status(name, &batch_reset_patch(&sk))
        .await?;
    writeln!(out, "\nSuccessfully reset batch state for Skyhook {name:?}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::prompt::{ask, read_confirmation};

    #[test]
    fn confirmation_answers() {
        let read = |s: &str| read_confirmation(&mut s.as_bytes());
        assert!(read("y\n").unwrap());
        assert!(read("YES\n").unwrap());
        assert!(read(" Yes \n").unwrap());
        assert!(!read("n\n").unwrap());
        assert!(!read("\n").unwrap());
        assert!(!read("yep\n").unwrap());
        assert!(
            read("")
                .unwrap_err()
                .to_string()
                .starts_with("no answer to the confirmation prompt"),
        );
    }

    /// A declined or unanswered prompt is an error (a non-zero exit), so that a brake that did
    /// nothing never looks like success.
    #[test]
    fn declined_or_unanswered_prompt_fails() {
        let mut out = Vec::new();
        let err = ask(&mut out, &mut "no\n".as_bytes(), &["\nSure?".into()]).unwrap_err();
        assert!(matches!(err, CliError::Declined), "{err}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\nSure?\nContinue? [y/N]: Aborted\n"
        );
        let mut out = Vec::new();
        let err = ask(&mut out, &mut "".as_bytes(), &["Sure?".into()]).unwrap_err();
        assert!(matches!(err, CliError::NoAnswer), "{err}");
        assert_eq!(String::from_utf8(out).unwrap(), "Sure?\nContinue? [y/N]: ");
        let mut out = Vec::new();
        ask(&mut out, &mut "yes\n".as_bytes(), &["Sure?".into()]).unwrap();
    }

    #[test]
    fn forget_patch_leaves_the_cordon_alone() {
        let patch = forget_patch("sh");
        assert_eq!(
            patch.to_string(),
            r#"{"metadata":{"annotations":{"skyhook.nvidia.com/nodeState_sh":null,"skyhook.nvidia.com/applied_sh":null,"skyhook.nvidia.com/status_sh":null,"skyhook.nvidia.com/version_sh":null},"labels":{"skyhook.nvidia.com/status_sh":null}}}"#
        );
        assert!(!patch.to_string().contains(&schema::cordon_annotation("sh")));
    }

    #[test]
    fn batch_reset_clears_every_counter_of_every_compartment() {
        let sk: Skyhook = serde_json::from_value(json!({
            "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
            "metadata": {"name": "sh"},
            "spec": {},
            "status": {"compartmentStatuses": {
                "a": {"matched": 3, "ceiling": 1, "inProgress": 0, "completed": 1, "progressPercent": 33,
                      "batchState": {"currentBatch": 3, "failedNodes": 2, "shouldStop": true}},
                "b": {"matched": 1, "ceiling": 1, "inProgress": 0, "completed": 0, "progressPercent": 0},
            }},
        }))
        .unwrap();
        let patch = batch_reset_patch(&sk);
        for c in ["a", "b"] {
            assert_eq!(
                patch["status"]["compartmentStatuses"][c]["batchState"],
                BatchState::fresh_explicit(),
                "{c}"
            );
        }
        assert_eq!(
            patch["status"]["compartmentStatuses"]["a"]["batchState"]["shouldStop"],
            false
        );
    }
}
