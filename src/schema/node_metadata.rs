//! `packages.json` of the node metadata ConfigMap, read by package scripts on the node.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::{Interrupt, SchemaError, go_json};

/// Document shape `{"agentVersion", "packages": {<pkg>: …}}`, Go marshal order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMetadataPackages {
    #[serde(rename = "agentVersion")]
    pub agent_version: String,
    #[serde(default)]
    pub packages: BTreeMap<String, NodeMetadataPackage>,
}

/// One package in `packages.json`. Interrupt types keep the CRD spelling here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMetadataPackage {
    pub name: String,
    pub version: String,
    pub image: String,
    #[serde(
        rename = "agentImageOverride",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub agent_image_override: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<Interrupt>,
    #[serde(
        rename = "configInterrupts",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub config_interrupts: BTreeMap<String, Interrupt>,
}

impl NodeMetadataPackages {
    pub fn parse(text: &str) -> Result<NodeMetadataPackages, SchemaError> {
        serde_json::from_str(text).map_err(|source| SchemaError::Json {
            what: "packages.json",
            source,
        })
    }

    /// The ConfigMap value, byte-identical to the reference operator's (so unchanged content
    /// is recognised and not rewritten).
    pub fn to_json(&self) -> String {
        go_json::to_string_infallible(self)
    }
}

/// `agentVersion`: the text after the last `:` of the agent image. Like the reference, a
/// digest-pinned image (`repo:tag@sha256:<hex>`) yields the digest hex, not the tag.
pub fn agent_version(agent_image: &str) -> &str {
    agent_image.rsplit(':').next().unwrap_or(agent_image)
}

/// `annotations.json` / `labels.json`: a string map as Go marshals it (sorted keys, HTML
/// escaping).
pub fn string_map_json<'a>(map: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let sorted: BTreeMap<&str, &str> = map.into_iter().collect();
    go_json::to_string_infallible(&sorted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::InterruptType;

    #[test]
    fn agent_version_is_after_last_colon() {
        assert_eq!(
            agent_version("ghcr.io/nvidia/skyhook/agent:v6.4.1"),
            "v6.4.1"
        );
        assert_eq!(agent_version("repo:v1@sha256:abcd"), "abcd");
        assert_eq!(agent_version("noversion"), "noversion");
        assert_eq!(agent_version("localhost:5000/agent:v1"), "v1");
    }

    #[test]
    fn packages_json_shape() {
        let mut doc = NodeMetadataPackages {
            agent_version: "v6.4.1".into(),
            packages: BTreeMap::new(),
        };
        doc.packages.insert(
            "zed".into(),
            NodeMetadataPackage {
                name: "zed".into(),
                version: "1.0.0".into(),
                image: "img/zed".into(),
                agent_image_override: String::new(),
                interrupt: None,
                config_interrupts: BTreeMap::new(),
            },
        );
        doc.packages.insert(
            "dexter".into(),
            NodeMetadataPackage {
                name: "dexter".into(),
                version: "1.2.3".into(),
                image: "img/dexter".into(),
                agent_image_override: "agent:v7".into(),
                interrupt: Some(Interrupt::new(InterruptType::Reboot)),
                config_interrupts: [(
                    "*.conf".to_string(),
                    Interrupt {
                        kind: InterruptType::Service,
                        services: vec!["cron".into()],
                    },
                )]
                .into(),
            },
        );
        let text = doc.to_json();
        assert_eq!(
            text,
            concat!(
                r#"{"agentVersion":"v6.4.1","packages":{"dexter":{"name":"dexter","version":"1.2.3","image":"img/dexter","#,
                r#""agentImageOverride":"agent:v7","interrupt":{"type":"reboot"},"configInterrupts":{"*.conf":{"type":"service","services":["cron"]}}},"#,
                r#""zed":{"name":"zed","version":"1.0.0","image":"img/zed"}}}"#
            )
        );
        assert_eq!(NodeMetadataPackages::parse(&text).unwrap(), doc);
    }

    #[test]
    fn string_maps() {
        let m: BTreeMap<String, String> = [
            ("b".to_string(), "<x>".to_string()),
            ("a".to_string(), "1".to_string()),
        ]
        .into();
        let pairs = m.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        assert_eq!(string_map_json(pairs), r#"{"a":"1","b":"\u003cx\u003e"}"#);
    }
}
