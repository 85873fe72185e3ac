//! The checker can fail (issue 52, item 3): a clean history passes, and each invariant has a
//! planted violation, an edited history, that it must name.

use serde_json::{Value, json};

use super::checker::{Rule, Verdict, check};
use super::history::{Kind, Record};

struct History {
    records: Vec<Record>,
    second: i64,
}

impl History {
    fn new() -> Self {
        History {
            records: Vec::new(),
            second: 0,
        }
    }

    fn push(&mut self, kind: Kind, deleted: bool, obj: Value) -> &mut Self {
        self.second += 1;
        self.records.push(Record {
            t: jiff::Timestamp::from_second(1_800_000_000 + self.second).expect("time"),
            kind,
            deleted,
            obj,
        });
        self
    }

    fn node(&mut self, name: &str, cordoned: bool, annotations: Value) -> &mut Self {
        self.push(
            Kind::Node,
            false,
            json!({"metadata": {"name": name, "uid": name, "labels": {"pool": "a"},
                "annotations": annotations}, "spec": {"unschedulable": cordoned}}),
        )
    }

    fn object(&mut self, status: &str, nodes: Value) -> &mut Self {
        self.push(
            Kind::Object,
            false,
            json!({"metadata": {"name": "sk", "uid": "sk"},
                "spec": {"nodeSelectors": {"matchLabels": {"pool": "a"}},
                    "packages": {"tool": {"version": "1", "interrupt": {"type": "reboot"}}}},
                "status": {"status": status, "nodeStatus": nodes}}),
        )
    }

    fn meta(uid: &str, node: &str, stage: &str) -> Value {
        json!({"name": format!("{uid}-{stage}"), "uid": uid,
            "labels": {"skyhook.nvidia.com/name": "sk", "skyhook.nvidia.com/node": node,
                "skyhook.nvidia.com/stage": stage},
            "annotations": {"skyhook.nvidia.com/package":
                "{\"name\":\"tool\",\"version\":\"1\",\"skyhook\":\"sk\",\"stage\":\"x\"}",
                "skyhook.nvidia.com/spec-hash": "h1"}})
    }

    /// A Job of `stage` on `node`: `None` unfinished, `Some(true)` complete, `Some(false)` failed.
    fn job(&mut self, uid: &str, node: &str, stage: &str, done: Option<bool>) -> &mut Self {
        let conditions = match done {
            Some(true) => json!([{"type": "Complete", "status": "True"}]),
            Some(false) => json!([{"type": "Failed", "status": "True"}]),
            None => json!([]),
        };
        self.push(
            Kind::Job,
            false,
            json!({"metadata": Self::meta(uid, node, stage), "status": {"conditions": conditions}}),
        )
    }

    fn pod(&mut self, uid: &str, node: &str, stage: &str, phase: &str) -> &mut Self {
        let uid = format!("pod-{uid}");
        self.push(
            Kind::Pod,
            false,
            json!({"metadata": Self::meta(&uid, node, stage), "status": {"phase": phase}}),
        )
    }

    /// One stage run start to end: Job, pod running, pod done, Job complete.
    fn stage(&mut self, uid: &str, node: &str, stage: &str) -> &mut Self {
        self.job(uid, node, stage, None)
            .pod(uid, node, stage, "Running")
            .pod(uid, node, stage, "Succeeded")
            .job(uid, node, stage, Some(true))
    }

    /// A node's whole rollout of `tool` (with its reboot), cordoned around the interrupt.
    fn rollout(&mut self, node: &str) -> &mut Self {
        self.node(node, false, json!({}))
            .stage(&format!("{node}-a"), node, "apply")
            .stage(&format!("{node}-c"), node, "config")
            .node(node, true, json!({"skyhook.nvidia.com/cordon_sk": "true"}))
            .stage(&format!("{node}-i"), node, "interrupt")
            .stage(&format!("{node}-p"), node, "post-interrupt")
            .node(
                node,
                false,
                json!({"skyhook.nvidia.com/status_sk": "complete"}),
            )
    }

    fn verdict(&self, limit: usize) -> Verdict {
        let rules = [Rule {
            object: "sk".into(),
            limit,
        }];
        check(&self.records, &rules)
    }
}

fn clean() -> History {
    let mut h = History::new();
    h.object("in_progress", json!({}))
        .rollout("n1")
        .rollout("n2")
        .object("complete", json!({"n1": "complete", "n2": "complete"}));
    h
}

#[test]
fn a_clean_history_passes_every_invariant() {
    let v = clean().verdict(1);
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    for inv in [
        "no-duplicate-jobs",
        "budget",
        "interrupt-cordoned",
        "once",
        "settled",
    ] {
        assert!(
            v.checks.get(inv).copied().unwrap_or(0) > 0,
            "{inv} never checked"
        );
    }
    assert_eq!((v.stages_run, v.interrupts), (8, 2));
}

#[test]
fn a_stage_run_twice_is_caught() {
    let mut h = clean();
    h.stage("again", "n1", "apply");
    let v = h.verdict(1);
    assert_eq!(v.named(), ["once"], "{:#?}", v.violations);
    assert!(v.violations[0].evidence.contains("without a failure"));
}

