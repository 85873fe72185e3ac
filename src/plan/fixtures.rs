//! The objects planner tests hand to the planner, built in one place so that every test module
//! shares one set of defaults and a case spells out only what it is about.
//!
//! Defaults: Skyhook `sh`, packages at `1.0.0` from `ghcr.io/x/<name>`, node `n1`, the clock at
//! `t(0)`. Builders (`skyhook`, `package`, `node`, `job`, `go_pod`) chain setters and end in
//! `build()`; the rest are plain constructors whose result a test changes with struct update.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

use super::NodeView;
use super::facts::NodeFacts;
use super::spec::{SpecView, spec_hash};
use super::stage::{self, Host, NodeInput, NodeOutcome, RetryPolicy};
use crate::crd::{
    DeploymentPolicy, EffectiveStrategy, Package, Skyhook, SkyhookStatus, StrategyParams,
};
use crate::jobs::{GoOutcome, GoPod, JobView, Outcome};
use crate::schema::{
    self, Folded, Interrupt, InterruptType, NodeState, PackageStatus, RuntimeTaints, Stage, State,
    Status, TaintSpec,
};
use crate::settings::Config;

/// `secs` after the fixed instant every planner test calls now.
pub(crate) fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("time")
}

pub(crate) fn now() -> Timestamp {
    t(0)
}

/// The operator's settings as an empty command line gives them.
pub(crate) fn config() -> Config {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        settings: crate::settings::Settings,
    }
    let cli = <Cli as clap::Parser>::parse_from(["skyhook-operator"]);
    cli.settings.validate().expect("default settings are valid")
}

pub(crate) fn runtime_taint() -> RuntimeTaints {
    RuntimeTaints::new(
        &TaintSpec::parse(schema::DEFAULT_RUNTIME_REQUIRED_TAINT).expect("taint spec"),
    )
}

/// Short enough that a test can walk a backoff to its cap in a few steps.
pub(crate) const RETRY: RetryPolicy = RetryPolicy {
    base: Duration::from_secs(10),
    max: Duration::from_secs(300),
    limit: None,
};

/// One node's input to [`step`]: a [`NodeInput`] with the decision to start work, which a pass
/// makes between the fold and the advance and a test makes up front.
pub(crate) struct StepInput<'a> {
    pub spec: &'a SpecView<'a>,
    pub state: NodeState,
    pub applied: BTreeMap<String, String>,
    pub folded: Folded,
    pub host: Host<'a>,
    pub jobs: &'a [&'a JobView],
    /// False outside the current batch, paused, disabled, gated or blocked: running work is
    /// still observed, but nothing new starts.
    pub may_start: bool,
    pub retry: RetryPolicy,
    pub failed_jobs_kept: usize,
    pub now: Timestamp,
}

/// One step of the machine for one node: [`stage::fold`], then advance when it may start
/// work, else rest.
pub(crate) fn step(input: StepInput) -> NodeOutcome {
    let StepInput {
        spec,
        state,
        applied,
        folded,
        host,
        jobs,
        may_start,
        retry,
        failed_jobs_kept,
        now,
    } = input;
    let node = stage::fold(NodeInput {
        spec,
        state,
        applied,
        folded,
        host,
        jobs,
        retry,
        failed_jobs_kept,
        now,
    });
    if may_start {
        node.advance()
    } else {
        node.rest()
    }
}

/// One node's step over `spec`: an empty node, nothing running, in the batch, at `t(0)`.
pub(crate) fn input<'a>(spec: &'a SpecView<'a>) -> StepInput<'a> {
    StepInput {
        spec,
        state: NodeState::default(),
        applied: BTreeMap::new(),
        folded: Default::default(),
        host: Default::default(),
        jobs: &[],
        may_start: true,
        retry: RETRY,
        failed_jobs_kept: 3,
        now: t(0),
    }
}

/// A package as a spec carries it, built from its JSON so that serde's defaults apply.
pub(crate) struct PackageB(Value);

pub(crate) fn package(name: &str) -> PackageB {
    PackageB(json!({"name": name, "version": "1.0.0", "image": format!("ghcr.io/x/{name}")}))
}

impl PackageB {
    pub(crate) fn version(mut self, version: &str) -> Self {
        self.0["version"] = json!(version);
        self
    }

    pub(crate) fn image(mut self, image: &str) -> Self {
        self.0["image"] = json!(image);
        self
    }

