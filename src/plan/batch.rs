//! The batch of one compartment (§6.4): nodes already at work keep going; when none is, the
//! finished batch is evaluated and the next `size` eligible nodes start, fresh nodes before
//! ones that failed, unless the failure threshold stopped the compartment.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;

use super::compartments::Compartment;
use super::facts::NodeFacts;
use super::stage::NodeOutcome;
use super::strategy::{self, Finished};
use crate::crd::BatchState;
use crate::schema::State;

/// What a look at one node without starting anything says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub name: String,
    /// Work of this Skyhook runs on the node; or, unless the node is ignored or untolerated,
    /// work is pending there or it holds our cordon.
    pub busy: bool,
    /// Complete at every package with nothing drifted.
    pub settled: bool,
    pub erroring: bool,
    /// Neither blocked nor gated.
    pub eligible: bool,
    /// The kubelet says the node is not Ready, or (with a health gate) its selected pods or node
    /// condition fail: a node of a soaking batch in this state fails the batch.
    pub unhealthy: bool,
    /// Gave its batch slot back while waiting for protected pods, which are gone now: it is
    /// picked first at the next batch choice, or for a slot a released node left free.
    pub resuming: bool,
    /// Not busy for its own fault (protected pods past their wait, a stalled Job, refused
    /// writes): the slot it held in the batch at work may be refilled.
    pub released: bool,
}

impl Seen {
    pub fn of(f: &NodeFacts, o: &NodeOutcome, settled: bool) -> Self {
        Seen {
            name: f.name.clone(),
            // A node taken out of the rollout (ignored, or a taint no longer tolerated) keeps
            // its state but gives its slot back, so the rest of its batch is not stalled; it
            // resumes where it stopped once it is eligible again (upstream #586, delta D48).
            busy: o.active
                || (f.block.is_none() && (f.holds_cordon || o.any_state(State::InProgress))),
            settled,
            erroring: o.any_state(State::Erroring),
            eligible: f.eligible(),
            unhealthy: f.node.not_ready,
            resuming: false,
            released: false,
        }
    }

    /// As the wait for protected pods sees the node (issue 51, upstream #543): within
    /// `release` of its start the node holds its slot, cordoned or not; past it the node gives
    /// the slot back, is no candidate while the pods run, and resumes first once they are gone.
    pub fn protected(
        mut self,
        f: &NodeFacts,
        active: bool,
        now: Timestamp,
        release: Duration,
    ) -> Self {
        let Some(since) = f.host.protected_since else {
            return self;
        };
        if f.block.is_some() {
            return self;
        }
        let waited = now.duration_since(since).unsigned_abs();
        if waited < release {
            self.busy = true;
            return self;
        }
        self.busy = active;
        self.released = !active;
        let running = f
            .host
            .pods
            .is_none_or(|pods| !super::drain::protected_pods(pods).is_empty());
        if running {
            self.eligible = false;
        } else {
            self.resuming = true;
        }
        self
    }
}

impl Seen {
    /// As a stalled node (issue 51, item 3): while its slow Job runs it gives its slot back and
    /// is no candidate; once the Job has ended it resumes first at the next batch choice, and
    /// not before (the budget holds). A node holding our cordon keeps its slot: the budget
    /// counts nodes out of service.
    pub fn stalled(mut self, f: &NodeFacts, stall: Option<&super::stall::Stall>) -> Self {
        let Some(stall) = stall else { return self };
        if f.block.is_some() || f.holds_cordon {
            return self;
        }
        self.busy = false;
        self.released = true;
        if stall.running {
            self.eligible = false;
        } else {
            self.resuming = true;
        }
        self
    }

