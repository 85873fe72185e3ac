//! Compartments of a rollout (§6.1, §6.2, §6.5, §6.7): which nodes share a budget and a batch
//! strategy, and what `status.compartmentStatuses` says about each.
//!
//! A Skyhook without a `deploymentPolicy` has one legacy compartment, `__default__`, built from
//! its `interruptionBudget`; with a policy it has the policy's compartments plus `__default__`
//! from the policy's default. Membership is recomputed every pass, so nodes move when their
//! labels change. The batch state is read back from the stored status, whoever wrote it (this
//! operator before a restart, or the Go operator before the hand-over).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::node::{LabelMatch, Labels};
use kube::ResourceExt;

use super::CompartmentPlan;
use crate::crd::MaintenanceWindow;
use crate::crd::window::{self, Gate, Window};
use crate::crd::{
    BatchState, CompartmentStatus, DeploymentBudget, DeploymentPolicy, EffectiveStrategy, Skyhook,
    SkyhookStatus, StrategyKind, StrategyParams,
};
use crate::schema::{self, Status};
use jiff::Timestamp;

/// The policy a Skyhook's rollout follows.
#[derive(Debug, Clone, Copy)]
pub enum Policy<'a> {
    /// No `deploymentPolicy`: the legacy compartment.
    Legacy,
    Named(&'a DeploymentPolicy),
    /// Named but absent: nothing new starts until it appears.
    Missing(&'a str),
}

impl<'a> Policy<'a> {
    pub fn of(sk: &'a Skyhook, policies: &'a [Arc<DeploymentPolicy>]) -> Self {
        match sk.spec.deployment_policy.as_deref() {
            Some(name) if !name.is_empty() => policies
                .iter()
                .find(|p| p.name_any() == name)
                .map_or(Policy::Missing(name), |p| Policy::Named(p.as_ref())),
            _ => Policy::Legacy,
        }
    }

    /// The `policy_name` metrics label: the policy's name, or `legacy`.
    pub fn label(&self) -> &str {
        match self {
            Policy::Legacy => "legacy",
            Policy::Named(p) => p.metadata.name.as_deref().unwrap_or_default(),
            Policy::Missing(name) => name,
        }
    }

    /// §6.6: whether batch state resets on completion and on version changes.
    pub fn resets_on_completion(&self, sk: &Skyhook) -> bool {
        let spec = match self {
            Policy::Named(p) => Some(&p.spec),
            _ => None,
        };
        sk.spec.reset_batch_state_on_completion(spec)
    }
}

/// One compartment of this pass, with its members in node order.
#[derive(Debug, Clone, PartialEq)]
pub struct Compartment {
    pub name: String,
    pub budget: DeploymentBudget,
    /// `None`: the ceiling is the batch size ("unknown" in metrics).
    pub strategy: Option<EffectiveStrategy>,
    pub batch: BatchState,
    pub nodes: Vec<String>,
    /// The stored status had nodes of it in progress (a batch was at work at the last pass).
    pub was_running: bool,
    /// Its maintenance windows (issue 38) at this pass: outside them no node starts.
    pub gate: Gate,
    /// It has maintenance windows at all.
    pub windowed: bool,
    /// How long a finished batch soaks before the next one (issue 38).
    pub soak: Option<std::time::Duration>,
    /// This pass: the compartment soaks until then.
    pub soaking: Option<Timestamp>,
    /// This pass: these nodes went NotReady while their batch soaked, which failed it.
    pub soak_failed: Vec<String>,
}

impl Compartment {
    pub fn ceiling(&self) -> i64 {
        self.budget.ceiling(self.nodes.len() as i64)
    }

    /// The `strategy` metrics label.
    pub fn strategy_label(&self) -> &'static str {
        self.strategy.map_or("unknown", |s| s.kind().as_str())
    }
}

/// A targeted node as membership sees it.
pub struct Member<'a> {
    pub name: &'a str,
    pub labels: &'a dyn Labels,
}

