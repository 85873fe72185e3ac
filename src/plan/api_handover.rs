//! Which of a Skyhook and a NodeWright of the same name is reconciled (issue 39): the
//! NodeWright takes over once the Skyhook is not mid-rollout, and the Skyhook is then frozen
//! (upstream v0.18's migration: legacy objects' status freezes, delta D23). While the Skyhook is
//! mid-rollout (`in_progress`, `erroring`, `blocked`, `waiting`, `unknown`: upstream's migration
//! hold, D24) it finishes, and the NodeWright waits.
//!
//! The take-over is recorded twice, so that it happens once and is never undone by accident: on
//! the Skyhook (`taken-over-by-nodewright`), which stays frozen from then on even when the
//! NodeWright is edited or deleted, until it is deleted or released; and per node
//! (`takenOver_<name>` under the NodeWright's prefix), so that the legacy keys are copied to a
//! node once and a key the NodeWright removed later is never copied back.

use kube::ResourceExt;

use super::actions::NodePatch;
use crate::crd::{Skyhook, SkyhookStatus};
use crate::node::NodeView;
use crate::schema::{self, Api, Status};

/// What a pass of an object does, given its same-named object of the other API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Reconcile it.
    Run,
    /// A Skyhook its NodeWright has taken over: nothing is written (a deletion only drops the
    /// finalizer).
    Frozen,
    /// A NodeWright whose Skyhook is mid-rollout: wait for it.
    Wait,
    /// A Skyhook taken over, released by its owner, with no NodeWright of its name left: the
    /// record and the release come off, and the Skyhook is reconciled again.
    Release,
}

/// A Skyhook its NodeWright took over (recorded on it).
pub fn taken_over(sk: &Skyhook) -> bool {
    sk.annotations().contains_key(schema::TAKEN_OVER_ANNOTATION)
}