    /// As a node whose drain ran past `drainConfig.timeout` (issue 51, item 3): it reads
    /// `erroring` and stays cordoned, as upstream's, but gives its batch slot back, so its batch
    /// is judged and the next may start. Once the node is drained it resumes first at the next
    /// batch choice, where its interrupt runs within the budget.
    pub fn drain_timed_out(mut self, f: &NodeFacts, active: bool, now: Timestamp) -> Self {
        let (Some(start), Some(limit)) = (f.host.drain_started, f.host.drain_timeout) else {
            return self;
        };
        if f.block.is_some() || now.duration_since(start).unsigned_abs() < limit {
            return self;
        }
        self.busy = active;
        self.erroring = true;
        let drained = matches!(
            super::drain::readiness(true, f.host.pods, false),
            super::drain::Readiness::Ready
        );
        if drained {
            self.resuming = true;
        } else {
            self.eligible = false;
        }
        self
    }

    /// As a node whose patches are refused for good: a Job it runs, or our cordon it holds,
    /// still counts against the budget (`out_of_service`), but it starts nothing and holds no
    /// slot for work it cannot record.
    pub fn refused(mut self, out_of_service: bool, refused: bool) -> Self {
        if refused {
            self.busy = out_of_service;
            self.released = !out_of_service;
            self.eligible = false;
        }
        self
    }

    /// As the health gate sees the node: waiting for it, the node is at work in its batch;
    /// past the timeout it is a failed node of the batch, which may then be judged.
    pub fn gated(mut self, health: &super::health::Health, active: bool) -> Self {
        match health {
            super::health::Health::Holding { .. } => self.busy = true,
            super::health::Health::Failed { .. } => {
                self.busy = active;
                self.erroring = true;
            }
            _ => {}
        }
        self
    }
}

/// What a pass's batch choice knows beside the compartment.
pub struct BatchPass<'a> {
    pub can_run: bool,
    /// False while the Skyhook is complete (§6.4: a batch state just reset on completion must
    /// stay reset).
    pub evaluate: bool,
    pub now: Timestamp,
    /// The nodes the stored status had in progress: a batch that finishes now was them.
    pub at_work_before: &'a BTreeSet<String>,
}

/// The nodes of one compartment that may work this pass. The compartment's batch state is
/// updated in place, its soak (issue 38) started, checked or ended.
pub fn select(c: &mut Compartment, members: &[&Seen], pass: &BatchPass) -> BTreeSet<String> {
    if members.iter().any(|s| s.busy) {
        let free = if pass.can_run { refill(c, members) } else { 0 };
        return at_work(members, free);
    }
    let (can_run, evaluate) = (pass.can_run, pass.evaluate);
    let batch_before = c.batch.current_batch;
    if evaluate {
        let count = |f: fn(&Seen) -> bool| members.iter().filter(|s| f(s)).count() as i64;
        let finished = Finished {
            complete: count(|s| s.settled),
            erroring: count(|s| s.erroring && !s.settled),
            total: members.len() as i64,
        };
        if c.batch == BatchState::fresh() && !c.was_running {
            // A rollout starting, or restarting after a reset: nodes that finished before it
            // are its baseline, not a batch (a failed node would otherwise stop it again).
            c.batch.completed_nodes = finished.complete;
            c.batch.failed_nodes = finished.erroring;
        } else {
            strategy::evaluate(c.strategy.as_ref(), &mut c.batch, finished);
        }
    }
    let total = members.len() as i64;
    if c.batch.current_batch != batch_before {
        start_soak(c, members, pass);
    }
    let soaking = check_soak(c, members, pass.now, total);
    let halted = c.strategy.is_some() && c.batch.should_stop;
    let size = strategy::batch_size(c.strategy.as_ref(), &c.batch, total, c.ceiling());
    allowed(
        members,
        size.max(0) as usize,
        can_run && !halted && !soaking,
    )
}

/// A batch just finished: with a soak, its nodes soak before the next batch may start.
fn start_soak(c: &mut Compartment, members: &[&Seen], pass: &BatchPass) {
    let Some(soak) = c.soak else { return };
    let pending = members.iter().any(|s| !s.settled);
    let Some(until) = jiff::SignedDuration::try_from(soak)
        .ok()
        .and_then(|d| pass.now.checked_add(d).ok())
    else {
        return;
    };
    if !pending {
        return;
    }
    c.batch.soak_until = Some(until.to_string());
    c.batch.soak_nodes = members
        .iter()
        .filter(|s| (s.settled || s.erroring) && pass.at_work_before.contains(&s.name))
        .map(|s| s.name.clone())
        .collect();
}

