//! Events of a pass (§5.3): what started, finished or failed on each node, drains, reboots,
//! and changes of the Skyhook's status worth a human's attention.

use super::Note;
use super::stage::NodeNote;
use crate::crd::SkyhookStatus;
use crate::schema::{self, State};

use super::status;

/// (package, version, node) of each stage started this pass, and failures worded for humans.
#[derive(Debug, Default)]
pub struct Started {
    pub started: Vec<(String, String, String)>,
    pub failures: Vec<String>,
}

/// Events of the machine's notes for one node.
pub fn node_notes(skyhook: &str, node: &str, notes: &[NodeNote], tally: &mut Started) -> Vec<Note> {
    let mut out = Vec::new();
    for note in notes {
        match note {
            NodeNote::Started {
                package,
                version,
                stage,
            } => {
                tally
                    .started
                    .push((package.clone(), version.clone(), node.to_string()));
                let msg = schema::node_apply_message(package, version, skyhook, *stage);
                out.push(Note::node(node, schema::APPLY_REASON, msg));
                let msg = schema::skyhook_apply_message(package, version, node, *stage);
                out.push(Note::skyhook(schema::APPLY_REASON, msg));
            }
            NodeNote::Completed {
                package, version, ..
            } => {
                let msg =
                    schema::node_package_state_message(package, version, State::Complete, skyhook);
                out.push(Note::node(node, schema::APPLY_REASON, msg));
            }
            NodeNote::Failed {
                package,
                version,
                stage,
                reason,
                message,
                restarts,
            } => {
                let text = format!(
                    "package {package}:{version} stage {} failed on node {node} ({reason}, attempt {restarts}): {message}",
                    stage.as_str(),
                );
                tally.failures.push(text.clone());
                let msg =
                    schema::node_package_state_message(package, version, State::Erroring, skyhook);
                out.push(Note::node(node, schema::APPLY_REASON, msg).warning());
                out.push(Note::skyhook(reason, text).warning());
            }
        }
    }
    out
}

/// A node rebooted and starts over (§3.18).
pub fn reboot(skyhook: &str, node: &str) -> [Note; 2] {
    [
        Note::skyhook(schema::REBOOT_REASON, schema::skyhook_reboot_message(node)),
        Note::node(
            node,
            schema::REBOOT_REASON,
            schema::node_reboot_message(skyhook),
        ),
    ]
}

/// Changes between the stored and the desired status worth an Event: a status transition, a
/// node newly held back, the spec newly invalid.
pub fn status_changes(
    prior: &SkyhookStatus,
    desired: &SkyhookStatus,
    invalid: &[String],
) -> Vec<Note> {
    let mut out = Vec::new();
    if let Some((old, new)) = status::transition(prior, desired) {
        let msg = schema::skyhook_transition_message(old, new);
        out.push(Note::skyhook(schema::STATE_REASON, msg));
    }
    if let Some(msg) = status::newly_held(prior, desired) {
        out.push(Note::skyhook(schema::DRAIN_BLOCKED_REASON, msg).warning());
    }
    if status::newly_invalid(prior, desired) {
        out.push(Note::skyhook(schema::INVALID_SPEC_REASON, invalid.join("; ")).warning());
    }
    out
}
