//! The plugin's lens over the two APIs (issue 39): a command speaks the canonical keys
//! (`skyhook.nvidia.com/...`); a NodeWright's nodes, objects and Jobs are read into them and its
//! writes go out under `nodewright.nvidia.com/`, as the operator's lens (`schema::Api`) does.

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;
use skyhook::schema;
use skyhook::schema::Api as ApiKind;

use super::node_meta::NodeMeta;

impl NodeMeta {
    /// The node as `api` sees it: its keys in the canonical set (`skyhook.nvidia.com/...`), the
    /// other API's keys left out.
    pub fn in_api(mut self, api: ApiKind) -> NodeMeta {
        match api {
            ApiKind::Skyhook => {
                let foreign = |k: &String| {
                    schema::is_operator_key(k)
                        && !schema::is_skyhook_key(k)
                        && k != schema::RUNTIME_REQUIRED_CORDON_ANNOTATION
                };
                self.labels.retain(|k, _| !foreign(k));
                self.annotations.retain(|k, _| !foreign(k));
            }
            ApiKind::NodeWright => {
                self.labels = api.canonical_map(&self.labels);
                self.annotations = api.canonical_map(&self.annotations);
            }
        }
        self
    }
}

/// [`Kube::selector`].
pub(super) fn selector_in(api: ApiKind, canonical: &str) -> String {
    canonical
        .split(',')
        .map(|term| {
            let end = term.find(['=', '!']).unwrap_or(term.len());
            let (key, rest) = term.split_at(end);
            format!("{}{rest}", api.local(key.trim()))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A metadata patch in canonical keys, its label and annotation keys as `api` writes them.
pub(super) fn patch_in(api: ApiKind, patch: &Value) -> Value {
    let mut patch = patch.clone();
    for field in ["labels", "annotations"] {
        if let Some(Value::Object(map)) = patch.pointer_mut(&format!("/metadata/{field}")) {
            *map = std::mem::take(map)
                .into_iter()
                .map(|(k, v)| (api.local(&k).into_owned(), v))
                .collect();
        }
    }
    patch
}

/// The node with its labels, annotations and conditions in `api`'s canonical keys (those of the
/// other API left out), as the plugin's lens reads nodes.
pub fn node_in_api(mut node: Node, api: ApiKind) -> Node {
    api.canonicalize(&mut node.metadata.labels);
    api.canonicalize(&mut node.metadata.annotations);
    if let Some(conditions) = node.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        conditions.retain_mut(|c| match api.canonical(&c.type_).map(|k| k.into_owned()) {
            Some(canonical) => {
                c.type_ = canonical;
                true
            }
            None => false,
        });
    }
    node
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nodewright_is_read_and_written_through_its_own_keys() {
        let nw = ApiKind::NodeWright;
        assert_eq!(
            selector_in(
                nw,
                "skyhook.nvidia.com/name=gpu,skyhook.nvidia.com/node!=n1"
            ),
            "nodewright.nvidia.com/name=gpu,nodewright.nvidia.com/node!=n1"
        );
        assert_eq!(
            selector_in(ApiKind::Skyhook, "skyhook.nvidia.com/name"),
            "skyhook.nvidia.com/name"
        );
        let patch = json!({"metadata": {"resourceVersion": "7",
            "annotations": {"skyhook.nvidia.com/nodeState_gpu": null, "other": "x"},
            "labels": {"skyhook.nvidia.com/status_gpu": null}}});
        assert_eq!(
            patch_in(nw, &patch),
            json!({"metadata": {"resourceVersion": "7",
                "annotations": {"nodewright.nvidia.com/nodeState_gpu": null, "other": "x"},
                "labels": {"nodewright.nvidia.com/status_gpu": null}}})
        );
        let both = NodeMeta {
            name: "n1".into(),
            labels: [
                ("skyhook.nvidia.com/status_a", "complete"),
                ("nodewright.nvidia.com/status_b", "erroring"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            annotations: [
                ("skyhook.nvidia.com/nodeState_a", "{}"),
                ("nodewright.nvidia.com/nodeState_b", "{}"),
                (schema::RUNTIME_REQUIRED_CORDON_ANNOTATION, "true"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        };
        let seen = both.clone().in_api(nw);
        assert_eq!(
            seen.labels.keys().collect::<Vec<_>>(),
            ["skyhook.nvidia.com/status_b"]
        );
        assert_eq!(
            seen.annotations.keys().collect::<Vec<_>>(),
            [
                schema::RUNTIME_REQUIRED_CORDON_ANNOTATION,
                "skyhook.nvidia.com/nodeState_b"
            ]
        );
        let legacy = both.in_api(ApiKind::Skyhook);
        assert_eq!(
            legacy.annotations.keys().collect::<Vec<_>>(),
            [
                schema::RUNTIME_REQUIRED_CORDON_ANNOTATION,
                "skyhook.nvidia.com/nodeState_a"
            ]
        );
    }
}
