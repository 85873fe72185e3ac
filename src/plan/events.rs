//! Events of a pass (§5.3): what started, finished or failed on each node, drains, reboots,
//! and changes of the Skyhook's status worth a human's attention.

use super::Note;
use super::stage::NodeNote;
use crate::crd::SkyhookStatus;
use std::collections::BTreeMap;

use crate::schema::{self, Stage, State};

use super::status;

/// (package, version, node) of each stage started this pass, the nodes of each started
/// (package, version, stage), and failures worded for humans.
#[derive(Debug, Default)]
pub struct Started {
    pub started: Vec<(String, String, String)>,
    pub by_stage: BTreeMap<(String, String, Stage), Vec<String>>,
    pub failures: Vec<String>,
}

/// Events of the machine's notes for one node. What completed and what started in one pass is
/// one Event (each part in the reference's words, joined by "; "): at a thousand nodes Events
/// were half of the operator's requests, and a completion is most often followed by the next
/// stage's start in the same pass. Failures are Warnings of their own. The Skyhook's side of
/// the starts comes from [`skyhook_starts`].
pub fn node_notes(skyhook: &str, node: &str, notes: &[NodeNote], tally: &mut Started) -> Vec<Note> {
    let mut out = Vec::new();
    let mut starts: Vec<(Stage, Vec<String>)> = Vec::new();
    let mut completed: Vec<String> = Vec::new();
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
                tally
                    .by_stage
                    .entry((package.clone(), version.clone(), *stage))
                    .or_default()
                    .push(node.to_string());
                let id = format!("{package}:{version}");
                match starts.iter_mut().find(|(s, _)| s == stage) {
                    Some((_, list)) => list.push(id),
                    None => starts.push((*stage, vec![id])),
                }
            }
            NodeNote::Completed {
                package, version, ..
            } => completed.push(format!("{package}:{version}")),
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
    let mut said: Vec<String> = Vec::new();
    if !completed.is_empty() {
        said.push(schema::node_packages_complete_message(&completed, skyhook));
    }
    for (stage, packages) in starts {
        said.push(schema::node_apply_many_message(&packages, skyhook, stage));
    }
    if !said.is_empty() {
        out.push(Note::node(node, schema::APPLY_REASON, said.join("; ")));
    }
    out
}

