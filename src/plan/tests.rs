//! `plan()` as a whole: hand-made worlds in, writes out. Each table names its cases; a failing
//! case prints its name.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::NodeView;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::*;
use crate::crd::Skyhook;
use crate::jobs::{JobView, Outcome};
use crate::schema::{NodeState, Stage, State, Status};
use crate::settings::Config;

fn config() -> Config {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        settings: crate::settings::Settings,
    }
    let cli = <Cli as clap::Parser>::parse_from(["skyhook-operator"]);
    cli.settings.validate().expect("default settings are valid")
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("time")
}

const PLAIN: &str = "tuned";
const REBOOT: &str = "driver";

/// A Skyhook `sh` with the finalizer, from its spec and annotations.
fn skyhook(spec: Value, annotations: Value) -> Skyhook {
    let mut sk: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": "sh", "uid": "u1", "generation": 1,
                     "finalizers": [schema::FINALIZER], "annotations": annotations},
        "spec": spec,
    }))
    .expect("skyhook");
    crate::crd::normalize(&mut sk);
    sk
}

fn one_package(interrupt: bool) -> Value {
    let name = if interrupt { REBOOT } else { PLAIN };
    let mut p = json!({"version": "1.0.0", "image": format!("ghcr.io/x/{name}")});
    if interrupt {
        p["interrupt"] = json!({"type": "reboot"});
    }
    json!({"packages": {name: p}})
}

fn node(name: &str, age: i64, annotations: Value, labels: Value, cordoned: bool) -> Arc<NodeView> {
    let mut n: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations, "labels": labels},
        "spec": {"unschedulable": cordoned},
    }))
    .expect("node");
    let created = Timestamp::from_second(1_700_000_000 + age).expect("time");
    n.metadata.creation_timestamp = Some(Time(created));
    Arc::new(n.into())
}

/// The node-state annotation of one package as the Go operator writes it.
fn go_state(package: &str, stage: &str, state: &str) -> Value {
    let raw = format!(
        r#"{{"{package}|1.0.0":{{"name":"{package}","version":"1.0.0","image":"ghcr.io/x/{package}","stage":"{stage}","state":"{state}"}}}}"#
    );
    json!({schema::node_state_annotation("sh"): raw})
}

fn job(package: &str, stage: Stage, node: &str, attempt: u32, outcome: Outcome) -> JobView {
    JobView {
        name: format!("{package}-{}-{node}-{attempt}", stage.as_str()).into(),
        skyhook: "sh".into(),
        package: package.into(),
        version: "1.0.0".into(),
        stage,
        node: node.into(),
        attempt,
        outcome,
        recorded: false,
        spec_hash: spec::spec_hash(
            &serde_json::from_value(json!({"name": package, "version": "1.0.0",
                "image": format!("ghcr.io/x/{package}")}))
            .expect("package"),
            &[],
        )
        .into(),
        created: None,
        deleting: false,
        node_version: None,
        counted: false,
        stuck: None,
    }
}

struct World {
    sk: Skyhook,
    others: Vec<Arc<Skyhook>>,
    nodes: Vec<Arc<NodeView>>,
    jobs: Vec<JobView>,
    pods: BTreeMap<String, Vec<PodInfo>>,
    busy: BTreeSet<String>,
    go_pods: BTreeMap<String, Vec<crate::jobs::GoPod>>,
    invalid: Vec<String>,
    policies: Vec<Arc<crate::crd::DeploymentPolicy>>,
    /// STATUS_NODE_BUDGET of this world's operator.
    status_budget: usize,
}

impl World {
    fn new(sk: Skyhook, nodes: Vec<Arc<NodeView>>) -> Self {
        World {
            sk,
            others: Vec::new(),
            nodes,
            jobs: Vec::new(),
            pods: BTreeMap::new(),
            busy: BTreeSet::new(),
            go_pods: BTreeMap::new(),
            invalid: Vec::new(),
            policies: Vec::new(),
            status_budget: crate::settings::DEFAULT_STATUS_NODE_BUDGET,
        }
    }

    fn plan(&self) -> Plan {
        let cfg = Config {
            status_node_budget: self.status_budget,
            ..config()
        };
        let mut skyhooks = self.others.clone();
        skyhooks.push(Arc::new(self.sk.clone()));
        let jobs: Vec<Arc<JobView>> = self.jobs.iter().cloned().map(Arc::new).collect();
        plan(&Inputs {
            skyhook: &self.sk,
            status: self.sk.status.as_ref(),
            skyhooks: &skyhooks,
            policies: &self.policies,
            nodes: &self.nodes,
            jobs: &jobs,
            configmaps: &[],
            pods_on_nodes: &self.pods,
            busy_nodes: &self.busy,
            go_pods: &self.go_pods,
            invalid: &self.invalid,
            config: &cfg,
            operator_version: "test",
            now: now(),
            create_room: launch::MAX_JOB_CREATES_PER_PASS,
        })
    }
}

/// (node, stage label) of every Job the plan creates, sorted.
fn created(plan: &Plan) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = plan
        .create_jobs
        .iter()
        .map(|j| j.job().expect("a Job"))
        .map(|j| {
            let labels = j.metadata.labels.clone().unwrap_or_default();
            let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
            (get(schema::NODE_LABEL), get(schema::STAGE_LABEL))
        })
        .collect();
    v.sort();
    v
}

fn node_status(plan: &Plan, node: &str) -> Option<Status> {
    plan.status.as_ref()?.node_status.get(node).copied()
}

fn written_state(plan: &Plan, node: &str) -> Option<NodeState> {
    let patch = plan.node_patches.iter().find(|p| p.node == node)?;
    let raw = patch
        .annotations
        .get(&schema::node_state_annotation("sh"))?
        .as_ref()?;
    NodeState::parse(raw).ok()
}