/// A soak under way: a node of the soaking batch gone NotReady (or failing its health gate's
/// pods or node condition) fails the batch (and ends the
/// soak); a soak past its end ends. True while the compartment still soaks.
fn check_soak(c: &mut Compartment, members: &[&Seen], now: Timestamp, total: i64) -> bool {
    let Some(until) = c.batch.soak_until.as_deref() else {
        return false;
    };
    let until: Option<Timestamp> = until.parse().ok();
    let sick: Vec<String> = c
        .batch
        .soak_nodes
        .iter()
        .filter(|n| members.iter().any(|s| s.name == **n && s.unhealthy))
        .cloned()
        .collect();
    let over = until.is_none_or(|u| now >= u);
    if sick.is_empty() && !over {
        c.soaking = until;
        return true;
    }
    if !sick.is_empty() {
        strategy::fail_batch(c.strategy.as_ref(), &mut c.batch, total);
        c.soak_failed = sick;
    }
    c.batch.soak_until = None;
    c.batch.soak_nodes.clear();
    false
}

/// How many fresh nodes may join the batch at work (issue 51, item 3): the slots its released
/// nodes left, and only those. A node that finished in this batch (counted against the batch
/// state's tallies of the last choice) keeps its slot until the batch is judged, as §6.4's
/// sticky batch wants; so one bad node costs its batch one slot, not the batch's time.
fn refill(c: &Compartment, members: &[&Seen]) -> usize {
    let released = members.iter().filter(|s| s.released).count();
    if released == 0 || (c.strategy.is_some() && c.batch.should_stop) {
        return 0;
    }
    let count = |f: &dyn Fn(&Seen) -> bool| members.iter().filter(|s| f(s)).count() as i64;
    let total = members.len() as i64;
    let size = strategy::batch_size(c.strategy.as_ref(), &c.batch, total, c.ceiling()).max(0);
    let busy = count(&|s| s.busy);
    let completed = (count(&|s| s.settled) - c.batch.completed_nodes).max(0);
    let failed = (count(&|s| s.erroring && !s.settled && !s.busy) - c.batch.failed_nodes).max(0);
    let free = size.saturating_sub(busy + completed + failed).max(0);
    (free as usize).min(released)
}

/// The batch at work, with `free` fresh nodes joining it.
fn at_work(seen: &[&Seen], free: usize) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = seen
        .iter()
        .filter(|s| s.busy)
        .map(|s| s.name.clone())
        .collect();
    out.extend(candidates(seen, free));
    out
}

/// The nodes that may start new work this pass.
pub fn allowed(seen: &[&Seen], size: usize, can_run: bool) -> BTreeSet<String> {
    if !can_run || seen.iter().any(|s| s.busy) {
        return at_work(seen, 0);
    }
    candidates(seen, size).collect()
}

