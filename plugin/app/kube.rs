//! The Kubernetes client: built from the kubectl-style global flags, with every call's failure
//! mapped to a one-line `CliError`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::kubeconfig::{KubeconfigError, Source, load};

use crate::app::error::{CliError, is_not_found, one_line};
use crate::app::global::GlobalArgs;

/// Nodes are listed in pages of this size (kubectl's default chunk size).
const PAGE_SIZE: u32 = 500;

/// What the plugin reads from a Node: only metadata, never the spec or status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMeta {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A connected client and the server it talks to (for error messages).
#[derive(Clone)]
pub struct Kube {
    client: Client,
    server: String,
}

impl Kube {
    /// Loads the kubeconfig the way kubectl does (`--kubeconfig`, else `$KUBECONFIG`, else
    /// `~/.kube/config`, else the in-cluster service account) and applies `--context` and
    /// `--request-timeout`.
    pub async fn connect(global: &GlobalArgs) -> Result<Kube, CliError> {
        let source = Source {
            path: global.kubeconfig.as_deref(),
            context: global.context.clone(),
            ..Source::default()
        };
        let mut config = load(&source).await.map_err(|e| match e {
            KubeconfigError::Read { path, reason } => {
                CliError::Kubeconfig(format!("cannot read {path}: {}", one_line(&reason)))
            }
            KubeconfigError::NoSuchContext(name) => CliError::NoSuchContext(name),
            KubeconfigError::Invalid(message) => CliError::Kubeconfig(one_line(&message)),
        })?;
        if let Some(limit) = global.request_timeout.0 {
            config.connect_timeout = Some(limit);
            config.read_timeout = Some(limit);
            config.write_timeout = Some(limit);
            config.reset_reader_on_write = true;
        }
        let server = config.cluster_url.to_string();
        let server = server.trim_end_matches('/').to_string();
        let client = Client::try_from(config).map_err(|e| {
            CliError::Kubeconfig(one_line(&format!("building a client for {server}: {e}")))
        })?;
        Ok(Kube { client, server })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The underlying client, for commands with calls of their own.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Maps a failed call to a one-line error; `action` says what was attempted.
    pub fn fail(&self, err: kube::Error, action: impl Into<String>) -> CliError {
        CliError::from_kube(err, action, &self.server)
    }

    /// Every node's metadata, sorted by name (one paged list call).
    pub async fn nodes(&self) -> Result<Vec<NodeMeta>, CliError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut nodes = Vec::new();
        let mut params = ListParams::default().limit(PAGE_SIZE);
        loop {
            let page = api
                .list_metadata(&params)
                .await
                .map_err(|e| self.fail(e, "listing nodes"))?;
            nodes.extend(page.items.into_iter().map(|n| NodeMeta {
                name: n.name_any(),
                labels: n.metadata.labels.unwrap_or_default(),
                annotations: n.metadata.annotations.unwrap_or_default(),
            }));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(nodes)
    }

    /// The Skyhook, or `SkyhookNotFound` / `CrdMissing`.
    pub async fn skyhook(&self, name: &str) -> Result<Skyhook, CliError> {
        let api: Api<Skyhook> = Api::all(self.client.clone());
        match api.get(name).await {
            Ok(sk) => Ok(sk),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                // A missing object names itself in the details; a missing resource type
                // (CRD not installed) does not.
                let names_object = status.details.as_ref().is_some_and(|d| d.name == name)
                    || status.message.contains(&format!("\"{name}\" not found"));
                if names_object {
                    Err(CliError::SkyhookNotFound(name.to_string()))
                } else {
                    Err(CliError::CrdMissing(self.server.clone()))
                }
            }
            Err(e) => Err(self.fail(e, format!("getting skyhook {name:?}"))),
        }
    }

    /// `Some(false)` when the Skyhook certainly does not exist; `None` when that cannot be told
    /// (e.g. the user may not read Skyhooks), so callers fall back to the reference behaviour.
    pub async fn skyhook_exists(&self, name: &str) -> Option<bool> {
        let api: Api<Skyhook> = Api::all(self.client.clone());
        match api.get_metadata(name).await {
            Ok(_) => Some(true),
            Err(e) if is_not_found(&e) => Some(false),
            Err(_) => None,
        }
    }

