//! Keeps the per-node maps of `.status` within a byte budget.
//!
//! `nodeState`, `nodeStatus`, `nodeBootIds` and `nodePriority` grow with every targeted node,
//! and the API server stores an object only while it stays under etcd's request limit (1.5 MiB
//! by default; the stored object also carries `managedFields` naming every entry). Measured on
//! the test cluster, a Skyhook with four packages stops fitting between 2,600 and 3,600 nodes,
//! after which no status write lands at all. Node annotations hold every node's progress
//! (they are the authoritative copy, §2.9), so over the budget the status keeps the entries
//! that matter most and says that it does:
//!
//! 1. every entry of the nodes that are not complete, erroring first, then in progress, then
//!    the rest (by name within each);
//! 2. the small per-node record (`nodeStatus`, `nodeBootIds`, `nodePriority`) of complete nodes;
//! 3. the `nodeState` of complete nodes;
//!
//! until the next one does not fit. Step 2 comes before 3 because `nodeBootIds` is what the
//! reboot detection of `REAPPLY_ON_REBOOT` compares with.

use std::collections::BTreeSet;
use std::io;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;

use super::condition::set_condition;
use super::status::newly_true;
use crate::crd::SkyhookStatus;
use crate::schema::{self, Status};

/// What a trimmed status still lists, out of how many targeted nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trim {
    pub nodes: usize,
    /// Nodes whose `nodeStatus` (and boot id, priority) are listed.
    pub records: usize,
    /// Nodes whose `nodeState` is listed.
    pub states: usize,
}

/// Trims `s` to `budget` bytes of per-node entries (as JSON); `None` when everything fits.
pub fn fit(s: &mut SkyhookStatus, budget: usize) -> Option<Trim> {
    // (rank, node, record bytes, state bytes), each entry measured once.
    let mut nodes: Vec<(u8, &String, usize, usize)> = s
        .node_status
        .iter()
        .map(|(n, st)| {
            let record = entry(n, Some(st))
                + entry(n, s.node_boot_ids.get(n))
                + entry(n, s.node_priority.get(n));
            (rank(*st), n, record, entry(n, s.node_state.get(n)))
        })
        .collect();
    let targeted = nodes.len();
    if nodes.iter().map(|(_, _, r, st)| r + st).sum::<usize>() <= budget {
        return None;
    }
    nodes.sort_unstable();
    let (incomplete, complete) = nodes.split_at(nodes.partition_point(|n| n.0 < COMPLETE));
    // Entries are kept in order until the first that does not fit; none after it.
    let (mut used, mut full) = (0, false);
    let mut fits = |size: usize| {
        full = full || used + size > budget;
        used += size;
        !full
    };
    let mut records: BTreeSet<String> = BTreeSet::new();
    let mut states: BTreeSet<String> = BTreeSet::new();
    for (_, n, record, state) in incomplete {
        if !fits(record + state) {
            break;
        }
        records.insert(n.to_string());
        states.insert(n.to_string());
    }
    for (_, n, record, _) in complete {
        if !fits(*record) {
            break;
        }
        records.insert(n.to_string());
    }
    for (_, n, _, state) in complete {
        if !fits(*state) {
            break;
        }
        states.insert(n.to_string());
    }
    s.node_state.retain(|n, _| states.contains(n));
    s.node_status.retain(|n, _| records.contains(n));
    s.node_boot_ids.retain(|n, _| records.contains(n));
    s.node_priority.retain(|n, _| records.contains(n));
    Some(Trim {
        nodes: targeted,
        records: s.node_status.len(),
        states: s.node_state.len(),
    })
}

/// The rank of complete nodes: listed last.
const COMPLETE: u8 = 4;

/// Which nodes an SRE looks for first.
fn rank(s: Status) -> u8 {
    match s {
        Status::Erroring => 0,
        Status::InProgress => 1,
        Status::Blocked => 2,
        Status::Complete => COMPLETE,
        _ => 3,
    }
}

