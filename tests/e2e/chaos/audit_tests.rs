//! The audit checks can fail: a clean audit log passes, and each audit invariant has a planted
//! violation, an edited log, that it must name.

use serde_json::{Value, json};

use super::audit::{check, read};
use super::checker::Verdict;
use super::history::{Kind, Record};

const OP: &str = "system:serviceaccount:ns:skyhook-operator";

fn t(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + s).expect("time")
}

fn rec(s: i64, kind: Kind, obj: Value) -> Record {
    Record {
        t: t(s),
        kind,
        deleted: false,
        obj,
    }
}

fn history() -> Vec<Record> {
    vec![
        rec(
            1,
            Kind::Node,
            json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": false}}),
        ),
        rec(
            2,
            Kind::Pod,
            json!({"metadata": {"name": "guard"}, "spec": {"nodeName": "n1"}}),
        ),
        rec(5, Kind::Job, json!({"metadata": {"name": "job-a"}})),
        rec(
            10,
            Kind::Node,
            json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}}),
        ),
    ]
}

fn event(s: i64, user: &str, verb: &str, resource: &str, sub: &str, name: &str) -> String {
    let mut e = json!({"kind": "Event", "stage": "ResponseComplete", "verb": verb,
        "user": {"username": user},
        "objectRef": {"resource": resource, "namespace": "ns"},
        "responseStatus": {"code": 201},
        "requestReceivedTimestamp": t(s).to_string()});
    if sub.is_empty() {
        e["requestObject"] = json!({"metadata": {"name": name}});
    } else {
        e["objectRef"]["subresource"] = json!(sub);
        e["objectRef"]["name"] = json!(name);
    }
    e.to_string() + "\n"
}

fn log() -> String {
    [
        event(4, OP, "create", "jobs", "", "job-a"),
        event(11, OP, "create", "pods", "eviction", "guard"),
    ]
    .concat()
}

fn verdict(log: &str) -> Verdict {
    let mut v = Verdict::default();
    check(&mut v, &history(), &read(log), "ns", OP);
    v
}

#[test]
fn a_clean_audit_log_passes_every_audit_invariant() {
    let v = verdict(&log());
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    for inv in ["audit-complete", "audit-writer", "audit-drain-cordoned"] {
        assert!(
            v.checks.get(inv).copied().unwrap_or(0) > 0,
            "{inv} not checked"
        );
    }
    assert_eq!(v.audit_events, 2);
}

#[test]
fn a_job_no_watch_saw_is_named() {
    let v = verdict(&(log() + &event(6, OP, "create", "jobs", "", "job-b")));
    assert_eq!(v.named(), ["audit-complete"], "{:#?}", v.violations);
}

#[test]
fn a_job_created_by_someone_else_is_named() {
    let v = verdict(&log().replacen(OP, "admin", 1));
    assert_eq!(v.named(), ["audit-writer"], "{:#?}", v.violations);
}

#[test]
fn an_eviction_from_a_schedulable_node_is_named() {
    let early = event(3, OP, "create", "pods", "eviction", "guard");
    let v = verdict(&(log() + &early));
    assert_eq!(v.named(), ["audit-drain-cordoned"], "{:#?}", v.violations);
    // A refused write and another namespace are not the campaign's.
    let refused = early.replace("201", "429");
    let elsewhere = early.replace("\"ns\"", "\"other\"");
    let v = verdict(&(log() + &refused + &elsewhere));
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
}
