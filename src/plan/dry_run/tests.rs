//! The dry run on hand-made worlds: its first pass is the planner's, and the whole rollout
//! ends as the operator's would.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;

use super::*;
use crate::crd::{Package, Skyhook};
use crate::jobs::Outcome;
use crate::plan::Elsewhere;
use crate::plan::fixtures::{config, entry_of, job, node, node_state, now, package, skyhook, t};
use crate::schema::{self, Api, Stage, State};

fn snapshot(sk: Skyhook, nodes: Vec<Node>) -> Snapshot {
    Snapshot {
        api: Api::Skyhook,
        status: sk.status.clone(),
        skyhooks: vec![Arc::new(sk.clone())],
        skyhook: sk,
        policies: Vec::new(),
        nodes,
        jobs: Vec::new(),
        history: Vec::new(),
        configmaps: Vec::new(),
        pods: BTreeMap::new(),
        budgets: Vec::new(),
        elsewhere: Elsewhere::default(),
        namespace: "skyhook".into(),
        config: config(),
        operator_version: "test".into(),
        now: now(),
    }
}

fn nodes(n: usize) -> Vec<Node> {
    (1..=n)
        .map(|i| {
            node(&format!("n{i}"))
                .created(i as i64)
                .boot(&format!("boot-n{i}"))
                .raw()
        })
        .collect()
}

fn driver(version: &str) -> Package {
    package("driver").version(version).reboot().build()
}

/// `n` nodes where `p` is complete.
fn done_nodes(n: usize, p: &Package) -> Vec<Node> {
    let state = node_state([entry_of(p, Stage::PostInterrupt, State::Complete)]).to_annotation();
    (1..=n)
        .map(|i| {
            node(&format!("n{i}"))
                .created(i as i64)
                .annotation(&schema::node_state_annotation("sh"), &state)
                .raw()
        })
        .collect()
}

