//! The functional core of the operator: from a snapshot of the world ([`Inputs`]) to the list
//! of writes for one Skyhook ([`Plan`]). Nothing here does I/O, so unit tests drive it with
//! hand-made objects ([`fixtures`]).
//!
//! One pass, straight through (each step a module named for the decision it makes; each reads
//! only what the steps before it produced):
//!
//! 1. [`select`] which nodes are targeted, blocked or gated, and [`facts`] what each carries
//!    (reads `Inputs`);
//! 2. [`release`] the nodes no longer targeted (reads the facts, every node and this Skyhook's
//!    Jobs), and [`config`] which configMap keys moved (reads the facts and the stored status);
//! 3. fold: each node's finished Jobs and Go pods folded into its state, once
//!    ([`stage::fold`]; reads the facts and the node's Jobs);
//! 4. [`compartments`], [`batch`] and [`strategy`] which nodes may start (reads the folds; a
//!    node at work is looked ahead once, [`stage::FoldedNode::advance`], to see whether it has
//!    fresh work);
//! 5. advance: each node that may start work advances once (that look ahead reused), the
//!    others rest ([`stage`], with [`interrupt`] grouping and the [`drain`] decision);
//! 6. [`launch`] Jobs and Job operations, [`metadata`] the node writes, [`events`] (read the
//!    node outcomes);
//! 7. [`status`] the Skyhook status (reads the tally of every node and the compartments), kept
//!    within its byte budget by [`status_budget`] ([`census`] counts every node for the
//!    metrics first), and held back when `Inputs::status_hold` asks for it.
//!
//! [`delete`] plans a deletion instead.

pub mod actions;
pub mod alerts;
pub mod api_handover;
pub mod batch;
pub mod census;
pub mod compartments;
pub mod condition;
pub mod config;
pub mod delete;
pub mod drain;
pub mod dry_run;
pub mod events;
pub mod facts;
pub mod fleet;
pub mod gates;
pub mod health;
pub mod inputs;
pub mod interrupt;
pub mod launch;
pub mod localize;
pub mod metadata;
pub mod mirror;
pub mod node_order;
pub mod notify;
pub mod pod_gate;
pub mod release;
pub mod select;
pub mod spec;
pub mod stage;
pub mod stall;
pub mod status;
pub mod status_budget;
pub mod strategy;
pub mod upstream_conditions;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;

pub use crate::node::NodeView;
pub use actions::{
    CompartmentPlan, Eviction, JobOp, NodePatch, Note, Plan, Reports, Target, job_node,
};
pub use delete::plan_delete;
pub use drain::PodInfo;
pub use inputs::{Elsewhere, Inputs};
pub use select::{targeted, tolerates_cordon};

use crate::crd::{Skyhook, SkyhookStatus};
use crate::jobs::JobView;
use crate::schema::{self, NodeState, RuntimeTaints, State, Status};
use crate::settings::Config;
use batch::Seen;
use compartments::{Compartment, Member, Policy};
use events::Started;
use facts::{NodeFacts, Switches};
use metadata::MetaInput;
use select::Block;
use spec::SpecView;
use stage::{FoldedNode, NodeAction, NodeInput, NodeNote, NodeOutcome, RetryPolicy};

/// The planner of one pass: what stays fixed while it runs, and the steps over it.
struct Planner<'a> {
    inp: &'a Inputs<'a>,
    name: String,
    spec: &'a SpecView<'a>,
    /// The spec as nodes whose config updates differ see it ([`SpecView::updates_for`]).
    node_specs: &'a BTreeMap<String, SpecView<'a>>,
    policy: Policy<'a>,
    switches: Switches,
    by_node: BTreeMap<&'a str, Vec<&'a JobView>>,
    /// Nodes whose stage Job runs (or ran) far longer than on their peers.
    stalls: BTreeMap<String, stall::Stall>,
    meta: MetaInput<'a>,
}

/// What the pass learns node by node, for the status and the requeue.
#[derive(Default)]
struct Tally {
    events: Started,
    node_states: BTreeMap<String, NodeState>,
    node_statuses: BTreeMap<String, Status>,
    held: Vec<String>,
    /// Nodes that gave their batch slot back for a fault of their own (stalled, refusing writes).
    released: Vec<String>,
    blocked_nodes: Vec<String>,
    /// Nodes whose interrupt waits for pods matching `podNonInterruptLabels`.
    non_interrupt_nodes: Vec<String>,
    /// Those nodes' waits: since when, which pods, and whether the slot was given back.
    protected_waits: Vec<status::ProtectedWaitRow>,
    /// Every node waits for this `sequencing: all` Skyhook ordered before this one.
    waiting_on: Option<String>,
    /// `nodePriority` with this pass's picks, and each listed node's `SKYHOOK_NODE_ORDER`.
    node_priority: BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    node_orders: BTreeMap<String, i64>,
    ignored_nodes: Vec<String>,
    /// Why some nodes' stored progress cannot be read, one line per node.
    unreadable: Vec<(String, String)>,
    any_active: bool,
    retry_at: Option<Timestamp>,
    /// The earliest opening of a maintenance window that holds a compartment.
    next_window: Option<Timestamp>,
    /// Nodes waiting for the health gate, and those past its timeout, each with why.
    health_holding: Vec<(String, String)>,
    health_failed: Vec<(String, String)>,
    /// The alert gate holds the next batches: its source is read again soon.
    alert_holds: bool,
}

