//! What a pass reads of a node, kept once per node in the operator's cache. A k8s-openapi `Node`
//! is 1.5 KiB of struct before any of its strings (every field of its spec and status has a
//! place, read or not); this record keeps the few fields the planner and the node metadata
//! ConfigMap read, a tenth of that, with the strings nodes repeat shared ([`Pairs`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::core::{Expression, Selector};

use crate::interned::Shared;
use crate::schema;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub created: Option<Time>,
    pub resource_version: Option<String>,
    /// All of them: Skyhook node selectors and the node metadata ConfigMap read any label.
    pub labels: Pairs,
    /// Under a NodeWright's lens ([`NodeView::in_api`]), the labels and annotations as stored:
    /// node selectors match these labels (`selector_labels`), as upstream matches a node's own,
    /// so a selector naming a `nodewright.nvidia.com/` or a user's `skyhook.nvidia.com/` label
    /// still matches; the node metadata ConfigMap copies both as they are.
    pub stored: Option<std::sync::Arc<NodeView>>,
    /// All of them: the node metadata ConfigMap copies every annotation.
    pub annotations: Pairs,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    /// The Skyhook conditions only (`skyhook.nvidia.com/...`): the kubelet's are never read.
    pub conditions: Vec<Condition>,
    /// Empty when the kubelet reported none.
    pub boot_id: String,
    /// The kubelet's `Ready` condition is there and not `True` (a soaking batch fails on it).
    pub not_ready: bool,
    /// Conditions set by others than the kubelet and Skyhooks (node-problem-detector, a device
    /// plugin), as (type, status): a health gate may wait for one.
    pub other_conditions: Vec<(Shared, Shared)>,
}

impl NodeView {
    /// The labels node selectors match: as stored (see `stored`).
    pub fn selector_labels(&self) -> &Pairs {
        self.stored.as_ref().map_or(&self.labels, |s| &s.labels)
    }

    /// The annotations as stored (see `stored`).
    pub fn stored_annotations(&self) -> &Pairs {
        self.stored
            .as_ref()
            .map_or(&self.annotations, |s| &s.annotations)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }

    /// Another Skyhook or NodeWright than `skyhook` holds a cordon on the node. Read from the
    /// node as stored, under both prefixes: a cordon either API relies on is never lifted by the
    /// other. The same name's mark under the other prefix is not another's: it is the copy a
    /// take-over made (or will make) of the same object's cordon.
    pub fn cordoned_by_another(&self, skyhook: &str) -> bool {
        let prefixes =
            schema::Api::ALL.map(|api| api.local(&schema::cordon_annotation("")).into_owned());
        self.stored_annotations().keys().any(|k| {
            prefixes.iter().any(|p| {
                k.strip_prefix(p.as_str())
                    .is_some_and(|owner| owner != skyhook)
            })
        })
    }