    /// JSON merge patch of one Skyhook annotation (`None` removes it).
    pub async fn set_skyhook_annotation(
        &self,
        name: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), CliError> {
        let api: Api<Skyhook> = Api::all(self.client.clone());
        let patch = single_key_patch("annotations", key, value);
        match api
            .patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Err(CliError::SkyhookNotFound(name.to_string())),
            Err(e) => Err(self.fail(e, format!("patching skyhook {name:?}"))),
        }
    }

    /// JSON merge patch of one node label (`None` removes it).
    pub async fn set_node_label(
        &self,
        node: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), CliError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = single_key_patch("labels", key, value);
        match api
            .patch_metadata(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Err(CliError::NodeNotFound(node.to_string())),
            Err(e) => Err(self.fail(e, format!("patching node {node:?}"))),
        }
    }

    /// JSON merge patch of a node's metadata.
    pub async fn merge_patch_node(&self, node: &str, patch: &Value) -> Result<(), CliError> {
        let api: Api<Node> = Api::all(self.client.clone());
        match api
            .patch_metadata(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Err(CliError::NodeNotFound(node.to_string())),
            Err(e) => Err(self.fail(e, format!("patching node {node:?}"))),
        }
    }

    /// A node's annotations and resourceVersion.
    pub async fn node_annotations(
        &self,
        node: &str,
    ) -> Result<(BTreeMap<String, String>, String), CliError> {
        let api: Api<Node> = Api::all(self.client.clone());
        match api.get_metadata(node).await {
            Ok(n) => Ok((
                n.metadata.annotations.unwrap_or_default(),
                n.metadata.resource_version.unwrap_or_default(),
            )),
            Err(e) if is_not_found(&e) => Err(CliError::NodeNotFound(node.to_string())),
            Err(e) => Err(self.fail(e, format!("getting node {node:?}"))),
        }
    }

    /// Merge patch carrying `metadata.resourceVersion`: `Ok(false)` when the node changed since
    /// (409 Conflict), so the caller re-reads instead of overwriting someone else's write.
    pub async fn merge_patch_node_unless_changed(
        &self,
        node: &str,
        patch: &Value,
    ) -> Result<bool, CliError> {
        let api: Api<Node> = Api::all(self.client.clone());
        match api
            .patch_metadata(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) if is_not_found(&e) => Err(CliError::NodeNotFound(node.to_string())),
            Err(e) => Err(self.fail(e, format!("patching node {node:?}"))),
        }
    }

    /// JSON merge patch of a Skyhook's status subresource.
    pub async fn patch_skyhook_status(&self, name: &str, patch: &Value) -> Result<(), CliError> {
        let api: Api<Skyhook> = Api::all(self.client.clone());
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Err(CliError::SkyhookNotFound(name.to_string())),
            Err(e) => Err(self.fail(e, format!("patching the status of skyhook {name:?}"))),
        }
    }

    pub async fn deployments(&self, namespace: &str) -> Result<Vec<Deployment>, CliError> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| self.fail(e, format!("listing deployments in namespace {namespace:?}")))
    }
}

/// `{"metadata":{"<field>":{"<key>":"<value>"|null}}}`.
pub fn single_key_patch(field: &str, key: &str, value: Option<&str>) -> Value {
    let v = value.map_or(Value::Null, |v| Value::String(v.to_string()));
    json!({ "metadata": { field: { key: v } } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skyhook::schema;

    #[test]
    fn merge_patches_match_the_reference() {
        assert_eq!(
            single_key_patch("annotations", schema::PAUSE_ANNOTATION, Some("true")).to_string(),
            r#"{"metadata":{"annotations":{"skyhook.nvidia.com/pause":"true"}}}"#
        );
        assert_eq!(
            single_key_patch("labels", schema::IGNORE_LABEL, None).to_string(),
            r#"{"metadata":{"labels":{"skyhook.nvidia.com/ignore":null}}}"#
        );
    }
}