/// A Skyhook its owner handed back to the legacy engine (`kubectl skyhook release`).
fn released(sk: &Skyhook) -> bool {
    sk.annotations()
        .get(schema::RELEASE_FROM_NODEWRIGHT_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Upstream's hold: a legacy object in one of these holds the migration.
pub fn mid_rollout(sk: &Skyhook) -> bool {
    matches!(
        sk.status.as_ref().and_then(|s| s.status),
        Some(
            Status::InProgress
                | Status::Erroring
                | Status::Blocked
                | Status::Waiting
                | Status::Unknown
        )
    )
}

/// The generation of a frozen Skyhook's spec that its last reconciled pass did not see: an edit
/// made after the take-over, which nothing applies.
pub fn unapplied_edit(sk: &Skyhook) -> Option<i64> {
    let generation = sk.metadata.generation?;
    let observed = sk.status.as_ref().map_or(0, |s| s.observed_generation);
    (generation > observed).then_some(generation)
}

/// The turn of `mine` (of `api`), `peer` being the same-named object of the other API, if any.
///
/// A Skyhook recorded as taken over stays frozen whatever becomes of its NodeWright: deleting or
/// editing the NodeWright never runs the old spec again. Only its own deletion (a deletion pass
/// runs no stage) and an explicit release, once no NodeWright of its name is left, end that.
pub fn turn(api: Api, mine: &Skyhook, peer: Option<&Skyhook>) -> Turn {
    let live = peer.filter(|p| p.metadata.deletion_timestamp.is_none());
    match api {
        Api::Skyhook if mine.metadata.deletion_timestamp.is_some() => match live {
            Some(_) if taken_over(mine) || !mid_rollout(mine) => Turn::Frozen,
            _ => Turn::Run,
        },
        Api::Skyhook if taken_over(mine) => {
            if released(mine) && peer.is_none() {
                Turn::Release
            } else {
                Turn::Frozen
            }
        }
        Api::Skyhook => match live {
            Some(_) if !mid_rollout(mine) => Turn::Frozen,
            _ => Turn::Run,
        },
        Api::NodeWright => match live {
            Some(p) if mid_rollout(p) && !taken_over(p) => Turn::Wait,
            _ => Turn::Run,
        },
    }
}

/// The status a frozen Skyhook shows: its NodeWright's, so that what polls the legacy object
/// (`kubectl wait --for=condition=Ready`, `.status.status`, `completeNodes`) follows the rollout
/// that now runs its nodes. The generation observed is the Skyhook's own, and the newest: the
/// operator has seen an edit made while frozen and answered it (the `EditNotApplied` Warning,
/// sent before this status), and `kubectl wait` ignores a status or condition whose generation
/// is older than the object's. `None` when it shows that already, or when there is no NodeWright
/// status to follow (the last one followed stays).
pub fn followed_status(sk: &Skyhook, nw: &Skyhook) -> Option<SkyhookStatus> {
    let mut status = nw.status.clone()?;
    let before = sk.status.as_ref().map_or(0, |s| s.observed_generation);
    let seen = sk.metadata.generation.unwrap_or(before);
    status.observed_generation = seen;
    for c in &mut status.conditions {
        c.observed_generation = Some(seen);
    }
    (sk.status.as_ref() != Some(&status)).then_some(status)
}

/// The node keys a NodeWright takes over from the Skyhook of its name (upstream's copy, delta
/// D24): the operator's name-scoped annotations and status label, and the node-scoped
/// `autoTaint_` annotations and `ignore` label. A key the NodeWright already has wins.
///
/// `node` is as stored (the legacy API's view); the patch is in the canonical keys, which the
/// NodeWright's writer puts under its prefix, with the record of the copy (`takenOver_<name>`,
/// `at`). `None` when the node holds nothing of the name, or when the copy was made already:
/// once per (name, node), so that a key the NodeWright removed is never copied back. The
/// node-scoped keys come with the first take-over of the node. A node the NodeWright already
/// keeps state on (taken over by an earlier build, which did not record it) gets the record
/// alone.
pub fn copied_keys(name: &str, node: &NodeView, at: &str) -> Option<NodePatch> {
    let nw = Api::NodeWright;
    let record = schema::taken_over_annotation(name);
    if node.annotation(&nw.local(&record)).is_some() {
        return None;
    }
    let named = schema::name_scoped_annotations(name);
    let label = schema::status_label(name);
    let here = named.iter().any(|k| node.annotation(k).is_some()) || node.label(&label).is_some();
    if !here {
        return None;
    }
    let mut patch = NodePatch::of(node);
    let state = schema::node_state_annotation(name);
    if node.annotation(&nw.local(&state)).is_none() {
        // The node-scoped keys come with the first take-over of the node only: copied again with
        // another name's, a key the NodeWrights' owner removed (`ignore`) would come back.
        let first = !node
            .annotations
            .keys()
            .any(|k| k.starts_with(nw.local(&schema::taken_over_annotation("")).as_ref()));
        let auto_taints = node
            .annotations
            .keys()
            .filter(|k| first && k.starts_with(&schema::auto_taint_annotation("")))
            .map(str::to_string);
        for key in named.into_iter().chain(auto_taints) {
            if let Some(v) = node.annotation(&key)
                && node.annotation(&nw.local(&key)).is_none()
            {
                patch.annotations.insert(key, Some(v.to_string()));
            }
        }
        let ignore = first.then(|| schema::IGNORE_LABEL.to_string());
        for key in std::iter::once(label).chain(ignore) {
            if let Some(v) = node.label(&key)
                && node.label(&nw.local(&key)).is_none()
            {
                patch.labels.insert(key, Some(v.to_string()));
            }
        }
    }
    patch.annotations.insert(record, Some(at.to_string()));
    Some(patch)
}

/// The legacy keys of `name` on `node` once a NodeWright's take-over is old enough (upstream's
/// clean-up, D24): the name-scoped annotations, the status label, and the node conditions of the
/// name (their types). Never `autoTaint_` or `ignore`. The patch names the legacy keys as they
/// are stored: it is written as the legacy API writes.
pub fn pruned_keys(name: &str, node: &NodeView) -> Option<(NodePatch, Vec<String>)> {
    let named = schema::name_scoped_annotations(name);
    let mut patch = NodePatch::of(node);
    for key in named {
        if node.annotation(&key).is_some() {
            patch.annotations.insert(key, None);
        }
    }
    let label = schema::status_label(name);
    if node.label(&label).is_some() {
        patch.labels.insert(label, None);
    }
    let conditions = node.condition_types_of(name);
    (!patch.is_empty() || !conditions.is_empty()).then_some((patch, conditions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::SkyhookStatus;

    #[test]
    fn a_nodewright_copies_the_legacy_keys_it_lacks_and_keeps_its_own() {
        let node = crate::plan::fixtures::node("n1")
            .annotation(&schema::node_state_annotation("sk"), "{\"legacy\":1}")
            .annotation(&schema::cordon_annotation("sk"), "true")
            .annotation("nodewright.nvidia.com/cordon_sk", "mine")
            .annotation(&schema::node_state_annotation("other"), "{}")
            .annotation(&schema::auto_taint_annotation("skyhook.nvidia.com"), "true")
            .labels(serde_json::json!({
                schema::status_label("sk"): "complete",
                schema::IGNORE_LABEL: "true",
            }))
            .build();
        let patch = copied_keys("sk", &node, "T").expect("a patch");
        let keys: Vec<&String> = patch.annotations.keys().collect();
        assert_eq!(
            keys,
            [
                &schema::auto_taint_annotation("skyhook.nvidia.com"),
                &schema::node_state_annotation("sk"),
                &schema::taken_over_annotation("sk"),
            ]
        );
        assert_eq!(
            patch.annotations[&schema::taken_over_annotation("sk")].as_deref(),
            Some("T")
        );
        assert_eq!(patch.labels.len(), 2);
        assert!(copied_keys("none", &crate::plan::fixtures::node("n2").build(), "T").is_none());
    }

    #[test]
    fn the_copy_is_made_once_per_node() {
        let legacy = || {
            crate::plan::fixtures::node("n1")
                .annotation(&schema::node_state_annotation("sk"), "{}")
                .annotation(&schema::cordon_annotation("sk"), "true")
        };
        // Recorded: the NodeWright removed its cordon since, and it is not copied back.
        let recorded = legacy()
            .annotation("nodewright.nvidia.com/takenOver_sk", "T")
            .annotation("nodewright.nvidia.com/nodeState_sk", "{}")
            .build();
        assert!(copied_keys("sk", &recorded, "T2").is_none());
        // A node with nothing of the name: nothing, not even the node's own keys.
        let other = crate::plan::fixtures::node("n2")
            .annotation(&schema::node_state_annotation("other"), "{}")
            .labels(serde_json::json!({schema::IGNORE_LABEL: "true"}))
            .build();
        assert!(copied_keys("sk", &other, "T").is_none());
        // The node-scoped keys come with the node's first take-over only.
        let second = crate::plan::fixtures::node("n3")
            .annotation(&schema::node_state_annotation("sk"), "{}")
            .annotation("nodewright.nvidia.com/takenOver_first", "T")
            .labels(serde_json::json!({schema::IGNORE_LABEL: "true"}))
            .build();
        let patch = copied_keys("sk", &second, "T2").expect("the name's keys");
        assert!(patch.labels.is_empty(), "{patch:?}");
        // Taken over by an earlier build (state, no record): the record alone.
        let earlier = legacy()
            .annotation("nodewright.nvidia.com/nodeState_sk", "{}")
            .build();
        let patch = copied_keys("sk", &earlier, "T2").expect("the record");
        assert_eq!(
            patch.annotations.keys().collect::<Vec<_>>(),
            [&schema::taken_over_annotation("sk")]
        );
        assert!(patch.labels.is_empty());
    }

    fn with(status: Option<Status>) -> Skyhook {
        let mut sk = Skyhook::new("sk", Default::default());
        sk.status = status.map(|s| SkyhookStatus {
            status: Some(s),
            ..SkyhookStatus::default()
        });
        sk
    }

    #[test]
    fn the_clean_up_takes_the_names_keys_and_leaves_the_nodes_own() {
        let node = crate::plan::fixtures::node("n1")
            .annotation(&schema::node_state_annotation("sk"), "{}")
            .annotation("nodewright.nvidia.com/nodeState_sk", "{}")
            .annotation(&schema::node_state_annotation("other"), "{}")
            .annotation(&schema::auto_taint_annotation("skyhook.nvidia.com"), "true")
            .labels(serde_json::json!({
                schema::status_label("sk"): "complete",
                schema::IGNORE_LABEL: "false",
            }))
            .conditions(serde_json::json!([
                {"type": schema::node_not_ready_condition("sk"), "status": "False"},
                {"type": "nodewright.nvidia.com/sk/NotReady", "status": "False"},
            ]))
            .build();
        let (patch, conditions) = pruned_keys("sk", &node).expect("something to prune");
        let keys: Vec<&String> = patch.annotations.keys().collect();
        assert_eq!(keys, [&schema::node_state_annotation("sk")]);
        assert!(patch.annotations.values().all(Option::is_none));
        assert_eq!(
            patch.labels.keys().collect::<Vec<_>>(),
            [&schema::status_label("sk")]
        );
        assert_eq!(conditions, [schema::node_not_ready_condition("sk")]);
        assert!(pruned_keys("none", &node).is_none());
    }

    #[test]
    fn an_edit_after_the_freeze_is_one_its_last_pass_did_not_see() {
        let mut sk = with(Some(Status::Complete));
        sk.metadata.generation = Some(3);
        assert_eq!(unapplied_edit(&sk), Some(3), "status observed 0");
        if let Some(s) = sk.status.as_mut() {
            s.observed_generation = 3;
        }
        assert_eq!(unapplied_edit(&sk), None);
        sk.metadata.generation = Some(4);
        assert_eq!(unapplied_edit(&sk), Some(4));
    }

    #[test]
    fn alone_each_runs() {
        for api in Api::ALL {
            assert_eq!(turn(api, &with(None), None), Turn::Run);
        }
    }

    #[test]
    fn a_skyhook_mid_rollout_finishes_and_its_nodewright_waits() {
        for s in [
            Status::InProgress,
            Status::Erroring,
            Status::Blocked,
            Status::Waiting,
            Status::Unknown,
        ] {
            let legacy = with(Some(s));
            let nw = with(None);
            assert_eq!(turn(Api::Skyhook, &legacy, Some(&nw)), Turn::Run, "{s:?}");
            assert_eq!(
                turn(Api::NodeWright, &nw, Some(&legacy)),
                Turn::Wait,
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_quiet_skyhook_is_frozen_and_its_nodewright_runs() {
        for s in [
            None,
            Some(Status::Complete),
            Some(Status::Paused),
            Some(Status::Disabled),
        ] {
            let legacy = with(s);
            let nw = with(None);
            assert_eq!(
                turn(Api::Skyhook, &legacy, Some(&nw)),
                Turn::Frozen,
                "{s:?}"
            );
            assert_eq!(
                turn(Api::NodeWright, &nw, Some(&legacy)),
                Turn::Run,
                "{s:?}"
            );
        }
    }

    fn deleting(mut sk: Skyhook) -> Skyhook {
        sk.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        sk
    }

    fn annotated(mut sk: Skyhook, pairs: &[(&str, &str)]) -> Skyhook {
        let a = sk.metadata.annotations.get_or_insert_default();
        for (k, v) in pairs {
            a.insert(k.to_string(), v.to_string());
        }
        sk
    }

    fn recorded(status: Option<Status>) -> Skyhook {
        annotated(with(status), &[(schema::TAKEN_OVER_ANNOTATION, "T")])
    }

    #[test]
    fn a_peer_being_deleted_that_never_took_over_takes_nothing_over() {
        let nw = deleting(with(None));
        assert_eq!(
            turn(Api::Skyhook, &with(Some(Status::Complete)), Some(&nw)),
            Turn::Run
        );
    }

    #[test]
    fn a_skyhook_taken_over_stays_frozen_when_its_nodewright_is_edited_or_deleted() {
        let sk = recorded(Some(Status::Complete));
        let nw = with(Some(Status::InProgress));
        assert_eq!(turn(Api::Skyhook, &sk, Some(&nw)), Turn::Frozen);
        assert_eq!(turn(Api::Skyhook, &sk, Some(&deleting(nw))), Turn::Frozen);
        assert_eq!(turn(Api::Skyhook, &sk, None), Turn::Frozen, "gone");
        // Its status follows the NodeWright's (in_progress): that holds nothing.
        let following = recorded(Some(Status::InProgress));
        assert_eq!(turn(Api::Skyhook, &following, None), Turn::Frozen);
        assert_eq!(
            turn(Api::NodeWright, &with(None), Some(&following)),
            Turn::Run
        );
    }

    #[test]
    fn only_an_explicit_release_with_no_nodewright_left_unfreezes_it() {
        let release = [(schema::RELEASE_FROM_NODEWRIGHT_ANNOTATION, "true")];
        let sk = annotated(recorded(Some(Status::Complete)), &release);
        assert_eq!(turn(Api::Skyhook, &sk, None), Turn::Release);
        assert_eq!(turn(Api::Skyhook, &sk, Some(&with(None))), Turn::Frozen);
        assert_eq!(
            turn(Api::Skyhook, &sk, Some(&deleting(with(None)))),
            Turn::Frozen,
            "its NodeWright's deletion pass first"
        );
        let no = annotated(
            recorded(None),
            &[(schema::RELEASE_FROM_NODEWRIGHT_ANNOTATION, "false")],
        );
        assert_eq!(turn(Api::Skyhook, &no, None), Turn::Frozen);
    }

    #[test]
    fn a_deleted_skyhook_is_cleaned_up_unless_a_nodewright_keeps_its_nodes() {
        let gone = deleting(recorded(Some(Status::Complete)));
        assert_eq!(turn(Api::Skyhook, &gone, None), Turn::Run);
        assert_eq!(turn(Api::Skyhook, &gone, Some(&with(None))), Turn::Frozen);
        let busy = deleting(with(Some(Status::InProgress)));
        assert_eq!(turn(Api::Skyhook, &busy, Some(&with(None))), Turn::Run);
    }

    #[test]
    fn a_frozen_skyhook_shows_its_nodewrights_status_at_its_own_newest_generation() {
        let mut sk = recorded(Some(Status::Complete));
        sk.metadata.generation = Some(3);
        if let Some(s) = sk.status.as_mut() {
            s.observed_generation = 2;
        }
        let mut nw = with(Some(Status::InProgress));
        if let Some(s) = nw.status.as_mut() {
            s.observed_generation = 7;
            s.complete_nodes = "1/3".to_string();
            s.conditions.push(
                serde_json::from_value(serde_json::json!({"type": "Ready", "status": "False",
                    "reason": "InProgress", "message": "", "lastTransitionTime":
                    "2026-01-01T00:00:00Z", "observedGeneration": 7}))
                .expect("a condition"),
            );
        }
        let shown = followed_status(&sk, &nw).expect("a new status");
        assert_eq!(shown.status, Some(Status::InProgress));
        assert_eq!(shown.complete_nodes, "1/3");
        assert_eq!(
            shown.observed_generation, 3,
            "kubectl wait skips a status older than the Skyhook's generation"
        );
        assert!(
            shown
                .conditions
                .iter()
                .all(|c| c.observed_generation == Some(3))
        );
        sk.status = Some(shown);
        assert_eq!(followed_status(&sk, &nw), None, "shown already");
        assert_eq!(followed_status(&sk, &with(None)), None, "nothing to follow");
    }
}