/// The planner's entry point for a live (not deleting) Skyhook.
pub fn plan(inp: &Inputs) -> Plan {
    let mut plan = plan_live(inp);
    hold_status(&mut plan, inp.status, inp.status_hold);
    plan
}

/// A status held back after a slow one is written by the first pass after the hold, which the
/// requeue makes sure of; like a status write that met a 409, its Events wait for it. Only
/// progress waits: news about the Skyhook as a whole (its aggregate status, a condition, a
/// generation observed) is written at once.
fn hold_status(plan: &mut Plan, stored: Option<&SkyhookStatus>, hold: Option<Duration>) {
    let (Some(desired), Some(hold)) = (plan.status.as_ref(), hold) else {
        return;
    };
    if stored.is_none_or(|s| status::news(s, desired)) {
        return;
    }
    plan.hold_status();
    plan.requeue_after = Some(plan.requeue_after.map_or(hold, |r| r.min(hold)));
}

fn plan_live(inp: &Inputs) -> Plan {
    let sk = inp.skyhook;
    let cfg = inp.config;
    let no_status = SkyhookStatus::default();
    let prior = inp.status.unwrap_or(&no_status);
    let runtime_taints = RuntimeTaints::new(&cfg.runtime_required_taint);
    let tolerations = select::job_tolerations(sk, &runtime_taints);
    // Nodes whose stored progress cannot be read are left out of the pass: no write, no Job,
    // no budget slot; the status and an Event name them.
    let waiting_on = select::waiting_on(sk, &inp.fleet(), inp.nodes).map(|s| s.name_any());
    let (facts, unreadable): (Vec<NodeFacts>, Vec<NodeFacts>) =
        facts::gather(inp, &tolerations, waiting_on.is_some())
            .into_iter()
            .partition(|f| f.unreadable.is_none());
    // Nodes whose auto-taint was refused are left out of every Skyhook: not counted, no work,
    // only the taint retried (upstream's D47).
    let (refused, mut facts): (Vec<NodeFacts>, Vec<NodeFacts>) = facts
        .into_iter()
        .partition(|f| inp.refused_auto_taints.contains(&f.name));
    let updates = config::config_updates(sk, inp.configmaps, prior, &facts);
    let spec = SpecView::new(&sk.spec.packages, &sk.spec.additional_tolerations, &updates)
        .serial(sk.spec.serial);
    let node_updates: BTreeMap<String, BTreeMap<String, Vec<String>>> = facts
        .iter()
        .filter_map(|f| Some((f.name.clone(), spec.updates_for(&f.prior, &f.applied)?)))
        .collect();
    let node_specs: BTreeMap<String, SpecView> = node_updates
        .iter()
        .map(|(n, u)| (n.clone(), spec.with_updates(u)))
        .collect();
    let by_node = jobs_by_node(inp.jobs);
    let stalls = stall::stalled(&by_node, inp.now, cfg.stalled_node_slot_release);
    let planner = Planner {
        inp,
        name: sk.name_any(),
        spec: &spec,
        node_specs: &node_specs,
        policy: Policy::of(sk, inp.policies),
        switches: Switches::of(sk, inp.invalid.is_empty()),
        by_node,
        stalls,
        meta: MetaInput {
            skyhook: sk,
            fleet: inp.fleet(),
            runtime_taints: &runtime_taints,
            operator_version: inp.operator_version,
        },
    };
    let targeted: BTreeSet<&str> = facts
        .iter()
        .chain(&unreadable)
        .chain(&refused)
        .map(|f| f.name.as_str())
        .collect();
    let released = release::release(&planner.meta, inp.nodes, &targeted, &planner.by_node);
    let reset = planner.policy.resets_on_completion(sk) && versions_changed(sk, prior);
    // Each node's finished work is folded once; the batch is chosen from the folds; then each
    // node that may start work advances once (the batch choice's own look ahead reused).
    let folds: Vec<FoldedNode> = facts.iter().map(|f| planner.fold(f)).collect();
    let (allowed, compartments, mut advanced) = planner.batch(
        &facts,
        &folds,
        &unreadable,
        prior,
        reset,
        released.holds_budget,
    );
    let mut node_patches = released.patches;
    node_patches.extend(
        refused
            .iter()
            .filter_map(|f| metadata::auto_taint_retry(&planner.meta, f.node)),
    );
    let mut plan = Plan {
        add_finalizer: !sk.finalizers().iter().any(|f| f == schema::FINALIZER),
        version_annotation: version_annotation(sk, inp.operator_version),
        node_patches,
        job_ops: released.job_ops,
        events: released.notes,
        ..Plan::default()
    };
    let mut tally = Tally {
        waiting_on,
        next_window: compartments
            .iter()
            .filter_map(|c| match c.gate {
                crate::crd::window::Gate::Closed { next } => next,
                crate::crd::window::Gate::Open => None,
            })
            .chain(compartments.iter().filter_map(|c| c.soaking))
            .min(),
        ..Tally::default()
    };
    tally.node_priority = node_order::picked(&prior.node_priority, &allowed, inp.now);
    tally.node_orders = node_order::orders(&tally.node_priority, prior.node_order_offset);
    for f in &unreadable {
        let why = f.unreadable.clone().unwrap_or_default();
        if !status::already_unreadable(prior, &why) {
            let note = Note::node(&f.name, schema::NODE_STATE_UNREADABLE_REASON, why.clone());
            plan.events.push(note.warning());
        }
        tally.unreadable.push((f.name.clone(), why));
        tally.node_statuses.insert(f.name.clone(), Status::Blocked);
    }
    for failure in status::new_write_failures(prior, inp.write_failures) {
        let note = Note::skyhook(schema::WRITE_FAILED_REASON, failure.clone());
        plan.events.push(note.warning());
    }
    for (f, node) in facts.iter_mut().zip(folds) {
        let may_start = planner.switches.can_run() && allowed.contains(&f.name) && f.eligible();
        let o = match advanced.remove(&f.name) {
            Some(o) if may_start => o,
            _ if may_start => node.advance(),
            _ => node.rest(),
        };
        planner.decide(f, o, &mut plan, &mut tally);
        f.release_progress();
    }
    plan.events.extend(events::skyhook_starts(&tally.events));
    for f in facts.iter().filter(|f| f.rebooted) {
        let notes = events::reboot(&planner.name, &f.name);
        plan.events.extend(notes.map(|n| n.about(&f.name)));
    }
    plan.compartments = compartments
        .iter()
        .map(|c| compartments::plan_of(c, &allowed))
        .collect();
    planner.finish_status(
        prior,
        updates.clone(),
        &facts,
        compartments,
        &mut tally,
        &mut plan,
    );
    if !planner.switches.valid {
        // An invalid Skyhook is never acted upon: only its status says why.
        freeze(&mut plan, cfg);
        return plan;
    }
    plan.configmaps
        .extend(config::package_configmaps(sk, inp.configmaps, cfg));
    plan.stale_configmaps = config::stale_package_configmaps(sk, inp.configmaps, inp.jobs);
    plan.requeue_after = Some(requeue(&tally, &plan, inp, cfg));
    plan
}

