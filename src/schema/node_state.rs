//! The node-state annotation (`nodeState_<sh>`): per-package progress of one Skyhook on a node.
//!
//! This JSON is shared with the reference operator and plugin, which rewrite it as strings, so
//! `NodeState::to_annotation` reproduces Go's `json.Marshal` byte for byte and parsing accepts
//! everything older writers produced (no `image`, unversioned keys, unknown fields).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

use super::{SchemaError, Stage, State, go_json};

/// The unique package key `<pkg>|<ver>`: node-state map key and dependency-graph vertex id.
pub fn package_key(name: &str, version: &str) -> String {
    format!("{name}|{version}")
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
    pub name: String,
    pub version: String,
    /// Image without tag; `""` when the writer had none (pre-v0.5 state, hand-made pods).
    #[serde(default)]
    pub image: String,
    /// Digest actually deployed (`sha256:…`).
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "is_none_or_empty"
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

fn is_none_or_empty(v: &Option<String>) -> bool {
    v.as_deref().is_none_or(str::is_empty)
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct NodeState(pub BTreeMap<String, PackageStatus>);

impl NodeState {
    /// Parses an annotation value. `null` (what Go writes for a nil map) is the empty state.
    pub fn parse(annotation: &str) -> Result<NodeState, SchemaError> {
        let parsed: Option<BTreeMap<String, PackageStatus>> = serde_json::from_str(annotation)
            .map_err(|source| SchemaError::Json {
                what: "node state",
                source,
            })?;
        Ok(NodeState(parsed.unwrap_or_default()))
    }

    /// The annotation value, byte-identical to the reference operator's.
    pub fn to_annotation(&self) -> String {
        go_json::to_string_infallible(&self.0)
    }

    /// The entry for an exact package version.
    pub fn get(&self, name: &str, version: &str) -> Option<&PackageStatus> {
        self.0.get(&package_key(name, version))
    }

    /// Inserts or replaces the entry under its own `<pkg>|<ver>` key.
    pub fn upsert(&mut self, status: PackageStatus) -> Option<PackageStatus> {
        self.0.insert(status.key(), status)
    }

    /// Removes the entry of an exact package version.
    pub fn remove(&mut self, name: &str, version: &str) -> Option<PackageStatus> {
        self.0.remove(&package_key(name, version))
    }

    /// Entries still stored under a legacy unversioned key, with that key.
    pub fn legacy_entries(&self) -> impl Iterator<Item = (&str, &PackageStatus)> {
        self.0
            .iter()
            .filter(|(k, _)| is_legacy_key(k))
            .map(|(k, v)| (k.as_str(), v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &PackageStatus)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
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
