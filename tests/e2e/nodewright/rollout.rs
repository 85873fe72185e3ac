//! A NodeWright rolls out beside a Skyhook: every key it writes is under `nodewright.nvidia.com/`
//! (node annotations, labels and conditions, its Jobs, its finalizer and status conditions),
//! the Skyhook's under `skyhook.nvidia.com/`, and deleting it cleans its keys alone.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use skyhook::schema::{self, Api as Kind, Status};

use super::{create_nodewright, nodewright, nw_setup, objects, wait_nodewright};
use crate::support::{pkg, skyhook, sleep};

#[tokio::test]
async fn a_nodewright_rolls_out_beside_a_skyhook_each_in_its_own_keys() {
    // SERVE_APIS=auto (the default): NodeWrights too, their CRD being installed.
    let env = nw_setup("nw-rollout", 2, &[]).await;
    let (nw, sk) = (env.ctx.name("nw"), env.ctx.name("sk"));
    let spec = json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}});
    create_nodewright(&env.ctx, &nw, spec.clone()).await;
    env.create(&skyhook(&env.ctx, &sk, spec)).await;
    let done = wait_nodewright(&env, &nw, Status::Complete, Duration::from_secs(90)).await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(90))
        .await;

    // Metrics: every object's series under both names while NodeWrights are served (upstream
    // v0.18's dual publishing), the same values.
    let text = crate::support::metrics::metrics(env.op.metrics_port);
    for line in [
        format!(r#"nodewright_status{{nodewright_name="{nw}",status="complete"}} 1"#),
        format!(r#"skyhook_status{{skyhook_name="{nw}",status="complete"}} 1"#),
        format!(r#"skyhook_status{{skyhook_name="{sk}",status="complete"}} 1"#),
        format!(r#"nodewright_status{{nodewright_name="{sk}",status="complete"}} 1"#),
        format!(r#"nodewright_node_target_count{{nodewright_name="{nw}"}} 2"#),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from the metrics"
        );
    }

    // The object: its own finalizer, and its status conditions under its prefix.
    assert_eq!(
        done.metadata.finalizers,
        Some(vec![schema::NODEWRIGHT_FINALIZER.to_string()])
    );
    let status = done.status.expect("status");
    assert!(!status.conditions.is_empty());
    for c in &status.conditions {
        assert!(
            !c.type_.starts_with("skyhook.nvidia.com/"),
            "a NodeWright condition under the legacy prefix: {}",
            c.type_
        );
    }
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "nodewright.nvidia.com/Transition"),
        "{:?}",
        status.conditions
    );

    // The nodes: the same JSON shapes under each API's prefix.
    let nodes: Api<Node> = Api::all(env.ctx.client.clone());
    for name in &env.nodes {
        let node = nodes.get(name).await.expect("node");
        let (a, l) = (node.annotations(), node.labels());
        let mine = Kind::NodeWright
            .local(&schema::node_state_annotation(&nw))
            .into_owned();
        let state = a
            .get(&mine)
            .unwrap_or_else(|| panic!("{name}: no {mine} in {a:?}"));
        let legacy = a
            .get(&schema::node_state_annotation(&sk))
            .unwrap_or_else(|| panic!("{name}: the Skyhook's node state is missing"));
        assert_eq!(
            schema::NodeState::parse(state).expect("node state").len(),
            schema::NodeState::parse(legacy).expect("node state").len()
        );
        assert!(!a.contains_key(&schema::node_state_annotation(&nw)));
        assert_eq!(
            l.get(Kind::NodeWright.local(&schema::status_label(&nw)).as_ref())
                .map(String::as_str),
            Some("complete")
        );
        assert_eq!(
            l.get(&schema::status_label(&sk)).map(String::as_str),
            Some("complete")
        );
    }

    // Its Jobs: labelled under its prefix and owned by it.
    let jobs: Api<Job> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let mine = jobs
        .list(&ListParams::default().labels(&format!("nodewright.nvidia.com/name={nw}")))
        .await
        .expect("list Jobs")
        .items;
    assert_eq!(mine.len(), 2 * 2, "apply and config on each node");
    for j in &mine {
        let owner = &j.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("NodeWright", nw.as_str())
        );
        assert!(
            j.labels()
                .keys()
                .all(|k| !k.starts_with("skyhook.nvidia.com/")),
            "{:?}",
            j.labels()
        );
    }
    assert!(env.jobs_of(&nw).await.is_empty());

    // Deleted, it takes its keys off the nodes and leaves the Skyhook's.
    objects(&env.ctx, Kind::NodeWright)
        .delete(&nw, &DeleteParams::default())
        .await
        .expect("delete the NodeWright");
    env.ctx
        .wait_for("the NodeWright gone", Duration::from_secs(60), || async {
            nodewright(&env.ctx, &nw).await.is_none().then_some(())
        })
        .await;
    for name in &env.nodes {
        let node = nodes.get(name).await.expect("node");
        let keys: Vec<&String> = node
            .annotations()
            .keys()
            .chain(node.labels().keys())
            .filter(|k| k.starts_with("nodewright.nvidia.com/") && k.ends_with(&nw))
            .collect();
        assert!(keys.is_empty(), "{name} keeps {keys:?}");
        assert!(
            node.annotations()
                .contains_key(&schema::node_state_annotation(&sk))
        );
    }
}

/// `SERVE_APIS=skyhook`: a NodeWright is left alone (no status, no finalizer, no Job).
#[tokio::test]
async fn an_operator_serving_skyhooks_alone_leaves_nodewrights_untouched() {
    let env = nw_setup("nw-off", 1, &[("SERVE_APIS", "skyhook")]).await;
    let (nw, sk) = (env.ctx.name("nw"), env.ctx.name("sk"));
    let spec = json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}});
    create_nodewright(&env.ctx, &nw, spec.clone()).await;
    env.create(&skyhook(&env.ctx, &sk, spec)).await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(60))
        .await;
    let left = nodewright(&env.ctx, &nw).await.expect("the NodeWright");
    assert!(left.status.is_none(), "{:?}", left.status);
    assert!(left.metadata.finalizers.unwrap_or_default().is_empty());
    let jobs: Api<Job> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let theirs = jobs
        .list(&ListParams::default().labels(&format!("nodewright.nvidia.com/name={nw}")))
        .await
        .expect("list Jobs");
    assert!(theirs.items.is_empty());
    let text = crate::support::metrics::metrics(env.op.metrics_port);
    assert!(
        !text.contains("nodewright_"),
        "nodewright_ series from an operator that serves Skyhooks alone"
    );
}
