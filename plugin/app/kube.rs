//! The Kubernetes client: built from the kubectl-style global flags, with every call's failure
//! mapped to a one-line `CliError`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::AuthInfo;
use kube::{Client, Config};
use serde_json::{Value, json};
use skyhook::crd::{DeploymentPolicy, Skyhook, object_resource, policy_resource};
use skyhook::kubeconfig::{KubeconfigError, Source, load};
use skyhook::schema::Api as ApiKind;
use skyhook::streamed;

use crate::app::error::{CliError, is_not_found, one_line};
use crate::app::global::GlobalArgs;
use crate::app::lens::{patch_in, selector_in};
use crate::app::node_meta::{AllLabelsMeta, NodePage};
pub use crate::app::node_meta::{Labels, NodeMeta};

/// What a typed [`Api`] call needs of a kind (of any scope).
pub trait Kind:
    kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug
{
}

impl<K> Kind for K where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug
{
}

/// Nodes are listed in pages of this size (kubectl's default chunk size).
const PAGE_SIZE: u32 = 500;

/// A connected client, the server it talks to (for error messages), and the API of the objects
/// the command works on: every key it reads is seen in the canonical set and every key it writes
/// goes out under that API's prefix, so the commands speak one set of keys.
#[derive(Clone)]
pub struct Kube {
    client: Client,
    server: String,
    api: ApiKind,
}

