//! `plan()` as a whole: hand-made worlds in, writes out. Each table names its cases; a failing
//! case prints its name.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::NodeView;
use serde_json::{Value, json};

use super::*;
use crate::crd::Package;
use crate::jobs::{JobView, Outcome};
use crate::plan::fixtures::{
    SkyhookB, config, failure, go_pod, job, node, now, package, policy, skyhook, t,
};
use crate::schema::{NodeState, Stage, State, Status};

const PLAIN: &str = "tuned";
const REBOOT: &str = "driver";

fn tuned() -> Package {
    package(PLAIN).build()
}

/// The Skyhook `sh` as a pass sees it, with one package: `driver` (a reboot) or `tuned`.
fn one_package(interrupt: bool) -> SkyhookB {
    let p = if interrupt {
        package(REBOOT).reboot()
    } else {
        package(PLAIN)
    };
    skyhook("sh").live().package(p)
}

/// The node-state annotation of one package as the Go operator writes it.
fn go_state(package: &str, stage: &str, state: &str) -> Value {
    let raw = format!(
        r#"{{"{package}|1.0.0":{{"name":"{package}","version":"1.0.0","image":"ghcr.io/x/{package}","stage":"{stage}","state":"{state}"}}}}"#
    );
    json!({schema::node_state_annotation("sh"): raw})
}

struct World {
    sk: Skyhook,
    others: Vec<Arc<Skyhook>>,
    /// NodeWrights beside this Skyhook (the other API).
    peers: Vec<Arc<Skyhook>>,
    nodes: Vec<Arc<NodeView>>,
    jobs: Vec<JobView>,
    pods: BTreeMap<String, Vec<PodInfo>>,
    busy: BTreeSet<String>,
    interrupting: BTreeSet<String>,
    write_failures: Vec<String>,
    go_pods: BTreeMap<String, Vec<crate::jobs::GoPod>>,
    invalid: Vec<String>,
    policies: Vec<Arc<crate::crd::DeploymentPolicy>>,
    /// STATUS_NODE_BUDGET of this world's operator.
    status_budget: usize,
    /// Nodes whose auto-taint was refused.
    refused_taints: BTreeSet<String>,
    /// Nodes whose patches were refused for good.
    refused_nodes: BTreeSet<String>,
    configmaps: Vec<Arc<k8s_openapi::api::core::v1::ConfigMap>>,
    checks: BTreeMap<String, Vec<crate::jobs::CheckRun>>,
    alerts: Option<alerts::AlertReading>,
}

impl World {
    fn new(sk: Skyhook, nodes: Vec<Arc<NodeView>>) -> Self {
        World {
            sk,
            others: Vec::new(),
            peers: Vec::new(),
            nodes,
            jobs: Vec::new(),
            pods: BTreeMap::new(),
            busy: BTreeSet::new(),
            interrupting: BTreeSet::new(),
            write_failures: Vec::new(),
            go_pods: BTreeMap::new(),
            invalid: Vec::new(),
            policies: Vec::new(),
            status_budget: crate::settings::DEFAULT_STATUS_NODE_BUDGET,
            refused_taints: BTreeSet::new(),
            refused_nodes: BTreeSet::new(),
            configmaps: Vec::new(),
            checks: BTreeMap::new(),
            alerts: None,
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
            peers: crate::plan::fleet::Peers {
                api: schema::Api::NodeWright,
                objects: &self.peers,
            },
            policies: &self.policies,
            nodes: &self.nodes,
            jobs: &jobs,
            configmaps: &self.configmaps,
            pods_on_nodes: &self.pods,
            busy_nodes: &self.busy,
            interrupting_nodes: &self.interrupting,
            go_pods: &self.go_pods,
            invalid: &self.invalid,
            write_failures: &self.write_failures,
            drain_blocks: &[],
            refused_auto_taints: &self.refused_taints,
            refused_nodes: &self.refused_nodes,
            health_checks: &self.checks,
            alerts: self.alerts.as_ref(),
            config: &cfg,
            operator_version: "test",
            now: now(),
            status_hold: None,
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

/// The message of the plan's condition of `kind` (empty when it has none).
fn condition_message(plan: &Plan, kind: &str) -> String {
    plan.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == kind))
        .map(|c| c.message.clone())
        .unwrap_or_default()
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
        let n = node("n1")
            .annotations(annotations)
            .cordoned(*interrupt)
            .arc();
        let mut w = World::new(one_package(*interrupt).build(), vec![n]);
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
        let n = node("n1")
            .labels(labels.clone())
            .taints(taints.clone())
            .arc();
        let w = World::new(
            one_package(false).annotations(annotations.clone()).build(),
            vec![n],
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
        let sk = one_package(false).set("interruptionBudget", budget.clone());
        let nodes: Vec<Arc<NodeView>> = (0..*count)
            .map(|i| node(&format!("n{i}")).created(i as i64).arc())
            .collect();
        let mut w = World::new(sk.build(), nodes);
        for i in 0..*busy {
            w.jobs
                .push(job(&tuned(), Stage::Apply).on(&format!("n{i}")).build());
        }
        let plan = w.plan();
        assert_eq!(plan.create_jobs.len(), *jobs, "{case}");
    }
}

#[test]
fn oldest_nodes_start_first_and_the_batch_is_kept_until_done() {
    let sk = one_package(false).set("interruptionBudget", json!({"count": 1}));
    let nodes = vec![
        node("young").created(50).arc(),
        node("old").created(1).arc(),
    ];
    let mut w = World::new(sk.build(), nodes);
    assert_eq!(created(&w.plan()), vec![("old".into(), "apply".into())]);
    w.jobs.push(job(&tuned(), Stage::Apply).on("old").build());
    let plan = w.plan();
    assert!(plan.create_jobs.is_empty(), "the busy node keeps the batch");
    assert_eq!(node_status(&plan, "young"), Some(Status::Waiting));
}

/// Issue 51, item 3 (upstream #382): in a batch of one, node `old`'s apply Job has run for 31
/// minutes (past STALLED_NODE_SLOT_RELEASE, 30m by default) where it took 2 s on `peer`: `old`
/// gives its slot back and `young` starts; `old` is named. Without the peer there is no
/// evidence against the node and the batch holds. A node whose patches are refused holds no
/// slot either, and its patch is a probe written each pass.
#[test]
fn a_stalled_node_and_a_node_refusing_writes_give_their_slots_back() {
    let sk = one_package(false).set("interruptionBudget", json!({"count": 1}));
    let mut done = go_state(PLAIN, "config", "complete");
    done[schema::status_annotation("sh")] = json!("complete");
    let world = |with_peer: bool| {
        let mut nodes = vec![
            node("old").created(1).arc(),
            node("young").created(50).arc(),
        ];
        let mut jobs = vec![
            job(&tuned(), Stage::Apply)
                .on("old")
                .created(t(-31 * 60))
                .build(),
        ];
        if with_peer {
            nodes.push(node("peer").created(2).annotations(done.clone()).arc());
            let finished = Outcome::Complete { at: t(-3598) };
            jobs.push(
                job(&tuned(), Stage::Apply)
                    .on("peer")
                    .created(t(-3600))
                    .outcome(finished)
                    .build(),
            );
        }
        let mut w = World::new(sk.clone().build(), nodes);
        w.jobs = jobs;
        w
    };
    let plan = world(true).plan();
    assert_eq!(created(&plan), vec![("young".into(), "apply".into())]);
    let blocked = plan
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == schema::NODE_BLOCKED_CONDITION)
        })
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_default();
    assert_eq!(blocked.0, schema::SLOT_RELEASED_REASON);
    assert!(
        blocked.1.contains("node old: stalled: the apply Job"),
        "{}",
        blocked.1
    );

    let plan = world(false).plan();
    assert!(created(&plan).is_empty(), "no peer: the batch holds");

    let mut w = world(false);
    w.jobs.clear();
    w.refused_nodes.insert("old".into());
    let plan = w.plan();
    assert_eq!(created(&plan), vec![("young".into(), "apply".into())]);
    let probe = plan.node_patches.iter().find(|p| p.node == "old");
    assert!(probe.is_some_and(|p| p.probe && !p.is_empty()), "{probe:?}");
}