    /// Someone else than `skyhook` wants the node kept cordoned: another Skyhook's cordon, or
    /// upstream's `runtimeRequiredCordon`. `skyhook` then drops its share but never lifts it.
    pub fn cordon_kept_by_others(&self, skyhook: &str) -> bool {
        self.cordoned_by_another(skyhook)
            || self
                .annotations
                .contains_key(schema::RUNTIME_REQUIRED_CORDON_ANNOTATION)
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
        let all = status.conditions.unwrap_or_default();
        let not_ready = all.iter().any(|c| c.type_ == "Ready" && c.status != "True");
        let other_conditions = all
            .iter()
            .filter(|c| !schema::is_operator_key(&c.type_) && !is_kubelet_condition(&c.type_))
            .map(|c| (Shared::new(&c.type_), Shared::new(&c.status)))
            .collect();
        let conditions = all
            .into_iter()
            .filter(|c| schema::is_operator_key(&c.type_))
            .map(Condition::from)
            .collect();
        NodeView {
            name: meta.name.unwrap_or_default(),
            created: meta.creation_timestamp,
            resource_version: meta.resource_version,
            labels: meta.labels.unwrap_or_default().into(),
            stored: None,
            annotations: meta.annotations.unwrap_or_default().into(),
            taints: spec.taints.unwrap_or_default(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            conditions,
            boot_id: status.node_info.map(|i| i.boot_id).unwrap_or_default(),
            not_ready,
            other_conditions,
        }
    }
}

/// The conditions the kubelet itself sets.
pub fn is_kubelet_condition(type_: &str) -> bool {
    matches!(
        type_,
        "Ready" | "MemoryPressure" | "DiskPressure" | "PIDPressure" | "NetworkUnavailable"
    )
}

impl NodeView {
    /// The node as a pass of an object of `api` reads it: its labels, annotations and conditions
    /// under the canonical keys, without those of the other API. Shared for the legacy API.
    pub fn in_api(self: &std::sync::Arc<Self>, api: schema::Api) -> std::sync::Arc<NodeView> {
        if api == schema::Api::Skyhook {
            return self.clone();
        }
        let pairs = |p: &Pairs| {
            Pairs(
                p.0.iter()
                    .filter_map(|(k, v)| {
                        let key = api.canonical(k)?;
                        Some((Shared::new(&key), v.clone()))
                    })
                    .collect::<Vec<_>>()
                    .into_iter()
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into_iter()
                    .collect(),
            )
        };
        let conditions = self
            .conditions
            .iter()
            .filter_map(|c| {
                let type_ = api.canonical(&c.type_)?;
                Some(Condition {
                    type_: Shared::new(&type_),
                    ..c.clone()
                })
            })
            .collect();
        std::sync::Arc::new(NodeView {
            labels: pairs(&self.labels),
            stored: Some(self.clone()),
            annotations: pairs(&self.annotations),
            conditions,
            ..(**self).clone()
        })
    }

    /// The types of the node conditions a Skyhook of this name set.
    pub fn condition_types_of(&self, skyhook: &str) -> Vec<String> {
        let prefix = schema::node_condition_prefix(skyhook);
        self.conditions
            .iter()
            .filter(|c| c.type_.starts_with(&prefix))
            .map(|c| c.type_.to_string())
            .collect()
    }

    /// The status of a condition neither the kubelet nor a Skyhook sets.
    pub fn other_condition(&self, type_: &str) -> Option<&str> {
        self.other_conditions
            .iter()
            .find(|(t, _)| t.as_str() == type_)
            .map(|(_, s)| s.as_str())
    }
}

/// A node's labels or annotations, sorted by key, every key and value shared. Across a fleet
/// they repeat: label keys and values, annotation keys, and the node-state JSON of nodes at the
/// same point of a rollout. A map per node held a B-tree leaf with room for eleven entries and
/// a string per key and value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pairs(Box<[(Shared, Shared)]>);

impl Pairs {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// In key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl From<BTreeMap<String, String>> for Pairs {
    fn from(map: BTreeMap<String, String>) -> Pairs {
        Pairs(
            map.iter()
                .map(|(k, v)| (Shared::new(k), Shared::new(v)))
                .collect(),
        )
    }
}

/// A Skyhook node condition as a pass reads it (its message is fixed by its type and status).
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub type_: Shared,
    pub status: Shared,
    pub reason: Option<Shared>,
    pub last_transition_time: Option<Time>,
}

impl From<NodeCondition> for Condition {
    fn from(c: NodeCondition) -> Condition {
        Condition {
            type_: Shared::new(&c.type_),
            status: Shared::new(&c.status),
            reason: c.reason.as_deref().map(Shared::new),
            last_transition_time: c.last_transition_time,
        }
    }
}

