//! The campaign's ground truth as the harness saw it: every Node, Job, pod and object (Skyhook,
//! NodeWright) change from its own watches, one JSON line each, with the time it was received.
//! The checker reads only this (and the workload), never the operator's code or its verdicts:
//! the keys below are the wire contract, written out again here on purpose.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The two prefixes our keys come in (`skyhook.nvidia.com/…`, `nodewright.nvidia.com/…`).
pub const PREFIXES: [&str; 2] = ["skyhook.nvidia.com/", "nodewright.nvidia.com/"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Node,
    Job,
    Pod,
    /// A Skyhook or a NodeWright.
    Object,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// When the harness received it.
    pub t: Timestamp,
    pub kind: Kind,
    pub deleted: bool,
    pub obj: Value,
}

impl Record {
    pub fn name(&self) -> &str {
        str_at(&self.obj, "/metadata/name")
    }
    pub fn uid(&self) -> &str {
        str_at(&self.obj, "/metadata/uid")
    }
}

pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// One of our keys in `map` (labels or annotations) under either prefix.
pub fn ours<'a>(map: &'a Value, key: &str) -> Option<&'a str> {
    PREFIXES
        .iter()
        .find_map(|p| map.get(format!("{p}{key}")).and_then(Value::as_str))
}

/// What identifies one run of one stage: (object, node, package, version, stage, spec hash).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunKey {
    pub object: String,
    pub node: String,
    pub package: String,
    pub version: String,
    pub stage: String,
    pub hash: String,
}

impl std::fmt::Display for RunKey {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{} {}@{} {} on {} (hash {})",
            self.object, self.package, self.version, self.stage, self.node, self.hash
        )
    }
}

/// The run a Job (or its pod) stands for, from its labels and annotations.
pub fn run_key(obj: &Value) -> Option<RunKey> {
    let labels = obj.pointer("/metadata/labels")?;
    let annotations = obj.pointer("/metadata/annotations")?;
    let package: Value = serde_json::from_str(ours(annotations, "package")?).ok()?;
    Some(RunKey {
        object: ours(labels, "name")?.to_string(),
        node: ours(labels, "node")?.to_string(),
        package: str_at(&package, "/name").to_string(),
        version: str_at(&package, "/version").to_string(),
        stage: ours(labels, "stage")?.to_string(),
        hash: ours(annotations, "spec-hash").unwrap_or("").to_string(),
    })
}

/// A Job's terminal condition, if it has one: `Some(true)` complete, `Some(false)` failed.
pub fn job_finished(obj: &Value) -> Option<bool> {
    let conditions = obj.pointer("/status/conditions")?.as_array()?;
    conditions.iter().find_map(|c| {
        let on = str_at(c, "/status") == "True";
        match str_at(c, "/type") {
            "Complete" if on => Some(true),
            "Failed" if on => Some(false),
            _ => None,
        }
    })
}

/// A pod that has started and not finished: running, or (on a real node, where an interrupt
/// runs in an init container while the phase still reads Pending) with a container that runs or
/// ran.
pub fn pod_active(pod: &Value) -> bool {
    let phase = str_at(pod, "/status/phase");
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    let began = |list: &str| {
        pod.pointer(&format!("/status/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.pointer("/state/running").is_some() || c.pointer("/state/terminated").is_some()
            })
    };
    phase == "Running" || began("initContainerStatuses") || began("containerStatuses")
}

/// Reads a history file: one [`Record`] a line.
pub fn read(path: &std::path::Path) -> std::io::Result<Vec<Record>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}