/// The compartments of this pass with every targeted node assigned to one (§6.1). Empty when
/// the policy is missing.
pub fn build(
    sk: &Skyhook,
    policy: Policy,
    members: &[Member],
    prior: &SkyhookStatus,
    now: Timestamp,
) -> Vec<Compartment> {
    // Batch state and "a batch was at work" come back from the stored status.
    let fresh = |name: &str, budget: DeploymentBudget, strategy: Option<EffectiveStrategy>| {
        let stored = prior.compartment_statuses.get(name);
        Compartment {
            name: name.to_string(),
            budget,
            strategy,
            batch: stored
                .and_then(|c| c.batch_state.clone())
                .unwrap_or_else(BatchState::fresh),
            nodes: Vec::new(),
            was_running: stored.is_some_and(|c| c.in_progress > 0),
            gate: Gate::Open,
            windowed: false,
            soak: None,
            soaking: None,
            soak_failed: Vec::new(),
        }
    };
    let p = match policy {
        Policy::Missing(_) => return Vec::new(),
        Policy::Legacy => {
            let (budget, strategy) = legacy(sk, members.len());
            let mut c = fresh(schema::DEFAULT_COMPARTMENT, budget, Some(strategy));
            c.nodes = members.iter().map(|m| m.name.to_string()).collect();
            return vec![c];
        }
        Policy::Named(p) => p,
    };
    let mut out: Vec<Compartment> = p
        .spec
        .compartments
        .iter()
        .map(|c| {
            let strategy = c.strategy.as_ref().and_then(|s| s.effective());
            let own = if c.windows.is_empty() {
                &p.spec.windows
            } else {
                &c.windows
            };
            let mut out = gated(fresh(&c.name, c.budget.clone(), strategy), own, now);
            out.soak = soak_of(c.soak.as_deref().or(p.spec.soak.as_deref()));
            out
        })
        .collect();
    let default_nodes = assign(p, members, &mut out);
    let mut default = fresh(
        schema::DEFAULT_COMPARTMENT,
        p.spec.default.budget.clone(),
        p.spec.default.strategy.effective(),
    );
    default.nodes = default_nodes;
    default.soak = soak_of(p.spec.soak.as_deref());
    out.push(gated(default, &p.spec.windows, now));
    out
}

/// A soak that admission would refuse (only in policies stored before the rule) is none.
fn soak_of(v: Option<&str>) -> Option<std::time::Duration> {
    v.and_then(|s| schema::parse_go_duration(s).ok())
        .filter(|d| !d.is_zero())
}

/// The compartment with the gate of its maintenance windows at `now`. A window that cannot be
/// read (only in a policy stored before the admission rules; validation names it) keeps the
/// compartment closed: nothing starts outside a window its author meant to have.
fn gated(mut c: Compartment, windows: &[MaintenanceWindow], now: Timestamp) -> Compartment {
    c.windowed = !windows.is_empty();
    let parsed: Result<Vec<Window>, _> = windows
        .iter()
        .map(|w| Window::parse(w, "windows"))
        .collect();
    c.gate = match parsed {
        Ok(ws) => window::gate(&ws, now),
        Err(_) => Gate::Closed { next: None },
    };
    c
}

/// Compartments outside their maintenance windows with nodes still to do, and when each opens
/// next (`statuses`: every targeted node's status).
pub fn window_holds(
    compartments: &[Compartment],
    statuses: &BTreeMap<String, Status>,
) -> Vec<(String, Option<Timestamp>)> {
    compartments
        .iter()
        .filter_map(|c| match c.gate {
            Gate::Closed { next } => {
                let pending = c
                    .nodes
                    .iter()
                    .any(|n| statuses.get(n).is_some_and(|s| *s != Status::Complete));
                pending.then(|| (c.name.clone(), next))
            }
            Gate::Open => None,
        })
        .collect()
}