impl<'a> Planner<'a> {
    /// The spec as node `name` sees it.
    fn spec_of(&self, name: &str) -> &'a SpecView<'a> {
        self.node_specs.get(name).unwrap_or(self.spec)
    }

    fn fold(&self, f: &NodeFacts<'a>) -> FoldedNode<'_> {
        let cfg = self.inp.config;
        stage::fold(NodeInput {
            spec: self.spec_of(&f.name),
            state: f.prior.clone(),
            applied: f.applied.clone(),
            folded: f.folded.clone(),
            host: f.host,
            jobs: self.by_node.get(f.name.as_str()).map_or(&[], Vec::as_slice),
            retry: RetryPolicy {
                base: cfg.retry_base,
                max: cfg.retry_max,
                limit: cfg.job_backoff_limit,
            },
            failed_jobs_kept: cfg.failed_jobs_kept,
            now: self.inp.now,
        })
    }

    /// Pick each compartment's batch from what the folds say. Nodes whose state cannot be read
    /// start nothing, but one that still holds our cordon or runs a Job of ours is at work, and
    /// the budget counts it. `reset` starts every compartment over from batch 1 (§6.6, a
    /// version change). `hold`: a node that left still runs a Job of ours, so no new node
    /// starts. Also returns the nodes the choice had to advance to see whether they have fresh
    /// work, as advanced.
    fn batch(
        &self,
        facts: &[NodeFacts],
        folds: &[FoldedNode],
        unreadable: &[NodeFacts],
        prior: &crate::crd::SkyhookStatus,
        reset: bool,
        hold: bool,
    ) -> (
        BTreeSet<String>,
        Vec<Compartment>,
        BTreeMap<String, NodeOutcome>,
    ) {
        let mut advanced = BTreeMap::new();
        let mut seen: Vec<Seen> = Vec::with_capacity(facts.len() + unreadable.len());
        for (f, node) in facts.iter().zip(folds) {
            let o = node.outcome();
            let (settled, health) = self.gate(f, o);
            let release = self.inp.config.non_interrupt_slot_release;
            let mut s = Seen::of(f, o, settled)
                .gated(&health, o.active)
                .protected(f, o.active, self.inp.now, release)
                .stalled(f, self.stalls.get(&f.name))
                .drain_timed_out(f, o.active, self.inp.now)
                .refused(
                    o.active || f.holds_cordon,
                    self.inp.refused_nodes.contains(&f.name),
                );
            s.unhealthy |= self.sick(f);
            if self.may_have_fresh_work(f, &s) {
                let ahead = node.advance();
                s.busy = has_fresh_work(o, &ahead);
                advanced.insert(f.name.clone(), ahead);
            }
            seen.push(s);
        }
        seen.extend(unreadable.iter().map(|f| {
            Seen {
                name: f.name.clone(),
                busy: f.holds_cordon
                    || self
                        .by_node
                        .get(f.name.as_str())
                        .is_some_and(|jobs| jobs.iter().any(|j| !j.finished())),
                settled: false,
                erroring: false,
                eligible: false,
                unhealthy: f.node.not_ready,
                resuming: false,
                released: false,
            }
        }));
        let members: Vec<Member> = facts
            .iter()
            .chain(unreadable)
            .map(|f| Member {
                name: &f.name,
                labels: f.node.selector_labels(),
            })
            .collect();
        let mut compartments =
            compartments::build(self.inp.skyhook, self.policy, &members, prior, self.inp.now);
        if reset {
            compartments::reset(&mut compartments);
        }
        let can_run = self.switches.can_run() && !hold;
        if compartments.is_empty() {
            // The policy is missing: work in flight finishes, nothing new starts.
            let all: Vec<&Seen> = seen.iter().collect();
            return (batch::allowed(&all, 0, false), compartments, advanced);
        }
        let by_name: BTreeMap<&str, &Seen> = seen.iter().map(|s| (s.name.as_str(), s)).collect();
        // §6.4: a batch state just reset on completion is not evaluated again.
        let evaluate = prior.status != Some(Status::Complete);
        let mut allowed = BTreeSet::new();
        let alert_holds = self.alert_hold().is_some_and(|(_, h)| h.holds());
        let at_work_before: BTreeSet<String> = prior
            .node_status
            .iter()
            .filter(|(_, s)| matches!(s, Status::InProgress | Status::Erroring))
            .map(|(n, _)| n.clone())
            .collect();
        for c in &mut compartments {
            let members: Vec<&Seen> = c
                .nodes
                .iter()
                .filter_map(|n| by_name.get(n.as_str()).copied())
                .collect();
            // Outside its maintenance windows, or while matching alerts fire, a compartment
            // finishes what runs and starts nothing.
            let open = c.gate == crate::crd::window::Gate::Open && !alert_holds;
            let pass = batch::BatchPass {
                can_run: can_run && open,
                evaluate,
                now: self.inp.now,
                at_work_before: &at_work_before,
            };
            allowed.extend(batch::select(c, &members, &pass));
        }
        (allowed, compartments, advanced)
    }

    /// A node of the batch at work (stored status `in_progress` or `erroring`) that sits between
    /// two stages, or beside a failed package has others still due, stays in its batch: it has
    /// fresh work ([`has_fresh_work`]). Only such a node is worth the look ahead.
    fn may_have_fresh_work(&self, f: &NodeFacts, seen: &Seen) -> bool {
        let stored = f.node.annotation(&schema::status_annotation(&self.name));
        let at_work = matches!(
            Status::from_annotation(stored),
            Status::InProgress | Status::Erroring
        );
        // A node back from its wait for protected pods waits for the next batch choice.
        !seen.busy && !seen.settled && seen.eligible && !seen.resuming && at_work
    }

    /// A node waiting for protected pods, for the conditions. One this pass did not judge
    /// again (its slot given back) keeps its stored clock, with the pods as listed now.
    fn protected_wait(&self, f: &NodeFacts, o: &mut NodeOutcome, tally: &mut Tally) {
        let now = self.inp.now;
        if o.protected_since.is_none()
            && let Some(since) = f.host.protected_since
            && let Some(pods) = f.host.pods
        {
            let wait = schema::ProtectedWait {
                since,
                pods: drain::protected_pods(pods),
            };
            if !wait.pods.is_empty() {
                o.blocked
                    .get_or_insert_with(|| wait.blocked_message(", its batch slot given back"));
                o.protected_pods = wait.pods;
                o.protected_since = Some(Some(since));
            }
        }
        if o.protected_pods.is_empty() {
            return;
        }
        let since = o.protected_since.flatten().unwrap_or(now);
        let release = self.inp.config.non_interrupt_slot_release;
        tally.non_interrupt_nodes.push(f.name.clone());
        tally.protected_waits.push(status::ProtectedWaitRow {
            node: f.name.clone(),
            wait: schema::ProtectedWait {
                since,
                pods: o.protected_pods.clone(),
            },
            released: now.duration_since(since).unsigned_abs() >= release,
        });
    }

    /// A node whose drain is past its timeout, not judged this pass (its slot given back): it
    /// reads as one judged, `erroring` with the reason.
    fn parked_drain(&self, f: &NodeFacts, o: &mut NodeOutcome) {
        let Some(start) = f.host.drain_started else {
            return;
        };
        let drained = matches!(
            drain::readiness(true, f.host.pods, false),
            drain::Readiness::Ready
        );
        if !o.drain_timed_out && !o.active && !drained && f.block.is_none() {
            stage::overdue(self.inp.now, start, f.host.drain_timeout, o);
        }
    }

    /// A node that gave its slot back for its own fault (issue 51, item 3), for `NodeBlocked`.
    fn bad_node(&self, f: &NodeFacts, tally: &mut Tally) {
        if self.inp.refused_nodes.contains(&f.name) {
            tally.released.push(format!(
                "node {}: its writes are refused for good (see {}); its batch slot given back until one goes through",
                f.name,
                schema::WRITE_FAILED_CONDITION
            ));
        } else if let Some(s) = self.stalls.get(&f.name)
            && f.block.is_none()
            && !f.holds_cordon
        {
            let release = self.inp.config.stalled_node_slot_release;
            tally
                .released
                .push(format!("node {}: {}", f.name, s.message(release)));
        }
    }

    /// The policy's alert gate and its verdict this pass (`None`: no alert gate).
    fn alert_hold(&self) -> Option<(&'a crate::crd::AlertGate, alerts::AlertHold)> {
        let Policy::Named(p) = self.policy else {
            return None;
        };
        let gate = p.spec.alert_gate.as_ref()?;
        let reading = self.inp.alerts?;
        Some((gate, alerts::judge(gate, reading)))
    }

    /// Whether the node is settled once its health gate has spoken, and the gate's verdict.
    fn gate(&self, f: &NodeFacts, o: &NodeOutcome) -> (bool, health::Health) {
        let raw = self.spec_of(&f.name).settled(&o.state, &o.applied);
        let verdict = health::judge(&health::GateInput {
            skyhook: &self.name,
            gate: self.inp.skyhook.spec.health_gate.as_ref(),
            node: f.node,
            settled: raw,
            pods: f.host.pods,
            checks: self.checks_of(f),
            now: self.inp.now,
        });
        (raw && !verdict.waits(), verdict)
    }

    /// A node the health gate would hold now (its pods or node condition fail), whatever its
    /// state: what a soaking batch watches besides the kubelet's Ready.
    fn sick(&self, f: &NodeFacts) -> bool {
        let Some(gate) = self.inp.skyhook.spec.health_gate.as_ref() else {
            return false;
        };
        health::sick(&health::GateInput {
            skyhook: &self.name,
            gate: Some(gate),
            node: f.node,
            settled: true,
            pods: f.host.pods,
            checks: &[],
            now: self.inp.now,
        })
    }

    fn checks_of(&self, f: &NodeFacts) -> &'a [crate::jobs::CheckRun] {
        self.inp
            .health_checks
            .get(&f.name)
            .map_or(&[], Vec::as_slice)
    }

