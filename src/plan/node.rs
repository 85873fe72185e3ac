//! What a pass reads of a node, kept once per node in the operator's cache. A k8s-openapi `Node`
//! is 1.5 KiB of struct before any of its strings (every field of its spec and status has a
//! place, read or not); this record keeps the few fields the planner and the node metadata
//! ConfigMap read, a tenth of that.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::schema;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub created: Option<Time>,
    pub resource_version: Option<String>,
    /// All of them: Skyhook node selectors and the node metadata ConfigMap read any label.
    pub labels: BTreeMap<String, String>,
    /// All of them: the node metadata ConfigMap copies every annotation.
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    /// The Skyhook conditions only (`skyhook.nvidia.com/...`): the kubelet's are never read.
    pub conditions: Vec<NodeCondition>,
    /// Empty when the kubelet reported none.
    pub boot_id: String,
}

impl NodeView {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// The resourceVersion as a number (etcd's revision), when it is one.
    pub fn version_number(&self) -> Option<u64> {
        self.resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
    }
}

impl From<Node> for NodeView {
    fn from(n: Node) -> NodeView {
        let meta = n.metadata;
        let spec = n.spec.unwrap_or_default();
        let status = n.status.unwrap_or_default();
        let mut conditions = status.conditions.unwrap_or_default();
        conditions.retain(|c| schema::is_skyhook_key(&c.type_));
        conditions.shrink_to_fit();
        NodeView {
            name: meta.name.unwrap_or_default(),
            created: meta.creation_timestamp,
            resource_version: meta.resource_version,
            labels: meta.labels.unwrap_or_default(),
            annotations: meta.annotations.unwrap_or_default(),
            taints: spec.taints.unwrap_or_default(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            conditions,
            boot_id: status.node_info.map(|i| i.boot_id).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_what_a_pass_reads_and_drops_the_kubelets_conditions() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": "42", "uid": "u",
                "creationTimestamp": "2026-11-25T10:00:00Z",
                "labels": {"a": "1"}, "annotations": {"b": "2"}},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "skyhook.nvidia.com/sh/NotReady", "status": "True"},
                ],
                "nodeInfo": {"bootID": "boot-1", "machineID": "", "systemUUID": "",
                    "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "",
                    "kubeletVersion": "", "kubeProxyVersion": "", "operatingSystem": "",
                    "architecture": ""},
            },
        }))
        .expect("node");
        let v = NodeView::from(node);
        assert_eq!(v.name, "n1");
        assert_eq!(v.version_number(), Some(42));
        assert_eq!(v.label("a"), Some("1"));
        assert_eq!(v.annotation("b"), Some("2"));
        assert!(v.unschedulable);
        assert_eq!(v.taints.len(), 1);
        let types: Vec<&str> = v.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["skyhook.nvidia.com/sh/NotReady"]);
        assert_eq!(v.boot_id, "boot-1");
        assert!(v.created.is_some());
        assert!(std::mem::size_of::<NodeView>() < std::mem::size_of::<Node>() / 4);
    }

    #[test]
    fn a_bare_node_has_no_boot_id_and_no_cordon() {
        let v = NodeView::from(Node::default());
        assert_eq!(v.boot_id, "");
        assert!(!v.unschedulable);
        assert_eq!(v.version_number(), None);
    }
}