/// Bytes of `"node":value,` in the stored JSON; 0 when the map has no entry.
fn entry<T: Serialize>(node: &str, value: Option<&T>) -> usize {
    let Some(value) = value else {
        return 0;
    };
    let mut count = Count(0);
    // Writing to a counter cannot fail, and these types always serialise.
    let _ = serde_json::to_writer(&mut count, value);
    node.len() + 4 + count.0
}

struct Count(usize);

impl io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The `StatusTrimmed` condition: `True` while the maps are trimmed; once it has been `True`,
/// `False` when everything fits again. Skyhooks never trimmed do not carry it.
pub fn condition(
    list: &mut Vec<Condition>,
    trim: Option<Trim>,
    skyhook: &str,
    budget: usize,
    generation: i64,
    now: Timestamp,
) {
    let kind = schema::STATUS_TRIMMED_CONDITION;
    if trim.is_none() && !list.iter().any(|c| c.type_ == kind) {
        return;
    }
    let (reason, message) = match trim {
        Some(t) => (
            schema::STATUS_TRIMMED_REASON,
            schema::status_trimmed_message(skyhook, t.states, t.records, t.nodes, budget),
        ),
        None => (
            schema::STATUS_COMPLETE_REASON,
            "every targeted node is listed".to_string(),
        ),
    };
    set_condition(list, kind, trim.is_some(), reason, message, generation, now);
}