/// Found by the fault campaign (issue 52, seed 1): the driver's config was edited while node
/// `mid` had only run apply. The change is recorded as a config update (other nodes had
/// completed the package), but `mid` never completed this version: it still owes the package's
/// reboot, so after its config it is cordoned for the interrupt, not reported complete. `done`
/// had completed it (its `applied_` record keeps the installed mark): it re-ran config for the
/// change alone and takes no reboot (no configInterrupt matches).
#[test]
fn a_config_edit_mid_install_keeps_the_install_interrupt() {
    let driver = package(REBOOT)
        .reboot()
        .with(json!({"configMap": {"driver.conf": "edit=1"}}));
    let mut sk = one_package(true).build();
    sk.spec.packages.insert(REBOOT.into(), driver.build());
    sk.status
        .get_or_insert_with(Default::default)
        .config_updates
        .insert(REBOOT.into(), vec!["driver.conf".into()]);
    // Both ran config for the new data; only `done` had completed the package before.
    let hash = crate::plan::spec::spec_hash(&sk.spec.packages[REBOOT], &[]);
    let at_config = |installed: bool| {
        let mut a = go_state(REBOOT, "config", "complete");
        a[schema::status_annotation("sh")] = json!("in_progress");
        let mut applied = json!({schema::package_key(REBOOT, "1.0.0"): hash});
        if installed {
            applied[schema::installed_key(REBOOT, "1.0.0")] = json!("true");
        }
        a[schema::applied_annotation("sh")] = json!(applied.to_string());
        a
    };
    let nodes = vec![
        node("mid").created(1).annotations(at_config(false)).arc(),
        node("done").created(2).annotations(at_config(true)).arc(),
    ];
    let mut w = World::new(sk, nodes);
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": schema::package_configmap_name("sh", REBOOT, "1.0.0")},
        "data": {"driver.conf": "edit=1"}}))
    .expect("configmap");
    w.configmaps.push(Arc::new(cm));
    let plan = w.plan();
    assert_ne!(node_status(&plan, "mid"), Some(Status::Complete));
    let cordoned = plan
        .node_patches
        .iter()
        .any(|p| p.node == "mid" && p.unschedulable == Some(true));
    assert!(
        cordoned,
        "mid is not cordoned for its reboot: {:?}",
        plan.node_patches
    );
    assert_eq!(node_status(&plan, "done"), Some(Status::Complete));
}

/// Found by the fault campaign (issue 52, seed 1, second run): in a batch of one, node `back`
/// left the selector between two stages (its apply done) and was released; another node took
/// the slot. When `back` returned, it rejoined the batch at work (stored `in_progress`) and its
/// config ran beside the other node: two at work with a budget of one. Released, it now reads
/// `waiting`, so it comes back as a candidate for the next batch choice.
#[test]
fn a_node_back_in_the_selector_waits_for_a_batch_choice() {
    let sk = one_package(false)
        .set("interruptionBudget", json!({"count": 1}))
        .set("nodeSelectors", json!({"matchLabels": {"pool": "a"}}));
    let pool = json!({"pool": "a"});
    let mut busy = go_state(PLAIN, "apply", "in_progress");
    busy[schema::status_annotation("sh")] = json!("in_progress");
    let mut back = go_state(PLAIN, "apply", "complete");
    back[schema::status_annotation("sh")] = json!("in_progress");
    let busy_node = || {
        node("busy")
            .created(2)
            .labels(pool.clone())
            .annotations(busy.clone())
            .arc()
    };
    let world = |back_node: Arc<NodeView>| {
        let mut w = World::new(sk.clone().build(), vec![back_node, busy_node()]);
        w.jobs.push(job(&tuned(), Stage::Apply).on("busy").build());
        w
    };
    // Away: released, and no longer at work.
    let plan = world(node("back").created(1).annotations(back.clone()).arc()).plan();
    let release = plan.node_patches.iter().find(|p| p.node == "back");
    let status = schema::status_annotation("sh");
    let written = release.and_then(|p| p.annotations.get(&status).cloned().flatten());
    assert_eq!(written.as_deref(), Some("waiting"), "{release:?}");

    // Back as the release used to leave it (`in_progress`): its config ran beside the busy node.
    let stale = node("back")
        .created(1)
        .labels(pool.clone())
        .annotations(back.clone());
    let plan = world(stale.arc()).plan();
    assert_eq!(
        created(&plan),
        vec![("back".to_string(), "config".to_string())]
    );

    // Back, as the release leaves it now: nothing starts beside the busy node.
    let mut returned = back.clone();
    returned[&status] = json!("waiting");
    let plan = world(
        node("back")
            .created(1)
            .labels(pool.clone())
            .annotations(returned)
            .arc(),
    )
    .plan();
    assert!(created(&plan).is_empty(), "{:?}", created(&plan));
}