    /// The health check Job the verdict asks for, if any.
    fn health_check(&self, f: &NodeFacts, verdict: &health::Health, plan: &mut Plan) {
        let sk = self.inp.skyhook;
        let Some(gate) = sk.spec.health_gate.as_ref() else {
            return;
        };
        if !self.switches.can_run() {
            return;
        }
        let inp = health::GateInput {
            skyhook: &self.name,
            gate: Some(gate),
            node: f.node,
            settled: true,
            pods: f.host.pods,
            checks: self.checks_of(f),
            now: self.inp.now,
        };
        let (Some((since, attempt)), Some(check)) =
            (health::check_to_start(&inp, verdict), gate.check.as_ref())
        else {
            return;
        };
        let deadline = i64::try_from(gate.timeout().as_secs()).unwrap_or(i64::MAX);
        let since = since.to_string();
        let cfg = self.inp.config;
        if let Some(job) =
            crate::jobs::health_check_job(sk, check, &f.name, &since, attempt, deadline, cfg)
        {
            plan.health_check_jobs.push(job);
        }
    }

    /// Adds what one node's outcome needs to the plan.
    fn decide(&self, f: &NodeFacts, mut o: NodeOutcome, plan: &mut Plan, tally: &mut Tally) {
        tally.any_active |= o.active;
        if let Some(r) = o.retry_at {
            tally.retry_at = Some(tally.retry_at.map_or(r, |x| x.min(r)));
        }
        match f.block {
            Some(Block::Ignored) => tally.ignored_nodes.push(f.name.clone()),
            Some(Block::Taint) => tally.blocked_nodes.push(f.name.clone()),
            None => {}
        }
        let order = tally.node_orders.get(&f.name).copied().unwrap_or(0);
        self.parked_drain(f, &mut o);
        let launched = launch::node_work(self.inp, f, &o, order, plan);
        // A start whose Job waits for the next pass is announced by the pass that creates it.
        let notes: Vec<NodeNote> = o
            .notes
            .iter()
            .filter(|n| launched || !matches!(n, NodeNote::Started { .. }))
            .cloned()
            .collect();
        let notes = events::node_notes(&self.name, &f.name, &notes, &mut tally.events);
        plan.events
            .extend(notes.into_iter().map(|n| n.about(&f.name)));
        self.protected_wait(f, &mut o, tally);
        if let Some(why) = &o.blocked {
            tally.held.push(format!("node {}: {why}", f.name));
        }
        self.bad_node(f, tally);
        self.drain(f, &o, plan);
        let (settled, verdict) = self.gate(f, &o);
        let status = match (
            metadata::node_status(self.switches, f, settled, &o),
            verdict.status(),
        ) {
            (Status::Waiting | Status::InProgress | Status::Erroring, Some(gated)) => gated,
            (status, _) => status,
        };
        let now = self.inp.now;
        plan.events
            .extend(health::notes(&self.name, f.node, &verdict, now));
        match &verdict {
            health::Health::Holding { why, .. } => {
                tally.health_holding.push((f.name.clone(), why.clone()));
            }
            health::Health::Failed { why, .. } => {
                tally.health_failed.push((f.name.clone(), why.clone()));
            }
            _ => {}
        }
        self.health_check(f, &verdict, plan);
        let passed = matches!(verdict, health::Health::Passed { .. });
        if settled && (passed || !self.spec_of(&f.name).node_complete(&f.prior)) {
            let msg = schema::node_complete_message(&self.name);
            plan.events
                .push(Note::node(&f.name, schema::STATE_REASON, msg));
        }
        let mut patch = metadata::node_patch(&self.meta, f, &o, status, settled);
        health::clock(&self.name, f.node, &verdict, &mut patch);
        let was_working = f
            .prior
            .iter()
            .any(|(_, e)| e.state == Some(State::InProgress));
        patch.starts = o.any_state(State::InProgress) && !was_working;
        if self.inp.refused_nodes.contains(&f.name) {
            // Written every pass, so the first that goes through brings the node back.
            patch.probe = true;
            if patch.is_empty() {
                patch.annotations.insert(
                    schema::status_annotation(&self.name),
                    Some(status.to_string()),
                );
            }
        }
        if !patch.is_empty() {
            plan.node_patches.push(patch);
        }
        if let Some(c) = metadata::node_conditions(&self.name, f.node, &o.state, settled, now) {
            plan.node_conditions.push((f.name.clone(), c, Vec::new()));
        }
        tally.node_states.insert(f.name.clone(), o.state);
        tally.node_statuses.insert(f.name.clone(), status);
    }