/// The status became trimmed in this pass (its Event is due): the condition's message.
pub fn newly_trimmed(prior: &SkyhookStatus, desired: &SkyhookStatus) -> Option<String> {
    newly_true(prior, desired, schema::STATUS_TRIMMED_CONDITION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::{self, node_state};
    use crate::schema::{NodeState, PackageStatus, Stage, State};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// Two packages at `st`, with an image as long as a real one (the sizes are what is tested).
    fn state(st: State) -> NodeState {
        node_state(["alpha", "beta"].map(|p| PackageStatus {
            image: "ghcr.io/example/pkg".into(),
            ..fixtures::entry(p, Stage::Apply, st)
        }))
    }

    /// `(node, status)` pairs, each node with two packages and a boot id.
    fn status_of(nodes: &[(&str, Status)]) -> SkyhookStatus {
        let mut s = SkyhookStatus::default();
        for (n, st) in nodes {
            let pkg = match st {
                Status::Complete => State::Complete,
                Status::Erroring => State::Erroring,
                _ => State::InProgress,
            };
            s.node_state.insert(n.to_string(), state(pkg));
            s.node_status.insert(n.to_string(), *st);
            s.node_boot_ids.insert(n.to_string(), format!("boot-{n}"));
        }
        s
    }

    fn names<V>(m: &std::collections::BTreeMap<String, V>) -> Vec<&str> {
        m.keys().map(String::as_str).collect()
    }

    #[test]
    fn entry_sizes_are_the_stored_json() {
        let s = status_of(&[("n1", Status::Complete), ("n22", Status::InProgress)]);
        let whole = serde_json::to_string(&s).expect("json");
        let maps: usize = ["n1", "n22"]
            .iter()
            .map(|n| {
                entry(n, s.node_state.get(*n))
                    + entry(n, s.node_status.get(*n))
                    + entry(n, s.node_boot_ids.get(*n))
            })
            .sum();
        // Each map adds `"key":{},` and its last entry has no comma.
        let rest = serde_json::to_string(&SkyhookStatus::default()).expect("json");
        let framing = ["nodeState", "nodeStatus", "nodeBootIds"]
            .iter()
            .map(|k| k.len() + 6 - 1)
            .sum::<usize>();
        assert_eq!(whole.len(), rest.len() + maps + framing);
    }

    #[test]
    fn a_status_within_the_budget_is_left_whole() {
        let mut s = status_of(&[("a", Status::Complete), ("b", Status::InProgress)]);
        let before = s.clone();
        assert_eq!(fit(&mut s, 10_000), None);
        assert_eq!(s, before);
    }

    #[test]
    fn over_the_budget_the_nodes_at_work_come_first() {
        use Status::*;
        let nodes = [
            ("a", Complete),
            ("b", Complete),
            ("c", InProgress),
            ("d", Erroring),
            ("e", Waiting),
            ("f", Complete),
        ];
        let full = status_of(&nodes);
        let record =
            |n: &str| entry(n, full.node_status.get(n)) + entry(n, full.node_boot_ids.get(n));
        let state = |n: &str| entry(n, full.node_state.get(n));
        let work: usize = ["c", "d", "e"].iter().map(|n| record(n) + state(n)).sum();
        let records: usize = ["a", "b", "f"].iter().map(|n| record(n)).sum();
        // (case, budget, nodeStatus kept, nodeState kept)
        let cases: [(&str, usize, &[&str], &[&str]); 5] = [
            (
                "only the erroring node",
                record("d") + state("d"),
                &["d"],
                &["d"],
            ),
            (
                "erroring, then in progress",
                record("d") + state("d") + record("c") + state("c") + 1,
                &["c", "d"],
                &["c", "d"],
            ),
            (
                "all work, records of some complete nodes",
                work + record("a") + record("b"),
                &["a", "b", "c", "d", "e"],
                &["c", "d", "e"],
            ),
            (
                "every record before any complete node's state",
                work + records + state("a"),
                &["a", "b", "c", "d", "e", "f"],
                &["a", "c", "d", "e"],
            ),
            ("nothing fits", 10, &[], &[]),
        ];
        for (case, budget, want_records, want_states) in cases {
            let mut s = full.clone();
            let trim = fit(&mut s, budget).expect(case);
            assert_eq!(names(&s.node_status), want_records, "case: {case}");
            assert_eq!(names(&s.node_boot_ids), want_records, "case: {case}");
            assert_eq!(names(&s.node_state), want_states, "case: {case}");
            assert_eq!(
                trim,
                Trim {
                    nodes: 6,
                    records: want_records.len(),
                    states: want_states.len()
                },
                "case: {case}"
            );
        }
    }

    #[test]
    fn priorities_go_with_their_node_record() {
        let mut s = status_of(&[("a", Status::Complete), ("b", Status::InProgress)]);
        s.node_priority
            .insert("a".into(), Time(Timestamp::UNIX_EPOCH));
        s.node_priority
            .insert("b".into(), Time(Timestamp::UNIX_EPOCH));
        let b = entry("b", s.node_status.get("b"))
            + entry("b", s.node_boot_ids.get("b"))
            + entry("b", s.node_priority.get("b"))
            + entry("b", s.node_state.get("b"));
        fit(&mut s, b).expect("trimmed");
        assert_eq!(names(&s.node_priority), ["b"]);
    }

    #[test]
    fn the_condition_appears_with_a_trim_and_clears_after_it() {
        let now = Timestamp::UNIX_EPOCH;
        let trim = Trim {
            nodes: 10,
            records: 8,
            states: 3,
        };
        let mut list = Vec::new();
        condition(&mut list, None, "sh", 100, 1, now);
        assert!(list.is_empty(), "never trimmed: no condition");
        condition(&mut list, Some(trim), "sh", 100, 1, now);
        assert_eq!(list[0].status, "True");
        assert!(list[0].message.contains("3 of 10"), "{}", list[0].message);
        let prior = SkyhookStatus::default();
        let desired = SkyhookStatus {
            conditions: list.clone(),
            ..SkyhookStatus::default()
        };
        assert!(newly_trimmed(&prior, &desired).is_some());
        assert_eq!(newly_trimmed(&desired, &desired), None);
        condition(&mut list, None, "sh", 100, 1, now);
        assert_eq!(list[0].status, "False");
    }
}