/// Upstream #587, its reproduction ported: in a batch of two, node `a` finished its interrupt
/// (post-interrupt due, still cordoned) while node `b`'s stage runs. Upstream's batch returned
/// only the nodes `in_progress`, so `a`, stored as `waiting`, got no post-interrupt until every
/// other node of the batch was idle. Here `a` goes on whatever status the last writer stored
/// (the Go operator's `waiting` included), and no third node joins the batch.
#[test]
fn a_node_past_its_interrupt_is_not_starved_by_a_busy_neighbour() {
    let sk = one_package(true).set("interruptionBudget", json!({"count": 2}));
    let driver = package(REBOOT).reboot().build();
    let cordoned = |name: &str, created: i64, stage: &str, state: &str, stored: &str| {
        let mut annotations = go_state(REBOOT, stage, state);
        annotations[schema::status_annotation("sh")] = json!(stored);
        annotations[schema::cordon_annotation("sh")] = json!("true");
        node(name)
            .created(created)
            .annotations(annotations)
            .cordoned(true)
            .arc()
    };
    for stored in ["waiting", "in_progress", "unknown"] {
        let nodes = vec![
            cordoned("a", 1, "interrupt", "complete", stored),
            cordoned("b", 2, "apply", "in_progress", "in_progress"),
            node("c").created(3).arc(),
        ];
        let mut w = World::new(sk.clone().build(), nodes);
        w.jobs.push(job(&driver, Stage::Apply).on("b").build());
        let plan = w.plan();
        assert_eq!(
            created(&plan),
            vec![("a".to_string(), "post-interrupt".to_string())],
            "a stored as {stored}"
        );
        let c_cordoned = plan
            .node_patches
            .iter()
            .any(|p| p.node == "c" && p.unschedulable == Some(true));
        assert!(!c_cordoned, "a third node joined a batch of two ({stored})");
    }
}

/// Delta D48: a node of the batch that is then ignored keeps its state but gives its slot
/// back; another node starts. Unignored, it goes on.
#[test]
fn an_ignored_node_mid_batch_gives_its_slot_back() {
    let sk = one_package(true).set("interruptionBudget", json!({"count": 1}));
    let mid_batch = |ignored: bool| {
        let mut labels = json!({});
        if ignored {
            labels[schema::IGNORE_LABEL] = json!(schema::TRUE_VALUE);
        }
        let mut annotations = go_state(REBOOT, "config", "complete");
        annotations[schema::status_annotation("sh")] = json!("in_progress");
        annotations[schema::cordon_annotation("sh")] = json!("true");
        node("old")
            .created(1)
            .labels(labels)
            .annotations(annotations)
            .cordoned(true)
            .arc()
    };
    // The young node's first step is its cordon (its package has an interrupt).
    for (ignored, young_starts) in [(true, true), (false, false)] {
        let nodes = vec![mid_batch(ignored), node("young").created(50).arc()];
        let plan = World::new(sk.clone().build(), nodes).plan();
        let cordoned = plan
            .node_patches
            .iter()
            .any(|p| p.node == "young" && p.unschedulable == Some(true));
        assert_eq!(cordoned, young_starts, "ignored: {ignored}");
    }
}