    fn drain(&self, f: &NodeFacts, o: &NodeOutcome, plan: &mut Plan) {
        if o.drain_timed_out {
            let msg = o.blocked.clone().unwrap_or_default();
            let msg = format!("node {}: {msg}", f.name);
            plan.events
                .push(Note::node(&f.name, schema::DRAIN_TIMEOUT_REASON, msg.clone()).warning());
            plan.events.push(
                Note::skyhook(schema::DRAIN_TIMEOUT_REASON, msg)
                    .warning()
                    .about(&f.name),
            );
        }
        if o.evict.is_empty() {
            return;
        }
        let rules = drain::DrainRules::of(self.inp.skyhook.spec.drain_config.as_ref());
        plan.evictions
            .extend(o.evict.iter().map(|(namespace, pod)| Eviction {
                node: f.name.clone(),
                namespace: namespace.clone(),
                pod: pod.clone(),
                delete: rules.delete,
                grace_seconds: rules.grace_seconds,
            }));
        let packages = self.inp.skyhook.spec.packages.values();
        let spec = self.spec_of(&f.name);
        if let Some(pkg) = packages.into_iter().find(|p| spec.has_interrupt(p)) {
            let msg = schema::node_drain_message(&f.name, &pkg.name, &pkg.version, &self.name);
            plan.events
                .push(Note::node(&f.name, schema::INTERRUPT_REASON, msg));
        }
    }

