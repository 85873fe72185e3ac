//! The usual test environment: a context, its own labelled nodes and its own operator, with the
//! APIs the tests read.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::{BatchState, DeploymentPolicy, Skyhook};
use skyhook::schema::{self, NodeState};

use super::{Operator, TestCtx, install_crds};

pub struct Env {
    // Dropped first (fields drop in declaration order): the operator stops before its test's
    // namespace and bindings go, which it would otherwise meet as 403s.
    pub op: Operator,
    pub ctx: TestCtx,
    pub nodes: Vec<String>,
    pub skyhooks: Api<Skyhook>,
    pub jobs: Api<Job>,
    pub node_api: Api<Node>,
}

/// CRDs installed, a context named after `test`, `nodes` nodes of its own and an operator
/// started with `operator_env`.
///
/// Run [`super::under`] NodeWrights, the NodeWright CRDs are installed too, the operator serves
/// NodeWrights alone (with upstream's runtime-required taint), and the test speaks to them
/// through the translating proxy: the same steps, on the new kind and keys.
pub async fn setup(test: &str, nodes: usize, operator_env: &[(&str, &str)]) -> Env {
    install_crds();
    let mut ctx = TestCtx::new(test).await;
    let nodes = ctx.add_test_nodes(nodes);
    if super::kind() == schema::Api::NodeWright {
        super::install_nodewright_crds();
        let mut env: Vec<(String, String)> = vec![
            ("SERVE_APIS".into(), "nodewright".into()),
            (
                "RUNTIME_REQUIRED_TAINT".into(),
                "nodewright.nvidia.com=runtime-required:NoSchedule".into(),
            ),
        ];
        for (k, v) in operator_env {
            env.retain(|(have, _)| have != k);
            env.push((k.to_string(), super::translate::outward(v)));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let op = Operator::start(&ctx, &env);
        ctx.translate_to_nodewrights().await;
        ctx.report_on_failure(&["get", "nodewrights.nodewright.nvidia.com", "-o", "yaml"]);
        return Env::new(ctx, op, nodes);
    }
    let op = Operator::start(&ctx, operator_env);
    Env::new(ctx, op, nodes)
}

impl Env {
    /// The APIs of a test whose operator is already started.
    pub fn new(mut ctx: TestCtx, op: Operator, nodes: Vec<String>) -> Env {
        ctx.report_on_failure(&["get", "skyhooks", "-o", "yaml"]);
        ctx.report_on_failure(&[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.annotations}{\"\\n\"}{end}",
        ]);
        Env {
            skyhooks: Api::all(ctx.client.clone()),
            jobs: Api::namespaced(ctx.client.clone(), &ctx.ns),
            node_api: Api::all(ctx.client.clone()),
            ctx,
            op,
            nodes,
        }
    }

    /// The Skyhook's condition `kind`: (reason, message).
    pub async fn condition(&self, sk: &str, kind: &str) -> Option<(String, String)> {
        let s = self.skyhooks.get(sk).await.ok()?.status?;
        let c = s.conditions.iter().find(|c| c.type_ == kind)?;
        Some((c.reason.clone(), c.message.clone()))
    }

    /// The batch state of the Skyhook's default compartment.
    pub async fn batch_state(&self, sk: &str) -> Option<BatchState> {
        let s = self.skyhooks.get(sk).await.ok()?.status?;
        s.compartment_statuses
            .get("__default__")?
            .batch_state
            .clone()
    }

    pub async fn create(&self, sk: &Skyhook) {
        self.skyhooks
            .create(&PostParams::default(), sk)
            .await
            .expect("create Skyhook");
    }

    /// The node's `nodeState_<sk>` annotation, raw and parsed.
    pub async fn node_state(&self, node: &str, sk: &str) -> Option<(String, NodeState)> {
        let n = self.node_api.get(node).await.ok()?;
        let raw = n
            .annotations()
            .get(&schema::node_state_annotation(sk))?
            .clone();
        let parsed = NodeState::parse(&raw).ok()?;
        Some((raw, parsed))
    }

    /// The node's `folded_<sk>` record: which Job attempts its state holds.
    pub async fn folded(&self, node: &str, sk: &str) -> schema::Folded {
        let n = self.node_api.get(node).await.expect("node");
        n.annotations()
            .get(&schema::folded_annotation(sk))
            .map(|raw| serde_json::from_str(raw).expect("folded record"))
            .unwrap_or_default()
    }

    pub async fn wait_status(&self, sk: &str, want: schema::Status, timeout: Duration) -> Skyhook {
        self.ctx
            .wait_for(
                &format!("Skyhook {sk} status {}", want.as_str()),
                timeout,
                || async {
                    let s = self.skyhooks.get(sk).await.ok()?;
                    (s.status.as_ref()?.status == Some(want)).then_some(s)
                },
            )
            .await
    }

    /// Waits up to 30 s for an Event about the object named `object` that `matches`.
    pub async fn wait_event(
        &self,
        what: &str,
        object: &str,
        matches: impl Fn(&Event) -> bool,
    ) -> Event {
        let events: Api<Event> = Api::all(self.ctx.client.clone());
        let lp = ListParams::default().fields(&format!("involvedObject.name={object}"));
        self.ctx
            .wait_for(what, Duration::from_secs(30), || async {
                let list = events.list(&lp).await.ok()?;
                list.items.into_iter().find(|e| matches(e))
            })
            .await
    }

    /// A workload pod `name` on `node` in the test's namespace (`meta` merged into its
    /// metadata: labels, finalizers), once kwok runs it.
    pub async fn run_workload(&self, name: &str, node: &str, meta: serde_json::Value) -> Pod {
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ctx.ns);
        let mut pod = serde_json::json!({"metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "example.com/app:1"}]}});
        if let (Some(m), Some(extra)) = (pod["metadata"].as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        let pod: Pod = serde_json::from_value(pod).expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create the workload pod");
        self.ctx
            .wait_for("the workload Running", Duration::from_secs(30), || async {
                let p = pods.get(name).await.ok()?;
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                running.then_some(p)
            })
            .await
    }

    /// The node's `status_<sk>` annotation.
    pub async fn node_status(&self, node: &str, sk: &str) -> Option<String> {
        let n = self.node_api.get(node).await.ok()?;
        n.metadata
            .annotations?
            .get(&schema::status_annotation(sk))
            .cloned()
    }

    /// Whether Skyhook `sk`'s status is `complete`.
    pub async fn is_complete(&self, sk: &str) -> bool {
        let status = self
            .skyhooks
            .get(sk)
            .await
            .ok()
            .and_then(|s| s.status?.status);
        status == Some(schema::Status::Complete)
    }

    pub async fn jobs_of(&self, sk: &str) -> Vec<Job> {
        self.jobs
            .list(&ListParams::default().labels(&format!("{}={sk}", schema::NAME_LABEL)))
            .await
            .expect("list jobs")
            .items
    }
}

/// A Job's label `k`, or "" when it has none.
pub fn label<'a>(j: &'a Job, k: &str) -> &'a str {
    j.labels().get(k).map(String::as_str).unwrap_or("")
}

/// A DeploymentPolicy of the test with `spec`, created; its name.
pub async fn create_policy(ctx: &TestCtx, spec: Value) -> String {
    let name = ctx.name("policy");
    let policy: DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("valid DeploymentPolicy");
    Api::<DeploymentPolicy>::all(ctx.client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the DeploymentPolicy");
    name
}

/// The node is unschedulable.
pub fn cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}
