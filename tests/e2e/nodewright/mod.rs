//! The NodeWright API (`nodewright.nvidia.com`, upstream v0.18 and later) served by the same
//! engine as Skyhooks (issue 39): `cargo test --test e2e nodewright`.

mod continued;
mod rollout;
mod takeover;

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, Api as Kind};

use crate::support::{Env, TestCtx, install_nodewright_crds, setup};

/// [`setup`] with the NodeWright API's CRDs installed (they are installed on purpose only).
pub async fn nw_setup(test: &str, nodes: usize, operator_env: &[(&str, &str)]) -> Env {
    install_nodewright_crds();
    setup(test, nodes, operator_env).await
}

/// The objects of `kind` (cluster scoped).
pub fn objects(ctx: &TestCtx, kind: Kind) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: kind.group().into(),
        version: "v1alpha1".into(),
        api_version: kind.api_version().into(),
        kind: kind.kind().into(),
        plural: kind.plural().into(),
    };
    Api::all_with(ctx.client.clone(), &resource)
}

/// A NodeWright of the test's nodes with `spec`, created.
pub async fn create_nodewright(ctx: &TestCtx, name: &str, spec: Value) {
    create_nodewright_with(ctx, name, spec, json!({})).await;
}

/// [`create_nodewright`] with `annotations`.
pub async fn create_nodewright_with(ctx: &TestCtx, name: &str, spec: Value, annotations: Value) {
    let (k, v) = ctx.test_label();
    let mut spec = spec;
    spec["nodeSelectors"] = json!({"matchLabels": {k.clone(): v.clone()}});
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": Kind::NodeWright.api_version(), "kind": Kind::NodeWright.kind(),
        "metadata": {"name": name, "labels": {k: v}, "annotations": annotations},
        "spec": spec,
    }))
    .expect("valid NodeWright");
    objects(ctx, Kind::NodeWright)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create the NodeWright");
}

/// The NodeWright `name` read as the Skyhook type (the same schema), as stored.
pub async fn nodewright(ctx: &TestCtx, name: &str) -> Option<Skyhook> {
    let obj = objects(ctx, Kind::NodeWright).get(name).await.ok()?;
    serde_json::to_value(obj)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// Waits until the NodeWright's status is `want`.
pub async fn wait_nodewright(
    env: &Env,
    name: &str,
    want: schema::Status,
    within: Duration,
) -> Skyhook {
    env.ctx
        .wait_for(
            &format!("NodeWright {name} status {}", want.as_str()),
            within,
            || async {
                let s = nodewright(&env.ctx, name).await?;
                (s.status.as_ref()?.status == Some(want)).then_some(s)
            },
        )
        .await
}

/// The NodeWright `name`'s node-state annotation on `node`, raw (under its prefix).
pub async fn nodewright_state(env: &Env, node: &str, name: &str) -> Option<String> {
    let n = env.node_api.get(node).await.expect("node");
    let key = Kind::NodeWright
        .local(&schema::node_state_annotation(name))
        .into_owned();
    n.metadata.annotations?.get(&key).cloned()
}
