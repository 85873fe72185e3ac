//! Request bodies and parameters of the writes of a pass, and how their answers are read: pure,
//! so they can be unit-tested.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::controller::error::Error;
use crate::plan::NodePatch;

pub(super) fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// What the API server said, with each cause (an eviction's names the budget and what it
/// needs: "The disruption budget web needs 1 healthy pods ...").
pub(super) fn api_words(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => {
            let causes = status.details.iter().flat_map(|d| &d.causes);
            std::iter::once(status.message.as_str())
                .chain(causes.map(|c| c.message.as_str()))
                .filter(|m| !m.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        }
        other => other.to_string(),
    }
}

/// A write guarded by a resourceVersion that the object no longer has.
pub(super) fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Kube(k) if is_status(k, 409))
}

/// `Ok` for success and for a 404 (the object went away); the error otherwise.
pub(super) fn ignore_not_found<T>(res: Result<T, kube::Error>) -> Result<(), Error> {
    match res {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The merge patch of one node: `None` values remove keys, the taint list is replaced whole,
/// and the resourceVersion the patch was computed from is its precondition.
pub(super) fn node_patch_body(p: &NodePatch) -> Value {
    let mut meta = serde_json::Map::new();
    if !p.annotations.is_empty() {
        meta.insert("annotations".into(), to_json_map(&p.annotations));
    }
    if !p.labels.is_empty() {
        meta.insert("labels".into(), to_json_map(&p.labels));
    }
    if let Some(rv) = &p.resource_version {
        meta.insert("resourceVersion".into(), json!(rv));
    }
    let mut body = json!({"metadata": meta});
    if let Some(u) = p.unschedulable {
        body["spec"]["unschedulable"] = json!(u);
    }
    if let Some(t) = &p.taints {
        // A merge patch replaces the list, so send all of it (null when empty).
        body["spec"]["taints"] = if t.is_empty() { Value::Null } else { json!(t) };
    }
    body
}

pub(super) fn to_json_map(m: &BTreeMap<String, Option<String>>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String)))
            .collect(),
    )
}

/// Server-side apply bodies must carry apiVersion and kind.
pub(super) fn with_kind<T: serde::Serialize>(obj: &T, api_version: &str, kind: &str) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
            meta.remove("resourceVersion");
        }
    }
    v
}