#[test]
fn go_operator_state_is_continued_in_every_stage_and_state() {
    // (case, interrupt package, stage, state, Job started this pass, node status after)
    let cases: &[(&str, bool, &str, &str, Option<&str>, Status)] = &[
        (
            "apply in progress reruns apply",
            false,
            "apply",
            "in_progress",
            Some("apply"),
            Status::InProgress,
        ),
        (
            "apply erroring retries apply",
            false,
            "apply",
            "erroring",
            Some("apply"),
            Status::InProgress,
        ),
        (
            "apply unknown reruns apply",
            false,
            "apply",
            "unknown",
            Some("apply"),
            Status::InProgress,
        ),
        (
            "apply complete moves to config",
            false,
            "apply",
            "complete",
            Some("config"),
            Status::InProgress,
        ),
        (
            "config in progress reruns config",
            false,
            "config",
            "in_progress",
            Some("config"),
            Status::InProgress,
        ),
        (
            "config erroring retries config",
            false,
            "config",
            "erroring",
            Some("config"),
            Status::InProgress,
        ),
        (
            "config complete is done",
            false,
            "config",
            "complete",
            None,
            Status::Complete,
        ),
        (
            "upgrade in progress reruns upgrade",
            false,
            "upgrade",
            "in_progress",
            Some("upgrade"),
            Status::InProgress,
        ),
        (
            "upgrade complete moves to config",
            false,
            "upgrade",
            "complete",
            Some("config"),
            Status::InProgress,
        ),
        (
            "uninstall of the spec version reruns uninstall",
            false,
            "uninstall",
            "in_progress",
            Some("uninstall"),
            Status::InProgress,
        ),
        (
            "interrupt package config complete interrupts",
            true,
            "config",
            "complete",
            Some("interrupt"),
            Status::InProgress,
        ),
        (
            "interrupt in progress reruns the interrupt",
            true,
            "interrupt",
            "in_progress",
            Some("interrupt"),
            Status::InProgress,
        ),
        (
            "interrupt erroring retries the interrupt",
            true,
            "interrupt",
            "erroring",
            Some("interrupt"),
            Status::InProgress,
        ),
        (
            "interrupt complete moves to post-interrupt",
            true,
            "interrupt",
            "complete",
            Some("post-interrupt"),
            Status::InProgress,
        ),
        (
            "post-interrupt in progress reruns it",
            true,
            "post-interrupt",
            "in_progress",
            Some("post-interrupt"),
            Status::InProgress,
        ),
        (
            "post-interrupt complete is done",
            true,
            "post-interrupt",
            "complete",
            None,
            Status::Complete,
        ),
        (
            "config complete without interrupt stage recorded",
            true,
            "post-interrupt",
            "erroring",
            Some("post-interrupt"),
            Status::InProgress,
        ),
    ];
    for (case, interrupt, stage, state, job, status) in cases {
        let package = if *interrupt { REBOOT } else { PLAIN };
        // Interrupt packages run their stages on a node already cordoned by us and drained.
        let mut annotations = go_state(package, stage, state);
        if *interrupt {
            annotations[schema::cordon_annotation("sh")] = json!("true");
        }
        let n = node("n1", 0, annotations, json!({}), *interrupt);
        let mut w = World::new(skyhook(one_package(*interrupt), json!({})), vec![n]);
        w.pods.insert("n1".into(), Vec::new());
        let plan = w.plan();
        let want: Vec<(String, String)> = job
            .iter()
            .map(|s| ("n1".to_string(), s.to_string()))
            .collect();
        assert_eq!(created(&plan), want, "{case}: Jobs");
        assert_eq!(node_status(&plan, "n1"), Some(*status), "{case}: status");
        if job.is_none() {
            assert!(
                written_state(&plan, "n1").is_none(),
                "{case}: a complete Go node state is kept byte for byte"
            );
        }
    }
}

#[test]
fn switches_and_node_blocks_decide_what_starts() {
    let ignored = json!({schema::IGNORE_LABEL: "true"});
    // (case, skyhook annotations, node labels, node taints, Jobs, node status)
    let cases: &[(&str, Value, Value, Value, usize, Status)] = &[
        (
            "fresh node starts apply",
            json!({}),
            json!({}),
            json!([]),
            1,
            Status::InProgress,
        ),
        (
            "paused starts nothing",
            json!({schema::PAUSE_ANNOTATION: "true"}),
            json!({}),
            json!([]),
            0,
            Status::Paused,
        ),
        (
            "disabled starts nothing",
            json!({schema::DISABLE_ANNOTATION: "true"}),
            json!({}),
            json!([]),
            0,
            Status::Disabled,
        ),
        (
            "pause must be exactly true",
            json!({schema::PAUSE_ANNOTATION: "yes"}),
            json!({}),
            json!([]),
            1,
            Status::InProgress,
        ),
        (
            "ignored node is blocked",
            json!({}),
            ignored.clone(),
            json!([]),
            0,
            Status::Blocked,
        ),
        (
            "untolerated taint blocks",
            json!({}),
            json!({}),
            json!([{"key": "gpu", "effect": "NoSchedule"}]),
            0,
            Status::Blocked,
        ),
        (
            "cordon taint is tolerated",
            json!({}),
            json!({}),
            json!([{"key": schema::UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}]),
            1,
            Status::InProgress,
        ),
    ];
    for (case, annotations, labels, taints, jobs, status) in cases {
        let n = node("n1", 0, json!({}), labels.clone(), false);
        let mut n = (*n).clone();
        n.taints = serde_json::from_value(taints.clone()).unwrap_or_default();
        let w = World::new(
            skyhook(one_package(false), annotations.clone()),
            vec![Arc::new(n)],
        );
        let plan = w.plan();
        assert_eq!(plan.create_jobs.len(), *jobs, "{case}: Jobs");
        assert_eq!(node_status(&plan, "n1"), Some(*status), "{case}: status");
    }
}

#[test]
fn budget_limits_the_nodes_that_start() {
    // (case, interruptionBudget, nodes, nodes already busy, Jobs started)
    let cases: &[(&str, Value, usize, usize, usize)] = &[
        ("no budget starts every node", json!({}), 5, 0, 5),
        ("count 2 of 5", json!({"count": 2}), 5, 0, 2),
        (
            "percent 50 of 5 truncates to 2",
            json!({"percent": 50}),
            5,
            0,
            2,
        ),
        (
            "percent 10 of 5 is at least 1",
            json!({"percent": 10}),
            5,
            0,
            1,
        ),
        ("a busy node holds the batch", json!({"count": 3}), 5, 1, 0),
    ];
    for (case, budget, count, busy, jobs) in cases {
        let mut spec = one_package(false);
        spec["interruptionBudget"] = budget.clone();
        let nodes: Vec<Arc<NodeView>> = (0..*count)
            .map(|i| node(&format!("n{i}"), i as i64, json!({}), json!({}), false))
            .collect();
        let mut w = World::new(skyhook(spec, json!({})), nodes);
        for i in 0..*busy {
            w.jobs.push(job(
                PLAIN,
                Stage::Apply,
                &format!("n{i}"),
                0,
                Outcome::Running,
            ));
        }
        let plan = w.plan();
        assert_eq!(plan.create_jobs.len(), *jobs, "{case}");
    }
}

#[test]
fn oldest_nodes_start_first_and_the_batch_is_kept_until_done() {
    let mut spec = one_package(false);
    spec["interruptionBudget"] = json!({"count": 1});
    let nodes = vec![
        node("young", 50, json!({}), json!({}), false),
        node("old", 1, json!({}), json!({}), false),
    ];
    let mut w = World::new(skyhook(spec, json!({})), nodes);
    assert_eq!(created(&w.plan()), vec![("old".into(), "apply".into())]);
    w.jobs
        .push(job(PLAIN, Stage::Apply, "old", 0, Outcome::Running));
    let plan = w.plan();
    assert!(plan.create_jobs.is_empty(), "the busy node keeps the batch");
    assert_eq!(node_status(&plan, "young"), Some(Status::Waiting));
}

