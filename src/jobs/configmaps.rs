//! The ConfigMaps the operator creates for a Skyhook (§2.7): one per package (its `configMap`
//! files) and one per targeted node (the node's labels and annotations and every package).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{SkyhookIds, owner_reference, string_map};
use crate::crd::{Package, Skyhook};
use crate::node::NodeView;
use crate::schema;
use crate::settings::Config;

/// The package ConfigMap (§2.7): `lower(<sh>-<pkg>-<ver>)`, labelled with the Skyhook, annotated
/// with Skyhook, package name and version, data = the package's `configMap` verbatim.
pub fn package_configmap(skyhook: &Skyhook, package: &Package, cfg: &Config) -> ConfigMap {
    let ids = SkyhookIds::of(skyhook);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(schema::package_configmap_name(
                ids.name,
                &package.name,
                &package.version,
            )),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(string_map([(schema::NAME_LABEL, ids.name)])),
            annotations: Some(string_map([
                (schema::NAME_ANNOTATION, ids.name),
                (schema::PACKAGE_NAME_ANNOTATION, package.name.as_str()),
                (schema::PACKAGE_VERSION_ANNOTATION, package.version.as_str()),
            ])),
            owner_references: Some(vec![owner_reference(skyhook)]),
            ..Default::default()
        },
        data: Some(package.config_map.clone()),
        ..Default::default()
    }
}

