//! NodeWrights in e2e tests: created over the test's nodes, read back as the Skyhook type (the
//! same schema), waited for.

use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, Api as Kind};

use super::{Env, TestCtx};

/// The objects of `kind` (cluster scoped).
pub fn objects(ctx: &TestCtx, kind: Kind) -> Api<DynamicObject> {
    Api::all_with(ctx.client.clone(), &skyhook::crd::object_resource(kind))
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
    wait_nodewright_in(&env.ctx, name, want, within).await
}

/// [`wait_nodewright`] for a test without an [`Env`] (its operator a pod, or a chart's).
pub async fn wait_nodewright_in(
    ctx: &TestCtx,
    name: &str,
    want: schema::Status,
    within: Duration,
) -> Skyhook {
    ctx.wait_for(
        &format!("NodeWright {name} status {}", want.as_str()),
        within,
        || async {
            let s = nodewright(ctx, name).await?;
            (s.status.as_ref()?.status == Some(want)).then_some(s)
        },
    )
    .await
}
