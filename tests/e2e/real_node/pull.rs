//! A package image that is not in the registry: a real pull fails on the real kubelet and the
//! stage ends erroring at its deadline, as on kwok.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;
use skyhook::schema::{self, Stage, State};

use super::{create, setup};

#[tokio::test]
async fn a_missing_image_tag_is_a_real_pull_error_and_the_stage_errors() {
    let (env, node) = setup("rn-pull", &[("STAGE_DEADLINE", "30s")]).await;
    let sk = env.ctx.name("pull");
    let imgs = crate::support::real::images(&env.ctx);
    let pkg = json!({"version": "0.0.0-not-pushed", "image": imgs.shellscript_repo});
    create(&env, &sk, json!({"missing": pkg})).await;
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let reason = env
        .ctx
        .wait_for("the kubelet's pull error", Duration::from_secs(120), || {
            let pods = pods.clone();
            let node = node.clone();
            async move {
                let list = pods.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
                    .flat_map(|p| {
                        p.status
                            .iter()
                            .flat_map(|s| s.init_container_statuses.iter().flatten())
                    })
                    .find_map(|c| {
                        let w = c.state.as_ref()?.waiting.as_ref()?;
                        let r = w.reason.clone()?;
                        (r == "ErrImagePull" || r == "ImagePullBackOff")
                            .then(|| format!("{r}: {}", w.message.clone().unwrap_or_default()))
                    })
            }
        })
        .await;
    assert!(
        reason.contains("not found")
            || reason.contains("manifest unknown")
            || reason.contains("0.0.0-not-pushed"),
        "the pull error does not name the missing tag: {reason}"
    );
    let state = env
        .ctx
        .wait_for(
            "the node's package to be erroring",
            Duration::from_secs(120),
            || async {
                let (_, state) = env.node_state(&node, &sk).await?;
                let pkg = state.get("missing", "0.0.0-not-pushed")?.clone();
                (pkg.state == Some(State::Erroring)).then_some(pkg)
            },
        )
        .await;
    assert_eq!(state.stage, Stage::Apply);
    env.wait_status(&sk, schema::Status::Erroring, Duration::from_secs(30))
        .await;
}

/// Delta D29: a package image named with its registry's port is pulled as
/// `host:port/repo:<version>` by the real kubelet and its stages run (the reference cut such an
/// image to `host`); the package's script also sees `SKYHOOK_NODE_ORDER` (delta D7).
#[tokio::test]
async fn an_image_on_a_registry_with_a_port_is_pulled_and_runs() {
    let (env, node) = setup("rn-port", &[]).await;
    let sk = env.ctx.name("port");
    let imgs = crate::support::real::images(&env.ctx);
    let image = imgs
        .shellscript_repo
        .replacen(&imgs.registry_host, &imgs.registry_address, 1);
    assert_ne!(image, imgs.shellscript_repo, "no registry name to replace");
    let mut pkg = super::shellscript(
        &env.ctx,
        json!({"apply.sh": "#!/bin/sh\necho applied-from-a-registry-with-a-port\necho \"$SKYHOOK_NODE_ORDER\" > /var/tmp/skyhook-node-order\n"}),
        json!({}),
    );
    pkg["image"] = json!(image);
    super::roll_out(&env, &sk, json!({"ported": pkg})).await;
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    // The rollout completed, so the kubelet pulled what the pods name.
    let pulled: Vec<String> = pods
        .list(&ListParams::default().labels(&format!("{}={sk}", schema::NAME_LABEL)))
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
        .flat_map(|p| {
            p.spec
                .iter()
                .flat_map(|s| s.init_containers.iter().flatten())
        })
        .filter_map(|c| c.image.clone())
        .collect();
    // Delta D7: the package's own script sees SKYHOOK_NODE_ORDER (the only node: 0).
    let order = env
        .ctx
        .read_on_node(&node, "/var/tmp/skyhook-node-order")
        .unwrap_or_default();
    assert_eq!(
        order.trim(),
        "0",
        "SKYHOOK_NODE_ORDER as the package saw it"
    );
    let want = format!("{image}:{}", imgs.shellscript_version);
    assert!(
        pulled.contains(&want),
        "no container ran {want}: {pulled:?}"
    );
}
