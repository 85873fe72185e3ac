//! The status write as a JSON patch of what changed since the stored status. A full replace
//! sends every node's state on every write (about 1 MiB at a thousand nodes × four packages,
//! serialised into one buffer while the pass holds everything else), though a pass changes a
//! few nodes. The patch replaces or removes whole entries of the per-node maps (JSON patch
//! `add` replaces a member whole, where a merge patch would merge into it and keep stale keys),
//! and every other field whole when it changed. It sets `metadata.resourceVersion` to the
//! version the pass read, so the API server refuses it with a 409 when the Skyhook moved on,
//! exactly like the guarded replace.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::crd::SkyhookStatus;

/// The JSON names of the per-node maps (checked against the serialiser by a test).
const NODE_STATE: &str = "nodeState";
const NODE_STATUS: &str = "nodeStatus";
const NODE_BOOT_IDS: &str = "nodeBootIds";
const NODE_PRIORITY: &str = "nodePriority";

/// The operations that turn `before` (the status stored at `resource_version`) into `after`.
pub fn ops(
    before: &SkyhookStatus,
    after: &SkyhookStatus,
    resource_version: &str,
) -> Result<Vec<Value>, serde_json::Error> {
    let mut ops = vec![json!({
        "op": "replace", "path": "/metadata/resourceVersion", "value": resource_version,
    })];
    let (old, new) = (object(&small(before))?, object(&small(after))?);
    for (key, value) in &new {
        if old.get(key) != Some(value) {
            ops.push(add(&[key], value.clone()));
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(*k)) {
        ops.push(remove(&[key]));
    }
    per_node(&mut ops, NODE_STATE, &before.node_state, &after.node_state)?;
    per_node(
        &mut ops,
        NODE_STATUS,
        &before.node_status,
        &after.node_status,
    )?;
    per_node(
        &mut ops,
        NODE_BOOT_IDS,
        &before.node_boot_ids,
        &after.node_boot_ids,
    )?;
    per_node(
        &mut ops,
        NODE_PRIORITY,
        &before.node_priority,
        &after.node_priority,
    )?;
    Ok(ops)
}

/// Everything but the per-node maps. Every field is named, so a new one cannot be left out.
fn small(s: &SkyhookStatus) -> SkyhookStatus {
    SkyhookStatus {
        observed_generation: s.observed_generation,
        status: s.status,
        node_state: BTreeMap::new(),
        node_status: BTreeMap::new(),
        conditions: s.conditions.clone(),
        node_boot_ids: BTreeMap::new(),
        node_priority: BTreeMap::new(),
        node_order_offset: s.node_order_offset,
        config_updates: s.config_updates.clone(),
        compartment_statuses: s.compartment_statuses.clone(),
        nodes_in_progress: s.nodes_in_progress,
        complete_nodes: s.complete_nodes.clone(),
        package_list: s.package_list.clone(),
    }
}

fn object(s: &SkyhookStatus) -> Result<Map<String, Value>, serde_json::Error> {
    match serde_json::to_value(s)? {
        Value::Object(m) => Ok(m),
        _ => Ok(Map::new()),
    }
}

/// An empty map is left out of the stored status (Go's `omitempty`), so it is added or removed
/// whole; otherwise entry by entry.
fn per_node<V: Serialize + PartialEq>(
    ops: &mut Vec<Value>,
    field: &str,
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
) -> Result<(), serde_json::Error> {
    match (before.is_empty(), after.is_empty()) {
        (true, true) => {}
        (true, false) => ops.push(add(&[field], serde_json::to_value(after)?)),
        (false, true) => ops.push(remove(&[field])),
        (false, false) => {
            for (node, value) in after {
                if before.get(node) != Some(value) {
                    ops.push(add(&[field, node], serde_json::to_value(value)?));
                }
            }
            for node in before.keys().filter(|n| !after.contains_key(*n)) {
                ops.push(remove(&[field, node]));
            }
        }
    }
    Ok(())
}

/// `/status/<segments>`, each segment escaped (RFC 6901).
fn pointer(segments: &[&str]) -> String {
    let mut p = String::from("/status");
    for s in segments {
        p.push('/');
        p.push_str(&s.replace('~', "~0").replace('/', "~1"));
    }
    p
}

fn add(segments: &[&str], value: Value) -> Value {
    json!({"op": "add", "path": pointer(segments), "value": value})
}

fn remove(segments: &[&str]) -> Value {
    json!({"op": "remove", "path": pointer(segments)})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{NodeState, PackageStatus, Stage, State, Status};

    fn state(stage: Stage, st: State) -> NodeState {
        let mut s = NodeState::default();
        s.upsert(PackageStatus {
            name: "pkg".into(),
            version: "1.0".into(),
            image: "img".into(),
            container_sha: None,
            stage,
            state: Some(st),
            restarts: 0,
        });
        s
    }

    /// The status as stored at version 7, as JSON with its resourceVersion.
    fn stored(s: &SkyhookStatus) -> Value {
        json!({"metadata": {"resourceVersion": "7"}, "status": s})
    }

    fn applied(before: &SkyhookStatus, after: &SkyhookStatus) -> Value {
        let mut doc = stored(before);
        let ops = ops(before, after, "7").unwrap();
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        doc
    }

    fn status(nodes: &[(&str, Stage, State, Status)]) -> SkyhookStatus {
        let mut s = SkyhookStatus::default();
        for (n, stage, st, status) in nodes {
            s.node_state.insert(n.to_string(), state(*stage, *st));
            s.node_status.insert(n.to_string(), *status);
            s.node_boot_ids.insert(n.to_string(), format!("boot-{n}"));
        }
        s.complete_nodes = format!("0/{}", nodes.len());
        s
    }

    /// Whatever the change, the patched document is the new status, byte for byte as a
    /// replace would store it.
    #[test]
    fn the_patched_status_is_the_new_status() {
        use Stage::*;
        use State::*;
        let a = ("node-a", Apply, InProgress, Status::InProgress);
        let b = ("node/b~1", Config, Complete, Status::Complete);
        let c = ("c", Apply, Erroring, Status::Erroring);
        let mut with_condition = status(&[a, b]);
        with_condition.conditions =
            vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "Rolling".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            }];
        with_condition.status = Some(Status::InProgress);
        let cases: Vec<(&str, SkyhookStatus, SkyhookStatus)> = vec![
            ("first nodes", SkyhookStatus::default(), status(&[a, b])),
            (
                "one node moves",
                status(&[a, b]),
                status(&[(a.0, Config, InProgress, a.3), b]),
            ),
            ("a node leaves", status(&[a, b, c]), status(&[a, c])),
            ("a node comes", status(&[a]), status(&[a, c])),
            ("all nodes go", status(&[a, b]), SkyhookStatus::default()),
            (
                "a condition and the status",
                status(&[a, b]),
                with_condition.clone(),
            ),
            ("they go again", with_condition, status(&[a, b])),
            ("nothing", status(&[a]), status(&[a])),
        ];
        for (case, before, after) in cases {
            assert_eq!(applied(&before, &after), stored(&after), "case: {case}");
        }
    }

    #[test]
    fn only_the_changed_nodes_are_sent_and_the_version_guards_it() {
        use Stage::*;
        use State::*;
        let nodes: Vec<String> = (0..100).map(|i| format!("n{i}")).collect();
        let rows: Vec<_> = nodes
            .iter()
            .map(|n| (n.as_str(), Apply, InProgress, Status::InProgress))
            .collect();
        let before = status(&rows);
        let mut after = before.clone();
        after
            .node_state
            .insert("n42".into(), state(Apply, Complete));
        let ops = ops(&before, &after, "7").unwrap();
        assert_eq!(
            ops,
            [
                json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "7"}),
                json!({"op": "add", "path": "/status/nodeState/n42",
                    "value": serde_json::to_value(state(Apply, Complete)).unwrap()}),
            ]
        );
    }

    #[test]
    fn the_per_node_maps_have_these_json_names() {
        let s = status(&[("n", Stage::Apply, State::InProgress, Status::InProgress)]);
        let mut s = s;
        s.node_priority.insert(
            "n".into(),
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let v = serde_json::to_value(&s).unwrap();
        for name in [NODE_STATE, NODE_STATUS, NODE_BOOT_IDS, NODE_PRIORITY] {
            assert!(v.get(name).is_some(), "{name} in {v}");
        }
        assert_eq!(object(&small(&s)).unwrap().get(NODE_STATE), None);
    }
}
