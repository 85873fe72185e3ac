//! A stalled node (issue 51, item 3; upstream #382): its stage Job has run past
//! STALLED_NODE_SLOT_RELEASE and three times as long as the same stage of the same package
//! version took on the nodes that finished it. Such a node is the node's problem, not the
//! package's: it gives its batch slot back so the rest of the rollout goes on, and resumes at a
//! batch choice once the Job ends. With no peer that finished the stage there is no evidence
//! against the node (every node may be that slow, or the package may hang everywhere): the
//! batch holds, so a package that hangs never spreads past the budget.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::jobs::{JobView, Outcome};
use crate::schema::Stage;

/// How many times the peers' median a Job must run before its node stalls.
pub const PEER_FACTOR: u32 = 3;

/// One stalled node's Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub job: String,
    pub package: String,
    pub version: String,
    pub stage: Stage,
    /// The Job still runs (else it ended late, and the node waits for a batch choice).
    pub running: bool,
    /// The median run of the same stage on the nodes that finished it.
    pub peers: Duration,
    pub peer_count: usize,
}

impl Stall {
    /// For the `NodeBlocked` condition. No age or peer figure in it: a pass must not rewrite
    /// the status for them.
    pub fn message(&self, release: Duration) -> String {
        let ran = if self.running { "has run" } else { "ran" };
        format!(
            "stalled: the {} Job {} of {} {} {ran} past STALLED_NODE_SLOT_RELEASE ({}) and {PEER_FACTOR} times as long as on the nodes that finished it; its batch slot given back",
            self.stage,
            self.job,
            self.package,
            self.version,
            super::health::human(release),
        )
    }
}

type Key<'a> = (&'a str, &'a str, Stage);

fn ran(j: &JobView, now: Timestamp) -> Option<(Duration, bool)> {
    let start = j.created?;
    let (end, running) = match &j.outcome {
        Outcome::Running => (now, true),
        Outcome::Complete { at } => (*at, false),
        Outcome::Failed { .. } => return None,
    };
    Some((end.duration_since(start).unsigned_abs(), running))
}