/// The first `n` nodes that may start, busy ones aside.
fn candidates<'a>(seen: &[&'a Seen], n: usize) -> impl Iterator<Item = String> + use<'a> {
    let mut candidates: Vec<&Seen> = seen
        .iter()
        .copied()
        .filter(|s| !s.busy && !s.settled && s.eligible)
        .collect();
    // Stable sort: oldest node first within each group (§6.4's waiting/unknown before erroring),
    // a node that gave its slot back (protected pods, a stalled Job, a drain past its timeout)
    // and may go on first of all.
    candidates.sort_by_key(|s| (!s.resuming, s.erroring));
    candidates.into_iter().take(n).map(|s| s.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::fixtures::{entry, facts, node};
    use crate::plan::select::Block;
    use crate::schema::Stage;

    /// (name, busy, settled, erroring, eligible)
    fn seen(rows: &[(&str, bool, bool, bool, bool)]) -> Vec<Seen> {
        rows.iter()
            .map(|&(name, busy, settled, erroring, eligible)| Seen {
                resuming: false,
                released: false,
                name: name.to_string(),
                busy,
                settled,
                erroring,
                eligible,
                unhealthy: false,
            })
            .collect()
    }

    #[test]
    fn allowed_keeps_the_batch_then_starts_the_next() {
        const FRESH: (bool, bool, bool, bool) = (false, false, false, true);
        let row = |n: &'static str, (b, s, e, el): (bool, bool, bool, bool)| (n, b, s, e, el);
        // (case, nodes, size, can_run, allowed)
        let cases: Vec<(
            &str,
            Vec<(&str, bool, bool, bool, bool)>,
            usize,
            bool,
            Vec<&str>,
        )> = vec![
            (
                "nothing busy: the first `size` candidates",
                vec![row("a", FRESH), row("b", FRESH), row("c", FRESH)],
                2,
                true,
                vec!["a", "b"],
            ),
            (
                "input order kept (oldest first comes from the caller)",
                vec![row("n3", FRESH), row("n1", FRESH), row("n2", FRESH)],
                2,
                true,
                vec!["n1", "n3"],
            ),
            (
                "busy nodes keep the batch and nothing else starts",
                vec![
                    ("a", true, false, false, true),
                    row("b", FRESH),
                    row("c", FRESH),
                ],
                3,
                true,
                vec!["a"],
            ),
            (
                "busy nodes beyond the size are all kept",
                vec![
                    ("a", true, false, false, true),
                    ("b", true, false, false, true),
                    row("c", FRESH),
                ],
                1,
                true,
                vec!["a", "b"],
            ),
            (
                "a settled node holding our cordon still counts as busy",
                vec![("a", true, true, false, true), row("b", FRESH)],
                2,
                true,
                vec!["a"],
            ),
            (
                "a busy ineligible node is kept (its running work is observed)",
                vec![("a", true, false, false, false), row("b", FRESH)],
                2,
                true,
                vec!["a"],
            ),
            (
                "cannot run: nothing new",
                vec![row("a", FRESH), row("b", FRESH)],
                2,
                false,
                vec![],
            ),
            (
                "cannot run: busy nodes kept",
                vec![("a", true, false, false, true), row("b", FRESH)],
                2,
                false,
                vec!["a"],
            ),
            (
                "settled nodes skipped",
                vec![
                    ("a", false, true, false, true),
                    row("b", FRESH),
                    row("c", FRESH),
                ],
                1,
                true,
                vec!["b"],
            ),
            (
                "ineligible nodes skipped",
                vec![("a", false, false, false, false), row("b", FRESH)],
                1,
                true,
                vec!["b"],
            ),
            (
                "non-erroring before erroring",
                vec![
                    ("a", false, false, true, true),
                    row("b", FRESH),
                    row("c", FRESH),
                ],
                2,
                true,
                vec!["b", "c"],
            ),
            (
                "erroring nodes fill the remaining room",
                vec![
                    ("a", false, false, true, true),
                    row("b", FRESH),
                    ("c", false, false, true, true),
                ],
                2,
                true,
                vec!["a", "b"],
            ),
            (
                "erroring nodes keep their order",
                vec![
                    ("e2", false, false, true, true),
                    ("e1", false, false, true, true),
                    row("f", FRESH),
                ],
                2,
                true,
                vec!["e2", "f"],
            ),
            (
                "size 0 starts nothing",
                vec![row("a", FRESH)],
                0,
                true,
                vec![],
            ),
            (
                "every node settled",
                vec![("a", false, true, false, true)],
                3,
                true,
                vec![],
            ),
        ];
        for (name, rows, size, can_run, want) in cases {
            let rows = seen(&rows);
            let refs: Vec<&Seen> = rows.iter().collect();
            let got = allowed(&refs, size, can_run);
            let want: BTreeSet<String> = want.into_iter().map(String::from).collect();
            assert_eq!(got, want, "case: {name}");
        }
    }

    #[test]
    fn seen_of_a_node() {
        let node = node("n").build();
        // (case, active Job, holds cordon, package state, block, gated, (busy, erroring, eligible))
        let cases = [
            (
                "idle fresh node",
                false,
                false,
                None,
                None,
                false,
                (false, false, true),
            ),
            (
                "a running Job",
                true,
                false,
                None,
                None,
                false,
                (true, false, true),
            ),
            (
                "our cordon",
                false,
                true,
                None,
                None,
                false,
                (true, false, true),
            ),
            (
                "a package in progress",
                false,
                false,
                Some(State::InProgress),
                None,
                false,
                (true, false, true),
            ),
            (
                "a package erroring",
                false,
                false,
                Some(State::Erroring),
                None,
                false,
                (false, true, true),
            ),
            (
                "blocked by a taint",
                false,
                false,
                None,
                Some(Block::Taint),
                false,
                (false, false, false),
            ),
            (
                "ignored",
                false,
                false,
                None,
                Some(Block::Ignored),
                false,
                (false, false, false),
            ),
            (
                "gated",
                false,
                false,
                None,
                None,
                true,
                (false, false, false),
            ),
        ];
        for (name, active, holds_cordon, state, block, gated, want) in cases {
            let f = NodeFacts {
                holds_cordon,
                block,
                gated,
                ..facts(&node)
            };
            let mut o = NodeOutcome {
                active,
                ..NodeOutcome::default()
            };
            if let Some(s) = state {
                o.state.upsert(entry("p", Stage::Apply, s));
            }
            let s = Seen::of(&f, &o, false);
            assert_eq!((s.busy, s.erroring, s.eligible), want, "case: {name}");
            assert_eq!(s.name, "n", "case: {name}");
            assert!(Seen::of(&f, &o, true).settled, "case: {name}");
        }
    }

    /// Issue 51 (upstream #543): a node waiting for protected pods holds its slot for the
    /// release wait, then gives it back and is no candidate while they run; once they are gone
    /// it is picked first at the next batch choice, joining a batch at work only for a slot a
    /// released node left.
    #[test]
    fn a_node_waiting_for_protected_pods_gives_its_slot_back() {
        use crate::plan::drain::PodInfo;
        use crate::plan::fixtures::t;
        let node = node("n").build();
        let train = [PodInfo {
            namespace: "apps".into(),
            name: "train".into(),
            protected: true,
            evictable: false,
            terminating: false,
            unmovable: None,
            health: None,
        }];
        let release = Duration::from_secs(20);
        let at = |secs: i64| t(0) + jiff::SignedDuration::from_secs(secs);
        let seen = |pods: Option<&'static [PodInfo]>, since: Option<Timestamp>, now: Timestamp| {
            let mut f = facts(&node);
            f.holds_cordon = true;
            f.host.pods = pods;
            f.host.protected_since = since;
            let s = Seen::of(&f, &NodeOutcome::default(), false);
            let s = s.protected(&f, false, now, release);
            (s.busy, s.eligible, s.resuming)
        };
        let train: &'static [PodInfo] = Box::leak(Box::new(train));
        // (case, pods listed, wait since, now, (busy, eligible, resuming))
        let cases = [
            ("no wait", Some(train), None, at(100), (true, true, false)),
            (
                "within the release wait",
                Some(train),
                Some(at(0)),
                at(19),
                (true, true, false),
            ),
            (
                "past it, still running",
                Some(train),
                Some(at(0)),
                at(20),
                (false, false, false),
            ),
            (
                "past it, pods not listed",
                None,
                Some(at(0)),
                at(30),
                (false, false, false),
            ),
            (
                "past it, gone",
                Some(&[]),
                Some(at(0)),
                at(30),
                (false, true, true),
            ),
        ];
        for (name, pods, since, now, want) in cases {
            assert_eq!(seen(pods, since, now), want, "case: {name}");
        }
        // Back from its wait: first in line, but only once no batch is at work.
        let back = Seen {
            resuming: true,
            ..seen_row("back", false, false)
        };
        let (a, b) = (seen_row("a", false, false), seen_row("b", false, false));
        let got = allowed(&[&a, &b, &back], 1, true);
        assert_eq!(got, BTreeSet::from(["back".to_string()]));
        let busy = seen_row("busy", true, false);
        let got = allowed(&[&busy, &back], 2, true);
        assert_eq!(got, BTreeSet::from(["busy".to_string()]));
    }

    fn seen_row(name: &str, busy: bool, settled: bool) -> Seen {
        Seen {
            name: name.into(),
            busy,
            settled,
            erroring: false,
            eligible: true,
            unhealthy: false,
            resuming: false,
            released: false,
        }
    }

    /// Issue 51, item 3: a slot a released node left in the batch at work goes to the next
    /// candidate; a slot of a node that finished in the batch does not (§6.4's sticky batch).
    #[test]
    fn a_released_slot_is_refilled_within_the_batch_at_work() {
        use crate::crd::policy::{EffectiveStrategy, StrategyParams};
        use crate::plan::fixtures::t;
        let compartment =
            |completed: i64, should_stop: bool| crate::plan::compartments::Compartment {
                name: "__default__".into(),
                budget: serde_json::from_value(serde_json::json!({"count": 3})).unwrap(),
                strategy: Some(EffectiveStrategy::Fixed(StrategyParams {
                    initial_batch: 3,
                    batch_threshold: 100,
                    failure_threshold: None,
                    safety_limit: 50,
                })),
                batch: crate::crd::BatchState {
                    current_batch: 1,
                    completed_nodes: completed,
                    should_stop,
                    ..Default::default()
                },
                nodes: ["done", "n0", "n1", "n2", "n3", "n4"]
                    .map(String::from)
                    .to_vec(),
                was_running: true,
                gate: crate::crd::window::Gate::Open,
                windowed: false,
                soak: None,
                soaking: None,
                soak_failed: Vec::new(),
            };
        let row = |name: &str, busy: bool, settled: bool, released: bool| Seen {
            released,
            eligible: !released,
            ..seen_row(name, busy, settled)
        };
        let at_work = BTreeSet::new();
        let pass = |can_run| BatchPass {
            can_run,
            evaluate: true,
            now: t(0),
            at_work_before: &at_work,
        };
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        // "done" finished before this batch (the last choice's tally: 1 complete).
        let before = row("done", false, true, false);
        // (case, n0..n2 as (busy, settled, released), can_run, should_stop, allowed)
        type Row = (bool, bool, bool);
        const BUSY: Row = (true, false, false);
        const SETTLED: Row = (false, true, false);
        const RELEASED: Row = (false, false, true);
        let cases: [(&str, [Row; 3], bool, bool, &[&str]); 6] = [
            ("all at work", [BUSY; 3], true, false, &["n0", "n1", "n2"]),
            (
                "one released: the next candidate takes its slot",
                [BUSY, RELEASED, BUSY],
                true,
                false,
                &["n0", "n2", "n3"],
            ),
            (
                "one released, one finished: one slot, not two",
                [BUSY, RELEASED, SETTLED],
                true,
                false,
                &["n0", "n3"],
            ),
            (
                "none released, one finished: the batch keeps its size",
                [BUSY, BUSY, SETTLED],
                true,
                false,
                &["n0", "n1"],
            ),
            (
                "paused, or a window closed: no refill",
                [BUSY, RELEASED, BUSY],
                false,
                false,
                &["n0", "n2"],
            ),
            (
                "the rollout stopped: no refill",
                [BUSY, RELEASED, BUSY],
                true,
                true,
                &["n0", "n2"],
            ),
        ];
        for (case, rows, can_run, stop, want) in cases {
            let batch: Vec<Seen> = ["n0", "n1", "n2"]
                .iter()
                .zip(rows)
                .map(|(n, (b, s, r))| row(n, b, s, r))
                .collect();
            let fresh = [
                row("n3", false, false, false),
                row("n4", false, false, false),
            ];
            let mut members: Vec<&Seen> = vec![&before];
            members.extend(batch.iter().chain(&fresh));
            let mut c = compartment(1, stop);
            assert_eq!(
                select(&mut c, &members, &pass(can_run)),
                names(want),
                "case: {case}"
            );
        }
        // Once the refill is at work the slot is taken: no second refill.
        let (n0, n1, n2, n3) = (
            row("n0", true, false, false),
            row("n1", false, false, true),
            row("n2", false, true, false),
            row("n3", true, false, false),
        );
        let n4 = row("n4", false, false, false);
        let mut c = compartment(1, false);
        assert_eq!(
            select(&mut c, &[&before, &n0, &n1, &n2, &n3, &n4], &pass(true)),
            names(&["n0", "n3"])
        );
    }

    /// Issue 38: a finished batch soaks before the next starts; a node of it going NotReady
    /// meanwhile fails the batch (and stops the rollout at its failure threshold).
    #[test]
    fn a_finished_batch_soaks_and_a_not_ready_node_fails_it() {
        use crate::crd::policy::{EffectiveStrategy, StrategyParams};
        use crate::plan::fixtures::t;
        let strategy = EffectiveStrategy::Fixed(StrategyParams {
            initial_batch: 1,
            batch_threshold: 100,
            failure_threshold: Some(1),
            safety_limit: 100,
        });
        let mut c = crate::plan::compartments::Compartment {
            name: "rack".into(),
            budget: serde_json::from_value(serde_json::json!({"count": 1})).unwrap(),
            strategy: Some(strategy),
            batch: crate::crd::BatchState {
                current_batch: 1,
                ..Default::default()
            },
            nodes: vec!["a".into(), "b".into()],
            was_running: true,
            gate: crate::crd::window::Gate::Open,
            windowed: false,
            soak: Some(std::time::Duration::from_secs(60)),
            soaking: None,
            soak_failed: Vec::new(),
        };
        let at_work: BTreeSet<String> = ["a".to_string()].into();
        let pass = |now| BatchPass {
            can_run: true,
            evaluate: true,
            now,
            at_work_before: &at_work,
        };
        // a finished: batch 2 is due, but soaks first.
        let rows = seen(&[
            ("a", false, true, false, true),
            ("b", false, false, false, true),
        ]);
        let members: Vec<&Seen> = rows.iter().collect();
        assert!(
            select(&mut c, &members, &pass(t(0))).is_empty(),
            "started during the soak"
        );
        assert_eq!(c.batch.current_batch, 2);
        assert_eq!(c.batch.soak_nodes, ["a"]);
        assert_eq!(c.soaking, Some(t(60)));
        // Still soaking at 59 s; at 60 s the soak is over and b starts.
        assert!(select(&mut c, &members, &pass(t(59))).is_empty());
        let mut done = c.clone();
        assert_eq!(
            select(&mut done, &members, &pass(t(60))),
            ["b".to_string()].into()
        );
        assert!(done.batch.soak_until.is_none() && done.batch.soak_nodes.is_empty());
        // a goes NotReady during the soak: the batch failed, the rollout stops.
        let mut sick_rows = rows.clone();
        sick_rows[0].unhealthy = true;
        let members: Vec<&Seen> = sick_rows.iter().collect();
        assert!(select(&mut c, &members, &pass(t(30))).is_empty());
        assert_eq!(c.soak_failed, ["a"]);
        assert!(
            c.batch.last_batch_failed && c.batch.should_stop,
            "{:?}",
            c.batch
        );
        assert_eq!(c.batch.consecutive_failures, 1);
        assert!(c.batch.soak_until.is_none());
    }
}
