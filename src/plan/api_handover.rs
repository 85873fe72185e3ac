//! Which of a Skyhook and a NodeWright of the same name is reconciled (issue 39): the
//! NodeWright takes over once the Skyhook is not mid-rollout, and the Skyhook is then frozen
//! (upstream v0.18's migration: legacy objects' status freezes, delta D23). While the Skyhook is
//! mid-rollout (`in_progress`, `erroring`, `blocked`, `waiting`, `unknown`: upstream's migration
//! hold, D24) it finishes, and the NodeWright waits.

use super::actions::NodePatch;
use crate::crd::Skyhook;
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
pub fn turn(api: Api, mine: &Skyhook, peer: Option<&Skyhook>) -> Turn {
    let Some(peer) = peer.filter(|p| p.metadata.deletion_timestamp.is_none()) else {
        return Turn::Run;
    };
    match api {
        Api::Skyhook if mid_rollout(mine) => Turn::Run,
        Api::Skyhook => Turn::Frozen,
        Api::NodeWright if mid_rollout(peer) => Turn::Wait,
        Api::NodeWright => Turn::Run,
    }
}

/// The node keys a NodeWright takes over from the Skyhook of its name (upstream's copy, delta
/// D24): the operator's name-scoped annotations and status label, and the node-scoped
/// `autoTaint_` annotations and `ignore` label. A key the NodeWright already has wins.
///
/// `node` is as stored (the legacy API's view); the patch is in the canonical keys, which the
/// NodeWright's writer puts under its prefix. `None` when there is nothing to copy.
pub fn copied_keys(name: &str, node: &NodeView) -> Option<NodePatch> {
    let nw = Api::NodeWright;
    let named = schema::name_scoped_annotations(name);
    let auto_taints = node
        .annotations
        .keys()
        .filter(|k| k.starts_with(&schema::auto_taint_annotation("")))
        .map(str::to_string);
    let mut patch = NodePatch::of(node);
    for key in named.into_iter().chain(auto_taints) {
        if let Some(v) = node.annotation(&key)
            && node.annotation(&nw.local(&key)).is_none()
        {
            patch.annotations.insert(key, Some(v.to_string()));
        }
    }
    for key in [schema::status_label(name), schema::IGNORE_LABEL.to_string()] {
        if let Some(v) = node.label(&key)
            && node.label(&nw.local(&key)).is_none()
        {
            patch.labels.insert(key, Some(v.to_string()));
        }
    }
    (!patch.is_empty()).then_some(patch)
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
        let patch = copied_keys("sk", &node).expect("a patch");
        let keys: Vec<&String> = patch.annotations.keys().collect();
        assert_eq!(
            keys,
            [
                &schema::auto_taint_annotation("skyhook.nvidia.com"),
                &schema::node_state_annotation("sk"),
            ]
        );
        assert_eq!(patch.labels.len(), 2);
        assert!(copied_keys("none", &crate::plan::fixtures::node("n2").build()).is_none());
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

    #[test]
    fn a_peer_being_deleted_takes_nothing_over() {
        let mut nw = with(None);
        nw.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(
            turn(Api::Skyhook, &with(Some(Status::Complete)), Some(&nw)),
            Turn::Run
        );
    }
}