/// Labels a selector can be matched against.
pub trait Labels {
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Labels for Pairs {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

/// A label selector, matched as kube's `Selector` matches a `BTreeMap` (the only labels it
/// takes), over any [`Labels`].
pub struct LabelMatch(Vec<Expression>);

impl LabelMatch {
    /// `None` for a selector kube rejects (an operator it does not know): it selects nothing.
    pub fn new(selector: &LabelSelector) -> Option<LabelMatch> {
        let selector = Selector::try_from(selector.clone()).ok()?;
        Some(LabelMatch(selector.into_iter().collect()))
    }

    pub fn matches(&self, labels: &(impl Labels + ?Sized)) -> bool {
        self.0.iter().all(|e| match e {
            Expression::In(key, values) => labels.label(key).is_some_and(|v| values.contains(v)),
            Expression::NotIn(key, values) => labels.label(key).is_none_or(|v| !values.contains(v)),
            Expression::Exists(key) => labels.label(key).is_some(),
            Expression::DoesNotExist(key) => labels.label(key).is_none(),
            Expression::Equal(key, value) => labels.label(key) == Some(value.as_str()),
            Expression::NotEqual(key, value) => labels.label(key) != Some(value.as_str()),
        })
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
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "KernelDeadlock", "status": "False", "message": "kernel has no deadlock"},
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
        assert_eq!(v.other_condition("KernelDeadlock"), Some("False"));
        assert_eq!(v.other_condition("MemoryPressure"), None);
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

    /// Over the same labels, the same answers as kube's own matching.
    #[test]
    fn label_matches_answer_as_kube_selectors_do() {
        use kube::core::SelectorExt;
        let selectors = [
            json!({}),
            json!({"matchLabels": {"a": "1"}}),
            json!({"matchLabels": {"a": "1", "b": "2"}}),
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}),
            json!({"matchExpressions": [{"key": "b", "operator": "Exists"}]}),
            json!({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}),
            json!({"matchLabels": {"a": "1"},
                "matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["x"]}]}),
        ];
        let label_sets = [
            json!({}),
            json!({"a": "1"}),
            json!({"a": "2", "b": "2"}),
            json!({"a": "1", "b": "2", "c": "x"}),
            json!({"a": "3", "c": "y"}),
        ];
        for sel in &selectors {
            let sel: LabelSelector = serde_json::from_value(sel.clone()).expect("selector");
            let kube = Selector::try_from(sel.clone()).expect("kube selector");
            let ours = LabelMatch::new(&sel).expect("selector");
            for labels in &label_sets {
                let map: BTreeMap<String, String> =
                    serde_json::from_value(labels.clone()).expect("labels");
                let pairs = Pairs::from(map.clone());
                let want = kube.matches(&map);
                assert_eq!(ours.matches(&map), want, "{sel:?} on {labels}");
                assert_eq!(ours.matches(&pairs), want, "{sel:?} on {labels} (pairs)");
            }
        }
        let unknown: LabelSelector = serde_json::from_value(
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
        )
        .expect("selector");
        assert!(LabelMatch::new(&unknown).is_none());
    }

    #[test]
    fn pairs_look_up_and_iterate_in_key_order_and_share_their_strings() {
        let map = |i: usize| -> BTreeMap<String, String> {
            [
                ("zone", "a"),
                ("kubernetes.io/hostname", "n"),
                ("arch", "amd64"),
            ]
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    format!("{v}{}", if k == "zone" { i } else { 0 }),
                )
            })
            .collect()
        };
        let (one, two) = (Pairs::from(map(1)), Pairs::from(map(2)));
        assert_eq!(one.get("zone"), Some("a1"));
        assert_eq!(one.get("missing"), None);
        assert!(one.contains_key("arch"));
        let keys: Vec<&str> = one.keys().collect();
        assert_eq!(keys, ["arch", "kubernetes.io/hostname", "zone"]);
        let (a, b) = (&one.0[0], &two.0[0]);
        assert!(
            std::ptr::eq(a.1.as_str(), b.1.as_str()),
            "one copy of a shared value"
        );
    }
}
