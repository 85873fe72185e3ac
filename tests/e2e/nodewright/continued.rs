//! A cluster as upstream v0.18+ leaves it after its own migration (delta D24): the legacy
//! Skyhook, its NodeWright mirror (`nodewright.nvidia.com/mirrored-from`), and on each node the
//! operator's keys under both prefixes with the same JSON. This operator continues it: the
//! NodeWright reports complete and no stage runs again (the Skyhook, frozen once its NodeWright
//! is seen, runs none either).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Api as Kind, Status};

use super::{create_nodewright_with, nodewright, nodewright_state, nw_setup, wait_nodewright};
use crate::support::{pkg, skyhook};

#[tokio::test]
async fn a_cluster_migrated_by_upstream_is_continued_with_no_stage_run_again() {
    let env = nw_setup("nw-continued", 2, &[]).await;
    let name = env.ctx.name("sk");
    let package = pkg("1.0.0", json!([]));
    let image = package["image"].as_str().unwrap_or_default().to_string();
    let state = json!({"tool|1.0.0": {"name": "tool", "version": "1.0.0", "image": image,
        "stage": "config", "state": "complete"}})
    .to_string();
    for node in &env.nodes {
        let mut annotations = serde_json::Map::new();
        let mut labels = serde_json::Map::new();
        for kind in [Kind::Skyhook, Kind::NodeWright] {
            let key = |k: String| kind.local(&k).into_owned();
            annotations.insert(key(schema::node_state_annotation(&name)), json!(state));
            annotations.insert(key(schema::status_annotation(&name)), json!("complete"));
            annotations.insert(
                key(schema::node_version_annotation(&name)),
                json!("v0.18.0"),
            );
            labels.insert(key(schema::status_label(&name)), json!("complete"));
        }
        env.node_api
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"annotations": annotations, "labels": labels}})),
            )
            .await
            .expect("write upstream's migrated node keys");
    }
    let spec = json!({"packages": {"tool": package}});
    // The legacy object upstream froze, and its mirror.
    env.create(&skyhook(&env.ctx, &name, spec.clone())).await;
    create_nodewright_with(
        &env.ctx,
        &name,
        spec,
        json!({"nodewright.nvidia.com/mirrored-from": name}),
    )
    .await;
    let done = wait_nodewright(&env, &name, Status::Complete, Duration::from_secs(60)).await;
    // A few passes later: still no Job of either object, and the node state as upstream wrote it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let jobs: Api<Job> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    for label in [schema::NAME_LABEL, "nodewright.nvidia.com/name"] {
        let ran = jobs
            .list(&ListParams::default().labels(&format!("{label}={name}")))
            .await
            .expect("list Jobs");
        assert!(ran.items.is_empty(), "a stage ran again ({label})");
    }
    for node in &env.nodes {
        let raw = nodewright_state(&env, node, &name)
            .await
            .expect("node state");
        let kept = schema::NodeState::parse(&raw).expect("node state");
        assert_eq!(
            kept.get("tool", "1.0.0").and_then(|p| p.state),
            Some(schema::State::Complete),
            "{raw}"
        );
    }
    let status = done.status.expect("status");
    assert_eq!(status.node_status.len(), 2, "{:?}", status.node_status);
    assert!(nodewright(&env.ctx, &name).await.is_some());
}
