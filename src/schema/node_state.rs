//! The node-state annotation (`nodeState_<sh>`): per-package progress of one Skyhook on a node.
//!
//! This JSON is shared with the reference operator and plugin, which rewrite it as strings, so
//! `NodeState::to_annotation` reproduces Go's `json.Marshal` byte for byte and parsing accepts
//! everything older writers produced (no `image`, unversioned keys, unknown fields).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

use super::{SchemaError, Stage, State, go_json};
use crate::interned::Shared;

/// The unique package key `<pkg>|<ver>`: node-state map key and dependency-graph vertex id.
pub fn package_key(name: &str, version: &str) -> String {
    format!("{name}|{version}")
}

/// The mark in a node's `applied_<sh>` record that it completed `name` at `version` once (by
/// the package's own interrupt): a config change recorded later is config-only there, while a
/// node still installing owes the package's interrupt too.
pub fn installed_key(name: &str, version: &str) -> String {
    format!("{name}|{version}|installed")
}

/// Splits a `<pkg>|<ver>` key; `None` for a legacy unversioned key.
pub fn split_package_key(key: &str) -> Option<(&str, &str)> {
    key.split_once('|')
}

/// Whether a node-state key is the pre-v0.5 unversioned form (`"dexter"`), which migration
/// rewrites to `<pkg>|<ver>`.
pub fn is_legacy_key(key: &str) -> bool {
    !key.contains('|')
}

/// Progress of one package version on one node. Field order is Go's marshal order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PackageStatus {
    pub name: Shared,
    pub version: Shared,
    /// Image without tag; `""` when the writer had none (pre-v0.5 state, hand-made pods).
    #[serde(default)]
    pub image: Shared,
    /// Digest actually deployed (`sha256:…`).
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "go_json::is_none_or_empty"
    )]
    pub container_sha: Option<String>,
    pub stage: Stage,
    /// `None` when absent or `""` (Go's omitempty drops the empty string).
    #[serde(
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub state: Option<State>,
    /// Container restart count of the stage pod.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: i32,
}

impl PackageStatus {
    /// The map key this entry belongs under.
    pub fn key(&self) -> String {
        package_key(&self.name, &self.version)
    }
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

fn empty_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<State>, D::Error> {
    let raw: Option<String> = Option::deserialize(d)?;
    Ok(raw.filter(|s| !s.is_empty()).map(|s| {
        // Unrecognised states read as `unknown`, which the operator treats as erroring.
        s.parse().unwrap_or(State::Unknown)
    }))
}

/// All packages of one Skyhook on one node, keyed `<pkg>|<ver>` (sorted bytewise, as Go sorts
/// map keys).
///
/// A sorted list rather than a `BTreeMap`: a node carries a handful of packages, and a map's
/// first leaf reserves room for eleven entries, so each state took three times the memory its
/// entries need. The operator holds every node's state several times over at once (the node
/// cache, the Skyhook status, the pass's result, the status written), which at a thousand
/// nodes made this type one of its largest. Keys, names, versions and images are the same on
/// every node, so each is one shared copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeState(Vec<(Shared, PackageStatus)>);

impl NodeState {
    /// Parses an annotation value. `null` (what Go writes for a nil map) is the empty state.
    pub fn parse(annotation: &str) -> Result<NodeState, SchemaError> {
        serde_json::from_str(annotation).map_err(|source| SchemaError::Json {
            what: "node state",
            source,
        })
    }

