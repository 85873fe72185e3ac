//! The NodeWright API (`nodewright.nvidia.com`, upstream v0.18 and later) served by the same
//! engine as Skyhooks (issue 39): `cargo test --test e2e nodewright`.

mod continued;
mod metrics;
mod migration;
mod plan;
mod plugin;
mod rollout;
mod scenarios;
mod shared_node;
mod takeover;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use skyhook::schema::{self, Api as Kind};

pub use crate::support::nodewrights::{
    create_nodewright, create_nodewright_with, nodewright, objects, wait_nodewright,
};
use crate::support::{Env, TestCtx, install_nodewright_crds, setup};

/// [`setup`] with the NodeWright API's CRDs installed (they are installed on purpose only).
pub async fn nw_setup(test: &str, nodes: usize, operator_env: &[(&str, &str)]) -> Env {
    install_nodewright_crds();
    setup(test, nodes, operator_env).await
}

/// The new group's DeploymentPolicies.
pub fn nodewright_policies(ctx: &TestCtx) -> Api<DynamicObject> {
    Api::all_with(
        ctx.client.clone(),
        &skyhook::crd::policy_resource(Kind::NodeWright),
    )
}

/// A DeploymentPolicy of the new group with `spec`, labelled as the test's; its name.
pub async fn create_nodewright_policy(ctx: &TestCtx, spec: Value) -> String {
    let (k, v) = ctx.test_label();
    let name = ctx.name("policy");
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": Kind::NodeWright.api_version(), "kind": "DeploymentPolicy",
        "metadata": {"name": name, "labels": {k: v}},
        "spec": spec,
    }))
    .expect("valid DeploymentPolicy");
    nodewright_policies(ctx)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create the new group's DeploymentPolicy");
    name
}

/// The NodeWright `name`'s node-state annotation on `node`, raw (under its prefix).
pub async fn nodewright_state(env: &Env, node: &str, name: &str) -> Option<String> {
    let n = env.node_api.get(node).await.expect("node");
    let key = Kind::NodeWright
        .local(&schema::node_state_annotation(name))
        .into_owned();
    n.metadata.annotations?.get(&key).cloned()
}

/// How many Jobs of the test carry `label=name` (`nodewright.nvidia.com/name` for a NodeWright's).
pub async fn jobs_labelled(env: &Env, label: &str, name: &str) -> usize {
    let jobs: Api<Job> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    jobs.list(&ListParams::default().labels(&format!("{label}={name}")))
        .await
        .expect("list Jobs")
        .items
        .len()
}

/// The node keys of `name` under both prefixes carry the same JSON on every node of the test.
pub async fn assert_keys_under_both_prefixes(env: &Env, name: &str) {
    for node in &env.nodes {
        let n = env.node_api.get(node).await.expect("node");
        let a = n.metadata.annotations.unwrap_or_default();
        let legacy = schema::node_state_annotation(name);
        let mine = Kind::NodeWright.local(&legacy).into_owned();
        assert!(a.contains_key(&mine), "{node} has no {mine}: {a:?}");
        assert_eq!(a.get(&mine), a.get(&legacy), "{node}: {a:?}");
        let l = n.metadata.labels.unwrap_or_default();
        let label = Kind::NodeWright
            .local(&schema::status_label(name))
            .into_owned();
        assert_eq!(
            l.get(&label).map(String::as_str),
            Some("complete"),
            "{node}: {l:?}"
        );
    }
}