#[test]
fn an_invalid_skyhook_only_writes_its_status() {
    let n = node(
        "n1",
        0,
        go_state(PLAIN, "apply", "in_progress"),
        json!({}),
        false,
    );
    let mut w = World::new(skyhook(one_package(false), json!({})), vec![n]);
    w.invalid = vec!["spec.packages.tuned.version: not a semver".into()];
    // A finished Job's outcome is not stored while the spec is invalid, so the Job must not be
    // marked recorded either: it is read again once the Skyhook is valid.
    let at = now();
    w.jobs
        .push(job(PLAIN, Stage::Apply, "n1", 0, Outcome::Complete { at }));
    let plan = w.plan();
    let recorded = plan
        .job_ops
        .iter()
        .any(|(_, op)| matches!(op, JobOp::Counted { .. }));
    assert!(!recorded, "an outcome marked recorded without a node write");
    assert!(plan.create_jobs.is_empty() && plan.node_patches.is_empty());
    assert!(plan.configmaps.is_empty() && plan.node_conditions.is_empty());
    let status = plan.status.expect("status");
    assert_eq!(status.status, Some(Status::Blocked));
    let invalid_event = plan
        .events
        .iter()
        .any(|e| e.warning && e.reason == schema::INVALID_SPEC_REASON);
    assert!(invalid_event, "an InvalidSpec Warning Event");
}

#[test]
fn a_lower_priority_skyhook_waits_for_the_one_before_it() {
    let mut first = skyhook(one_package(false), json!({}));
    first.metadata.name = Some("aaa".into());
    let cases: &[(&str, &str, usize, Status)] = &[
        (
            "earlier skyhook incomplete gates: waiting (§3.14)",
            "in_progress",
            0,
            Status::Waiting,
        ),
        (
            "earlier skyhook complete lets it run",
            "complete",
            1,
            Status::InProgress,
        ),
    ];
    for (case, earlier, jobs, status) in cases {
        let annotations = json!({schema::status_annotation("aaa"): earlier});
        let n = node("n1", 0, annotations, json!({}), false);
        let mut w = World::new(skyhook(one_package(false), json!({})), vec![n]);
        w.others.push(Arc::new(first.clone()));
        let plan = w.plan();
        assert_eq!(plan.create_jobs.len(), *jobs, "{case}");
        assert_eq!(node_status(&plan, "n1"), Some(*status), "{case}");
    }
}

#[test]
fn interrupt_waits_for_other_work_on_the_node() {
    // (case, a Job of another Skyhook runs on the node, interrupt Jobs started)
    let cases: &[(&str, bool, usize)] = &[
        ("alone: the interrupt starts", false, 1),
        ("another Skyhook's Job runs: it waits", true, 0),
    ];
    for (case, other_busy, jobs) in cases {
        let mut annotations = go_state(REBOOT, "config", "complete");
        annotations[schema::cordon_annotation("sh")] = json!("true");
        let n = node("n1", 0, annotations, json!({}), true);
        let mut w = World::new(skyhook(one_package(true), json!({})), vec![n]);
        w.pods.insert("n1".into(), Vec::new());
        if *other_busy {
            w.busy.insert("n1".into());
        }
        let plan = w.plan();
        assert_eq!(plan.create_jobs.len(), *jobs, "{case}");
    }
}

#[test]
fn drain_cordons_then_evicts_then_runs() {
    let pod = |protected: bool| PodInfo {
        namespace: "apps".into(),
        name: "web".into(),
        protected,
        evictable: !protected,
    };
    // (case, cordoned, pods, cordon written, evictions, Jobs)
    let cases: &[(&str, bool, Option<Vec<PodInfo>>, bool, usize, usize)] = &[
        ("not cordoned: cordon first", false, None, true, 0, 0),
        ("cordoned, pods not listed yet", true, None, false, 0, 0),
        (
            "protected pod holds",
            true,
            Some(vec![pod(true)]),
            false,
            0,
            0,
        ),
        (
            "evictable pod is evicted",
            true,
            Some(vec![pod(false)]),
            false,
            1,
            0,
        ),
        ("empty node runs apply", true, Some(vec![]), false, 0, 1),
    ];
    for (case, cordoned, pods, cordon, evictions, jobs) in cases {
        let annotations = if *cordoned {
            json!({schema::cordon_annotation("sh"): "true"})
        } else {
            json!({})
        };
        let n = node("n1", 0, annotations, json!({}), *cordoned);
        let mut w = World::new(skyhook(one_package(true), json!({})), vec![n]);
        if let Some(p) = pods {
            w.pods.insert("n1".into(), p.clone());
        }
        let plan = w.plan();
        let wrote_cordon = plan
            .node_patches
            .iter()
            .any(|p| p.unschedulable == Some(true));
        assert_eq!(wrote_cordon, *cordon, "{case}: cordon");
        assert_eq!(plan.evictions.len(), *evictions, "{case}: evictions");
        assert_eq!(plan.create_jobs.len(), *jobs, "{case}: Jobs");
    }
}