#[test]
fn an_uninstall_again_after_a_reinstall_is_allowed_and_twice_in_a_row_is_caught() {
    // Removed, installed again, removed again (seed 2's spec edits): two uninstall runs of one
    // package on one node, each after the package was installed.
    let mut h = clean();
    h.stage("u1", "n1", "uninstall")
        .stage("again-a", "n1", "apply")
        .stage("again-c", "n1", "config")
        .stage("u2", "n1", "uninstall");
    let v = h.verdict(1);
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    // With no install between, the second uninstall is a stage run twice.
    let mut h = clean();
    h.stage("u1", "n1", "uninstall")
        .stage("u2", "n1", "uninstall");
    let v = h.verdict(1);
    assert_eq!(v.named(), ["once"], "{:#?}", v.violations);
    assert!(
        v.violations[0].evidence.contains("u1-uninstall"),
        "{:#?}",
        v.violations
    );
}

#[test]
fn a_retry_after_a_failure_is_allowed() {
    let mut h = History::new();
    h.object("in_progress", json!({}))
        .node("n1", false, json!({}))
        .job("first", "n1", "apply", None)
        .job("first", "n1", "apply", Some(false))
        .rollout("n1")
        .rollout("n2")
        .object("complete", json!({"n1": "complete", "n2": "complete"}));
    let v = h.verdict(1);
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
}

#[test]
fn an_interrupt_on_a_schedulable_node_is_caught() {
    let mut h = History::new();
    h.object("in_progress", json!({}))
        .node("n1", false, json!({}))
        .stage("a", "n1", "apply")
        .stage("c", "n1", "config")
        .stage("i", "n1", "interrupt");
    let v = h.verdict(1);
    assert!(
        v.violations
            .iter()
            .any(|x| x.invariant == "interrupt-cordoned" && x.evidence.contains("schedulable")),
        "{:#?}",
        v.violations
    );
}

#[test]
fn a_stage_running_during_an_interrupt_is_caught() {
    let mut h = History::new();
    h.object("in_progress", json!({}))
        .node("n1", true, json!({"skyhook.nvidia.com/cordon_sk": "true"}))
        .job("i", "n1", "interrupt", None)
        .pod("i", "n1", "interrupt", "Running")
        .job("c", "n1", "config", None)
        .pod("c", "n1", "config", "Running");
    let v = h.verdict(1);
    assert!(
        v.violations
            .iter()
            .any(|x| x.invariant == "interrupt-cordoned" && x.evidence.contains("during interrupt")),
        "{:#?}",
        v.violations
    );
}

#[test]
fn two_unfinished_jobs_for_one_run_are_caught() {
    let mut h = History::new();
    h.object("in_progress", json!({}))
        .node("n1", false, json!({}))
        .job("one", "n1", "apply", None)
        .job("two", "n1", "apply", None);
    let v = h.verdict(1);
    assert!(
        v.named().contains(&"no-duplicate-jobs"),
        "{:#?}",
        v.violations
    );
}

#[test]
fn more_nodes_at_work_than_the_budget_is_caught() {
    let mut h = History::new();
    h.object("in_progress", json!({}))
        .node("n1", false, json!({}))
        .node("n2", false, json!({}))
        .job("a1", "n1", "apply", None)
        .job("a2", "n2", "apply", None);
    let v = h.verdict(1);
    let budget: Vec<_> = v
        .violations
        .iter()
        .filter(|x| x.invariant == "budget")
        .collect();
    assert_eq!(
        budget.len(),
        1,
        "one excursion, one violation: {:#?}",
        v.violations
    );
    assert!(budget[0].evidence.contains("2 nodes at work (n1, n2)"));
    assert!(
        h.verdict(2)
            .violations
            .iter()
            .all(|x| x.invariant != "budget")
    );
}

#[test]
fn anything_stranded_at_the_end_is_caught() {
    // (case, the last node record, the words)
    let cases = [
        (
            "cordon",
            (true, json!({"skyhook.nvidia.com/status_sk": "complete"})),
            "ends cordoned",
        ),
        (
            "bookkeeping key",
            (
                false,
                json!({"skyhook.nvidia.com/status_sk": "complete",
                "skyhook.nvidia.com/drainStart_sk": "2026-12-07T00:00:00Z"}),
            ),
            "bookkeeping keys",
        ),
        (
            "node and status disagree",
            (
                false,
                json!({"skyhook.nvidia.com/status_sk": "in_progress"}),
            ),
            "ends \"in_progress\"",
        ),
    ];
    for (case, (cordoned, annotations), words) in cases {
        let mut h = clean();
        h.node("n2", cordoned, annotations);
        let v = h.verdict(1);
        assert!(
            v.violations
                .iter()
                .any(|x| x.invariant == "settled" && x.evidence.contains(words)),
            "{case}: {:#?}",
            v.violations
        );
    }
    // A stage that never finished on a node the object selects.
    let mut h = History::new();
    h.object("in_progress", json!({}))
        .rollout("n1")
        .object("complete", json!({"n1": "complete"}));
    h.records
        .retain(|r| !r.name().starts_with("pod-n1-p") && !r.name().starts_with("n1-p"));
    let v = h.verdict(1);
    assert!(
        v.violations
            .iter()
            .any(|x| x.evidence.contains("no finished post-interrupt Job")),
        "{:#?}",
        v.violations
    );
}