    pub(crate) fn reboot(self) -> Self {
        self.with(json!({"interrupt": {"type": "reboot"}}))
    }

    /// Sets (or replaces) the fields of `extra`, spelled as in the CRD.
    pub(crate) fn with(mut self, extra: Value) -> Self {
        if let (Some(m), Some(e)) = (self.0.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        self
    }

    pub(crate) fn build(self) -> Package {
        serde_json::from_value(self.0).expect("package")
    }
}

impl From<PackageB> for Package {
    fn from(p: PackageB) -> Package {
        p.build()
    }
}

/// `spec.packages` of these packages.
pub(crate) fn packages<'a>(
    list: impl IntoIterator<Item = &'a Package>,
) -> BTreeMap<String, Package> {
    list.into_iter()
        .map(|p| (p.name.clone(), p.clone()))
        .collect()
}

pub(crate) fn service(units: &[&str]) -> Interrupt {
    Interrupt {
        kind: InterruptType::Service,
        services: units.iter().map(|u| u.to_string()).collect(),
    }
}

/// A node-state entry of package `name` at `1.0.0`, image `img`, never restarted.
pub(crate) fn entry(name: &str, stage: Stage, state: State) -> PackageStatus {
    PackageStatus {
        name: name.into(),
        version: "1.0.0".into(),
        image: "img".into(),
        container_sha: None,
        stage,
        state: Some(state),
        restarts: 0,
    }
}

/// A node-state entry of `p` as the spec has it.
pub(crate) fn entry_of(p: &Package, stage: Stage, state: State) -> PackageStatus {
    PackageStatus {
        name: p.name.as_str().into(),
        version: p.version.as_str().into(),
        image: p.image.as_str().into(),
        ..entry(&p.name, stage, state)
    }
}

pub(crate) fn node_state(entries: impl IntoIterator<Item = PackageStatus>) -> NodeState {
    let mut s = NodeState::default();
    for e in entries {
        s.upsert(e);
    }
    s
}

/// A Skyhook, built from its JSON so that serde's defaults apply (as when read from the API).
#[derive(Clone)]
pub(crate) struct SkyhookB {
    metadata: Value,
    spec: Value,
    status: Option<SkyhookStatus>,
    normalize: bool,
}

/// Skyhook `name` with an empty spec and nothing else in its metadata.
pub(crate) fn skyhook(name: &str) -> SkyhookB {
    SkyhookB {
        metadata: json!({"name": name}),
        spec: json!({}),
        status: None,
        normalize: false,
    }
}

impl SkyhookB {
    /// As a pass receives it: created (uid, generation 1), holding our finalizer, normalised.
    pub(crate) fn live(self) -> Self {
        let mut sk = self.uid("u1").generation(1);
        sk.metadata["finalizers"] = json!([schema::FINALIZER]);
        sk.normalize = true;
        sk
    }

    pub(crate) fn uid(mut self, uid: &str) -> Self {
        self.metadata["uid"] = json!(uid);
        self
    }

    pub(crate) fn generation(mut self, generation: i64) -> Self {
        self.metadata["generation"] = json!(generation);
        self
    }

    pub(crate) fn finalizers(mut self, finalizers: Value) -> Self {
        self.metadata["finalizers"] = finalizers;
        self
    }

    pub(crate) fn annotations(mut self, annotations: Value) -> Self {
        merge(&mut self.metadata, "annotations", annotations);
        self
    }

    /// Replaces the whole spec.
    pub(crate) fn spec(mut self, spec: Value) -> Self {
        self.spec = spec;
        self
    }

    /// Sets one field of the spec, spelled as in the CRD.
    pub(crate) fn set(mut self, field: &str, value: Value) -> Self {
        self.spec[field] = value;
        self
    }

    /// Adds (or replaces) a package under its name.
    pub(crate) fn package(mut self, p: impl Into<Package>) -> Self {
        let p: Package = p.into();
        merge(&mut self.spec, "packages", json!({p.name.clone(): p}));
        self
    }

    pub(crate) fn policy(self, name: &str) -> Self {
        self.set("deploymentPolicy", json!(name))
    }

    pub(crate) fn status(mut self, status: SkyhookStatus) -> Self {
        self.status = Some(status);
        self
    }