/// The node metadata ConfigMap (§2.7) of one (Skyhook, node): exactly `annotations.json`,
/// `labels.json` (all of the node's, as Go marshals them) and `packages.json` (pass
/// [`packages_json`]).
pub fn node_metadata_configmap(
    skyhook: &Skyhook,
    node: &NodeView,
    packages_json: String,
    cfg: &Config,
) -> ConfigMap {
    let ids = SkyhookIds::of(skyhook);
    let node_name = node.name.as_str();
    let data = BTreeMap::from([
        (
            schema::METADATA_ANNOTATIONS_KEY.to_owned(),
            schema::string_map_json(node.stored_annotations().iter()),
        ),
        (
            schema::METADATA_LABELS_KEY.to_owned(),
            schema::string_map_json(node.selector_labels().iter()),
        ),
        (schema::METADATA_PACKAGES_KEY.to_owned(), packages_json),
    ]);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(schema::node_metadata_configmap_name(ids.name, node_name)),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(string_map([(schema::NODE_META_LABEL, ids.name)])),
            annotations: Some(string_map([
                (schema::NAME_ANNOTATION, ids.name),
                (schema::NODE_NAME_ANNOTATION, node_name),
            ])),
            owner_references: Some(vec![owner_reference(skyhook)]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// `packages.json` of the node metadata ConfigMaps (§2.9): every spec package, keyed by name,
/// with `agentVersion` taken from `AGENT_IMAGE`.
pub fn packages_json(skyhook: &Skyhook, cfg: &Config) -> String {
    let packages = skyhook
        .spec
        .packages
        .iter()
        .map(|(key, p)| {
            let name = if p.name.is_empty() { key } else { &p.name };
            (
                key.clone(),
                schema::NodeMetadataPackage {
                    name: name.clone(),
                    version: p.version.clone(),
                    image: p.image.clone(),
                    agent_image_override: p.agent_image_override.clone().unwrap_or_default(),
                    interrupt: p.interrupt.clone(),
                    config_interrupts: p.config_interrupts.clone(),
                },
            )
        })
        .collect();
    schema::NodeMetadataPackages {
        agent_version: schema::agent_version(&cfg.agent_image).to_owned(),
        packages,
    }
    .to_json()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::jobs::tests::{cfg, dexter, skyhook};
    use crate::schema::{Interrupt, InterruptType};

    #[test]
    fn configmaps() {
        let mut p = dexter();
        p.interrupt = Some(Interrupt::new(InterruptType::Reboot));
        let zed = Package {
            name: "zed".into(),
            version: "0.1.0".into(),
            image: "img/zed".into(),
            agent_image_override: Some("agent:v7".into()),
            ..Default::default()
        };
        let sk = skyhook(&[&p, &zed]);
        let c = cfg();

        let cm = serde_json::to_value(package_configmap(&sk, &p, &c)).unwrap();
        let owner = json!([{
            "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
            "name": "simple-skyhook", "uid": "uid-1",
            "controller": true, "blockOwnerDeletion": true,
        }]);
        assert_eq!(
            cm,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "simple-skyhook-dexter-1.2.3",
                    "namespace": "skyhook",
                    "labels": {"skyhook.nvidia.com/name": "simple-skyhook"},
                    "annotations": {
                        "skyhook.nvidia.com/name": "simple-skyhook",
                        "skyhook.nvidia.com/Package.Name": "dexter",
                        "skyhook.nvidia.com/Package.Version": "1.2.3",
                    },
                    "ownerReferences": owner,
                },
                "data": {"a.conf": "x=1"},
            })
        );

        let packages = packages_json(&sk, &c);
        assert_eq!(
            packages,
            concat!(
                r#"{"agentVersion":"v6.4.1","packages":{"#,
                r#""dexter":{"name":"dexter","version":"1.2.3","image":"ghcr.io/nvidia/skyhook/agentless","interrupt":{"type":"reboot"}},"#,
                r#""zed":{"name":"zed","version":"0.1.0","image":"img/zed","agentImageOverride":"agent:v7"}}}"#
            )
        );

        let node = NodeView {
            name: "kind-worker".into(),
            labels: string_map([("kubernetes.io/hostname", "kind-worker")]).into(),
            annotations: string_map([("b", "<2>"), ("a", "1")]).into(),
            ..Default::default()
        };
        let cm = serde_json::to_value(node_metadata_configmap(&sk, &node, packages.clone(), &c))
            .unwrap();
        assert_eq!(
            cm,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "simple-skyhook-kind-worker-metadata-52688a8e",
                    "namespace": "skyhook",
                    "labels": {"skyhook.nvidia.com/skyhook-node-meta": "simple-skyhook"},
                    "annotations": {
                        "skyhook.nvidia.com/name": "simple-skyhook",
                        "skyhook.nvidia.com/Node.name": "kind-worker",
                    },
                    "ownerReferences": owner,
                },
                "data": {
                    "annotations.json": r#"{"a":"1","b":"\u003c2\u003e"}"#,
                    "labels.json": r#"{"kubernetes.io/hostname":"kind-worker"}"#,
                    "packages.json": packages,
                },
            })
        );

        // A node without labels or annotations still gets the three keys.
        let bare = NodeView {
            name: "bare".into(),
            ..Default::default()
        };
        let cm = node_metadata_configmap(&sk, &bare, "{}".into(), &c);
        let data = cm.data.unwrap();
        assert_eq!(data.len(), 3);
        assert_eq!(data[schema::METADATA_LABELS_KEY], "{}");
        assert_eq!(data[schema::METADATA_ANNOTATIONS_KEY], "{}");
    }

    #[test]
    fn a_nodewright_node_metadata_configmap_copies_the_node_as_stored() {
        let sk = skyhook(&[&dexter()]);
        let stored: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": {"name": "n1",
                "labels": {"nodewright.nvidia.com/status_nw": "complete", "skyhook.nvidia.com/gpu": "true"},
                "annotations": {"nodewright.nvidia.com/nodeState_nw": "{}"}},
        }))
        .unwrap();
        let seen = std::sync::Arc::new(NodeView::from(stored)).in_api(schema::Api::NodeWright);
        let cm = node_metadata_configmap(&sk, &seen, "{}".into(), &cfg());
        let data = cm.data.unwrap();
        assert_eq!(
            data[schema::METADATA_LABELS_KEY],
            r#"{"nodewright.nvidia.com/status_nw":"complete","skyhook.nvidia.com/gpu":"true"}"#
        );
        assert_eq!(
            data[schema::METADATA_ANNOTATIONS_KEY],
            r#"{"nodewright.nvidia.com/nodeState_nw":"{}"}"#
        );
    }
}