#[test]
fn finished_jobs_are_folded_and_the_node_moves_on() {
    let at = now();
    let failed = Outcome::Failed {
        at,
        reason: "PodFailurePolicy".into(),
        message: "exit 1".into(),
    };
    // (case, Job outcome, stage and state after, Jobs started, Job operations)
    let cases: &[(&str, Outcome, (Stage, State), usize, usize)] = &[
        (
            "success starts config",
            Outcome::Complete { at },
            (Stage::Config, State::InProgress),
            1,
            0,
        ),
        (
            "failure waits out the backoff, its Job marked counted",
            failed.clone(),
            (Stage::Apply, State::Erroring),
            0,
            1,
        ),
        (
            "running is adopted",
            Outcome::Running,
            (Stage::Apply, State::InProgress),
            0,
            0,
        ),
    ];
    for (case, outcome, (stage, state), jobs, ops) in cases {
        let n = node(
            "n1",
            0,
            go_state(PLAIN, "apply", "in_progress"),
            json!({}),
            false,
        );
        let mut w = World::new(skyhook(one_package(false), json!({})), vec![n]);
        w.jobs
            .push(job(PLAIN, Stage::Apply, "n1", 0, outcome.clone()));
        let plan = w.plan();
        assert_eq!(plan.create_jobs.len(), *jobs, "{case}: Jobs");
        assert_eq!(plan.job_ops.len(), *ops, "{case}: Job operations");
        let folded = plan.node_patches.iter().find_map(|p| {
            p.annotations
                .get(&schema::folded_annotation("sh"))
                .cloned()
                .flatten()
        });
        let want = matches!(outcome, Outcome::Complete { .. })
            .then(|| format!(r#"{{"{PLAIN}|1.0.0|apply":0}}"#));
        assert_eq!(folded, want, "{case}: folded with the state, no Job write");
        let st = written_state(&plan, "n1")
            .or_else(|| {
                let raw = go_state(PLAIN, "apply", "in_progress");
                NodeState::parse(raw[schema::node_state_annotation("sh")].as_str()?).ok()
            })
            .expect("state");
        let e = st.get(PLAIN, "1.0.0").expect("entry");
        assert_eq!((e.stage, e.state), (*stage, Some(*state)), "{case}: state");
    }
}

#[test]
fn an_unchanged_world_writes_nothing() {
    let n = node("n1", 0, json!({}), json!({}), false);
    let w = World::new(skyhook(one_package(false), json!({})), vec![n]);
    let first = w.plan();
    // Feed the first pass's writes back in, then plan again.
    let mut annotations = serde_json::Map::new();
    let mut labels = serde_json::Map::new();
    for p in &first.node_patches {
        for (k, v) in &p.annotations {
            annotations.insert(k.clone(), json!(v));
        }
        for (k, v) in &p.labels {
            labels.insert(k.clone(), json!(v));
        }
    }
    let mut node_after = (*node(
        "n1",
        0,
        Value::Object(annotations),
        Value::Object(labels),
        false,
    ))
    .clone();
    node_after.conditions = first.node_conditions[0]
        .1
        .iter()
        .cloned()
        .map(Into::into)
        .collect();
    let mut sk = w.sk.clone();
    sk.status = first.status.clone();
    let mut w2 = World::new(sk, vec![Arc::new(node_after)]);
    w2.jobs
        .push(job(PLAIN, Stage::Apply, "n1", 0, Outcome::Running));
    let second = w2.plan();
    assert!(second.create_jobs.is_empty(), "no twin Job");
    assert!(second.node_patches.is_empty(), "{:?}", second.node_patches);
    assert!(second.node_conditions.is_empty());
    assert!(second.status.is_none(), "status unchanged");
}

#[test]
fn a_huge_graceful_shutdown_stored_before_the_bound_is_flagged_not_fatal() {
    let mut spec = one_package(false);
    spec["packages"][PLAIN]["gracefulShutdown"] = json!("1000000000h");
    let sk = skyhook(spec, json!({}));
    let problems = crate::crd::validate_skyhook(&sk).expect_err("rejected by the operator");
    let text: Vec<String> = problems.iter().map(|e| e.to_string()).collect();
    assert!(
        text.iter().any(|t| t.contains("gracefulShutdown")),
        "{text:?}"
    );
    let n = node("n1", 0, json!({}), json!({}), false);
    let mut w = World::new(sk.clone(), vec![n]);
    w.invalid = text;
    let plan = w.plan();
    assert!(
        plan.create_jobs.is_empty(),
        "an invalid Skyhook runs nothing"
    );
    // Building its Job anyway (as an older operator would have) must not panic either.
    let package = &sk.spec.packages[PLAIN];
    let req = crate::jobs::StageJob {
        skyhook: &sk,
        package,
        stage: Stage::Apply,
        node: "n1",
        attempt: 0,
        spec_hash: "h",
    };
    let job = crate::jobs::stage_job(&req, &config());
    let grace = job
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.termination_grace_period_seconds);
    assert_eq!(grace, None);
}

#[test]
fn a_node_leaving_the_batch_is_written_before_the_next_one_starts() {
    let mut spec = one_package(false);
    spec["interruptionBudget"] = json!({"count": 1});
    let done = node(
        "done",
        0,
        go_state(PLAIN, "config", "in_progress"),
        json!({}),
        false,
    );
    let next = node("next", 1, json!({}), json!({}), false);
    let mut w = World::new(skyhook(spec, json!({})), vec![done, next]);
    let at = now();
    w.jobs.push(job(
        PLAIN,
        Stage::Config,
        "done",
        0,
        Outcome::Complete { at },
    ));
    let plan = w.plan();
    assert_eq!(created(&plan), vec![("next".into(), "apply".into())]);
    let starts = |n: &str| {
        plan.node_patches
            .iter()
            .find(|p| p.node == n)
            .map(|p| p.starts)
    };
    assert_eq!(
        starts("done"),
        Some(false),
        "the finished node is written first"
    );
    assert_eq!(
        starts("next"),
        Some(true),
        "the starting node is written after"
    );
}

#[test]
fn unreadable_node_state_leaves_the_node_untouched_and_says_so() {
    let state_key = schema::node_state_annotation("sh");
    let applied_key = schema::applied_annotation("sh");
    let cases = [
        (
            "corrupt JSON",
            json!({state_key.clone(): "{not json"}),
            state_key.clone(),
        ),
        (
            "unknown stage",
            json!({state_key.clone(): r#"{"tuned|1.0.0":{"name":"tuned","version":"1.0.0","image":"ghcr.io/x/tuned","stage":"bogus","state":"complete"}}"#}),
            state_key.clone(),
        ),
        (
            "corrupt applied record",
            json!({applied_key.clone(): "[1,"}),
            applied_key.clone(),
        ),
    ];
    for (name, annotations, key) in cases {
        let bad = node("n1", 0, annotations, json!({}), false);
        let good = node("n2", 1, json!({}), json!({}), false);
        let w = World::new(skyhook(one_package(false), json!({})), vec![bad, good]);
        let plan = w.plan();
        assert!(
            plan.node_patches.iter().all(|p| p.node != "n1"),
            "case: {name}: {:?}",
            plan.node_patches
        );
        assert!(
            plan.node_conditions.iter().all(|(n, _, _)| n != "n1"),
            "case: {name}"
        );
        let nodes_with_jobs: Vec<String> = plan
            .create_jobs
            .iter()
            .map(|j| j.job().expect("a Job"))
            .filter_map(|j| j.metadata.labels.as_ref()?.get(schema::NODE_LABEL).cloned())
            .collect();
        assert_eq!(nodes_with_jobs, vec!["n2".to_string()], "case: {name}");
        let warning = plan
            .events
            .iter()
            .find(|e| e.reason == schema::NODE_STATE_UNREADABLE_REASON)
            .unwrap_or_else(|| panic!("case: {name}: no Event"));
        assert!(
            warning.warning && warning.node.as_deref() == Some("n1"),
            "case: {name}"
        );
        assert!(
            warning.message.contains(&key),
            "case: {name}: {}",
            warning.message
        );
        let status = plan.status.clone().expect("status");
        let cond = status
            .conditions
            .iter()
            .find(|c| c.type_ == schema::NODE_STATE_UNREADABLE_CONDITION)
            .unwrap_or_else(|| panic!("case: {name}: no condition"));
        assert_eq!(cond.status, "True", "case: {name}");
        assert!(
            cond.message.contains("node n1") && cond.message.contains(&key),
            "case: {name}"
        );
        assert_eq!(
            status.node_status.get("n1"),
            Some(&Status::Blocked),
            "case: {name}"
        );

        // Reported once: the next pass publishes no second Event, and keeps the condition.
        let mut again = World::new(w.sk.clone(), w.nodes.clone());
        again.sk.status = Some(status);
        let plan = again.plan();
        assert!(
            plan.events
                .iter()
                .all(|e| e.reason != schema::NODE_STATE_UNREADABLE_REASON),
            "case: {name}: Event repeated"
        );
        let kept = plan
            .status
            .as_ref()
            .or(again.sk.status.as_ref())
            .expect("status");
        assert!(
            kept.conditions
                .iter()
                .any(|c| c.type_ == schema::NODE_STATE_UNREADABLE_CONDITION && c.status == "True"),
            "case: {name}"
        );
    }
}

#[test]
fn a_skyhook_without_unreadable_nodes_carries_no_such_condition() {
    let w = World::new(
        skyhook(one_package(false), json!({})),
        vec![node("n1", 0, json!({}), json!({}), false)],
    );
    let status = w.plan().status.expect("status");
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.type_ != schema::NODE_STATE_UNREADABLE_CONDITION)
    );
}

#[test]
fn the_version_annotation_is_written_once() {
    let mut w = World::new(
        skyhook(one_package(false), json!({})),
        vec![node("n1", 0, json!({}), json!({}), false)],
    );
    let want = schema::skyhook_version_value("test");
    assert_eq!(w.plan().version_annotation, Some(want.clone()));
    w.sk = skyhook(
        one_package(false),
        json!({schema::VERSION_ANNOTATION: want}),
    );
    assert_eq!(w.plan().version_annotation, None);
    w.sk = skyhook(
        one_package(false),
        json!({schema::VERSION_ANNOTATION: "v0.12.0"}),
    );
    assert!(
        w.plan().version_annotation.is_some(),
        "an older writer's value is replaced"
    );
}

#[test]
fn an_interrupt_never_starts_beside_another_stage_in_one_pass() {
    let mut spec = one_package(true);
    spec["packages"][PLAIN] = json!({"version": "1.0.0", "image": format!("ghcr.io/x/{PLAIN}")});
    let mut annotations = go_state(REBOOT, "config", "complete");
    annotations[schema::cordon_annotation("sh")] = json!("true");
    let n = node("n1", 0, annotations, json!({}), true);
    let mut w = World::new(skyhook(spec, json!({})), vec![n]);
    w.pods.insert("n1".into(), Vec::new());
    let plan = w.plan();
    let stages: Vec<String> = plan
        .create_jobs
        .iter()
        .map(|j| j.job().expect("a Job"))
        .filter_map(|j| {
            j.metadata
                .labels
                .as_ref()?
                .get(schema::STAGE_LABEL)
                .cloned()
        })
        .collect();
    assert!(!stages.is_empty(), "nothing started");
    assert!(
        !stages.iter().any(|s| s == "interrupt") || stages.len() == 1,
        "an interrupt started beside {stages:?}"
    );
}

#[test]
fn nothing_starts_beside_a_running_interrupt_in_later_passes() {
    let mut spec = one_package(true);
    spec["packages"][PLAIN] = json!({"version": "1.0.0", "image": format!("ghcr.io/x/{PLAIN}")});
    // (case, the interrupt Job is being deleted)
    for (case, deleting) in [("running", false), ("being deleted", true)] {
        let mut annotations = go_state(REBOOT, "interrupt", "in_progress");
        annotations[schema::cordon_annotation("sh")] = json!("true");
        let n = node("n1", 0, annotations, json!({}), true);
        let mut w = World::new(skyhook(spec.clone(), json!({})), vec![n]);
        w.pods.insert("n1".into(), Vec::new());
        let mut running = job(REBOOT, Stage::Interrupt, "n1", 0, Outcome::Running);
        running.deleting = deleting;
        w.jobs.push(running);
        let plan = w.plan();
        assert!(
            plan.create_jobs.is_empty(),
            "case: {case}: started {:?}",
            plan.create_jobs
                .iter()
                .map(|j| j.job().expect("a Job"))
                .map(|j| j.metadata.name.clone())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn an_unreadable_node_still_at_work_holds_the_budget() {
    let bad_state = json!({schema::node_state_annotation("sh"): "{not json",
                           schema::cordon_annotation("sh"): "true"});
    // (case, the unreadable node holds our cordon, nodes that start)
    for (case, busy, starts) in [("idle", false, 1), ("holds our cordon", true, 0)] {
        let annotations = if busy {
            bad_state.clone()
        } else {
            json!({schema::node_state_annotation("sh"): "{not json"})
        };
        let bad = node("n1", 0, annotations, json!({}), busy);
        let good = node("n2", 1, json!({}), json!({}), false);
        let mut spec = one_package(false);
        spec["interruptionBudget"] = json!({"count": 1});
        let w = World::new(skyhook(spec, json!({})), vec![bad, good]);
        let plan = w.plan();
        let nodes: BTreeSet<String> = plan
            .create_jobs
            .iter()
            .map(|j| j.job().expect("a Job"))
            .filter_map(|j| j.metadata.labels.as_ref()?.get(schema::NODE_LABEL).cloned())
            .collect();
        assert_eq!(nodes.len(), starts, "case: {case}: {nodes:?}");
    }
}

#[test]
fn packages_merged_into_a_starting_interrupt_are_skipped_in_the_same_pass() {
    let svc = |name: &str| {
        json!({"version": "1.0.0", "image": format!("ghcr.io/x/{name}"),
               "interrupt": {"type": "service", "services": [name]}})
    };
    let spec = json!({"packages": {"alpha": svc("alpha"), "bravo": svc("bravo")}});
    let raw = r#"{"alpha|1.0.0":{"name":"alpha","version":"1.0.0","image":"ghcr.io/x/alpha","stage":"config","state":"complete"},"bravo|1.0.0":{"name":"bravo","version":"1.0.0","image":"ghcr.io/x/bravo","stage":"config","state":"complete"}}"#;
    let mut annotations = json!({schema::node_state_annotation("sh"): raw});
    annotations[schema::cordon_annotation("sh")] = json!("true");
    let n = node("n1", 0, annotations, json!({}), true);
    let mut w = World::new(skyhook(spec, json!({})), vec![n]);
    w.pods.insert("n1".into(), Vec::new());
    let plan = w.plan();
    assert_eq!(plan.create_jobs.len(), 1, "one merged interrupt Job");
    let st = written_state(&plan, "n1").expect("state written");
    let states: Vec<(Stage, Option<State>)> = ["alpha", "bravo"]
        .iter()
        .map(|p| {
            let e = st.get(p, "1.0.0").expect("entry");
            (e.stage, e.state)
        })
        .collect();
    assert!(
        states.contains(&(Stage::Interrupt, Some(State::InProgress)))
            && states.contains(&(Stage::Interrupt, Some(State::Skipped))),
        "{states:?}"
    );
}

#[test]
fn one_pass_creates_a_bounded_number_of_jobs_and_comes_back_at_once() {
    let cap = launch::MAX_JOB_CREATES_PER_PASS;
    let nodes: Vec<Arc<NodeView>> = (0..cap + 50)
        .map(|i| node(&format!("n{i:04}"), i as i64, json!({}), json!({}), false))
        .collect();
    let world = World::new(skyhook(one_package(false), json!({})), nodes);
    let plan = world.plan();
    assert_eq!(plan.create_jobs.len(), cap);
    assert_eq!(plan.deferred_jobs, 50);
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(1)));
    // Starts are announced, and metadata ConfigMaps written, only for the Jobs created.
    let node_starts = plan
        .events
        .iter()
        .filter(|e| e.target == Target::Node && e.reason == schema::APPLY_REASON)
        .count();
    assert_eq!(node_starts, cap);
    let metadata = plan
        .configmaps
        .iter()
        .filter(|c| c.metadata.name.as_deref().is_some_and(|n| n.contains("n0")))
        .count();
    assert!(metadata <= cap, "{metadata} metadata ConfigMaps");
    // Every node's state is stored at once; the Jobs of the last 50 follow next pass.
    let starting = plan.node_patches.iter().filter(|p| p.starts).count();
    assert_eq!(starting, cap + 50);
    let mut next = World::new(world.sk.clone(), world.nodes.clone());
    next.nodes = world
        .nodes
        .iter()
        .map(|n| {
            let mut n = (**n).clone();
            let p = plan.node_patches.iter().find(|p| p.node == n.name);
            let mut ann: BTreeMap<String, String> = n
                .annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            for (k, v) in p.map(|p| p.annotations.clone()).unwrap_or_default() {
                if let Some(v) = v {
                    ann.insert(k, v);
                }
            }
            n.annotations = ann.into();
            Arc::new(n)
        })
        .collect();
    next.jobs = created(&plan)
        .iter()
        .map(|(n, _)| job(PLAIN, Stage::Apply, n, 0, Outcome::Running))
        .collect();
    let again = next.plan();
    assert_eq!(again.create_jobs.len(), 50, "the deferred Jobs");
    assert_eq!(again.deferred_jobs, 0);
    let announced = again
        .events
        .iter()
        .filter(|e| e.target == Target::Node && e.reason == schema::APPLY_REASON)
        .count();
    assert_eq!(
        announced, 50,
        "the deferred starts are announced when their Jobs are created"
    );
}

fn policy(compartments: Value, default: Value) -> Arc<crate::crd::DeploymentPolicy> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
            "metadata": {"name": "p"},
            "spec": {"compartments": compartments, "default": default},
        }))
        .expect("policy"),
    )
}