/// The stalled nodes among `by_node` (one object's Jobs). `release` zero: none.
pub fn stalled(
    by_node: &BTreeMap<&str, Vec<&JobView>>,
    now: Timestamp,
    release: Duration,
) -> BTreeMap<String, Stall> {
    let mut out = BTreeMap::new();
    if release.is_zero() {
        return out;
    }
    // Each node's Job that holds it: its newest running one, else its newest. A running Job is
    // never history, even with a newer Job of another package beside it (the fault campaign
    // found a node whose hung Job of one package sat under a newer, finished Job of another,
    // and the node held its whole batch).
    let newest: Vec<(&str, &JobView)> = by_node
        .iter()
        .filter_map(|(n, jobs)| {
            let live = jobs.iter().filter(|j| !j.deleting);
            let running = live
                .clone()
                .filter(|j| matches!(j.outcome, Outcome::Running))
                .max_by_key(|j| j.created);
            let j = running.or_else(|| live.max_by_key(|j| j.created))?;
            Some((*n, *j))
        })
        .collect();
    let suspects: Vec<(&str, &JobView, bool)> = newest
        .iter()
        .filter_map(|(n, j)| {
            let (d, running) = ran(j, now)?;
            (d >= release).then_some((*n, *j, running))
        })
        .collect();
    if suspects.is_empty() {
        return out;
    }
    let mut finished: BTreeMap<Key, Vec<(&str, Duration)>> = BTreeMap::new();
    for (node, jobs) in by_node {
        for j in jobs {
            if let (Some((d, false)), Outcome::Complete { .. }) = (ran(j, now), &j.outcome) {
                let key = (&*j.package, &*j.version, j.stage);
                finished.entry(key).or_default().push((node, d));
            }
        }
    }
    for (node, j, running) in suspects {
        let key = (&*j.package, &*j.version, j.stage);
        let mut peers: Vec<Duration> = finished
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|(n, _)| *n != node)
            .map(|(_, d)| *d)
            .collect();
        if peers.is_empty() {
            continue;
        }
        peers.sort();
        let median = peers[peers.len() / 2];
        let (own, _) = ran(j, now).unwrap_or_default();
        if own < median.saturating_mul(PEER_FACTOR) {
            continue;
        }
        out.insert(
            node.to_string(),
            Stall {
                job: j.name.to_string(),
                package: j.package.to_string(),
                version: j.version.to_string(),
                stage: j.stage,
                running,
                peers: median,
                peer_count: peers.len(),
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::fixtures::{job, package, t};

    fn view(node: &str, stage: Stage, created: i64, outcome: Outcome) -> JobView {
        let mut j = job(&package("tool").build(), stage).on(node).build();
        j.created = Some(t(created));
        j.outcome = outcome;
        j
    }

    fn view_of(pkg: &str, node: &str, stage: Stage, created: i64, outcome: Outcome) -> JobView {
        let mut j = job(&package(pkg).build(), stage).on(node).build();
        j.created = Some(t(created));
        j.outcome = outcome;
        j
    }

    #[test]
    fn a_hung_job_under_a_newer_job_of_another_package_stalls_its_node() {
        // Found by the fault campaign (seed 2): bravo's apply hung on a real node whose pod
        // sandbox was lost, and a later upgrade of alpha finished beside it; the node held its
        // batch for good.
        let jobs = vec![
            view_of("bravo", "slow", Stage::Apply, 0, Outcome::Running),
            view_of("alpha", "slow", Stage::Upgrade, 10, done(12)),
            view_of("alpha", "slow", Stage::Config, 12, done(14)),
            view_of("bravo", "a", Stage::Apply, 0, done(4)),
            view_of("bravo", "b", Stage::Apply, 0, done(5)),
        ];
        let s = run(&jobs, 60, 15);
        let stall = s.get("slow").expect("stalled");
        assert!(stall.running);
        assert_eq!((&*stall.package, stall.stage), ("bravo", Stage::Apply));
    }

    fn done(at: i64) -> Outcome {
        Outcome::Complete { at: t(at) }
    }

    fn run(jobs: &[JobView], now: i64, release: u64) -> BTreeMap<String, Stall> {
        let mut by_node: BTreeMap<&str, Vec<&JobView>> = BTreeMap::new();
        for j in jobs {
            by_node.entry(&j.node).or_default().push(j);
        }
        stalled(&by_node, t(now), Duration::from_secs(release))
    }

    #[test]
    fn a_job_far_slower_than_its_finished_peers_stalls_its_node() {
        let jobs = vec![
            view("slow", Stage::Apply, 0, Outcome::Running),
            view("a", Stage::Apply, 0, done(4)),
            view("b", Stage::Apply, 0, done(5)),
        ];
        let s = run(&jobs, 20, 15);
        let stall = s.get("slow").expect("stalled");
        assert!(stall.running);
        assert_eq!((stall.peers, stall.peer_count), (Duration::from_secs(5), 2));
        assert_eq!(s.len(), 1, "{s:?}");
        let msg = stall.message(Duration::from_secs(15));
        assert!(msg.contains("apply Job") && msg.contains("15s"), "{msg}");

        // Ended late: still stalled (waits for a batch choice), not running.
        let mut jobs = jobs;
        jobs[0].outcome = done(30);
        assert!(!run(&jobs, 40, 15)["slow"].running);
    }

    #[test]
    fn no_stall_without_evidence_against_the_node() {
        // (case, jobs, now, release)
        let cases = vec![
            (
                "under the release wait",
                vec![
                    view("slow", Stage::Apply, 0, Outcome::Running),
                    view("a", Stage::Apply, 0, done(1)),
                ],
                10,
                15,
            ),
            (
                "no peer finished the stage: the package may hang everywhere",
                vec![
                    view("slow", Stage::Apply, 0, Outcome::Running),
                    view("a", Stage::Apply, 0, Outcome::Running),
                    view("a", Stage::Config, 0, done(1)),
                ],
                60,
                15,
            ),
            (
                "the peers were as slow: a slow stage, not a bad node",
                vec![
                    view("slow", Stage::Apply, 0, Outcome::Running),
                    view("a", Stage::Apply, 0, done(50)),
                ],
                60,
                15,
            ),
            (
                "the setting is zero",
                vec![
                    view("slow", Stage::Apply, 0, Outcome::Running),
                    view("a", Stage::Apply, 0, done(1)),
                ],
                60,
                0,
            ),
            (
                "a failed Job is the retry's business",
                vec![
                    view(
                        "slow",
                        Stage::Apply,
                        0,
                        Outcome::Failed {
                            at: t(50),
                            reason: "DeadlineExceeded".into(),
                            message: String::new(),
                        },
                    ),
                    view("a", Stage::Apply, 0, done(1)),
                ],
                60,
                15,
            ),
            (
                "an older slow Job is history: the node moved on",
                vec![
                    view("slow", Stage::Apply, 0, done(40)),
                    view("slow", Stage::Config, 40, Outcome::Running),
                    view("a", Stage::Apply, 0, done(1)),
                ],
                45,
                15,
            ),
        ];
        for (case, jobs, now, release) in cases {
            assert!(run(&jobs, now, release).is_empty(), "{case}");
        }
    }
}