    /// The desired status, and the Events its changes are worth.
    fn finish_status(
        &self,
        prior: &crate::crd::SkyhookStatus,
        updates: BTreeMap<String, Vec<String>>,
        facts: &[NodeFacts],
        mut compartments: Vec<Compartment>,
        tally: &mut Tally,
        plan: &mut Plan,
    ) {
        let mut base = status::carried(prior);
        plan.boot_ids_before.clone_from(&prior.node_boot_ids);
        base.config_updates = updates;
        base.node_boot_ids = facts
            .iter()
            .filter_map(|f| Some((f.name.clone(), f.boot_id.clone()?)))
            .collect();
        let mut facts = status::SkyhookFacts {
            skyhook: self.inp.skyhook,
            prior: &base,
            node_states: std::mem::take(&mut tally.node_states),
            node_statuses: std::mem::take(&mut tally.node_statuses),
            paused: self.switches.paused,
            disabled: self.switches.disabled,
            invalid: self.inp.invalid,
            started: &tally.events.started,
            failures: &tally.events.failures,
            held: &tally.held,
            released: &tally.released,
            blocked_nodes: std::mem::take(&mut tally.blocked_nodes),
            non_interrupt_nodes: std::mem::take(&mut tally.non_interrupt_nodes),
            protected_waits: tally.protected_waits.clone(),
            slot_release: self.inp.config.non_interrupt_slot_release,
            ignored_nodes: std::mem::take(&mut tally.ignored_nodes),
            unreadable: std::mem::take(&mut tally.unreadable),
            write_failures: self.inp.write_failures,
            drain_blocks: self.inp.drain_blocks,
            missing_policy: match self.policy {
                Policy::Missing(name) => Some(name),
                _ => None,
            },
            waiting_on: tally.waiting_on.clone(),
            node_priority: std::mem::take(&mut tally.node_priority),
            stopped: compartments::stopped(&self.name, &compartments),
            compartment_statuses: None,
            now: self.inp.now,
        };
        // The compartments are final before the status is derived: a rollout completing now
        // starts its batches over when the policy says so (§6.4).
        let completed =
            status::aggregate(&facts) == Status::Complete && prior.status != Some(Status::Complete);
        if completed && self.policy.resets_on_completion(self.inp.skyhook) {
            compartments::reset(&mut compartments);
        }
        let window_holds = compartments::window_holds(&compartments, &facts.node_statuses);
        // A missing policy keeps the stored batch state for when it comes back.
        if !matches!(self.policy, Policy::Missing(_)) {
            let statuses = &facts.node_statuses;
            let of = |c: &Compartment| (c.name.clone(), compartments::status(c, statuses));
            facts.compartment_statuses = Some(compartments.iter().map(of).collect());
        }
        let mut desired = status::skyhook_status(facts);
        plan.policy_label = self.policy.label().to_string();
        let mut census = census::Census::of(self.inp.skyhook, &desired);
        census.health_holding = tally.health_holding.len();
        census.health_failed = tally.health_failed.len();
        plan.census = Some(census);
        let budget = self.inp.config.status_node_budget;
        let trim = status_budget::fit(&mut desired, budget);
        let generation = self.inp.skyhook.metadata.generation.unwrap_or(0);
        let (list, now) = (&mut desired.conditions, self.inp.now);
        status_budget::condition(list, trim, &self.name, budget, generation, now);
        let present = (!window_holds.is_empty()).then(|| {
            let holds: Vec<(String, Option<String>)> = window_holds
                .iter()
                .map(|(c, t)| (c.clone(), t.map(|t| t.to_string())))
                .collect();
            let message = schema::maintenance_window_message(&holds);
            (schema::OUTSIDE_MAINTENANCE_WINDOW_REASON, message)
        });
        let was_held = prior
            .conditions
            .iter()
            .any(|c| c.type_ == schema::MAINTENANCE_WINDOW_CONDITION);
        if let (Some((reason, message)), false) = (&present, was_held) {
            plan.events.push(Note::skyhook(reason, message.clone()));
        }
        let kind = schema::MAINTENANCE_WINDOW_CONDITION;
        condition::present_while(list, kind, present, generation, now);
        let alert = self.alert_hold();
        tally.alert_holds = alert.as_ref().is_some_and(|(_, h)| h.holds());
        gates::alerts(
            list,
            prior,
            alert.as_ref(),
            &mut plan.events,
            generation,
            now,
        );
        gates::health(
            list,
            &tally.health_failed,
            &tally.health_holding,
            generation,
            now,
        );
        gates::soak(
            list,
            prior,
            &compartments,
            &mut plan.events,
            generation,
            now,
        );
        if self.inp.config.notifications {
            let meta = &self.inp.skyhook.metadata;
            // The status the change is from, not the object's resourceVersion: a pass's own
            // finalizer write changes that, and a pass repeated after a crash between that write
            // and the status would name its notifications anew (sent twice).
            let from = schema::sha256_hex(serde_json::to_vec(prior).unwrap_or_default(), 16);
            let src = notify::Source {
                skyhook: &self.name,
                uid: meta.uid.as_deref().unwrap_or(""),
                version: &from,
                time: now.to_string(),
            };
            plan.notifications = notify::changes(&src, prior, &desired);
        }
        let changes = events::status_changes(prior, &desired, self.inp.invalid);
        plan.events.extend(changes.into_iter().map(Note::of_status));
        if desired != *prior {
            plan.status = Some(desired);
        }
    }
}

