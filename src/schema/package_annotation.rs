//! The `skyhook.nvidia.com/package` annotation on package/interrupt pods and Jobs.

use serde::{Deserialize, Serialize};

use super::{SchemaError, Stage, go_json};

/// Which package, version and stage a pod/Job runs. Field order is Go's marshal order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageAnnotation {
    pub name: String,
    pub version: String,
    pub skyhook: String,
    pub stage: Stage,
    /// Image without tag; hand-made pods (CLI tests) omit it, which reads as `""`.
    #[serde(default)]
    pub image: String,
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "go_json::is_none_or_empty"
    )]
    pub container_sha: Option<String>,
    /// Set when the operator has invalidated the pod; it is deleted on the next pod event.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invalid: bool,
}

impl PackageAnnotation {
    pub fn parse(annotation: &str) -> Result<PackageAnnotation, SchemaError> {
        serde_json::from_str(annotation).map_err(|source| SchemaError::Json {
            what: "package annotation",
            source,
        })
    }

    /// The annotation value, byte-identical to the reference operator's.
    pub fn to_annotation(&self) -> String {
        go_json::to_string_infallible(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_roundtrip() {
        let text = r#"{"name":"spencer","version":"3.2.3","skyhook":"simple-skyhook","stage":"apply","image":"ghcr.io/nvidia/skyhook/agentless"}"#;
        let a = PackageAnnotation::parse(text).unwrap();
        assert_eq!(a.stage, Stage::Apply);
        assert!(!a.invalid);
        assert_eq!(a.to_annotation(), text);
    }

    #[test]
    fn optional_fields() {
        let a = PackageAnnotation {
            name: "p".into(),
            version: "1.0".into(),
            skyhook: "sh".into(),
            stage: Stage::Interrupt,
            image: "img".into(),
            container_sha: Some("sha256:00".into()),
            invalid: true,
        };
        let text = a.to_annotation();
        assert_eq!(
            text,
            r#"{"name":"p","version":"1.0","skyhook":"sh","stage":"interrupt","image":"img","containerSHA":"sha256:00","invalid":true}"#
        );
        assert_eq!(PackageAnnotation::parse(&text).unwrap(), a);
    }

    #[test]
    fn hand_made_without_image() {
        let a = PackageAnnotation::parse(
            r#"{"name":"dexter","version":"1.2.3","stage":"config","skyhook":"sh","other":1}"#,
        )
        .unwrap();
        assert_eq!(a.image, "");
        assert_eq!(a.container_sha, None);
        assert_eq!(
            a.to_annotation(),
            r#"{"name":"dexter","version":"1.2.3","skyhook":"sh","stage":"config","image":""}"#
        );
        assert!(PackageAnnotation::parse("{").is_err());
    }
}