#[test]
fn an_invalid_skyhook_only_writes_its_status() {
    let n = node("n1")
        .annotations(go_state(PLAIN, "apply", "in_progress"))
        .arc();
    let mut w = World::new(one_package(false).build(), vec![n]);
    w.invalid = vec!["spec.packages.tuned.version: not a semver".into()];
    // A finished Job's outcome is not stored while the spec is invalid, so the Job must not be
    // marked recorded either: it is read again once the Skyhook is valid.
    let at = now();
    w.jobs.push(
        job(&tuned(), Stage::Apply)
            .outcome(Outcome::Complete { at })
            .build(),
    );
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
    let first = skyhook("aaa").live().package(tuned()).build();
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
        let n = node("n1").annotations(annotations).arc();
        let mut w = World::new(one_package(false).build(), vec![n]);
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
        let n = node("n1")
            .annotations(go_state(REBOOT, "config", "complete"))
            .annotation(&schema::cordon_annotation("sh"), "true")
            .cordoned(true)
            .arc();
        let mut w = World::new(one_package(true).build(), vec![n]);
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
        terminating: false,
        unmovable: None,
        health: None,
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
        let n = node("n1")
            .annotations(annotations)
            .cordoned(*cordoned)
            .arc();
        let mut w = World::new(one_package(true).build(), vec![n]);
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

/// Issue 51, item 3: a node whose drain ran past `drainConfig.timeout` (a pod that cannot be
/// evicted) stays cordoned and reads `erroring`, but gives its slot back in a batch of one: the
/// next node starts. Once drained it is first at the next batch choice, not before (the budget
/// holds while the other node works).
#[test]
fn a_node_whose_drain_timed_out_gives_its_slot_back() {
    let sk = one_package(true)
        .set("interruptionBudget", json!({"count": 1}))
        .set("drainConfig", json!({"timeout": "5m"}));
    let web = PodInfo {
        namespace: "apps".into(),
        name: "web".into(),
        protected: false,
        evictable: true,
        terminating: false,
        unmovable: None,
        health: None,
    };
    let mut stuck = json!({});
    stuck[schema::status_annotation("sh")] = json!("erroring");
    stuck[schema::cordon_annotation("sh")] = json!("true");
    stuck[schema::drain_start_annotation("sh")] = json!(t(-600).to_string());
    let world = |pods: Vec<PodInfo>, next_busy: bool| {
        let mut next = node("next").created(2);
        if next_busy {
            let mut a = go_state(REBOOT, "apply", "in_progress");
            a[schema::status_annotation("sh")] = json!("in_progress");
            next = next.annotations(a);
        }
        let nodes = vec![
            node("stuck")
                .created(1)
                .annotations(stuck.clone())
                .cordoned(true)
                .arc(),
            next.arc(),
        ];
        let mut w = World::new(sk.clone().build(), nodes);
        w.pods.insert("stuck".into(), pods);
        if next_busy {
            w.jobs.push(
                job(&package(REBOOT).reboot().build(), Stage::Apply)
                    .on("next")
                    .build(),
            );
        }
        w
    };
    let plan = world(vec![web.clone()], false).plan();
    assert!(
        plan.evictions.is_empty(),
        "past the timeout nothing is evicted"
    );
    let next_cordoned = plan
        .node_patches
        .iter()
        .any(|p| p.node == "next" && p.unschedulable == Some(true));
    assert!(next_cordoned, "the next node did not start");
    assert_eq!(node_status(&plan, "stuck"), Some(Status::Erroring));
    let uncordoned = plan
        .node_patches
        .iter()
        .any(|p| p.node == "stuck" && p.unschedulable == Some(false));
    assert!(!uncordoned, "the stuck node stays cordoned");

    // Drained while the other node works: it waits for the batch choice.
    let plan = world(vec![], true).plan();
    assert!(
        !created(&plan).iter().any(|(n, _)| n == "stuck"),
        "{:?}",
        created(&plan)
    );
    // Drained and the batch done: its work goes on.
    let plan = world(vec![], false).plan();
    assert!(
        created(&plan).iter().any(|(n, _)| n == "stuck"),
        "{:?}",
        created(&plan)
    );
}

#[test]
fn finished_jobs_are_folded_and_the_node_moves_on() {
    let at = now();
    let failed = failure(at);
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
        let n = node("n1")
            .annotations(go_state(PLAIN, "apply", "in_progress"))
            .arc();
        let mut w = World::new(one_package(false).build(), vec![n]);
        w.jobs
            .push(job(&tuned(), Stage::Apply).outcome(outcome.clone()).build());
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
    let n = node("n1").arc();
    let w = World::new(one_package(false).build(), vec![n]);
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
    let mut node_after = node("n1")
        .annotations(Value::Object(annotations))
        .labels(Value::Object(labels))
        .build();
    node_after.conditions = first.node_conditions[0]
        .1
        .iter()
        .cloned()
        .map(Into::into)
        .collect();
    let mut sk = w.sk.clone();
    sk.status = first.status.clone();
    let mut w2 = World::new(sk, vec![Arc::new(node_after)]);
    w2.jobs.push(job(&tuned(), Stage::Apply).build());
    let second = w2.plan();
    assert!(second.create_jobs.is_empty(), "no twin Job");
    assert!(second.node_patches.is_empty(), "{:?}", second.node_patches);
    assert!(second.node_conditions.is_empty());
    assert!(second.status.is_none(), "status unchanged");
}

#[test]
fn a_huge_graceful_shutdown_stored_before_the_bound_is_flagged_not_fatal() {
    let sk = one_package(false)
        .package(package(PLAIN).with(json!({"gracefulShutdown": "1000000000h"})))
        .build();
    let problems = crate::crd::validate_skyhook(&sk).expect_err("rejected by the operator");
    let text: Vec<String> = problems.iter().map(|e| e.to_string()).collect();
    assert!(
        text.iter().any(|t| t.contains("gracefulShutdown")),
        "{text:?}"
    );
    let n = node("n1").arc();
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
        place: crate::jobs::JobPlace {
            skyhook: &sk,
            node: "n1",
            attempt: 0,
            spec_hash: "h",
            node_order: 0,
        },
        package,
        stage: Stage::Apply,
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
    let sk = one_package(false).set("interruptionBudget", json!({"count": 1}));
    let done = node("done")
        .annotations(go_state(PLAIN, "config", "in_progress"))
        .arc();
    let next = node("next").created(1).arc();
    let mut w = World::new(sk.build(), vec![done, next]);
    let at = now();
    w.jobs.push(
        job(&tuned(), Stage::Config)
            .on("done")
            .outcome(Outcome::Complete { at })
            .build(),
    );
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
        let bad = node("n1").annotations(annotations).arc();
        let good = node("n2").created(1).arc();
        let w = World::new(one_package(false).build(), vec![bad, good]);
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
    let w = World::new(one_package(false).build(), vec![node("n1").arc()]);
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
    let mut w = World::new(one_package(false).build(), vec![node("n1").arc()]);
    let want = schema::skyhook_version_value("test");
    assert_eq!(w.plan().version_annotation, Some(want.clone()));
    w.sk = one_package(false)
        .annotations(json!({schema::VERSION_ANNOTATION: want}))
        .build();
    assert_eq!(w.plan().version_annotation, None);
    w.sk = one_package(false)
        .annotations(json!({schema::VERSION_ANNOTATION: "v0.12.0"}))
        .build();
    assert!(
        w.plan().version_annotation.is_some(),
        "an older writer's value is replaced"
    );
}

#[test]
fn an_interrupt_never_starts_beside_another_stage_in_one_pass() {
    let sk = one_package(true).package(tuned());
    let n = node("n1")
        .annotations(go_state(REBOOT, "config", "complete"))
        .annotation(&schema::cordon_annotation("sh"), "true")
        .cordoned(true)
        .arc();
    let mut w = World::new(sk.build(), vec![n]);
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
    let sk = one_package(true).package(tuned());
    // (case, the interrupt Job is being deleted)
    for (case, deleting) in [("running", false), ("being deleted", true)] {
        let n = node("n1")
            .annotations(go_state(REBOOT, "interrupt", "in_progress"))
            .annotation(&schema::cordon_annotation("sh"), "true")
            .cordoned(true)
            .arc();
        let mut w = World::new(sk.clone().build(), vec![n]);
        w.pods.insert("n1".into(), Vec::new());
        let driver = package(REBOOT).reboot().build();
        w.jobs
            .push(job(&driver, Stage::Interrupt).deleting(deleting).build());
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
        let bad = node("n1").annotations(annotations).cordoned(busy).arc();
        let good = node("n2").created(1).arc();
        let sk = one_package(false).set("interruptionBudget", json!({"count": 1}));
        let w = World::new(sk.build(), vec![bad, good]);
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
        package(name).with(json!({"interrupt": {"type": "service", "services": [name]}}))
    };
    let sk = skyhook("sh")
        .live()
        .package(svc("alpha"))
        .package(svc("bravo"));
    let raw = r#"{"alpha|1.0.0":{"name":"alpha","version":"1.0.0","image":"ghcr.io/x/alpha","stage":"config","state":"complete"},"bravo|1.0.0":{"name":"bravo","version":"1.0.0","image":"ghcr.io/x/bravo","stage":"config","state":"complete"}}"#;
    let n = node("n1")
        .annotations(json!({schema::node_state_annotation("sh"): raw}))
        .annotation(&schema::cordon_annotation("sh"), "true")
        .cordoned(true)
        .arc();
    let mut w = World::new(sk.build(), vec![n]);
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
        .map(|i| node(&format!("n{i:04}")).created(i as i64).arc())
        .collect();
    let world = World::new(one_package(false).build(), nodes);
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
        .map(|(n, _)| job(&tuned(), Stage::Apply).on(n).build())
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

#[test]
fn each_compartment_starts_its_own_batch_and_reports_it() {
    let nodes = vec![
        node("n0").labels(json!({"canary": "true"})).arc(),
        node("n1").created(1).arc(),
        node("n2").created(2).arc(),
        node("n3").created(3).arc(),
    ];
    let mut world = World::new(one_package(false).policy("p").build(), nodes);
    world.policies = vec![Arc::new(policy(
        json!([{"name": "canary", "selector": {"matchLabels": {"canary": "true"}},
                "budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}]),
        json!({"budget": {"percent": 100}, "strategy": {"linear": {"initialBatch": 1, "delta": 1}}}),
    ))];
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
    let sk = one_package(false).set("interruptionBudget", json!({"count": 3}));
    let nodes = (0..6)
        .map(|i| node(&format!("n{i}")).created(i).arc())
        .collect();
    let plan = World::new(sk.build(), nodes).plan();
    assert_eq!(created(&plan).len(), 3);
    let status = plan.status.expect("status");
    let c = &status.compartment_statuses["__default__"];
    assert_eq!((c.matched, c.ceiling, c.in_progress), (6, 3, 3));
    assert_eq!(plan.policy_label, "legacy");
}

#[test]
fn a_missing_policy_blocks_new_work_and_says_why() {
    let nodes = vec![node("n0").arc()];
    let plan = World::new(one_package(false).policy("p").build(), nodes).plan();
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
        node("n0")
            .annotations(go_state(PLAIN, "apply", "erroring"))
            .arc(),
        node("n1").created(1).arc(),
    ];
    let mut world = World::new(one_package(false).policy("p").build(), nodes);
    world.policies = vec![Arc::new(policy(
        json!([]),
        json!({"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 1, "failureThreshold": 1}}}),
    ))];
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
        let mut sk = one_package(false);
        if let Some(on) = option {
            sk = sk.set(
                "deploymentPolicyOptions",
                json!({"resetBatchStateOnCompletion": on}),
            );
        }
        let nodes = vec![node("n0").arc()];
        let mut world = World::new(sk.build(), nodes);
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
    let sk = skyhook("sh")
        .live()
        .package(package("alpha"))
        .package(package("broken"));
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
            .map(|i| {
                node(&format!("n{i}"))
                    .created(i)
                    .annotations(state(node_status))
                    .arc()
            })
            .collect();
        let mut world = World::new(sk.clone().build(), nodes);
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

/// The pass folds each node once, chooses the batch, then advances each node at most once:
/// the look ahead that keeps a node at work in its batch is the advance it then uses.
#[test]
fn the_node_machine_advances_at_most_once_per_node_per_pass() {
    let at_work = json!({
        schema::node_state_annotation("sh"): r#"{"alpha|1.0.0":{"name":"alpha","version":"1.0.0","image":"ghcr.io/x/alpha","stage":"apply","state":"complete"},"beta|1.0.0":{"name":"beta","version":"1.0.0","image":"ghcr.io/x/beta","stage":"apply","state":"complete"}}"#,
        schema::status_annotation("sh"): "in_progress",
    });
    let sk = skyhook("sh")
        .live()
        .package(package("alpha"))
        .package(package("beta"));
    // (case, node annotations, paused, Jobs created, advances)
    let cases: &[(&str, Value, bool, usize, usize)] = &[
        ("a fresh rollout: every node starts", json!({}), false, 6, 3),
        (
            "nodes at work between stages: looked ahead once, that advance used",
            at_work.clone(),
            false,
            6,
            3,
        ),
        ("paused: looked ahead, nothing starts", at_work, true, 0, 3),
    ];
    for (case, annotations, paused, want_jobs, want_advances) in cases {
        let nodes = (0..3)
            .map(|i| {
                node(&format!("n{i}"))
                    .created(i)
                    .annotations(annotations.clone())
                    .arc()
            })
            .collect();
        let mut sk = sk.clone();
        if *paused {
            sk = sk.annotations(json!({schema::PAUSE_ANNOTATION: "true"}));
        }
        let world = World::new(sk.build(), nodes);
        stage::counts::take();
        let plan = world.plan();
        let (folds, advances) = stage::counts::take();
        assert_eq!(
            plan.create_jobs.len(),
            *want_jobs,
            "{case}: {:?}",
            created(&plan)
        );
        assert_eq!(folds, 3, "{case}: one fold per node");
        assert_eq!(advances, *want_advances, "{case}: advances");
    }
}

/// Two nodes at work in one pass: n1 folds a finished apply Job and starts config, n2 starts
/// apply. Every node patch carries its node's resourceVersion; when n1's patch meets a
/// conflict, what depends on it goes (its Job, the Job's record, its Events, the status) and
/// n2's work stays.
#[test]
fn a_node_patch_that_conflicts_takes_its_nodes_work_and_the_status_with_it() {
    let versioned = |name: &str, rv: &str, annotations: Value| {
        node(name)
            .annotations(annotations)
            .resource_version(rv)
            .arc()
    };
    let n1 = versioned("n1", "41", go_state(PLAIN, "apply", "in_progress"));
    let n2 = versioned("n2", "42", json!({}));
    let sk = one_package(false)
        .status(crate::crd::SkyhookStatus {
            status: Some(Status::Waiting),
            ..Default::default()
        })
        .build();
    let mut w = World::new(sk, vec![n1, n2]);
    w.jobs.push(
        job(&tuned(), Stage::Apply)
            .outcome(Outcome::Complete { at: now() })
            .build(),
    );
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
    use crate::jobs::GoOutcome;
    let pod = |outcome| go_pod(&tuned(), Stage::Apply).outcome(outcome).build();
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
        let n1 = node("n1")
            .annotations(go_state(PLAIN, "apply", "in_progress"))
            .arc();
        let mut w = World::new(one_package(false).build(), vec![n1]);
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
            node(&format!("done-{i:02}"))
                .created(i)
                .annotations(done)
                .arc()
        })
        .collect();
    for i in 0..2 {
        let busy = go_state(PLAIN, "apply", "in_progress");
        nodes.push(
            node(&format!("busy-{i}"))
                .created(40 + i)
                .annotations(busy)
                .arc(),
        );
    }
    let mut world = World::new(one_package(false).build(), nodes);
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

/// Upstream's D47: a node whose auto-taint was refused is left out (no work, not counted, the
/// Skyhook completes without it) and only its taint is retried.
#[test]
fn a_node_whose_auto_taint_was_refused_is_left_out_and_its_taint_retried() {
    let sk = one_package(false)
        .spec(json!({"runtimeRequired": true, "autoTaintNewNodes": true}))
        .package(tuned())
        .build();
    let done = node("n2")
        .created(1)
        .annotations(json!({
            schema::node_state_annotation("sh"): r#"{"tuned|1.0.0":{"name":"tuned","version":"1.0.0","image":"ghcr.io/x/tuned","stage":"config","state":"complete"}}"#,
            schema::status_annotation("sh"): "complete",
        }))
        .arc();
    let fresh = node("n1").arc();
    let mut w = World::new(sk, vec![fresh, done]);
    w.refused_taints.insert("n1".into());
    let plan = w.plan();
    let n1: Vec<&NodePatch> = plan
        .node_patches
        .iter()
        .filter(|p| p.node == "n1")
        .collect();
    assert_eq!(n1.len(), 1, "{:?}", plan.node_patches);
    assert!(n1[0].auto_taint && n1[0].taints.as_ref().is_some_and(|t| t.len() == 1));
    assert!(
        n1[0].annotations.keys().all(|k| k.contains("autoTaint_")),
        "more than the taint retried: {:?}",
        n1[0].annotations
    );
    assert!(created(&plan).iter().all(|(n, _)| n != "n1"));
    let status = plan.status.as_ref().expect("status");
    assert_eq!(status.status, Some(Status::Complete), "{status:?}");
    assert_eq!(status.complete_nodes, "1/1");
    assert!(node_status(&plan, "n1").is_none());
}

/// Issue 38: outside its maintenance window a compartment starts nothing, the condition says
/// when it opens and the next pass is due then; inside, nodes start.
#[test]
fn a_compartment_outside_its_window_starts_nothing_and_says_when_it_opens() {
    let nodes = vec![node("n0").arc(), node("n1").created(1).arc()];
    let at = now().to_zoned(jiff::tz::TimeZone::UTC);
    let hhmm = |t: jiff::Zoned| format!("{:02}:{:02}", t.hour(), t.minute());
    let world = |start: String, end: String| {
        let mut w = World::new(one_package(false).policy("p").build(), nodes.clone());
        let mut p = policy(
            json!([]),
            json!({"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}),
        );
        p.spec.windows = vec![crate::crd::MaintenanceWindow {
            start,
            end,
            ..Default::default()
        }];
        w.policies = vec![Arc::new(p)];
        w
    };
    // Opens in two hours, for an hour.
    let later = |h: i64| at.checked_add(jiff::SignedDuration::from_hours(h)).unwrap();
    let plan = world(hhmm(later(2)), hhmm(later(3))).plan();
    assert!(created(&plan).is_empty(), "started outside the window");
    let status = plan.status.as_ref().expect("status");
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == schema::MAINTENANCE_WINDOW_CONDITION)
        .expect("condition");
    assert_eq!(c.reason, schema::OUTSIDE_MAINTENANCE_WINDOW_REASON);
    assert!(
        c.message.contains("compartment __default__"),
        "{}",
        c.message
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == schema::OUTSIDE_MAINTENANCE_WINDOW_REASON)
    );
    let due = plan.requeue_after.expect("requeue");
    assert!(due <= std::time::Duration::from_secs(2 * 3600), "{due:?}");
    assert_eq!(
        plan.compartments[0]
            .window
            .as_deref()
            .map(|w| w.starts_with("closed until")),
        Some(true)
    );
    // Opened an hour ago, closes in an hour: one node starts, no condition.
    let plan = world(hhmm(later(-1)), hhmm(later(1))).plan();
    assert_eq!(created(&plan).len(), 1);
    let status = plan.status.as_ref().expect("status");
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.type_ != schema::MAINTENANCE_WINDOW_CONDITION)
    );
    assert_eq!(plan.compartments[0].window.as_deref(), Some("open"));
}

/// The health gate (issue 38): a finished node is held cordoned, `in_progress`, until its
/// selected pods are Ready; past the timeout it is `erroring` and stays cordoned; it completes
/// and is uncordoned once healthy; a node complete before is never held again.
#[test]
fn health_gate_holds_fails_and_passes_a_finished_node() {
    let gate = json!({"timeout": "5m", "pods": {"namespace": "gpu", "selector": {"matchLabels": {"app": "dp"}}}});
    let sk = one_package(true).set("healthGate", gate).build();
    let clock = schema::health_gate_annotation("sh");
    let dp = |ready: bool| PodInfo {
        namespace: "gpu".into(),
        name: "dp-1".into(),
        protected: false,
        evictable: false,
        terminating: false,
        unmovable: None,
        health: Some(ready),
    };
    let finished = |stored: &str, since: Option<i64>| {
        let mut b = node("n1")
            .annotations(go_state(REBOOT, "post-interrupt", "complete"))
            .annotation(&schema::cordon_annotation("sh"), "true")
            .annotation(&schema::status_annotation("sh"), stored)
            .cordoned(true);
        if let Some(s) = since {
            b = b.annotation(&clock, &t(s).to_string());
        }
        b.arc()
    };
    // (case, stored status, clock started, pod Ready, status, clock after, cordon lifted, reasons)
    let cases: &[(
        &str,
        &str,
        Option<i64>,
        Option<bool>,
        Status,
        Option<Option<String>>,
        bool,
        &[&str],
    )] = &[
        (
            "just finished, pod not Ready: held, clock starts",
            "in_progress",
            None,
            Some(false),
            Status::InProgress,
            Some(Some(now().to_string())),
            false,
            &[schema::HEALTH_GATE_HOLDING_REASON],
        ),
        (
            "within the timeout: still held",
            "in_progress",
            Some(-60),
            Some(false),
            Status::InProgress,
            None,
            false,
            &[],
        ),
        (
            "no selected pod yet: held",
            "in_progress",
            Some(-60),
            None,
            Status::InProgress,
            None,
            false,
            &[],
        ),
        (
            "past the timeout: erroring, still cordoned",
            "in_progress",
            Some(-301),
            Some(false),
            Status::Erroring,
            None,
            false,
            &[
                schema::HEALTH_GATE_FAILED_REASON,
                schema::HEALTH_GATE_FAILED_REASON,
            ],
        ),
        (
            "failed before and still not Ready: no new Event",
            "erroring",
            Some(-900),
            Some(false),
            Status::Erroring,
            None,
            false,
            &[],
        ),
        (
            "pod Ready: complete, uncordoned, clock gone",
            "in_progress",
            Some(-60),
            Some(true),
            Status::Complete,
            Some(None),
            true,
            &[schema::HEALTH_GATE_PASSED_REASON],
        ),
        (
            "failed, then recovers: complete",
            "erroring",
            Some(-900),
            Some(true),
            Status::Complete,
            Some(None),
            true,
            &[schema::HEALTH_GATE_PASSED_REASON],
        ),
        (
            "complete before the gate: never held again",
            "complete",
            None,
            Some(false),
            Status::Complete,
            None,
            true,
            &[],
        ),
    ];
    for (case, stored, since, ready, status, clock_after, uncordoned, reasons) in cases {
        let mut w = World::new(sk.clone(), vec![finished(stored, *since)]);
        w.pods
            .insert("n1".into(), ready.map(dp).into_iter().collect());
        let plan = w.plan();
        assert_eq!(node_status(&plan, "n1"), Some(*status), "{case}");
        let patch = plan.node_patches.iter().find(|p| p.node == "n1");
        let wrote = patch.and_then(|p| p.annotations.get(&clock).cloned());
        assert_eq!(wrote, *clock_after, "{case}");
        let lifted = patch.is_some_and(|p| p.unschedulable == Some(false));
        assert_eq!(lifted, *uncordoned, "{case}");
        let gate_events: Vec<&str> = plan
            .events
            .iter()
            .map(|e| e.reason.as_str())
            .filter(|r| r.starts_with("HealthGate"))
            .collect();
        assert_eq!(gate_events, *reasons, "{case}");
        let condition = plan.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == schema::HEALTH_GATE_CONDITION)
        });
        let want = match status {
            Status::InProgress => Some(schema::HEALTH_GATE_HOLDING_REASON),
            Status::Erroring => Some(schema::HEALTH_GATE_FAILED_REASON),
            _ => None,
        };
        assert_eq!(condition.map(|c| c.reason.as_str()), want, "{case}");
        if *status == Status::InProgress {
            assert!(
                plan.requeue_after <= Some(std::time::Duration::from_secs(3)),
                "{case}"
            );
        }
    }
}

/// A node condition the gate names must have the status it wants; a NotReady node is held.
#[test]
fn health_gate_waits_for_a_node_condition_and_ready() {
    let gate = json!({"nodeCondition": {"type": "GpuHealthy", "status": "True"}});
    let sk = skyhook("sh")
        .live()
        .package(package(PLAIN))
        .set("healthGate", gate)
        .build();
    let finished = |conditions: Value| {
        node("n1")
            .annotations(go_state(PLAIN, "config", "complete"))
            .annotation(&schema::status_annotation("sh"), "in_progress")
            .conditions(conditions)
            .arc()
    };
    let ready = json!({"type": "Ready", "status": "True"});
    let cases = [
        (
            "condition absent",
            json!([ready.clone()]),
            Status::InProgress,
        ),
        (
            "condition False",
            json!([ready.clone(), {"type": "GpuHealthy", "status": "False"}]),
            Status::InProgress,
        ),
        (
            "condition True",
            json!([ready.clone(), {"type": "GpuHealthy", "status": "True"}]),
            Status::Complete,
        ),
        (
            "condition True, node NotReady",
            json!([{"type": "Ready", "status": "False"}, {"type": "GpuHealthy", "status": "True"}]),
            Status::InProgress,
        ),
    ];
    for (case, conditions, status) in cases {
        let w = World::new(sk.clone(), vec![finished(conditions)]);
        let plan = w.plan();
        assert_eq!(node_status(&plan, "n1"), Some(status), "{case}");
        let message = condition_message(&plan, schema::HEALTH_GATE_CONDITION);
        if status == Status::InProgress {
            assert!(message.contains("n1"), "{case}: {message}");
        }
    }
}

/// A check Job starts once the gate's clock is stored and the other checks hold; a failed
/// attempt is retried after its delay; a complete one passes the gate.
#[test]
fn health_gate_runs_its_check_job_and_retries_a_failed_one() {
    use crate::jobs::CheckRun;
    let gate = json!({"check": {"image": "example.com/check:1", "command": ["/check"]}});
    let sk = skyhook("sh")
        .live()
        .package(package(PLAIN))
        .set("healthGate", gate)
        .build();
    let since = t(-30);
    let finished = |clock: bool| {
        let mut b = node("n1")
            .annotations(go_state(PLAIN, "config", "complete"))
            .annotation(&schema::status_annotation("sh"), "in_progress");
        if clock {
            b = b.annotation(&schema::health_gate_annotation("sh"), &since.to_string());
        }
        b.arc()
    };
    let run = |attempt: u32, outcome: Outcome| CheckRun {
        name: format!("check-{attempt}"),
        node: "n1".into(),
        since: since.to_string(),
        attempt,
        outcome,
    };
    let failed = |secs: i64| crate::plan::fixtures::failure(t(secs));
    let last = schema::MAX_JOB_ATTEMPT;
    // (case, clock stored, runs, attempt created, status, the condition's message has)
    let cases: Vec<(&str, bool, Vec<CheckRun>, Option<&str>, Status, &str)> = vec![
        (
            "clock not stored yet: nothing starts",
            false,
            vec![],
            None,
            Status::InProgress,
            "",
        ),
        (
            "clock stored: attempt 0",
            true,
            vec![],
            Some("0"),
            Status::InProgress,
            "",
        ),
        (
            "attempt 0 running",
            true,
            vec![run(0, Outcome::Running)],
            None,
            Status::InProgress,
            "",
        ),
        (
            "attempt 0 failed 5 s ago: waits",
            true,
            vec![run(0, failed(-5))],
            None,
            Status::InProgress,
            "",
        ),
        (
            "attempt 0 failed 5 s ago: the condition says when the next starts",
            true,
            vec![run(0, failed(-5))],
            None,
            Status::InProgress,
            "attempt 2 of 1000 is retried at",
        ),
        (
            "attempt 0 failed 11 s ago: attempt 1",
            true,
            vec![run(0, failed(-11))],
            Some("1"),
            Status::InProgress,
            "",
        ),
        (
            "attempt 1 complete: passed",
            true,
            vec![run(0, failed(-20)), run(1, Outcome::Complete { at: t(-1) })],
            None,
            Status::Complete,
            "",
        ),
        (
            "another gate's complete run does not count",
            true,
            vec![CheckRun {
                since: t(-9000).to_string(),
                ..run(0, Outcome::Complete { at: t(-8000) })
            }],
            Some("0"),
            Status::InProgress,
            "",
        ),
        (
            "the last attempt failed: the gate stopped, says so and how to restart it",
            true,
            vec![run(last, failed(-400))],
            None,
            Status::InProgress,
            "the gate stopped checking at",
        ),
    ];
    for (case, clock, runs, attempt, status, says) in cases {
        let mut w = World::new(sk.clone(), vec![finished(clock)]);
        w.checks.insert("n1".into(), runs);
        let plan = w.plan();
        assert_eq!(node_status(&plan, "n1"), Some(status), "{case}");
        let message = condition_message(&plan, schema::HEALTH_GATE_CONDITION);
        assert!(message.contains(says), "{case}: {message}");
        if says.contains("stopped") {
            let restart = format!("{}-", schema::health_gate_annotation("sh"));
            assert!(message.contains(&restart), "{case}: {message}");
            assert!(!message.contains("retried"), "{case}: {message}");
        }
        let created: Vec<&str> = plan
            .health_check_jobs
            .iter()
            .filter_map(|j| {
                j.metadata
                    .annotations
                    .as_ref()?
                    .get(schema::ATTEMPT_ANNOTATION)
            })
            .map(String::as_str)
            .collect();
        assert_eq!(created, attempt.into_iter().collect::<Vec<_>>(), "{case}");
    }
}

/// Matching firing alerts, or an unreachable source (by default), start no batch and say why;
/// `onUnreachable: Proceed` goes on; clear alerts start the batch.
#[test]
fn the_alert_gate_holds_new_batches() {
    use crate::plan::alerts::AlertReading;
    let nodes = vec![node("n0").arc(), node("n1").created(1).arc()];
    let world = |reading: AlertReading, proceed: bool| {
        let mut w = World::new(one_package(false).policy("p").build(), nodes.clone());
        let mut p = policy(
            json!([]),
            json!({"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}),
        );
        p.spec.alert_gate = Some(crate::crd::AlertGate {
            url: "http://prom:9090".into(),
            matchers: vec!["severity=\"critical\"".into()],
            on_unreachable: proceed.then_some(crate::crd::Unreachable::Proceed),
            ..Default::default()
        });
        w.policies = vec![Arc::new(p)];
        w.alerts = Some(reading);
        w
    };
    let critical: BTreeMap<String, String> = [("alertname", "GPUXid"), ("severity", "critical")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let warning: BTreeMap<String, String> = [("alertname", "Disk"), ("severity", "warning")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let down = || AlertReading::Unreachable("connection refused".into());
    // (case, reading, proceed, Jobs, condition reason)
    let cases = [
        (
            "a critical alert fires",
            AlertReading::Firing(vec![critical, warning.clone()]),
            false,
            0,
            Some(schema::ALERTS_FIRING_REASON),
        ),
        (
            "only a warning fires",
            AlertReading::Firing(vec![warning]),
            false,
            1,
            None,
        ),
        (
            "the source is down",
            down(),
            false,
            0,
            Some(schema::ALERT_SOURCE_UNREACHABLE_REASON),
        ),
        (
            "down, onUnreachable: Proceed",
            down(),
            true,
            1,
            Some(schema::ALERT_SOURCE_UNREACHABLE_REASON),
        ),
    ];
    for (case, reading, proceed, jobs, reason) in cases {
        let plan = world(reading, proceed).plan();
        assert_eq!(created(&plan).len(), jobs, "{case}");
        let status = plan.status.as_ref().expect("status");
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == schema::ALERT_GATE_CONDITION);
        assert_eq!(c.map(|c| c.reason.as_str()), reason, "{case}");
        if reason.is_some() {
            assert!(
                plan.events
                    .iter()
                    .any(|e| Some(e.reason.as_str()) == reason),
                "{case}"
            );
        }
        if jobs == 0 {
            assert!(
                plan.requeue_after <= Some(std::time::Duration::from_secs(10)),
                "{case}"
            );
        }
    }
}