    pub(crate) fn build(self) -> Skyhook {
        let mut sk: Skyhook = serde_json::from_value(json!({
            "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
            "metadata": self.metadata, "spec": self.spec,
        }))
        .expect("skyhook");
        if self.normalize {
            crate::crd::normalize(&mut sk);
        }
        sk.status = self.status;
        sk
    }

    pub(crate) fn arc(self) -> Arc<Skyhook> {
        Arc::new(self.build())
    }
}

/// DeploymentPolicy `p`.
pub(crate) fn policy(compartments: Value, default: Value) -> DeploymentPolicy {
    serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": "p"},
        "spec": {"compartments": compartments, "default": default},
    }))
    .expect("policy")
}

/// Strategy parameters with the CRD's defaults but the first batch.
pub(crate) fn params(initial: i64) -> StrategyParams {
    StrategyParams {
        initial_batch: initial,
        batch_threshold: 100,
        failure_threshold: None,
        safety_limit: 50,
    }
}

pub(crate) fn fixed(initial: i64) -> EffectiveStrategy {
    EffectiveStrategy::Fixed(params(initial))
}

pub(crate) fn linear(initial: i64, delta: i64) -> EffectiveStrategy {
    EffectiveStrategy::Linear {
        params: params(initial),
        delta,
    }
}

pub(crate) fn exponential(initial: i64, growth_factor: i64) -> EffectiveStrategy {
    EffectiveStrategy::Exponential {
        params: params(initial),
        growth_factor,
    }
}

/// A node, built as a `Node` and read into a [`NodeView`] the way the operator's cache does.
pub(crate) struct NodeB {
    node: Value,
    created: Option<Timestamp>,
}

/// Node `name`: no labels, annotations, taints or creation time, schedulable.
pub(crate) fn node(name: &str) -> NodeB {
    NodeB {
        node: json!({"metadata": {"name": name}}),
        created: None,
    }
}

impl NodeB {
    /// Created `secs` after a fixed instant; a pass works on the oldest nodes first.
    pub(crate) fn created(mut self, secs: i64) -> Self {
        self.created = Some(Timestamp::from_second(1_700_000_000 + secs).expect("time"));
        self
    }

    pub(crate) fn labels(mut self, labels: Value) -> Self {
        merge(&mut self.node["metadata"], "labels", labels);
        self
    }

    pub(crate) fn annotations(mut self, annotations: Value) -> Self {
        merge(&mut self.node["metadata"], "annotations", annotations);
        self
    }

    pub(crate) fn annotation(self, key: &str, value: &str) -> Self {
        self.annotations(json!({key: value}))
    }

    pub(crate) fn resource_version(mut self, version: &str) -> Self {
        self.node["metadata"]["resourceVersion"] = json!(version);
        self
    }

    pub(crate) fn cordoned(mut self, cordoned: bool) -> Self {
        self.node["spec"]["unschedulable"] = json!(cordoned);
        self
    }

    pub(crate) fn taints(mut self, taints: Value) -> Self {
        self.node["spec"]["taints"] = taints;
        self
    }

    /// `status.nodeInfo.bootID`, as a kubelet reports it.
    pub(crate) fn boot(mut self, boot_id: &str) -> Self {
        let info = [
            "architecture",
            "containerRuntimeVersion",
            "kernelVersion",
            "kubeProxyVersion",
            "kubeletVersion",
            "machineID",
            "operatingSystem",
            "osImage",
            "systemUUID",
        ]
        .into_iter()
        .map(|k| (k.to_string(), json!("")))
        .chain([("bootID".to_string(), json!(boot_id))]);
        self.node["status"]["nodeInfo"] = Value::Object(info.collect());
        self
    }

    /// `status.conditions`, as the API has them (the view keeps Skyhook's own only).
    pub(crate) fn conditions(mut self, conditions: Value) -> Self {
        self.node["status"]["conditions"] = conditions;
        self
    }

    pub(crate) fn build(self) -> NodeView {
        self.raw().into()
    }

    /// The `Node` as the API server has it.
    pub(crate) fn raw(self) -> Node {
        let mut n: Node = serde_json::from_value(self.node).expect("node");
        if let Some(at) = self.created {
            n.metadata.creation_timestamp = Some(Time(at));
        }
        n
    }

    pub(crate) fn arc(self) -> Arc<NodeView> {
        Arc::new(self.build())
    }
}