/// Puts each member into the policy compartment the tie-break names (`out` follows the
/// policy's compartments); returns the members no compartment selects.
fn assign(p: &DeploymentPolicy, members: &[Member], out: &mut [Compartment]) -> Vec<String> {
    // An invalid selector matches nothing (validation reports it on the Skyhook).
    let selectors: Vec<Option<LabelMatch>> = p
        .spec
        .compartments
        .iter()
        .map(|c| LabelMatch::new(&c.selector))
        .collect();
    let matches = |i: usize, m: &Member| selectors[i].as_ref().is_some_and(|s| s.matches(m.labels));
    // Tie-break ceilings count every targeted node a selector matches, wherever it ends up.
    let matched: Vec<i64> = (0..out.len())
        .map(|i| members.iter().filter(|m| matches(i, m)).count() as i64)
        .collect();
    let mut unmatched = Vec::new();
    for m in members {
        let key = |i: usize| {
            let c = &out[i];
            let ceiling = c.budget.ceiling(matched[i].max(1));
            (rank(c.strategy), ceiling, c.name.clone())
        };
        match (0..out.len())
            .filter(|&i| matches(i, m))
            .min_by_key(|&i| key(i))
        {
            Some(i) => out[i].nodes.push(m.name.to_string()),
            None => unmatched.push(m.name.to_string()),
        }
    }
    unmatched
}

/// The compartment of every node `sk` targets, for displays that have only node labels. Empty
/// when the policy is missing.
pub fn membership<'a>(
    sk: &Skyhook,
    policies: &[Arc<DeploymentPolicy>],
    nodes: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> BTreeMap<String, String> {
    let Some(targets) = LabelMatch::new(&sk.spec.node_selectors) else {
        return BTreeMap::new();
    };
    let members: Vec<Member> = nodes
        .into_iter()
        .filter(|(_, labels)| targets.matches(*labels))
        .map(|(name, labels)| Member {
            name,
            labels: labels as &dyn Labels,
        })
        .collect();
    let prior = SkyhookStatus::default();
    build(
        sk,
        Policy::of(sk, policies),
        &members,
        &prior,
        Timestamp::UNIX_EPOCH,
    )
    .into_iter()
    .flat_map(|c| {
        let name = c.name;
        c.nodes.into_iter().map(move |n| (n, name.clone()))
    })
    .collect()
}

/// Strategy safety for overlapping compartments: fixed, linear, exponential, then none.
fn rank(s: Option<EffectiveStrategy>) -> u8 {
    match s.map(|s| s.kind()) {
        Some(StrategyKind::Fixed) => 0,
        Some(StrategyKind::Linear) => 1,
        Some(StrategyKind::Exponential) => 2,
        None => 3,
    }
}

/// §6.5: the legacy compartment's budget and its fixed strategy (batch from the budget,
/// threshold 100, safety limit 50, never stopping).
fn legacy(sk: &Skyhook, nodes: usize) -> (DeploymentBudget, EffectiveStrategy) {
    let ib = &sk.spec.interruption_budget;
    let n = nodes as i64;
    let (budget, initial) = match (ib.percent, ib.count) {
        (Some(p), _) => {
            let b = DeploymentBudget {
                percent: Some(p),
                count: None,
            };
            // §6.5 uses the same float product as the ceiling, but 0 nodes still give 1.
            (b.clone(), b.ceiling(n).max(1))
        }
        (None, Some(c)) => (
            DeploymentBudget {
                percent: None,
                count: Some(c),
            },
            n.min(c).max(1),
        ),
        (None, None) => (
            DeploymentBudget {
                percent: Some(100),
                count: None,
            },
            n.max(1),
        ),
    };
    let strategy = EffectiveStrategy::Fixed(StrategyParams {
        initial_batch: initial,
        batch_threshold: 100,
        failure_threshold: None,
        safety_limit: 50,
    });
    (budget, strategy)
}