/// Whether a node that advanced would start a package that is not failing: a node whose only
/// work left is retrying what failed has finished its batch (§6.4 counts it as failed) and
/// waits to be picked again.
fn has_fresh_work(folded: &NodeOutcome, ahead: &NodeOutcome) -> bool {
    ahead.actions.iter().any(|a| match a {
        NodeAction::Run { package, .. } => folded
            .state
            .get(&package.name, &package.version)
            .is_none_or(|e| e.state != Some(State::Erroring)),
        _ => false,
    })
}

fn jobs_by_node(jobs: &[Arc<JobView>]) -> BTreeMap<&str, Vec<&JobView>> {
    let mut by_node: BTreeMap<&str, Vec<&JobView>> = BTreeMap::new();
    for j in jobs.iter().map(|j| &**j) {
        by_node.entry(j.node.as_str()).or_default().push(j);
    }
    by_node
}

/// §6.6: a package of the stored list changed version or left the spec.
fn versions_changed(sk: &Skyhook, prior: &crate::crd::SkyhookStatus) -> bool {
    prior
        .package_list
        .split(',')
        .filter_map(|p| p.split_once(':'))
        .any(|(name, version)| {
            sk.spec
                .packages
                .values()
                .all(|p| !(p.name == name && p.version == version))
        })
}