    /// The annotation value, byte-identical to the reference operator's.
    pub fn to_annotation(&self) -> String {
        go_json::to_string_infallible(self)
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The entry for an exact package version.
    pub fn get(&self, name: &str, version: &str) -> Option<&PackageStatus> {
        let i = self.find(&package_key(name, version)).ok()?;
        Some(&self.0[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Inserts or replaces the entry under its own `<pkg>|<ver>` key.
    pub fn upsert(&mut self, status: PackageStatus) -> Option<PackageStatus> {
        let key = status.key();
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, status)),
            Err(i) => {
                self.0.insert(i, (Shared::new(&key), status));
                None
            }
        }
    }

    /// Removes the entry stored under `key`.
    pub fn remove_key(&mut self, key: &str) -> Option<PackageStatus> {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }

    /// Removes the entry of an exact package version.
    pub fn remove(&mut self, name: &str, version: &str) -> Option<PackageStatus> {
        self.remove_key(&package_key(name, version))
    }

    /// Entries still stored under a legacy unversioned key, with that key.
    pub fn legacy_entries(&self) -> impl Iterator<Item = (&str, &PackageStatus)> {
        self.iter().filter(|(k, _)| is_legacy_key(k))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PackageStatus)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl FromIterator<(String, PackageStatus)> for NodeState {
    /// Sorted by key; of two entries under one key the last wins, as in a map.
    fn from_iter<I: IntoIterator<Item = (String, PackageStatus)>>(iter: I) -> Self {
        let map: BTreeMap<String, PackageStatus> = iter.into_iter().collect();
        NodeState(map.into_iter().map(|(k, v)| (Shared::new(&k), v)).collect())
    }
}

impl Serialize for NodeState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de> Deserialize<'de> for NodeState {
    /// A JSON object, or `null` (what Go writes for a nil map) for the empty state.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map: Option<BTreeMap<Shared, PackageStatus>> = Option::deserialize(d)?;
        Ok(NodeState(map.unwrap_or_default().into_iter().collect()))
    }
}

impl JsonSchema for NodeState {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        <BTreeMap<String, PackageStatus>>::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut schema = <BTreeMap<String, PackageStatus>>::json_schema(generator);
        schema.insert(
            "description".to_string(),
            "All packages of one Skyhook on one node, keyed `<pkg>|<ver>` (sorted bytewise, as \
             Go sorts\nmap keys)."
                .into(),
        );
        schema
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "sha256:a9cc1e9e3b0fc9e8a8f4b2e5d7c6f1a0b3e2d4c5f6a7b8c9d0e1f2a3b4c5d6e7";

    fn golden() -> String {
        format!(
            concat!(
                r#"{{"dexter|1.2.3":{{"name":"dexter","version":"1.2.3","image":"ghcr.io/nvidia/skyhook/agentless","stage":"config","state":"complete"}},"#,
                r#""failure|1.2.3":{{"name":"failure","version":"1.2.3","image":"ghcr.io/nvidia/skyhook/agentless","stage":"apply","state":"erroring","restarts":3}},"#,
                r#""foobar|1.2":{{"name":"foobar","version":"1.2","image":"ghcr.io/nvidia/skyhook/agentless","containerSHA":"{}","stage":"config","state":"complete"}}}}"#
            ),
            SHA
        )
    }

    #[test]
    fn golden_roundtrip_byte_for_byte() {
        assert_eq!(SHA.len(), "sha256:".len() + 64);
        let text = golden();
        let state = NodeState::parse(&text).unwrap();
        assert_eq!(state.0.len(), 3);
        let failure = state.get("failure", "1.2.3").unwrap();
        assert_eq!(failure.stage, Stage::Apply);
        assert_eq!(failure.state, Some(State::Erroring));
        assert_eq!(failure.restarts, 3);
        assert_eq!(
            state.get("foobar", "1.2").unwrap().container_sha.as_deref(),
            Some(SHA)
        );
        assert_eq!(state.to_annotation(), text);
    }

    #[test]
    fn built_state_serialises_like_go() {
        let mut state = NodeState::default();
        state.upsert(PackageStatus {
            name: "zeta".into(),
            version: "2.0.0".into(),
            image: "img".into(),
            container_sha: Some(String::new()),
            stage: Stage::PostInterrupt,
            state: None,
            restarts: 0,
        });
        state.upsert(PackageStatus {
            name: "alpha".into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: None,
            stage: Stage::Uninstall,
            state: Some(State::Skipped),
            restarts: 0,
        });
        assert_eq!(
            state.to_annotation(),
            concat!(
                r#"{"alpha|1.0.0":{"name":"alpha","version":"1.0.0","image":"img","stage":"uninstall","state":"skipped"},"#,
                r#""zeta|2.0.0":{"name":"zeta","version":"2.0.0","image":"img","stage":"post-interrupt"}}"#
            )
        );
        assert_eq!(NodeState::default().to_annotation(), "{}");
    }