/// What a pass knows of `node` before deciding: nothing stored, nothing in the way.
pub(crate) fn facts(node: &NodeView) -> NodeFacts<'_> {
    NodeFacts {
        node,
        name: node.name.clone(),
        prior: NodeState::default(),
        applied: BTreeMap::new(),
        folded: Default::default(),
        host: Default::default(),
        holds_cordon: false,
        block: None,
        gated: false,
        boot_id: None,
        rebooted: false,
        unreadable: None,
    }
}

/// A Job of ours as the Job cache reads it.
pub(crate) struct JobB(JobView);

/// The first attempt of `p`'s `stage` on node `n1` of Skyhook `sh`, running, built from the spec
/// as it is (so not stale).
pub(crate) fn job(p: &Package, stage: Stage) -> JobB {
    JobB(JobView {
        name: "".into(),
        api: schema::Api::Skyhook,
        skyhook: "sh".into(),
        package: p.name.as_str().into(),
        version: p.version.as_str().into(),
        stage,
        node: "n1".into(),
        attempt: 0,
        outcome: Outcome::Running,
        recorded: false,
        spec_hash: spec_hash(p, &[]).into(),
        created: None,
        deleting: false,
        node_version: None,
        counted: false,
        stuck: None,
        boot_id: None,
    })
}

impl JobB {
    pub(crate) fn on(mut self, node: &str) -> Self {
        self.0.node = node.into();
        self
    }

    pub(crate) fn attempt(mut self, attempt: u32) -> Self {
        self.0.attempt = attempt;
        self
    }

    pub(crate) fn outcome(mut self, outcome: Outcome) -> Self {
        self.0.outcome = outcome;
        self
    }

    pub(crate) fn node_version(mut self, version: Option<u64>) -> Self {
        self.0.node_version = version;
        self
    }

    pub(crate) fn deleting(mut self, deleting: bool) -> Self {
        self.0.deleting = deleting;
        self
    }

    pub(crate) fn created(mut self, at: Timestamp) -> Self {
        self.0.created = Some(at);
        self
    }

    /// Named after what it runs, so that two Jobs share a name only when they are the same run.
    pub(crate) fn build(mut self) -> JobView {
        let j = &self.0;
        let name = format!(
            "{}-{}-{}-{}",
            j.package,
            j.stage.as_str(),
            j.node,
            j.attempt
        );
        self.0.name = name.into();
        self.0
    }
}

/// A failed Job's outcome as a non-zero exit reports it.
pub(crate) fn failure(at: Timestamp) -> Outcome {
    Outcome::Failed {
        at,
        reason: "PodFailurePolicy".into(),
        message: "exit 1".into(),
    }
}

/// A pod the Go operator left for one stage of a package.
pub(crate) struct GoPodB(GoPod);

/// The Go operator's pod of `p` at `stage` on node `n1`, running.
pub(crate) fn go_pod(p: &Package, stage: Stage) -> GoPodB {
    GoPodB(GoPod {
        name: format!("sh-{}-{}-{}-n1-0123abcd", p.name, p.version, stage.as_str()),
        skyhook: "sh".into(),
        package: p.name.clone(),
        version: p.version.clone(),
        stage,
        image: p.image.clone(),
        container_sha: None,
        node: "n1".into(),
        invalid: false,
        deleting: false,
        outcome: GoOutcome::Running,
    })
}

impl GoPodB {
    pub(crate) fn outcome(mut self, outcome: GoOutcome) -> Self {
        self.0.outcome = outcome;
        self
    }

    pub(crate) fn build(self) -> GoPod {
        self.0
    }
}

/// A Skyhook status condition, set at `t(0)` for generation 1.
pub(crate) fn condition(type_: &str, status: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: "R".to_string(),
        message: message.to_string(),
        observed_generation: Some(1),
        last_transition_time: Time(t(0)),
    }
}

/// A Skyhook status that says only this.
pub(crate) fn status_with(status: Option<Status>, conditions: Vec<Condition>) -> SkyhookStatus {
    SkyhookStatus {
        status,
        conditions,
        ..SkyhookStatus::default()
    }
}

/// Adds the keys of `more` to the object at `at[key]` rather than replacing it, so that setters
/// compose in any order.
fn merge(at: &mut Value, key: &str, more: Value) {
    if !at[key].is_object() {
        at[key] = json!({});
    }
    if let (Some(m), Some(extra)) = (at[key].as_object_mut(), more.as_object()) {
        m.extend(extra.clone());
    }
}
