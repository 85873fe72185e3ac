//! A dry run of a whole rollout: the operator's own [`plan`](super::plan) run pass after pass on
//! a copy of the world, each pass's writes applied to the copy and each Job it starts ending
//! after the time its package stage took before (`history`). Nothing is written to the cluster.
//! `kubectl skyhook plan` reads the world and prints the [`Rollout`]; every decision in it
//! (which nodes, which stages, cordons, drains, batches) is the planner's.
//!
//! What the copy cannot know, it assumes and the report says: every stage succeeds, every
//! eviction goes through (one a PodDisruptionBudget refuses today is named), the health and
//! alert gates pass, and other objects' Jobs keep their nodes busy.

mod budgets;
mod explain;
mod history;
mod report;
mod snapshot;
mod world;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

pub use explain::Reason;
pub use report::{
    BatchRun, End, Estimate, FirstPass, InterruptRun, NodeRun, PackageRun, PodEviction, Rollout,
    StageJob,
};
pub use snapshot::Snapshot;

use super::{Inputs, Plan};
use world::Sim;

/// How far the dry run goes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub passes: usize,
    /// Passes in a row that change nothing but wait (a requeue) before it says what holds.
    pub idle_passes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            passes: 20_000,
            idle_passes: 60,
        }
    }
}

/// One pass between two writes: as soon as the watch sees them.
const NEXT_PASS: Duration = Duration::from_secs(1);

/// The planner's inputs over the simulated world at `now`.
fn inputs<'a>(snap: &'a Snapshot, sim: &'a Sim, now: Timestamp) -> Inputs<'a> {
    Inputs {
        skyhook: &sim.skyhook,
        status: sim.status.as_ref(),
        skyhooks: &snap.skyhooks,
        peers: super::fleet::Peers::NONE,
        policies: &snap.policies,
        nodes: &sim.views,
        jobs: &sim.jobs,
        configmaps: &sim.configmaps,
        pods_on_nodes: &sim.pods_on_nodes,
        busy_nodes: &snap.elsewhere.busy,
        interrupting_nodes: &snap.elsewhere.interrupting,
        go_pods: &NO_GO_PODS,
        invalid: &[],
        write_failures: &[],
        drain_blocks: &[],
        refused_auto_taints: &super::inputs::NO_NODES,
        refused_nodes: &super::inputs::NO_NODES,
        health_checks: &super::inputs::NO_CHECKS,
        alerts: None,
        config: &snap.config,
        operator_version: &snap.operator_version,
        now,
        status_hold: None,
        create_room: super::launch::MAX_JOB_CREATES_PER_PASS,
    }
}

static NO_GO_PODS: BTreeMap<String, Vec<crate::jobs::GoPod>> = BTreeMap::new();

/// The plan of the operator's next pass on the world as read.
pub fn next_plan(snap: &Snapshot) -> Plan {
    let sim = Sim::new(snap);
    super::plan(&inputs(snap, &sim, snap.now))
}

/// The whole rollout, pass after pass, until every selected node is complete or something the
/// copy cannot make pass holds it.
pub fn simulate(snap: &Snapshot, limits: Limits) -> Rollout {
    let mut sim = Sim::new(snap);
    let durations = history::Durations::of(&snap.history);
    let selected: Vec<String> = super::targeted(&sim.skyhook, &sim.views)
        .into_iter()
        .map(|n| n.name.clone())
        .collect();
    let before = explain::Before::of(&sim.skyhook, &sim.views);
    let mut log = report::Log::new(snap.now);
    let mut now = snap.now;
    let mut idle = 0;
    let mut end = None;
    let mut passes = 0;
    while passes < limits.passes {
        passes += 1;
        let plan = super::plan(&inputs(snap, &sim, now));
        log.pass(&plan, now, &snap.budgets, &sim.pods);
        let wrote = sim.apply(plan, now, &durations);
        if wrote {
            idle = 0;
            now += NEXT_PASS;
            continue;
        }
        if let Some(due) = sim.next_due() {
            idle = 0;
            now = now.max(due);
            sim.finish_due(now);
            continue;
        }
        if sim.complete(&selected) {
            end = Some(End::Complete);
            break;
        }
        idle += 1;
        match sim.requeue {
            Some(after) if idle < limits.idle_passes => now += after.max(NEXT_PASS),
            _ => {
                end = Some(End::Waiting {
                    reasons: sim.holding(&selected),
                });
                break;
            }
        }
    }
    let end = end.unwrap_or(End::Limit { passes });
    log.finish(report::Finish {
        skyhook: &sim.skyhook,
        kind: snap.api.kind(),
        selected,
        before: &before,
        durations: &durations,
        end,
        passes,
        now,
    })
}

#[cfg(test)]
mod tests;