/// §6.7 for one compartment, from the node statuses of this pass.
pub fn status(c: &Compartment, statuses: &BTreeMap<String, Status>) -> CompartmentStatus {
    let count = |want: Status| {
        c.nodes
            .iter()
            .filter(|n| statuses.get(n.as_str()) == Some(&want))
            .count() as i64
    };
    let matched = c.nodes.len() as i64;
    let completed = count(Status::Complete);
    CompartmentStatus {
        matched,
        ceiling: c.ceiling(),
        in_progress: count(Status::InProgress),
        completed,
        progress_percent: if matched == 0 {
            0
        } else {
            completed * 100 / matched
        },
        batch_state: c.strategy.is_some().then(|| c.batch.clone()),
    }
}

/// What the plan reports of a compartment; `allowed` are the nodes that may work this pass.
pub fn plan_of(c: &Compartment, allowed: &std::collections::BTreeSet<String>) -> CompartmentPlan {
    CompartmentPlan {
        name: c.name.clone(),
        strategy: c.strategy_label().to_string(),
        budget: c.budget.clone(),
        ceiling: c.ceiling(),
        nodes: c.nodes.clone(),
        window: c.windowed.then(|| match c.gate {
            Gate::Open => "open".to_string(),
            Gate::Closed { next: Some(t) } => format!("closed until {t}"),
            Gate::Closed { next: None } => "closed".to_string(),
        }),
        batch_state: c.batch.clone(),
        batch: c
            .nodes
            .iter()
            .filter(|n| allowed.contains(*n))
            .cloned()
            .collect(),
    }
}

/// The compartments halted by their failure threshold, worded for the condition.
pub fn stopped(skyhook: &str, compartments: &[Compartment]) -> Vec<String> {
    compartments
        .iter()
        .filter(|c| c.batch.should_stop)
        .filter_map(|c| {
            let threshold = c.strategy?.params().failure_threshold.unwrap_or_default();
            let failures = c.batch.consecutive_failures;
            Some(schema::rollout_stopped_message(
                skyhook, &c.name, failures, threshold,
            ))
        })
        .collect()
}