fn with_policy(mut spec: Value) -> Skyhook {
    spec["deploymentPolicy"] = json!("p");
    skyhook(spec, json!({}))
}

#[test]
fn each_compartment_starts_its_own_batch_and_reports_it() {
    let nodes = vec![
        node("n0", 0, json!({}), json!({"canary": "true"}), false),
        node("n1", 1, json!({}), json!({}), false),
        node("n2", 2, json!({}), json!({}), false),
        node("n3", 3, json!({}), json!({}), false),
    ];
    let mut world = World::new(with_policy(one_package(false)), nodes);
    world.policies = vec![policy(
        json!([{"name": "canary", "selector": {"matchLabels": {"canary": "true"}},
                "budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}]),
        json!({"budget": {"percent": 100}, "strategy": {"linear": {"initialBatch": 1, "delta": 1}}}),
    )];
    let plan = world.plan();
    let nodes: Vec<String> = created(&plan).into_iter().map(|(n, _)| n).collect();
    assert_eq!(nodes, ["n0", "n1"], "one node per compartment");
    let status = plan.status.expect("status");
    let canary = &status.compartment_statuses["canary"];
    assert_eq!(
        (canary.matched, canary.ceiling, canary.in_progress),
        (1, 1, 1)
    );
    let default = &status.compartment_statuses["__default__"];
    assert_eq!(
        (default.matched, default.ceiling, default.in_progress),
        (3, 3, 1)
    );
    assert_eq!(default.batch_state, Some(crate::crd::BatchState::fresh()));
    assert_eq!(plan.policy_label, "p");
    let shape: Vec<(&str, &str, Vec<String>, Vec<String>)> = plan
        .compartments
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.strategy.as_str(),
                c.nodes.clone(),
                c.batch.clone(),
            )
        })
        .collect();
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        shape,
        [
            ("canary", "fixed", names(&["n0"]), names(&["n0"])),
            (
                "__default__",
                "linear",
                names(&["n1", "n2", "n3"]),
                names(&["n1"])
            ),
        ]
    );
}