impl Kube {
    /// Loads the kubeconfig the way kubectl does (`--kubeconfig`, else `$KUBECONFIG`, else
    /// `~/.kube/config`, else the in-cluster service account), picks `--context`, `--cluster`
    /// and `--user`, then applies the connection flags on top ([`apply_overrides`]) and
    /// `--request-timeout`.
    pub async fn connect(global: &GlobalArgs) -> Result<Kube, CliError> {
        let source = Source {
            path: global.kubeconfig.as_deref(),
            context: global.context.clone(),
            cluster: global.cluster.clone(),
            user: global.user.clone(),
        };
        let loaded = load(&source).await.map_err(|e| match e {
            KubeconfigError::Read { path, reason } => {
                CliError::Kubeconfig(format!("cannot read {path}: {}", one_line(&reason)))
            }
            KubeconfigError::NoSuchContext(name) => CliError::NoSuchContext(name),
            KubeconfigError::Invalid(message) => CliError::Kubeconfig(one_line(&message)),
        });
        let mut config = match (loaded, &global.server) {
            (Ok(config), _) => config,
            // Like kubectl, `--server` (with `--token` and a CA or --insecure-skip-tls-verify)
            // is enough on its own when there is no kubeconfig to start from.
            (Err(CliError::Kubeconfig(_)), Some(server))
                if global.kubeconfig.is_none()
                    && global.context.is_none()
                    && global.cluster.is_none()
                    && global.user.is_none() =>
            {
                Config::new(server_uri(server)?)
            }
            (Err(e), _) => return Err(e),
        };
        apply_overrides(&mut config, &Overrides::from_global(global)?)?;
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
        Ok(Kube {
            client,
            server,
            api: ApiKind::Skyhook,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The API the command works in.
    pub fn api(&self) -> ApiKind {
        self.api
    }

    /// The same client working in `api`.
    pub fn in_api(self, api: ApiKind) -> Kube {
        Kube { api, ..self }
    }

    /// The API to work in for the object `name`: `preferred` when it holds it (or when neither
    /// can be told to), else the other API when that one does.
    pub async fn api_of(&self, name: &str, preferred: ApiKind) -> ApiKind {
        let other = match preferred {
            ApiKind::Skyhook => ApiKind::NodeWright,
            ApiKind::NodeWright => ApiKind::Skyhook,
        };
        let here = self.clone().in_api(preferred);
        match here.skyhook_exists(name).await {
            Some(true) => preferred,
            _ if self.clone().in_api(other).skyhook_exists(name).await == Some(true) => other,
            _ => preferred,
        }
    }

    /// A canonical key (`skyhook.nvidia.com/...`) as the API the command works in spells it: for
    /// label selectors.
    pub fn key(&self, canonical: &str) -> String {
        self.api.local(canonical).into_owned()
    }

    /// A label selector of canonical keys (`skyhook.nvidia.com/name=x,...`) as this API's objects
    /// carry them.
    pub fn selector(&self, canonical: &str) -> String {
        selector_in(self.api, canonical)
    }

    /// The objects of this API (Skyhooks or NodeWrights), untyped.
    fn objects(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &object_resource(self.api))
    }

    /// The DeploymentPolicies of this API's group, read as the one type both groups share.
    pub async fn policies(&self) -> Result<Vec<DeploymentPolicy>, kube::Error> {
        let resource = policy_resource(self.api);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let list = api.list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect())
    }

    /// Every object of this API, as the planner reads them (canonical keys).
    pub async fn skyhooks(&self, params: &ListParams) -> Result<Vec<Skyhook>, kube::Error> {
        let list = self.objects().list(params).await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|o| self.typed(o).ok())
            .collect())
    }

    /// An object of this API as a Skyhook in the canonical keys.
    fn typed(&self, o: DynamicObject) -> Result<Skyhook, serde_json::Error> {
        let mut sk: Skyhook = serde_json::from_value(serde_json::to_value(o)?)?;
        skyhook::plan::localize::canonical(&mut sk, self.api);
        Ok(sk)
    }

    /// The underlying client, for commands with calls of their own.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Maps a failed call to a one-line error; `action` says what was attempted.
    pub fn fail(&self, err: kube::Error, action: impl Into<String>) -> CliError {
        CliError::from_kube(err, action, &self.server)
    }

    /// Every node's metadata with Skyhook's labels, sorted by name (one paged list call).
    pub async fn nodes(&self) -> Result<Vec<NodeMeta>, CliError> {
        self.nodes_with(Labels::Skyhook).await
    }

    /// Every node's metadata, sorted by name, keeping `labels`.
    pub async fn nodes_with(&self, labels: Labels) -> Result<Vec<NodeMeta>, CliError> {
        match labels {
            Labels::Skyhook => self.node_pages::<NodeMeta>().await,
            Labels::All => self.node_pages::<AllLabelsMeta>().await,
        }
    }

    /// The names of the cordoned nodes (`spec.unschedulable`), read with a field selector so
    /// that node lists stay metadata-only.
    pub async fn cordoned_nodes(&self) -> Result<BTreeSet<String>, CliError> {
        let params = ListParams::default().fields("spec.unschedulable=true");
        let nodes = self.node_pages_with::<NodeMeta>(params).await?;
        Ok(nodes.into_iter().map(|n| n.name).collect())
    }

    async fn node_pages<M>(&self) -> Result<Vec<NodeMeta>, CliError>
    where
        M: serde::de::DeserializeOwned + Into<NodeMeta> + Send + 'static,
    {
        self.node_pages_with::<M>(ListParams::default()).await
    }

    async fn node_pages_with<M>(&self, params: ListParams) -> Result<Vec<NodeMeta>, CliError>
    where
        M: serde::de::DeserializeOwned + Into<NodeMeta> + Send + 'static,
    {
        let request = kube::core::Request::new("/api/v1/nodes");
        let mut nodes = Vec::new();
        let mut params = params.limit(PAGE_SIZE);
        loop {
            let page: NodePage<M> = match request.list_metadata(&params) {
                Ok(req) => streamed::request(&self.client, req).await,
                Err(e) => Err(kube::Error::BuildRequest(e)),
            }
            .map_err(|e| self.fail(e, "listing nodes"))?;
            let items = page.items.unwrap_or_default();
            let api = self.api;
            nodes.extend(items.into_iter().map(|n| n.metadata.into().in_api(api)));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(nodes)
    }

    /// The Skyhook (or NodeWright), or `SkyhookNotFound` / `CrdMissing`.
    pub async fn skyhook(&self, name: &str) -> Result<Skyhook, CliError> {
        match self.objects().get(name).await {
            Ok(o) => self.typed(o).map_err(|e| CliError::Api {
                action: format!("reading {} {name:?}", self.api.kind()),
                message: e.to_string(),
            }),
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
        match self.objects().get_metadata(name).await {
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
        let patch = single_key_patch("annotations", &self.key(key), value);
        self.objects()
            .patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| self.skyhook_patch_failed(e, name, format!("patching skyhook {name:?}")))
    }

    /// JSON merge patch of a node's metadata.
    pub async fn merge_patch_node(&self, node: &str, patch: &Value) -> Result<(), CliError> {
        self.merge_metadata::<Node>(node, &self.localized(patch))
            .await
            .map_err(|e| self.node_patch_failed(e, node))
    }

    /// A node's annotations and resourceVersion.
    pub async fn node_annotations(
        &self,
        node: &str,
    ) -> Result<(BTreeMap<String, String>, String), CliError> {
        let api: Api<Node> = Api::all(self.client.clone());
        match api.get_metadata(node).await {
            Ok(n) => Ok((
                self.api
                    .canonical_map(&n.metadata.annotations.unwrap_or_default()),
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
        match self
            .merge_metadata::<Node>(node, &self.localized(patch))
            .await
        {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.node_patch_failed(e, node)),
        }
    }

    /// JSON merge patch of a Skyhook's status subresource.
    pub async fn patch_skyhook_status(&self, name: &str, patch: &Value) -> Result<(), CliError> {
        self.objects()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|e| {
                let action = format!("patching the status of skyhook {name:?}");
                self.skyhook_patch_failed(e, name, action)
            })
    }

    /// A node patch in canonical keys with its `metadata.labels` and `metadata.annotations` keys
    /// as this API writes them.
    fn localized(&self, patch: &Value) -> Value {
        patch_in(self.api, patch)
    }

    /// The raw call behind the metadata patches, whose callers map the error their own way
    /// (a 409 is an answer to some of them, a failure to others).
    async fn merge_metadata<K>(&self, name: &str, patch: &Value) -> Result<(), kube::Error>
    where
        K: Kind + kube::Resource<Scope = k8s_openapi::ClusterResourceScope>,
    {
        let api: Api<K> = Api::all(self.client.clone());
        api.patch_metadata(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
    }

    fn node_patch_failed(&self, err: kube::Error, node: &str) -> CliError {
        if is_not_found(&err) {
            return CliError::NodeNotFound(node.to_string());
        }
        self.fail(err, format!("patching node {node:?}"))
    }

    fn skyhook_patch_failed(&self, err: kube::Error, name: &str, action: String) -> CliError {
        if is_not_found(&err) {
            return CliError::SkyhookNotFound(name.to_string());
        }
        self.fail(err, action)
    }

    pub async fn deployments(&self, namespace: &str) -> Result<Vec<Deployment>, CliError> {
        self.list_in(namespace, &ListParams::default(), "deployments")
            .await
    }

    /// One list call in `namespace`; `kind` names the objects in the error.
    pub async fn list_in<K>(
        &self,
        namespace: &str,
        params: &ListParams,
        kind: &str,
    ) -> Result<Vec<K>, CliError>
    where
        K: Kind + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        api.list(params)
            .await
            .map(|l| l.items)
            .map_err(|e| self.fail(e, format!("listing {kind} in namespace {namespace:?}")))
    }
}

/// kubectl's connection flags, applied on top of the loaded kubeconfig.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--server`
    pub server: Option<http::Uri>,
    /// `--token`
    pub token: Option<String>,
    /// `--as`
    pub as_user: Option<String>,
    /// `--as-group`
    pub as_groups: Vec<String>,
    /// `--certificate-authority`, as DER certificates.
    pub root_certs: Option<Vec<Vec<u8>>>,
    /// `--insecure-skip-tls-verify`
    pub insecure: bool,
}

impl Overrides {
    /// Reads the flags (and the `--certificate-authority` file).
    pub fn from_global(global: &GlobalArgs) -> Result<Overrides, CliError> {
        let root_certs = match &global.certificate_authority {
            None => None,
            Some(path) => {
                let flag = |message: String| CliError::Flag {
                    flag: "--certificate-authority",
                    message,
                };
                let text = std::fs::read_to_string(path)
                    .map_err(|e| flag(format!("cannot read {}: {e}", path.display())))?;
                let certs = pem_certificates(&text).map_err(flag)?;
                if certs.is_empty() {
                    return Err(flag(format!(
                        "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                        path.display()
                    )));
                }
                Some(certs)
            }
        };
        Ok(Overrides {
            server: global.server.as_deref().map(server_uri).transpose()?,
            token: global.token.clone(),
            as_user: global.as_user.clone(),
            as_groups: global.as_group.clone(),
            root_certs,
            insecure: global.insecure_skip_tls_verify,
        })
    }
}

/// `--server`: a URL, or `host:port` (https, as kubectl assumes).
pub fn server_uri(raw: &str) -> Result<http::Uri, CliError> {
    let text = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("https://{raw}")
    };
    match text.parse::<http::Uri>() {
        Ok(uri) if uri.host().is_some_and(|h| !h.is_empty()) => Ok(uri),
        _ => Err(CliError::Flag {
            flag: "--server",
            message: format!("{raw:?} is not a URL (use e.g. https://10.0.0.1:6443)"),
        }),
    }
}