/// §6.6: every compartment starts again from batch 1.
pub fn reset(compartments: &mut [Compartment]) {
    for c in compartments {
        c.batch = BatchState::fresh();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    use crate::plan::fixtures::{fixed, policy, skyhook};

    /// A Skyhook without a policy, with this interruption budget.
    fn legacy_sk(percent: Option<i64>, count: Option<i64>) -> Skyhook {
        skyhook("s")
            .set(
                "interruptionBudget",
                json!({"percent": percent, "count": count}),
            )
            .build()
    }

    /// Nodes n0.. with the given labels.
    fn labels(rows: &[&[(&str, &str)]]) -> Vec<(String, BTreeMap<String, String>)> {
        rows.iter()
            .enumerate()
            .map(|(i, l)| {
                let map = l
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                (format!("n{i}"), map)
            })
            .collect()
    }

    fn members(nodes: &[(String, BTreeMap<String, String>)]) -> Vec<Member<'_>> {
        nodes
            .iter()
            .map(|(name, labels)| Member { name, labels })
            .collect()
    }

    fn initial_batch(c: &Compartment) -> i64 {
        c.strategy.map_or(0, |s| s.params().initial_batch)
    }

    #[test]
    fn legacy_compartment_matches_the_reference_unit_tests() {
        // (case, percent, count, nodes, initial batch, ceiling)
        let cases: &[(&str, Option<i64>, Option<i64>, usize, i64, i64)] = &[
            ("percent 20 of 2", Some(20), None, 2, 1, 1),
            ("percent 20 of 6", Some(20), None, 6, 1, 1),
            ("percent 20 of 10", Some(20), None, 10, 2, 2),
            ("percent 20 of 15", Some(20), None, 15, 3, 3),
            ("percent 0 of 15", Some(0), None, 15, 1, 1),
            (
                "percent 29 of 100 (float math)",
                Some(29),
                None,
                100,
                28,
                28,
            ),
            ("count 1 of 2", None, Some(1), 2, 1, 1),
            ("count 2 of 6", None, Some(2), 6, 2, 2),
            ("count 0 of 10", None, Some(0), 10, 1, 0),
            ("count 3 of 6 (the legacy e2e)", None, Some(3), 6, 3, 3),
            ("count beyond the nodes", None, Some(10), 3, 3, 10),
            ("no budget: every node", None, None, 7, 7, 7),
            ("no node", Some(50), None, 0, 1, 0),
        ];
        for &(case, percent, count, n, initial, ceiling) in cases {
            let nodes = labels(&vec![&[][..]; n]);
            let sk = legacy_sk(percent, count);
            let got = build(
                &sk,
                Policy::Legacy,
                &members(&nodes),
                &SkyhookStatus::default(),
                Timestamp::UNIX_EPOCH,
            );
            assert_eq!(got.len(), 1, "case: {case}");
            let c = &got[0];
            assert_eq!(c.name, "__default__", "case: {case}");
            assert_eq!(initial_batch(c), initial, "case: {case}: initial batch");
            assert_eq!(c.ceiling(), ceiling, "case: {case}: ceiling");
            assert_eq!(c.strategy_label(), "fixed", "case: {case}");
            let p = c.strategy.map(|s| *s.params());
            assert_eq!(
                p.map(|p| (p.batch_threshold, p.safety_limit, p.failure_threshold)),
                Some((100, 50, None)),
                "case: {case}"
            );
            assert_eq!(c.batch, BatchState::fresh(), "case: {case}");
        }
    }

    #[test]
    fn membership_and_the_overlap_tie_break() {
        let fixed = json!({"fixed": {"initialBatch": 1}});
        let linear = json!({"linear": {"initialBatch": 1}});
        let default = json!({"budget": {"percent": 100}, "strategy": {"fixed": {}}});
        let sel = |k: &str| json!({"matchLabels": {k: "true"}});
        // (case, compartments, node labels, compartment of each node)
        let cases: Vec<(&str, Value, Vec<&[(&str, &str)]>, Vec<&str>)> = vec![
            (
                "one selector each; unmatched nodes go to __default__",
                json!([{"name": "canary", "selector": sel("canary"), "budget": {"count": 1}, "strategy": fixed}]),
                vec![&[("canary", "true")], &[]],
                vec!["canary", "__default__"],
            ),
            (
                "rule 1: the safer strategy wins (fixed over linear)",
                json!([
                    {"name": "a-linear", "selector": sel("x"), "budget": {"count": 1}, "strategy": linear},
                    {"name": "z-fixed", "selector": sel("x"), "budget": {"count": 5}, "strategy": fixed},
                ]),
                vec![&[("x", "true")]],
                vec!["z-fixed"],
            ),
            (
                "rule 1: any strategy wins over none",
                json!([
                    {"name": "a-none", "selector": sel("x"), "budget": {"count": 1}},
                    {"name": "z-linear", "selector": sel("x"), "budget": {"count": 5}, "strategy": linear},
                ]),
                vec![&[("x", "true")]],
                vec!["z-linear"],
            ),
            (
                "rule 2: same strategy, the smaller ceiling wins",
                json!([
                    {"name": "a-wide", "selector": sel("x"), "budget": {"percent": 100}, "strategy": fixed},
                    {"name": "z-narrow", "selector": sel("y"), "budget": {"percent": 50}, "strategy": fixed},
                ]),
                vec![
                    &[("x", "true"), ("y", "true")],
                    &[("x", "true"), ("y", "true")],
                    &[("x", "true")],
                    &[("x", "true")],
                ],
                vec!["z-narrow", "z-narrow", "a-wide", "a-wide"],
            ),
            (
                "rule 3: same strategy and ceiling, the first name wins",
                json!([
                    {"name": "beta", "selector": sel("x"), "budget": {"count": 2}, "strategy": fixed},
                    {"name": "alpha", "selector": sel("y"), "budget": {"count": 2}, "strategy": fixed},
                ]),
                vec![&[("x", "true"), ("y", "true")]],
                vec!["alpha"],
            ),
        ];
        for (case, comps, rows, want) in cases {
            let p = policy(comps, default.clone());
            let nodes = labels(&rows);
            let sk = legacy_sk(None, None);
            let got = build(
                &sk,
                Policy::Named(&p),
                &members(&nodes),
                &SkyhookStatus::default(),
                Timestamp::UNIX_EPOCH,
            );
            assert_eq!(
                got.last().map(|c| c.name.as_str()),
                Some("__default__"),
                "case: {case}"
            );
            let home = |node: &str| {
                got.iter()
                    .find(|c| c.nodes.iter().any(|n| n == node))
                    .map(|c| c.name.clone())
            };
            for (i, w) in want.iter().enumerate() {
                assert_eq!(
                    home(&format!("n{i}")).as_deref(),
                    Some(*w),
                    "case: {case}: node n{i}"
                );
            }
            let placed: usize = got.iter().map(|c| c.nodes.len()).sum();
            assert_eq!(
                placed,
                nodes.len(),
                "case: {case}: every node in one compartment"
            );
        }
    }

    #[test]
    fn a_missing_policy_has_no_compartments_and_stored_batch_state_is_continued() {
        let sk = legacy_sk(None, None);
        let nodes = labels(&[&[]]);
        assert!(
            build(
                &sk,
                Policy::Missing("gone"),
                &members(&nodes),
                &SkyhookStatus::default(),
                Timestamp::UNIX_EPOCH
            )
            .is_empty()
        );
        let stored = BatchState {
            current_batch: 3,
            consecutive_failures: 1,
            completed_nodes: 4,
            last_batch_size: 2,
            last_batch_failed: true,
            ..BatchState::default()
        };
        let mut prior = SkyhookStatus::default();
        prior.compartment_statuses.insert(
            "__default__".into(),
            CompartmentStatus {
                batch_state: Some(stored.clone()),
                ..CompartmentStatus::default()
            },
        );
        let got = build(
            &sk,
            Policy::Legacy,
            &members(&nodes),
            &prior,
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(got[0].batch, stored);
    }

    #[test]
    fn compartment_status_counts_its_own_nodes() {
        let c = Compartment {
            name: "prod".into(),
            budget: DeploymentBudget {
                percent: Some(50),
                count: None,
            },
            strategy: None,
            batch: BatchState::fresh(),
            nodes: vec!["a".into(), "b".into(), "c".into(), "d".into()],
            was_running: false,
            gate: Gate::Open,
            windowed: false,
            soak: None,
            soaking: None,
            soak_failed: Vec::new(),
        };
        let statuses: BTreeMap<String, Status> = [
            ("a", Status::Complete),
            ("b", Status::InProgress),
            ("c", Status::Erroring),
            ("x", Status::Complete),
        ]
        .into_iter()
        .map(|(n, s)| (n.to_string(), s))
        .collect();
        let want = CompartmentStatus {
            matched: 4,
            ceiling: 2,
            in_progress: 1,
            completed: 1,
            progress_percent: 25,
            batch_state: None,
        };
        assert_eq!(status(&c, &statuses), want, "no strategy: no batch state");
        let with = Compartment {
            strategy: Some(fixed(1)),
            ..c
        };
        assert_eq!(
            status(&with, &statuses).batch_state,
            Some(BatchState::fresh())
        );
        let empty = Compartment {
            nodes: Vec::new(),
            ..with
        };
        assert_eq!(status(&empty, &statuses).progress_percent, 0, "no node: 0%");
    }
}