#[test]
fn a_legacy_skyhook_reports_its_default_compartment() {
    let spec =
        json!({"packages": one_package(false)["packages"], "interruptionBudget": {"count": 3}});
    let nodes = (0..6)
        .map(|i| node(&format!("n{i}"), i, json!({}), json!({}), false))
        .collect();
    let plan = World::new(skyhook(spec, json!({})), nodes).plan();
    assert_eq!(created(&plan).len(), 3);
    let status = plan.status.expect("status");
    let c = &status.compartment_statuses["__default__"];
    assert_eq!((c.matched, c.ceiling, c.in_progress), (6, 3, 3));
    assert_eq!(plan.policy_label, "legacy");
}

#[test]
fn a_missing_policy_blocks_new_work_and_says_why() {
    let nodes = vec![node("n0", 0, json!({}), json!({}), false)];
    let plan = World::new(with_policy(one_package(false)), nodes).plan();
    assert!(plan.create_jobs.is_empty());
    let status = plan.status.expect("status");
    assert_eq!(status.status, Some(Status::Blocked));
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == schema::DEPLOYMENT_POLICY_NOT_FOUND_CONDITION)
        .expect("condition");
    assert_eq!(
        (c.status.as_str(), c.message.as_str()),
        ("True", r#"DeploymentPolicy "p" not found"#)
    );
    let warned = plan.events.iter().any(|e| {
        e.warning
            && e.reason == schema::DEPLOYMENT_POLICY_NOT_FOUND_REASON
            && e.message.contains("spec.deploymentPolicy")
    });
    assert!(warned, "{:?}", plan.events);
}