/// The reference writes its version on every Skyhook it reconciles (§11.4 #20); its plugin gates
/// pause/disable on it. `None` when the annotation already says so.
fn version_annotation(sk: &Skyhook, operator_version: &str) -> Option<String> {
    let want = schema::skyhook_version_value(operator_version);
    (sk.annotations().get(schema::VERSION_ANNOTATION) != Some(&want)).then_some(want)
}

/// Drops every write but the status (and its Events).
fn freeze(plan: &mut Plan, cfg: &Config) {
    // No node state is written, so no outcome is stored: a Job or Go pod whose outcome would be
    // marked recorded (or counted, or deleted) now must stay to be read again once valid.
    plan.job_ops
        .retain(|(_, op)| matches!(op, JobOp::Fail { .. } | JobOp::Delete { .. }));
    plan.node_patches.clear();
    plan.node_conditions.clear();
    plan.configmaps.clear();
    plan.create_jobs.clear();
    plan.health_check_jobs.clear();
    plan.evictions.clear();
    plan.requeue_after = Some(cfg.default_interval);
}

/// When to look again without a watch event.
fn requeue(tally: &Tally, plan: &Plan, inp: &Inputs, cfg: &Config) -> Duration {
    let usual = usual_requeue(tally, plan, inp, cfg);
    // The alert source is read again every few seconds while it holds the rollout.
    let usual = if tally.alert_holds {
        usual.min(Duration::from_secs(10))
    } else {
        usual
    };
    // A maintenance window opening wakes the Skyhook: nothing else may happen then.
    match tally.next_window {
        Some(t) => {
            let wait = t.duration_since(inp.now).as_millis().max(200) as u64;
            usual.min(Duration::from_millis(wait))
        }
        None => usual,
    }
}

fn usual_requeue(tally: &Tally, plan: &Plan, inp: &Inputs, cfg: &Config) -> Duration {
    if plan.deferred_jobs > 0 {
        // More Jobs are due than one pass creates: the next pass goes on with them.
        Duration::from_secs(1)
    } else if !tally.held.is_empty() || !tally.protected_waits.is_empty() {
        // Pods on other namespaces are not watched: look again soon (a node that gave its
        // slot back while protected pods run is held too, though this pass did not judge it).
        Duration::from_secs(3)
    } else if !tally.health_holding.is_empty() {
        // The pods a health gate waits for are not watched: look again soon.
        Duration::from_secs(3)
    } else if !inp.write_failures.is_empty() {
        // Retry the failed writes soon, without hammering an API server that refuses them.
        Duration::from_secs(10)
    } else if tally.waiting_on.is_some() {
        // The Skyhook waited on completes on nodes this one does not target, whose changes do
        // not wake this Skyhook: look again soon.
        Duration::from_secs(5)
    } else if tally.any_active || !plan.create_jobs.is_empty() {
        Duration::from_secs(30)
    } else if !tally.health_failed.is_empty() {
        // A node past its health gate's timeout completes once it recovers.
        Duration::from_secs(10)
    } else if let Some(r) = tally.retry_at {
        let wait = r.duration_since(inp.now);
        Duration::from_millis(wait.as_millis().clamp(200, 3_600_000) as u64)
    } else {
        cfg.default_interval
    }
}
