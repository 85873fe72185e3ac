//! The API server's own account of the campaign (issue 52): its audit log, under the policy in
//! `audit-policy.yaml` beside this file (Job creates at Request level, evictions and node writes
//! at Metadata). Read against the watches' history:
//!
//! - `audit-complete`: every Job the API server created in the campaign's namespace is in the
//!   history, so the other invariants judged every Job there was.
//! - `audit-writer`: only the operator's ServiceAccount created those Jobs.
//! - `audit-drain-cordoned`: every eviction the operator made was of a pod on a node that was
//!   cordoned when the API server took it.

use std::collections::BTreeSet;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::checker::Verdict;
use super::history::{Kind, Record, str_at};
use super::host::cordoned_at;

/// One audit event, the fields the checks read.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub t: Timestamp,
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i64,
}

/// Parses the audit log (one JSON event a line); lines that do not parse are skipped.
pub fn read(text: &str) -> Vec<Event> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| {
            let name = match str_at(&e, "/objectRef/name") {
                // A create names its object in the body, not the path.
                "" => str_at(&e, "/requestObject/metadata/name"),
                n => n,
            };
            Some(Event {
                t: str_at(&e, "/requestReceivedTimestamp").parse().ok()?,
                user: str_at(&e, "/user/username").to_string(),
                verb: str_at(&e, "/verb").to_string(),
                resource: str_at(&e, "/objectRef/resource").to_string(),
                subresource: str_at(&e, "/objectRef/subresource").to_string(),
                namespace: str_at(&e, "/objectRef/namespace").to_string(),
                name: name.to_string(),
                code: e.pointer("/responseStatus/code")?.as_i64()?,
            })
        })
        .collect()
}

/// A watch event reaches the harness a moment after the API server took the write.
const SLACK: SignedDuration = SignedDuration::from_secs(3);

/// Checks the invariants above. `ns`: the campaign's namespace; `operator`: the user name of
/// the operator's ServiceAccount.
pub fn check(v: &mut Verdict, history: &[Record], events: &[Event], ns: &str, operator: &str) {
    let jobs_seen: BTreeSet<&str> = history
        .iter()
        .filter(|r| r.kind == Kind::Job)
        .map(Record::name)
        .collect();
    let mut sorted: Vec<&Record> = history.iter().collect();
    sorted.sort_by_key(|r| r.t);
    let ok = |e: &&Event| (200..300).contains(&e.code) && e.namespace == ns;
    for e in events.iter().filter(ok) {
        v.audit_events += 1;
        if e.resource == "jobs" && e.verb == "create" {
            v.check(
                "audit-complete",
                jobs_seen.contains(e.name.as_str()),
                || {
                    format!(
                        "at {}: the API server created Job {} that no watch saw",
                        e.t, e.name
                    )
                },
            );
            v.check("audit-writer", e.user == operator, || {
                format!(
                    "at {}: Job {} created by {}, not the operator ({operator})",
                    e.t, e.name, e.user
                )
            });
        }
        if e.resource == "pods" && e.subresource == "eviction" && e.user == operator {
            let node = sorted
                .iter()
                .filter(|r| r.kind == Kind::Pod && r.name() == e.name)
                .map(|r| str_at(&r.obj, "/spec/nodeName"))
                .find(|n| !n.is_empty())
                .unwrap_or("");
            let cordoned =
                cordoned_at(&sorted, node, e.t) || cordoned_at(&sorted, node, e.t + SLACK);
            v.check("audit-drain-cordoned", cordoned, || {
                format!(
                    "at {}: the operator evicted pod {} from {} while it was schedulable",
                    e.t,
                    e.name,
                    if node.is_empty() {
                        "a node no watch saw"
                    } else {
                        node
                    }
                )
            });
        }
    }
}