    #[test]
    fn entries_stay_sorted_and_unique_like_a_map() {
        let entry = |name: &str, restarts| PackageStatus {
            name: name.into(),
            version: "1".into(),
            image: "img".into(),
            container_sha: None,
            stage: Stage::Apply,
            state: None,
            restarts,
        };
        let mut state = NodeState::default();
        for name in ["m", "z", "a", "m"] {
            state.upsert(entry(name, 0));
        }
        assert_eq!(state.keys().collect::<Vec<_>>(), ["a|1", "m|1", "z|1"]);
        assert_eq!(state.upsert(entry("m", 2)).map(|e| e.restarts), Some(0));
        assert_eq!(state.get("m", "1").map(|e| e.restarts), Some(2));
        assert!(state.contains_key("z|1") && !state.contains_key("y|1"));
        assert_eq!(state.remove_key("a|1").map(|e| e.name), Some("a".into()));
        assert_eq!(state.remove("a", "1"), None);
        assert_eq!(state.len(), 2);
        // A JSON object naming one key twice keeps the last, as a map does.
        let twice = r#"{"b|1":{"name":"b","version":"1","stage":"apply"},"a|1":{"name":"a","version":"1","stage":"apply"},"b|1":{"name":"b","version":"1","stage":"config"}}"#;
        let parsed = NodeState::parse(twice).unwrap();
        assert_eq!(parsed.keys().collect::<Vec<_>>(), ["a|1", "b|1"]);
        assert_eq!(parsed.get("b", "1").map(|e| e.stage), Some(Stage::Config));
        assert!(NodeState::parse("null").unwrap().is_empty());
    }

    #[test]
    fn legacy_keys_and_missing_fields() {
        let text = r#"{"dexter":{"name":"dexter","version":"1.2.3","stage":"config","state":"complete","extra":{"x":1}},"spencer|3.2.3":{"name":"spencer","version":"3.2.3","stage":"apply","state":""}}"#;
        let state = NodeState::parse(text).unwrap();
        let legacy: Vec<_> = state.legacy_entries().collect();
        assert_eq!(legacy.len(), 1);
        assert_eq!(legacy[0].0, "dexter");
        assert_eq!(legacy[0].1.image, "");
        assert_eq!(legacy[0].1.key(), "dexter|1.2.3");
        assert!(is_legacy_key("dexter"));
        assert!(!is_legacy_key("dexter|1.2.3"));
        assert_eq!(split_package_key("a|1.0"), Some(("a", "1.0")));
        assert_eq!(split_package_key("a"), None);
        let spencer = state.get("spencer", "3.2.3").unwrap();
        assert_eq!(spencer.state, None);
        assert_eq!(spencer.restarts, 0);
        assert_eq!(
            state.to_annotation(),
            r#"{"dexter":{"name":"dexter","version":"1.2.3","image":"","stage":"config","state":"complete"},"spencer|3.2.3":{"name":"spencer","version":"3.2.3","image":"","stage":"apply"}}"#
        );
    }

    #[test]
    fn html_escaping_like_go() {
        let mut state = NodeState::default();
        state.upsert(PackageStatus {
            name: "a&b".into(),
            version: "1<2>".into(),
            image: "repo/<img>&".into(),
            container_sha: None,
            stage: Stage::Apply,
            state: Some(State::InProgress),
            restarts: 1,
        });
        let text = state.to_annotation();
        assert_eq!(
            text,
            r#"{"a\u0026b|1\u003c2\u003e":{"name":"a\u0026b","version":"1\u003c2\u003e","image":"repo/\u003cimg\u003e\u0026","stage":"apply","state":"in_progress","restarts":1}}"#
        );
        assert_eq!(NodeState::parse(&text).unwrap(), state);
    }

    #[test]
    fn parse_edge_cases() {
        assert!(NodeState::parse("null").unwrap().is_empty());
        assert!(NodeState::parse("{}").unwrap().is_empty());
        assert!(NodeState::parse("").is_err());
        assert!(NodeState::parse("[]").is_err());
        let err =
            NodeState::parse(r#"{"a|1":{"name":"a","version":"1","stage":"bogus"}}"#).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid node state JSON"),
            "{err}"
        );
        let odd = NodeState::parse(
            r#"{"a|1":{"name":"a","version":"1","stage":"apply","state":"weird"}}"#,
        )
        .unwrap();
        assert_eq!(odd.get("a", "1").unwrap().state, Some(State::Unknown));
    }
}