/// The Skyhook's Events of the starts of a pass: one per package and stage, naming its nodes.
pub fn skyhook_starts(tally: &Started) -> Vec<Note> {
    tally
        .by_stage
        .iter()
        .map(|((package, version, stage), nodes)| {
            let msg = schema::skyhook_apply_many_message(package, version, nodes, *stage);
            Note::skyhook(schema::APPLY_REASON, msg)
        })
        .collect()
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
    if let Some(msg) = status::newly_blocked_by_non_interrupt_pods(prior, desired) {
        out.push(Note::skyhook(schema::DRAIN_REASON, msg).warning());
    }
    if let Some(msg) = status::newly_missing_policy(prior, desired) {
        let msg = format!(
            "{msg}: nothing new starts on this Skyhook's nodes until it is created, or \
             spec.deploymentPolicy names another"
        );
        out.push(Note::skyhook(schema::DEPLOYMENT_POLICY_NOT_FOUND_REASON, msg).warning());
    }
    if let Some(msg) = status::newly_stopped(prior, desired) {
        out.push(Note::skyhook(schema::ROLLOUT_STOPPED_REASON, msg).warning());
    }
    if let Some(msg) = super::status_budget::newly_trimmed(prior, desired) {
        out.push(Note::skyhook(schema::STATUS_TRIMMED_REASON, msg));
    }
    if status::newly_invalid(prior, desired) {
        out.push(Note::skyhook(schema::INVALID_SPEC_REASON, invalid.join("; ")).warning());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Target;
    use super::*;
    use crate::plan::fixtures::{condition, status_with};
    use crate::schema::{Stage, Status};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn started(stage: Stage) -> NodeNote {
        NodeNote::Started {
            package: "drv".into(),
            version: "1.2.3".into(),
            stage,
        }
    }

    fn failed(stage: Stage, restarts: i32) -> NodeNote {
        NodeNote::Failed {
            package: "drv".into(),
            version: "1.2.3".into(),
            stage,
            reason: "ImagePullBackOff".into(),
            message: "pull access denied".into(),
            restarts,
        }
    }

    #[test]
    fn node_notes_table() {
        let sk_note = |reason: &str, message: String| Note::skyhook(reason, message);
        let node_note = |reason: &str, message: String| Note::node("n1", reason, message);
        let failure = |stage: &str, attempt: i32| {
            format!(
                "package drv:1.2.3 stage {stage} failed on node n1 (ImagePullBackOff, attempt {attempt}): pull access denied"
            )
        };
        // (case, notes, events, started, failures)
        let cases: Vec<(
            &str,
            Vec<NodeNote>,
            Vec<Note>,
            Vec<(&str, &str, &str)>,
            Vec<String>,
        )> = vec![
            ("nothing happened", vec![], vec![], vec![], vec![]),
            (
                "a stage started: on the node (the Skyhook's comes per pass)",
                vec![started(Stage::Apply)],
                vec![node_note(
                    schema::APPLY_REASON,
                    "Applying package [drv:1.2.3] from [skyhook:sh] stage [apply]".into(),
                )],
                vec![("drv", "1.2.3", "n1")],
                vec![],
            ),
            (
                "starts of one pass are one Event, grouped by stage",
                vec![
                    started(Stage::Apply),
                    NodeNote::Started {
                        package: "fw".into(),
                        version: "2.0".into(),
                        stage: Stage::Apply,
                    },
                    started(Stage::Config),
                ],
                vec![node_note(
                    schema::APPLY_REASON,
                    "Applying packages [drv:1.2.3, fw:2.0] from [skyhook:sh] stage [apply]; \
                     Applying package [drv:1.2.3] from [skyhook:sh] stage [config]"
                        .into(),
                )],
                vec![
                    ("drv", "1.2.3", "n1"),
                    ("fw", "2.0", "n1"),
                    ("drv", "1.2.3", "n1"),
                ],
                vec![],
            ),
            (
                "a stage completed: on the node only",
                vec![NodeNote::Completed {
                    package: "drv".into(),
                    version: "1.2.3".into(),
                    stage: Stage::Config,
                }],
                vec![node_note(
                    schema::APPLY_REASON,
                    "Package [drv:1.2.3] state complete on [skyhook:sh]".into(),
                )],
                vec![],
                vec![],
            ),
            (
                "a completion and the next stage's start are one Event",
                vec![
                    NodeNote::Completed {
                        package: "drv".into(),
                        version: "1.2.3".into(),
                        stage: Stage::Apply,
                    },
                    started(Stage::Config),
                ],
                vec![node_note(
                    schema::APPLY_REASON,
                    "Package [drv:1.2.3] state complete on [skyhook:sh]; \
                     Applying package [drv:1.2.3] from [skyhook:sh] stage [config]"
                        .into(),
                )],
                vec![("drv", "1.2.3", "n1")],
                vec![],
            ),
            (
                "a stage failed: warnings naming package, version, stage and attempt",
                vec![failed(Stage::PostInterrupt, 3)],
                vec![
                    node_note(
                        schema::APPLY_REASON,
                        "Package [drv:1.2.3] state erroring on [skyhook:sh]".into(),
                    )
                    .warning(),
                    sk_note("ImagePullBackOff", failure("post-interrupt", 3)).warning(),
                ],
                vec![],
                vec![failure("post-interrupt", 3)],
            ),
            (
                "several notes keep their order",
                vec![failed(Stage::Apply, 1), started(Stage::Config)],
                vec![
                    node_note(
                        schema::APPLY_REASON,
                        "Package [drv:1.2.3] state erroring on [skyhook:sh]".into(),
                    )
                    .warning(),
                    sk_note("ImagePullBackOff", failure("apply", 1)).warning(),
                    node_note(
                        schema::APPLY_REASON,
                        "Applying package [drv:1.2.3] from [skyhook:sh] stage [config]".into(),
                    ),
                ],
                vec![("drv", "1.2.3", "n1")],
                vec![failure("apply", 1)],
            ),
        ];
        for (name, notes, want, want_started, want_failures) in cases {
            let mut tally = Started::default();
            let got = node_notes("sh", "n1", &notes, &mut tally);
            assert_eq!(got, want, "case: {name}");
            let want_started: Vec<(String, String, String)> = want_started
                .into_iter()
                .map(|(p, v, n)| (p.into(), v.into(), n.into()))
                .collect();
            assert_eq!(tally.started, want_started, "case: {name}");
            assert_eq!(tally.failures, want_failures, "case: {name}");
            for n in &got {
                assert_eq!(n.node.is_some(), n.target == Target::Node, "case: {name}");
            }
        }
    }

    #[test]
    fn skyhook_starts_name_the_nodes_once_per_package_and_stage() {
        let mut tally = Started::default();
        for node in ["n1", "n2", "n3", "n4", "n5", "n6", "n7"] {
            node_notes("sh", node, &[started(Stage::Apply)], &mut tally);
        }
        node_notes("sh", "n1", &[started(Stage::Config)], &mut tally);
        let got = skyhook_starts(&tally);
        assert_eq!(
            got,
            [
                Note::skyhook(
                    schema::APPLY_REASON,
                    "Applying package [drv:1.2.3] to nodes [n1, n2, n3, n4, n5 and 2 more] stage [apply]".into()
                ),
                Note::skyhook(
                    schema::APPLY_REASON,
                    "Applying package [drv:1.2.3] to node [n1] stage [config]".into()
                ),
            ]
        );
    }

    #[test]
    fn reboot_notes_on_both_objects() {
        let [sk, node] = reboot("sh", "n1");
        assert_eq!(
            sk,
            Note::skyhook(schema::REBOOT_REASON, schema::skyhook_reboot_message("n1"))
        );
        assert_eq!(
            node,
            Note::node(
                "n1",
                schema::REBOOT_REASON,
                schema::node_reboot_message("sh")
            )
        );
    }

    #[test]
    fn status_changes_table() {
        let cond = |type_: &str, status: &str, message: &str| Condition {
            observed_generation: None,
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            ..condition(type_, status, message)
        };
        let held = cond(schema::NODE_BLOCKED_CONDITION, "True", "node n1: draining");
        let invalid = cond(schema::VALID_CONDITION, "False", "bad");
        let transition = Note::skyhook(
            schema::STATE_REASON,
            "Skyhook transitioned [in_progress] -> [complete]".into(),
        );
        let held_note =
            Note::skyhook(schema::DRAIN_BLOCKED_REASON, "node n1: draining".into()).warning();
        let invalid_note = Note::skyhook(schema::INVALID_SPEC_REASON, "a; b".into()).warning();
        let in_progress = Some(Status::InProgress);
        // (case, prior, desired, events)
        let cases: Vec<(&str, SkyhookStatus, SkyhookStatus, Vec<Note>)> = vec![
            (
                "nothing changed",
                status_with(in_progress, vec![]),
                status_with(in_progress, vec![]),
                vec![],
            ),
            (
                "first status: no transition event",
                status_with(None, vec![]),
                status_with(in_progress, vec![]),
                vec![],
            ),
            (
                "transition",
                status_with(in_progress, vec![]),
                status_with(Some(Status::Complete), vec![]),
                vec![transition.clone()],
            ),
            (
                "newly held",
                status_with(in_progress, vec![]),
                status_with(in_progress, vec![held.clone()]),
                vec![held_note.clone()],
            ),
            (
                "still held for the same reason",
                status_with(in_progress, vec![held.clone()]),
                status_with(in_progress, vec![held.clone()]),
                vec![],
            ),
            (
                "newly invalid, worded with every problem",
                status_with(in_progress, vec![]),
                status_with(in_progress, vec![invalid.clone()]),
                vec![invalid_note.clone()],
            ),
            (
                "still invalid",
                status_with(in_progress, vec![invalid.clone()]),
                status_with(in_progress, vec![invalid.clone()]),
                vec![],
            ),
            (
                "all three, in order",
                status_with(in_progress, vec![]),
                status_with(Some(Status::Complete), vec![held.clone(), invalid.clone()]),
                vec![transition.clone(), held_note.clone(), invalid_note.clone()],
            ),
        ];
        let problems = ["a".to_string(), "b".to_string()];
        for (name, prior, desired, want) in cases {
            assert_eq!(
                status_changes(&prior, &desired, &problems),
                want,
                "case: {name}"
            );
        }
    }
}