/// The DER bytes of each `CERTIFICATE` block of a PEM file.
fn pem_certificates(text: &str) -> Result<Vec<Vec<u8>>, String> {
    use base64::Engine as _;
    let mut certs = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines().map(str::trim) {
        match (&mut body, line) {
            (None, "-----BEGIN CERTIFICATE-----") => body = Some(String::new()),
            (Some(b), "-----END CERTIFICATE-----") => {
                let der = base64::engine::general_purpose::STANDARD
                    .decode(b.as_bytes())
                    .map_err(|e| format!("a certificate is not valid base64: {e}"))?;
                certs.push(der);
                body = None;
            }
            (Some(b), l) => b.push_str(l),
            (None, _) => {}
        }
    }
    Ok(certs)
}

/// Applies the connection flags as kubectl does: `--server` replaces the cluster URL (the
/// kubeconfig's CA still applies); `--token` replaces the user's credentials (client
/// certificate, exec plugin, basic auth); `--as`/`--as-group` add impersonation headers;
/// `--certificate-authority` replaces the CA; `--insecure-skip-tls-verify` turns verification
/// off and drops the CA.
pub fn apply_overrides(config: &mut Config, o: &Overrides) -> Result<(), CliError> {
    if let Some(server) = &o.server {
        config.cluster_url = server.clone();
    }
    if let Some(token) = &o.token {
        let impersonate = config.auth_info.impersonate.take();
        let groups = config.auth_info.impersonate_groups.take();
        config.auth_info =
            serde_json::from_value::<AuthInfo>(json!({ "token": token })).map_err(|e| {
                CliError::Flag {
                    flag: "--token",
                    message: e.to_string(),
                }
            })?;
        config.auth_info.impersonate = impersonate;
        config.auth_info.impersonate_groups = groups;
    }
    if let Some(user) = &o.as_user {
        config.auth_info.impersonate = Some(user.clone());
        config.auth_info.impersonate_groups =
            (!o.as_groups.is_empty()).then(|| o.as_groups.clone());
    }
    if let Some(certs) = &o.root_certs {
        config.root_cert = Some(certs.clone());
        config.root_cert_file = None;
        config.accept_invalid_certs = false;
    }
    if o.insecure {
        config.accept_invalid_certs = true;
        config.root_cert = None;
        config.root_cert_file = None;
    }
    Ok(())
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

    fn base_config() -> Config {
        let mut config = Config::new("https://10.0.0.1:6443".parse().unwrap());
        config.auth_info = serde_json::from_value(json!({
            "client-certificate-data": "Y2VydA==",
            "client-key-data": "a2V5",
            "username": "admin",
            "password": "secret",
        }))
        .unwrap();
        config.root_cert = Some(vec![vec![1, 2, 3]]);
        config
    }

    fn token_of(config: &Config) -> Option<String> {
        serde_json::to_value(&config.auth_info).unwrap()["token"]
            .as_str()
            .map(str::to_string)
    }

    #[test]
    fn node_pages_keep_names_labels_and_node_states_only() {
        let raw = json!({
            "metadata": {"continue": "abc"},
            "items": [
                {"metadata": {
                    "name": "n1",
                    "labels": {"a": "1", "skyhook.nvidia.com/status_sh": "complete",
                        "skyhook.nvidia.com.evil/x": "y"},
                    "annotations": {
                        "skyhook.nvidia.com/nodeState_sh": "{}",
                        "skyhook.nvidia.com/applied_sh": "{\"p|1\":\"x\"}",
                        "kwok.x-k8s.io/node": "fake",
                    },
                    "managedFields": [{"manager": "kwok", "fieldsV1": {"f:metadata": {}}}],
                }},
                {"metadata": {"name": "n2", "annotations": null, "labels": null}},
            ],
        });
        // A metadata-only list with nothing in it says `"items": null`.
        let empty: NodePage<NodeMeta> =
            serde_json::from_value(json!({"items": null, "metadata": {}})).unwrap();
        assert!(empty.items.is_none());
        let page: NodePage<NodeMeta> = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(page.metadata.continue_.as_deref(), Some("abc"));
        let nodes: Vec<NodeMeta> = page
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|i| i.metadata)
            .collect();
        assert_eq!(nodes[0].name, "n1");
        let status = (
            "skyhook.nvidia.com/status_sh".to_string(),
            "complete".to_string(),
        );
        assert_eq!(nodes[0].labels, BTreeMap::from([status.clone()]));
        assert_eq!(
            nodes[0].annotations,
            BTreeMap::from([("skyhook.nvidia.com/nodeState_sh".into(), "{}".into())])
        );
        let bare = NodeMeta {
            name: "n2".into(),
            ..NodeMeta::default()
        };
        assert_eq!(nodes[1], bare);

        let page: NodePage<AllLabelsMeta> = serde_json::from_value(raw).unwrap();
        let all: Vec<NodeMeta> = page
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|i| i.metadata.into())
            .collect();
        assert_eq!(all[0].labels.len(), 3, "{:?}", all[0].labels);
        assert_eq!(all[0].labels.get("a").map(String::as_str), Some("1"));
        assert_eq!(all[0].annotations, nodes[0].annotations);
        assert_eq!(all[1], bare);
    }

    #[test]
    fn no_flags_change_nothing() {
        let mut config = base_config();
        apply_overrides(&mut config, &Overrides::default()).unwrap();
        assert_eq!(config.cluster_url, "https://10.0.0.1:6443");
        assert_eq!(config.root_cert, Some(vec![vec![1, 2, 3]]));
        assert!(config.auth_info.client_certificate_data.is_some());
        assert!(!config.accept_invalid_certs);
        assert_eq!(config.auth_info.impersonate, None);
    }

    #[test]
    fn server_token_and_impersonation_override_the_kubeconfig() {
        let mut config = base_config();
        config.auth_info.impersonate = Some("from-kubeconfig".into());
        let o = Overrides {
            server: Some(server_uri("127.0.0.1:16443").unwrap()),
            token: Some("t0k3n".into()),
            ..Overrides::default()
        };
        apply_overrides(&mut config, &o).unwrap();
        assert_eq!(config.cluster_url, "https://127.0.0.1:16443");
        // The token replaces every other credential; the CA stays.
        assert_eq!(token_of(&config).as_deref(), Some("t0k3n"));
        assert_eq!(config.auth_info.client_certificate_data, None);
        assert!(config.auth_info.client_key_data.is_none());
        assert_eq!(config.auth_info.username, None);
        assert_eq!(
            config.auth_info.impersonate.as_deref(),
            Some("from-kubeconfig")
        );
        assert_eq!(config.root_cert, Some(vec![vec![1, 2, 3]]));

        let o = Overrides {
            as_user: Some("system:serviceaccount:ns:sa".into()),
            as_groups: vec!["g1".into(), "g2".into()],
            ..Overrides::default()
        };
        apply_overrides(&mut config, &o).unwrap();
        assert_eq!(
            config.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:ns:sa")
        );
        assert_eq!(
            config.auth_info.impersonate_groups,
            Some(vec!["g1".to_string(), "g2".to_string()])
        );
        assert_eq!(token_of(&config).as_deref(), Some("t0k3n"));
    }

    #[test]
    fn certificate_authority_and_insecure() {
        let mut config = base_config();
        let o = Overrides {
            root_certs: Some(vec![vec![9]]),
            ..Overrides::default()
        };
        apply_overrides(&mut config, &o).unwrap();
        assert_eq!(config.root_cert, Some(vec![vec![9]]));
        assert!(!config.accept_invalid_certs);
        let o = Overrides {
            insecure: true,
            ..Overrides::default()
        };
        apply_overrides(&mut config, &o).unwrap();
        assert!(config.accept_invalid_certs);
        assert_eq!(config.root_cert, None);
        // Client certificates still authenticate.
        assert!(config.auth_info.client_certificate_data.is_some());
    }

    #[test]
    fn server_urls_and_pem_files() {
        assert_eq!(server_uri("https://k:6443").unwrap(), "https://k:6443/");
        assert_eq!(server_uri("k:6443").unwrap(), "https://k:6443/");
        assert_eq!(server_uri("http://k").unwrap(), "http://k/");
        let err = server_uri("https://").unwrap_err().to_string();
        assert!(
            err.starts_with("--server: \"https://\" is not a URL"),
            "{err}"
        );
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nAQID\nBA==\n-----END CERTIFICATE-----\n\
                   -----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n\
                   -----BEGIN CERTIFICATE-----\nBQ==\n-----END CERTIFICATE-----\n";
        assert_eq!(
            pem_certificates(pem).unwrap(),
            vec![vec![1, 2, 3, 4], vec![5]]
        );
        assert_eq!(
            pem_certificates("nothing here").unwrap(),
            Vec::<Vec<u8>>::new()
        );
        assert!(
            pem_certificates("-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----").is_err()
        );
    }

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