#[test]
fn a_stopped_compartment_starts_nothing_until_reset() {
    // n0 failed in the first batch; its failure is the baseline after the reset, not a
    // further failed batch that would stop the compartment again.
    let nodes = vec![
        node(
            "n0",
            0,
            go_state(PLAIN, "apply", "erroring"),
            json!({}),
            false,
        ),
        node("n1", 1, json!({}), json!({}), false),
    ];
    let mut world = World::new(with_policy(one_package(false)), nodes);
    world.policies = vec![policy(
        json!([]),
        json!({"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 1, "failureThreshold": 1}}}),
    )];
    let stopped = crate::crd::BatchState {
        current_batch: 2,
        consecutive_failures: 1,
        failed_nodes: 1,
        last_batch_size: 1,
        last_batch_failed: true,
        should_stop: true,
        ..crate::crd::BatchState::default()
    };
    let mut prior = crate::crd::SkyhookStatus::default();
    prior.compartment_statuses.insert(
        "__default__".into(),
        crate::crd::CompartmentStatus {
            batch_state: Some(stopped.clone()),
            ..Default::default()
        },
    );
    world.sk.status = Some(prior);
    let plan = world.plan();
    assert!(plan.create_jobs.is_empty(), "halted");
    let status = plan.status.expect("status");
    assert_eq!(
        status.compartment_statuses["__default__"].batch_state,
        Some(stopped)
    );
    // The CLI's reset (a fresh batch state) lets it go on.
    let mut reset = world.sk.status.clone().unwrap_or_default();
    if let Some(c) = reset.compartment_statuses.get_mut("__default__") {
        c.batch_state = Some(crate::crd::BatchState::fresh());
    }
    world.sk.status = Some(reset);
    let resumed = world.plan();
    assert_eq!(created(&resumed), [("n1".to_string(), "apply".to_string())]);
    let status = resumed.status.expect("status");
    let b = status.compartment_statuses["__default__"]
        .batch_state
        .clone();
    assert_eq!(
        b.map(|b| (b.current_batch, b.failed_nodes, b.should_stop)),
        Some((1, 1, false))
    );
}

#[test]
fn a_version_change_resets_batch_state_when_the_options_say_so() {
    // (case, resetBatchStateOnCompletion, stored package list, batch state after)
    let cases: &[(&str, Option<bool>, &str, i64)] = &[
        ("version bumped, reset on", Some(true), "tuned:0.9.0", 1),
        ("version bumped, reset off", Some(false), "tuned:0.9.0", 5),
        (
            "version bumped, no option: legacy never resets",
            None,
            "tuned:0.9.0",
            5,
        ),
        ("same version, reset on", Some(true), "tuned:1.0.0", 5),
    ];
    for &(case, option, stored, want) in cases {
        let mut spec = one_package(false);
        if let Some(on) = option {
            spec["deploymentPolicyOptions"] = json!({"resetBatchStateOnCompletion": on});
        }
        let nodes = vec![node("n0", 0, json!({}), json!({}), false)];
        let mut world = World::new(skyhook(spec, json!({})), nodes);
        let mut prior = crate::crd::SkyhookStatus {
            package_list: stored.into(),
            ..Default::default()
        };
        prior.compartment_statuses.insert(
            "__default__".into(),
            crate::crd::CompartmentStatus {
                batch_state: Some(crate::crd::BatchState {
                    current_batch: 5,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        world.sk.status = Some(prior);
        let status = world.plan().status.expect("status");
        let batch = status.compartment_statuses["__default__"]
            .batch_state
            .clone();
        assert_eq!(batch.map(|b| b.current_batch), Some(want), "case: {case}");
    }
}

#[test]
fn a_failed_package_beside_others_still_due_keeps_the_node_in_its_batch() {
    let state = |node_status: &str| {
        let raw = r#"{"alpha|1.0.0":{"name":"alpha","version":"1.0.0","image":"ghcr.io/x/alpha","stage":"apply","state":"complete"},"broken|1.0.0":{"name":"broken","version":"1.0.0","image":"ghcr.io/x/broken","stage":"apply","state":"erroring","restarts":1}}"#;
        json!({schema::node_state_annotation("sh"): raw, schema::status_annotation("sh"): node_status})
    };
    let spec = json!({"packages": {
        "alpha": {"version": "1.0.0", "image": "ghcr.io/x/alpha"},
        "broken": {"version": "1.0.0", "image": "ghcr.io/x/broken"},
    }});
    // (case, stored node status, nodes whose alpha config starts)
    let cases: &[(&str, &str, usize)] = &[
        (
            "at work: every node of the batch goes on with alpha",
            "erroring",
            3,
        ),
        (
            "not at work (e.g. after a reset of its status): one batch slot",
            "complete",
            1,
        ),
    ];
    for &(case, node_status, want) in cases {
        let nodes = (0..3)
            .map(|i| node(&format!("n{i}"), i, state(node_status), json!({}), false))
            .collect();
        let mut world = World::new(skyhook(spec.clone(), json!({})), nodes);
        let mut prior = crate::crd::SkyhookStatus::default();
        prior.compartment_statuses.insert(
            "__default__".into(),
            crate::crd::CompartmentStatus {
                batch_state: Some(crate::crd::BatchState {
                    current_batch: 2,
                    failed_nodes: 3,
                    last_batch_size: 3,
                    last_batch_failed: true,
                    consecutive_failures: 1,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        world.sk.status = Some(prior);
        let plan = world.plan();
        let alpha_config = plan
            .create_jobs
            .iter()
            .map(|j| j.job().expect("a Job"))
            .filter(|j| {
                let l = j.metadata.labels.clone().unwrap_or_default();
                l.get(schema::PACKAGE_LABEL).map(String::as_str) == Some("alpha-1.0.0")
                    && l.get(schema::STAGE_LABEL).map(String::as_str) == Some("config")
            })
            .count();
        assert_eq!(alpha_config, want, "case: {case}: {:?}", created(&plan));
    }
}

/// Two nodes at work in one pass: n1 folds a finished apply Job and starts config, n2 starts
/// apply. Every node patch carries its node's resourceVersion; when n1's patch meets a
/// conflict, what depends on it goes (its Job, the Job's record, its Events, the status) and
/// n2's work stays.
#[test]
fn a_node_patch_that_conflicts_takes_its_nodes_work_and_the_status_with_it() {
    let versioned = |name: &str, rv: &str, annotations: Value| {
        let mut n = (*node(name, 0, annotations, json!({}), false)).clone();
        n.resource_version = Some(rv.to_string());
        Arc::new(n)
    };
    let n1 = versioned("n1", "41", go_state(PLAIN, "apply", "in_progress"));
    let n2 = versioned("n2", "42", json!({}));
    let mut sk = skyhook(one_package(false), json!({}));
    sk.status = Some(crate::crd::SkyhookStatus {
        status: Some(Status::Waiting),
        ..Default::default()
    });
    let mut w = World::new(sk, vec![n1, n2]);
    w.jobs.push(job(
        PLAIN,
        Stage::Apply,
        "n1",
        0,
        Outcome::Complete { at: now() },
    ));
    let mut plan = w.plan();
    let rv: BTreeMap<&str, Option<&str>> = plan
        .node_patches
        .iter()
        .map(|p| (p.node.as_str(), p.resource_version.as_deref()))
        .collect();
    assert_eq!(
        rv,
        BTreeMap::from([("n1", Some("41")), ("n2", Some("42"))]),
        "each patch is guarded by its node's resourceVersion"
    );
    let about = |plan: &Plan, node: &str| {
        plan.events
            .iter()
            .filter(|e| e.reports == Reports::Node(node.to_string()))
            .count()
    };
    assert!(about(&plan, "n1") > 0 && about(&plan, "n2") > 0);
    assert_eq!(
        created(&plan),
        vec![
            ("n1".to_string(), "config".to_string()),
            ("n2".to_string(), "apply".to_string())
        ]
    );
    let n1_folds = |plan: &Plan| {
        plan.node_patches
            .iter()
            .any(|p| p.node == "n1" && p.annotations.contains_key(&schema::folded_annotation("sh")))
    };
    assert!(n1_folds(&plan), "n1's apply Job is folded in its patch");
    assert!(plan.status.is_some());
    assert!(
        plan.events.iter().any(|e| e.reports == Reports::Status),
        "the status change is announced: {:?}",
        plan.events
    );

    plan.drop_work_of(&BTreeSet::from(["n1".to_string()]));
    assert_eq!(
        created(&plan),
        vec![("n2".to_string(), "apply".to_string())]
    );
    assert!(plan.node_conditions.iter().all(|(n, _, _)| n != "n1"));
    assert_eq!(about(&plan, "n1"), 0, "{:?}", plan.events);
    assert!(about(&plan, "n2") > 0, "n2's Events stay");
    assert!(plan.status.is_none());
    assert!(plan.events.iter().all(|e| e.reports != Reports::Status));
}

/// The hand-over in a whole pass: a Go pod of the node's stage holds its Job back, its success is
/// written to the node before the pod is deleted (the delete is the node's work, dropped with a
/// conflicting patch), and an invalid Skyhook deletes nothing whose outcome it cannot store.
#[test]
fn go_operator_pods_hold_their_stage_and_are_recorded_before_deletion() {
    use crate::jobs::{GoOutcome, GoPod};
    let pod = |outcome| GoPod {
        name: "sh-tuned-1-0-0-apply-n1-0123abcd".into(),
        skyhook: "sh".into(),
        package: PLAIN.into(),
        version: "1.0.0".into(),
        stage: Stage::Apply,
        image: format!("ghcr.io/x/{PLAIN}"),
        container_sha: None,
        node: "n1".into(),
        invalid: false,
        deleting: false,
        outcome,
    };
    let succeeded = GoOutcome::Succeeded { restarts: 0 };
    // (case, Go pod on n1, Skyhook valid, Jobs created, pod deleted, tuned's state written (None:
    // unchanged, so not rewritten))
    let cases: &[(
        &str,
        Option<GoOutcome>,
        bool,
        &[&str],
        bool,
        Option<(Stage, State)>,
    )] = &[
        (
            "running: no Job for its stage",
            Some(GoOutcome::Running),
            true,
            &[],
            false,
            None,
        ),
        (
            "succeeded: complete, deleted, the next stage waits for it to go",
            Some(succeeded.clone()),
            true,
            &[],
            true,
            Some((Stage::Apply, State::Complete)),
        ),
        (
            "succeeded, invalid Skyhook: nothing stored, so nothing deleted",
            Some(succeeded),
            false,
            &[],
            false,
            None,
        ),
        (
            "gone: the stage runs as a Job",
            None,
            true,
            &["apply"],
            false,
            None,
        ),
    ];
    for (case, outcome, valid, jobs, deleted, written) in cases {
        let n1 = node(
            "n1",
            0,
            go_state(PLAIN, "apply", "in_progress"),
            json!({}),
            false,
        );
        let mut w = World::new(skyhook(one_package(false), json!({})), vec![n1]);
        if let Some(o) = outcome {
            w.go_pods.insert("n1".into(), vec![pod(o.clone())]);
        }
        if !valid {
            w.invalid.push("broken".into());
        }
        let plan = w.plan();
        let want: Vec<(String, String)> = jobs
            .iter()
            .map(|s| ("n1".to_string(), s.to_string()))
            .collect();
        assert_eq!(created(&plan), want, "{case}: Jobs");
        let deletes: Vec<&(String, JobOp)> = plan
            .job_ops
            .iter()
            .filter(|(_, op)| matches!(op, JobOp::DeleteGoPod { .. }))
            .collect();
        assert_eq!(!deletes.is_empty(), *deleted, "{case}: deleted");
        assert!(deletes.iter().all(|(n, _)| n == "n1"), "{case}: n1's work");
        let got = written_state(&plan, "n1").and_then(|s| {
            let e = s.get(PLAIN, "1.0.0")?;
            Some((e.stage, e.state?))
        });
        assert_eq!(got, *written, "{case}: node state");
    }
}

/// Over its byte budget the status lists the nodes at work first and says so (condition and
/// one Event); the metrics' census still counts every node; the next pass, with nothing new,
/// writes nothing and announces nothing.
#[test]
fn a_status_over_its_budget_lists_the_nodes_at_work_and_says_so() {
    let mut nodes: Vec<Arc<NodeView>> = (0..30)
        .map(|i| {
            let done = go_state(PLAIN, "config", "complete");
            node(&format!("done-{i:02}"), i, done, json!({}), false)
        })
        .collect();
    for i in 0..2 {
        let busy = go_state(PLAIN, "apply", "in_progress");
        nodes.push(node(&format!("busy-{i}"), 40 + i, busy, json!({}), false));
    }
    let mut world = World::new(skyhook(one_package(false), json!({})), nodes);
    world.status_budget = 2_000;
    let plan = world.plan();
    let status = plan.status.clone().expect("status");
    let listed: Vec<&str> = status.node_state.keys().map(String::as_str).collect();
    assert!(
        listed.starts_with(&["busy-0", "busy-1"]) && listed.len() < 32,
        "{listed:?}"
    );
    assert!(
        serde_json::to_string(&status.node_state)
            .expect("json")
            .len()
            <= 2_000,
        "over the budget"
    );
    let census = plan.census.clone().expect("census");
    assert_eq!(census.targeted, 32);
    let complete = Status::ALL.iter().position(|s| *s == Status::Complete);
    assert_eq!(complete.map(|i| census.statuses[i]), Some(30));
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == schema::STATUS_TRIMMED_CONDITION)
        .expect("StatusTrimmed condition");
    assert_eq!(condition.status, "True");
    assert!(
        condition
            .message
            .contains(&format!("{} of 32 nodes", listed.len())),
        "{}",
        condition.message
    );
    let announced = |plan: &Plan| {
        plan.events
            .iter()
            .filter(|e| e.reason == schema::STATUS_TRIMMED_REASON)
            .count()
    };
    assert_eq!(announced(&plan), 1, "{:?}", plan.events);

    world.sk.status = Some(status);
    let again = world.plan();
    assert_eq!(announced(&again), 0, "{:?}", again.events);
    assert_eq!(
        again.status, None,
        "an unchanged trimmed status is written again"
    );
}
