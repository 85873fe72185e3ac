//! What the plugin reads of a node: its name and Skyhook's (or a NodeWright's) labels and
//! annotations, decoded from a metadata-only list while it arrives; nothing else is built.

use std::collections::BTreeMap;

use serde::Deserialize;
use skyhook::schema;
use skyhook::schema::Api as ApiKind;

/// What the plugin reads from a Node: only metadata, never the spec or status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NodeMeta {
    pub name: String,
    /// Skyhook's own labels (`skyhook.nvidia.com/...`), unless listed with
    /// [`Labels::All`]: only a compartment lookup reads the others, and they were a fifth of
    /// what `node status` kept of a thousand nodes.
    #[serde(default, deserialize_with = "skyhook_labels")]
    pub labels: BTreeMap<String, String>,
    /// The node-state annotations (`nodeState_<sh>`), upstream's `runtimeRequiredCordon` mark,
    /// the status, health gate and protected pods' wait annotations (`status_<sh>`,
    /// `healthGate_<sh>`, `nonInterruptWait_<sh>`) only: nothing else of a node's annotations is read, and at a thousand nodes the
    /// others (our own bookkeeping among them) would be most of what a list keeps.
    #[serde(default, deserialize_with = "node_states")]
    pub annotations: BTreeMap<String, String>,
}

/// Which of a node's labels a listing keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Labels {
    /// `skyhook.nvidia.com/...` only.
    Skyhook,
    /// Every label (DeploymentPolicy selectors can name any).
    All,
}

/// [`NodeMeta`] with every label.
#[derive(Deserialize)]
pub(super) struct AllLabelsMeta {
    name: String,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "node_states")]
    annotations: BTreeMap<String, String>,
}

impl From<AllLabelsMeta> for NodeMeta {
    fn from(m: AllLabelsMeta) -> NodeMeta {
        NodeMeta {
            name: m.name,
            labels: m.labels.unwrap_or_default(),
            annotations: m.annotations,
        }
    }
}

fn skyhook_labels<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    d.deserialize_any(Kept(schema::is_operator_key))
}

fn node_states<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    d.deserialize_any(Kept(|k| {
        let read = |k: &str| {
            schema::skyhook_of_node_state_annotation(k).is_some()
                || k == schema::RUNTIME_REQUIRED_CORDON_ANNOTATION
                || schema::is_gate_or_status_annotation(k)
                || schema::skyhook_of_protected_wait_annotation(k).is_some()
        };
        // A NodeWright's keys too: each listing keeps the keys of the API it is in (`in_api`).
        read(k)
            || ApiKind::NodeWright
                .canonical(k)
                .is_some_and(|c| c != k && read(&c))
    }))
}

/// A string map of which only the keys `.0` accepts are built; the rest are skipped unparsed.
struct Kept(fn(&str) -> bool);

impl<'de> serde::de::Visitor<'de> for Kept {
    type Value = BTreeMap<String, String>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a map of strings")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(BTreeMap::new())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut kept = BTreeMap::new();
        while let Some(k) = m.next_key::<String>()? {
            if (self.0)(&k) {
                kept.insert(k, m.next_value::<String>()?);
            } else {
                m.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(kept)
    }
}

/// One page of a metadata-only node list, parsed straight into [`NodeMeta`]: the managedFields
/// every writer of a node adds (the larger part of its metadata on a busy node, and a tree of
/// JSON values once parsed) are skipped, not kept.
#[derive(Deserialize)]
pub(super) struct NodePage<M> {
    /// `null` in an empty metadata-only list.
    #[serde(default = "Option::default")]
    pub(super) items: Option<Vec<NodeItem<M>>>,
    pub(super) metadata: PageMeta,
}

#[derive(Deserialize)]
pub(super) struct NodeItem<M> {
    pub(super) metadata: M,
}

#[derive(Deserialize)]
pub(super) struct PageMeta {
    #[serde(rename = "continue", default)]
    pub(super) continue_: Option<String>,
}
