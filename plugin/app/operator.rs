//! Finding this operator's (or the reference operator's) Deployment and its version: the
//! `version` command shows it, the lifecycle commands gate on it, `debug collect` records it.

use k8s_openapi::api::apps::v1::Deployment;

use super::kube::Kube;

/// The plugin version (`Cargo.toml`).
pub const PLUGIN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Helm's version label, preferred over the image tag.
const VERSION_LABEL: &str = "app.kubernetes.io/version";

/// The executable this project's operator image runs (`deploy/operator.yaml`: `command:
/// [skyhook-operator, run]`). The reference operator runs `/manager`.
const THIS_OPERATOR_EXECUTABLE: &str = "skyhook-operator";

/// An operator Deployment found in the operator namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorInfo {
    pub version: String,
    /// Whether it runs this project's operator, which reads the pause/disable annotations in
    /// every version (the version gate is about the reference operator's history).
    pub this_implementation: bool,
}

/// Whether a Deployment looks like a Skyhook operator: an image containing `skyhook` or, since
/// upstream's rename, `nodewright` (case-insensitive), or a label key or value containing one.
fn is_operator(d: &Deployment) -> bool {
    let named = |s: &str| {
        let s = s.to_lowercase();
        s.contains("skyhook") || s.contains("nodewright")
    };
    let images = containers(d).any(|c| c.image.as_deref().is_some_and(named));
    images
        || d.metadata
            .labels
            .iter()
            .flatten()
            .any(|(k, v)| named(k) || named(v))
}

/// Where `kubectl nodewright` without `-n` finds the operator, as upstream's CLI looks:
/// `nodewright` if an operator runs there, else `skyhook` if one runs there (said on stderr),
/// else `nodewright`.
pub async fn nodewright_namespace(kube: &Kube) -> String {
    for ns in ["nodewright", "skyhook"] {
        let found = kube
            .deployments(ns)
            .await
            .is_ok_and(|d| d.iter().any(is_operator));
        if found {
            if ns != "nodewright" {
                eprintln!(
                    "Note: no operator in namespace \"nodewright\"; using namespace \"{ns}\""
                );
            }
            return ns.to_string();
        }
    }
    "nodewright".to_string()
}

fn containers(d: &Deployment) -> impl Iterator<Item = &k8s_openapi::api::core::v1::Container> {
    d.spec
        .iter()
        .flat_map(|s| s.template.spec.iter())
        .flat_map(|p| p.containers.iter())
}

/// The tag of an image reference (`repo:tag[@digest]`), if any. A registry port
/// (`host:5000/repo`) is not a tag.
pub fn image_tag(image: &str) -> Option<&str> {
    let image = image.split('@').next().unwrap_or(image);
    let last_segment = image.rsplit('/').next().unwrap_or(image);
    let (_, tag) = last_segment.rsplit_once(':')?;
    let tag = tag.trim();
    (!tag.is_empty()).then_some(tag)
}

/// The reference's discovery over already-listed Deployments (API order): the first operator
/// Deployment with a non-blank version label, else a container image tag other than `latest`.
pub fn find_operator(deployments: &[Deployment], namespace: &str) -> Result<OperatorInfo, String> {
    for d in deployments.iter().filter(|d| is_operator(d)) {
        let this_implementation = containers(d).any(|c| {
            c.command
                .iter()
                .flatten()
                .next()
                .is_some_and(|exe| exe.rsplit('/').next() == Some(THIS_OPERATOR_EXECUTABLE))
        });
        let label = d
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(VERSION_LABEL))
            .map(|v| v.trim())
            .filter(|v| !v.is_empty());
        let tag = || {
            containers(d)
                .filter_map(|c| c.image.as_deref().and_then(image_tag))
                .find(|t| *t != "latest")
        };
        if let Some(version) = label.or_else(tag) {
            return Ok(OperatorInfo {
                version: version.to_string(),
                this_implementation,
            });
        }
    }
    Err(format!(
        "unable to determine operator version; no skyhook operator deployment found in namespace {namespace:?}"
    ))
}

/// Lists Deployments in `namespace` and finds the operator; errors are one line.
pub async fn discover(kube: &Kube, namespace: &str) -> Result<OperatorInfo, String> {
    let deployments = kube
        .deployments(namespace)
        .await
        .map_err(|e| e.to_string())?;
    find_operator(&deployments, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(labels: serde_json::Value, image: &str, command: &[&str]) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "labels": labels},
            "spec": {
                "selector": {},
                "template": {"spec": {"containers": [{"name": "c", "image": image, "command": command}]}}
            }
        }))
        .expect("deployment")
    }

    #[test]
    fn image_tags() {
        assert_eq!(
            image_tag("ghcr.io/nvidia/skyhook/operator:v1.2.3"),
            Some("v1.2.3")
        );
        assert_eq!(
            image_tag("ghcr.io/nvidia/skyhook/operator:v1.2.3@sha256:abc"),
            Some("v1.2.3")
        );
        assert_eq!(image_tag("ghcr.io/nvidia/skyhook/operator"), None);
        assert_eq!(image_tag("registry:5000/skyhook/operator"), None);
        assert_eq!(
            image_tag("registry:5000/skyhook/operator:v0.9.0"),
            Some("v0.9.0")
        );
    }

    #[test]
    fn discovery() {
        let ns = "skyhook";
        let none = find_operator(&[], ns).unwrap_err();
        assert_eq!(
            none,
            "unable to determine operator version; no skyhook operator deployment found in namespace \"skyhook\""
        );
        let unrelated = deployment(json!({"app": "web"}), "nginx:1.27", &[]);
        assert!(find_operator(std::slice::from_ref(&unrelated), ns).is_err());

        let by_label = deployment(
            json!({"app.kubernetes.io/name": "skyhook-operator", "app.kubernetes.io/version": " v0.9.1 "}),
            "example.com/op:v0.1.0",
            &["/manager"],
        );
        assert_eq!(
            find_operator(&[unrelated.clone(), by_label], ns).unwrap(),
            OperatorInfo {
                version: "v0.9.1".into(),
                this_implementation: false
            }
        );
        let by_tag = deployment(json!({}), "nvcr.io/nvidia/skyhook/operator:v0.7.2", &[]);
        assert_eq!(find_operator(&[by_tag], ns).unwrap().version, "v0.7.2");
        let latest = deployment(json!({}), "nvcr.io/nvidia/skyhook/operator:latest", &[]);
        assert!(find_operator(&[latest], ns).is_err());

        let ours = deployment(
            json!({"app.kubernetes.io/name": "skyhook-operator", "app.kubernetes.io/version": "v0.1.0"}),
            "ghcr.io/skyhook-rs/skyhook-operator:v0.1.0",
            &["skyhook-operator", "run"],
        );
        assert_eq!(
            find_operator(&[ours], ns).unwrap(),
            OperatorInfo {
                version: "v0.1.0".into(),
                this_implementation: true
            }
        );
    }
}