fn created(plan: &Plan) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = plan
        .create_jobs
        .iter()
        .map(|j| (j.view.node.to_string(), j.view.stage.as_str().to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn the_first_jobs_are_those_of_the_planners_own_passes() {
    let sk = skyhook("sh")
        .live()
        .package(driver("1.0.0"))
        .set("interruptionBudget", json!({"count": 2}))
        .build();
    let snap = snapshot(sk, nodes(3));
    let rollout = simulate(&snap, Limits::default());
    // The planner run by hand, pass after pass, on the same copy: the first Jobs it creates.
    let durations = history::Durations::default();
    let mut sim = Sim::new(&snap);
    let mut now = snap.now;
    let direct = loop {
        let plan = crate::plan::plan(&inputs(&snap, &sim, now));
        if !plan.create_jobs.is_empty() {
            break created(&plan);
        }
        assert!(
            sim.apply(plan, now, &durations),
            "the planner waits before any Job"
        );
        now += NEXT_PASS;
    };
    let mut jobs: Vec<(String, String)> = rollout
        .first_pass
        .jobs
        .iter()
        .map(|j| (j.node.clone(), j.stage.clone()))
        .collect();
    jobs.sort();
    assert_eq!(jobs, direct);
    assert_eq!(jobs.len(), 2, "a budget of two starts two nodes: {jobs:?}");
}

#[test]
fn a_new_reboot_package_runs_everywhere_one_batch_at_a_time() {
    let sk = skyhook("sh")
        .live()
        .package(driver("1.0.0"))
        .set("interruptionBudget", json!({"count": 1}))
        .build();
    let r = simulate(&snapshot(sk, nodes(3)), Limits::default());
    assert_eq!(r.end, End::Complete, "{r:#?}");
    assert_eq!(r.selected, ["n1", "n2", "n3"]);
    assert_eq!(r.nodes.len(), 3);
    for n in &r.nodes {
        let p = &n.packages[0];
        assert_eq!(p.reason, Reason::New, "{n:?}");
        for stage in ["apply", "interrupt", "post-interrupt"] {
            assert!(p.stages.iter().any(|s| s == stage), "{stage} on {n:?}");
        }
        let i = n.interrupt.as_ref().expect("an interrupt");
        assert!(i.cordon, "{n:?}");
        assert_eq!(i.kinds, ["reboot (driver)"]);
    }
    // One node at a time: each starts after the one before it ended.
    for w in r.nodes.windows(2) {
        assert!(w[1].start_s >= w[0].end_s, "{:?} then {:?}", w[0], w[1]);
    }
    assert_eq!(r.batches.len(), 3, "{:?}", r.batches);
    assert_eq!(r.first_pass.jobs.len(), 1);
}

#[test]
fn a_version_bump_a_removal_and_nothing_at_all_are_named() {
    let old = driver("1.0.0");
    // Nothing changes.
    let sk = skyhook("sh").live().package(old.clone()).build();
    let r = simulate(&snapshot(sk, done_nodes(2, &old)), Limits::default());
    assert!(r.is_noop(), "{r:#?}");
    assert_eq!(r.end, End::Complete);
    // A newer version.
    let sk = skyhook("sh").live().package(driver("1.1.0")).build();
    let r = simulate(&snapshot(sk, done_nodes(2, &old)), Limits::default());
    assert_eq!(r.end, End::Complete, "{r:#?}");
    let reasons: Vec<&Reason> = r.nodes.iter().map(|n| &n.packages[0].reason).collect();
    let bump = Reason::VersionChange {
        from: "1.0.0".into(),
        to: "1.1.0".into(),
    };
    assert_eq!(reasons, [&bump, &bump]);
    // The package leaves the spec.
    let sk = skyhook("sh")
        .live()
        .package(package("tuned").build())
        .build();
    let r = simulate(&snapshot(sk, done_nodes(1, &old)), Limits::default());
    let driver_run = r.nodes[0]
        .packages
        .iter()
        .find(|p| p.package == "driver")
        .expect("driver is uninstalled");
    assert_eq!(driver_run.reason, Reason::Uninstall);
    assert_eq!(driver_run.stages[0], "uninstall");
}

#[test]
fn the_estimate_comes_from_finished_jobs_and_says_what_has_none() {
    let p = driver("1.0.0");
    let sk = skyhook("sh").live().package(p.clone()).build();
    let mut snap = snapshot(sk, nodes(1));
    let mut apply = job(&p, Stage::Apply).on("old").build();
    apply.created = Some(t(0));
    apply.outcome = Outcome::Complete { at: t(600) };
    snap.history = vec![Arc::new(apply)];
    let r = simulate(&snap, Limits::default());
    assert_eq!(r.end, End::Complete);
    assert!(r.estimate.seconds >= 600, "{:?}", r.estimate);
    assert!(r.estimate.seconds < 700, "{:?}", r.estimate);
    assert_eq!(r.estimate.from_jobs, 1);
    assert!(
        r.estimate
            .without_history
            .contains(&"driver interrupt".to_string()),
        "{:?}",
        r.estimate
    );
    assert!(
        !r.estimate
            .without_history
            .contains(&"driver apply".to_string())
    );
}

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "web", "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "u", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }))
    .expect("pod")
}

fn budget(allowed: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "web-pdb", "namespace": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 1},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
            "expectedPods": 1},
    }))
    .expect("pdb")
}

#[test]
fn the_drain_names_each_pod_and_the_budget_that_refuses_it_now() {
    let sk = skyhook("sh").live().package(driver("1.0.0")).build();
    let mut snap = snapshot(sk, nodes(1));
    snap.pods = BTreeMap::from([(
        "n1".to_string(),
        vec![
            pod("web-1", json!({"app": "web"})),
            pod("db-1", json!({"app": "db"})),
        ],
    )]);
    snap.budgets = vec![budget(0)];
    let r = simulate(&snap, Limits::default());
    assert_eq!(r.end, End::Complete, "{r:#?}");
    let i = r.nodes[0].interrupt.as_ref().expect("an interrupt");
    let mut evicted: Vec<(&str, Option<&str>)> = i
        .evictions
        .iter()
        .map(|e| (e.pod.as_str(), e.refused_by.as_deref()))
        .collect();
    evicted.sort();
    assert_eq!(
        evicted,
        [("web/db-1", None), ("web/web-1", Some("web-pdb"))]
    );
    // A budget that allows one more disruption refuses nothing.
    assert_eq!(
        budgets::refusing(&[budget(1)], &pod("web-1", json!({"app": "web"}))),
        None
    );
}

#[test]
fn a_paused_object_waits_and_says_why() {
    let sk = skyhook("sh")
        .live()
        .package(driver("1.0.0"))
        .annotations(json!({schema::PAUSE_ANNOTATION: "true"}))
        .build();
    let r = simulate(&snapshot(sk, nodes(2)), Limits::default());
    assert!(r.is_noop(), "{r:#?}");
    assert!(matches!(r.end, End::Waiting { .. }), "{:?}", r.end);
}
