//! What a dry run found, pass by pass ([`Log`]), and the report made of it ([`Rollout`]).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use super::budgets;
use super::explain::{Before, Reason};
use super::history::{Durations, Source};
use crate::crd::Skyhook;
use crate::plan::Plan;
use crate::schema::Stage;

/// The dry run of one object's rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    pub kind: String,
    pub name: String,
    /// The DeploymentPolicy, or `legacy`.
    pub policy: String,
    pub selected: Vec<String>,
    /// The first Jobs the operator creates, and the cordons and evictions before them.
    pub first_pass: FirstPass,
    /// The nodes that run something, in the order they start.
    pub nodes: Vec<NodeRun>,
    pub batches: Vec<BatchRun>,
    pub estimate: Estimate,
    pub end: End,
    /// Passes of the planner the dry run made.
    pub passes: usize,
}

impl Rollout {
    /// Nothing would run: no Job, no cordon, no eviction.
    pub fn is_noop(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FirstPass {
    pub jobs: Vec<StageJob>,
    pub cordons: Vec<String>,
    pub evictions: Vec<PodEviction>,
    /// Jobs due but left to the next pass (the per-pass creation limit).
    pub deferred: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageJob {
    pub node: String,
    pub package: String,
    pub version: String,
    pub stage: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRun {
    pub node: String,
    /// Compartment and batch number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<(String, i64)>,
    pub packages: Vec<PackageRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<InterruptRun>,
    /// Seconds from now.
    pub start_s: i64,
    pub end_s: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageRun {
    pub package: String,
    pub version: String,
    pub reason: Reason,
    pub stages: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptRun {
    /// Interrupt types with their packages (`reboot (driver)`).
    pub kinds: Vec<String>,
    pub cordon: bool,
    pub evictions: Vec<PodEviction>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodEviction {
    pub node: String,
    /// `namespace/name`.
    pub pod: String,
    /// A PodDisruptionBudget that refuses it now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchRun {
    pub compartment: String,
    pub number: i64,
    pub nodes: Vec<String>,
    pub start_s: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    pub seconds: i64,
    /// Finished Jobs the stage durations come from.
    pub from_jobs: usize,
    /// Package stages with no finished Job: counted as taking no time.
    pub without_history: Vec<String>,
}

/// How the dry run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum End {
    /// Every selected node complete.
    Complete,
    /// Something the dry run cannot make pass holds it (a pause, a window, a gate, a busy node).
    Waiting { reasons: Vec<String> },
    /// It stopped after this many passes.
    Limit { passes: usize },
}

/// One stage Job the dry run started.
struct Started {
    job: StageJob,
    stage: Stage,
    at: Timestamp,
}

/// Everything the passes did, in order.
pub(super) struct Log {
    start: Timestamp,
    passes: usize,
    first: FirstPass,
    started: Vec<Started>,
    cordoned: BTreeSet<String>,
    evictions: Vec<PodEviction>,
    batches: BTreeMap<String, (String, i64)>,
    batch_starts: Vec<BatchRun>,
    policy: String,
}

pub(super) struct Finish<'a> {
    pub skyhook: &'a Skyhook,
    pub kind: &'a str,
    pub selected: Vec<String>,
    pub before: &'a Before,
    pub durations: &'a Durations,
    pub end: End,
    pub passes: usize,
    pub now: Timestamp,
}

impl Log {
    pub fn new(start: Timestamp) -> Log {
        Log {
            start,
            passes: 0,
            first: FirstPass::default(),
            started: Vec::new(),
            cordoned: BTreeSet::new(),
            evictions: Vec::new(),
            batches: BTreeMap::new(),
            batch_starts: Vec::new(),
            policy: String::new(),
        }
    }

    fn offset(&self, at: Timestamp) -> i64 {
        at.duration_since(self.start).as_secs()
    }

    /// What one pass decided, before it is applied.
    pub fn pass(
        &mut self,
        plan: &Plan,
        now: Timestamp,
        budgets: &[PodDisruptionBudget],
        pods: &BTreeMap<String, Vec<Pod>>,
    ) {
        self.passes += 1;
        self.policy.clone_from(&plan.policy_label);
        let jobs: Vec<StageJob> = plan
            .create_jobs
            .iter()
            .map(|j| StageJob {
                node: j.view.node.to_string(),
                package: j.view.package.to_string(),
                version: j.view.version.to_string(),
                stage: j.view.stage.as_str().to_string(),
            })
            .collect();
        for (job, planned) in jobs.iter().zip(&plan.create_jobs) {
            self.started.push(Started {
                job: job.clone(),
                stage: planned.view.stage,
                at: now,
            });
        }
        let cordons: Vec<String> = plan
            .node_patches
            .iter()
            .filter(|p| p.unschedulable == Some(true))
            .map(|p| p.node.clone())
            .collect();
        self.cordoned.extend(cordons.iter().cloned());
        let evictions = evictions(plan, budgets, pods);
        self.evictions.extend(evictions.iter().cloned());
        // The first Jobs, and the cordons and evictions up to them.
        if self.first.jobs.is_empty() {
            self.first.cordons.extend(cordons);
            self.first.evictions.extend(evictions);
            self.first.jobs = jobs;
            self.first.deferred = plan.deferred_jobs;
        }
        self.batches(plan, now);
    }

    /// A batch is the nodes a compartment starts in one pass: under a policy the planner starts
    /// a whole batch at once; under the legacy budget each freed slot is one.
    fn batches(&mut self, plan: &Plan, now: Timestamp) {
        for c in &plan.compartments {
            let fresh: Vec<String> = c
                .batch
                .iter()
                .filter(|n| !self.batches.contains_key(*n))
                .cloned()
                .collect();
            if fresh.is_empty() {
                continue;
            }
            let number = 1 + self
                .batch_starts
                .iter()
                .filter(|b| b.compartment == c.name)
                .count() as i64;
            for n in &fresh {
                self.batches.insert(n.clone(), (c.name.clone(), number));
            }
            self.batch_starts.push(BatchRun {
                compartment: c.name.clone(),
                number,
                nodes: fresh,
                start_s: self.offset(now),
            });
        }
    }

    pub fn finish(self, f: Finish) -> Rollout {
        let (mut nodes, without_history) = self.node_runs(&f);
        for run in &mut nodes {
            self.explain(run, &f);
        }
        let seconds = self.offset(f.now);
        Rollout {
            kind: f.kind.to_string(),
            name: f.skyhook.name_any(),
            policy: self.policy,
            selected: f.selected,
            first_pass: self.first,
            nodes,
            batches: self.batch_starts,
            estimate: Estimate {
                seconds,
                from_jobs: f.durations.jobs,
                without_history: without_history.into_iter().collect(),
            },
            end: f.end,
            passes: f.passes,
        }
    }

    /// Each node's work from the Jobs started, in the order the nodes started, and the package
    /// stages without history.
    fn node_runs(&self, f: &Finish) -> (Vec<NodeRun>, BTreeSet<String>) {
        let mut nodes: Vec<NodeRun> = Vec::new();
        let mut without_history = BTreeSet::new();
        for s in &self.started {
            let took = f
                .durations
                .estimate(&s.job.package, &s.job.version, s.stage);
            if took.source == Source::None {
                without_history.insert(format!("{} {}", s.job.package, s.job.stage));
            }
            let start_s = self.offset(s.at);
            let end_s = start_s + took.seconds().as_secs();
            let i = match nodes.iter().position(|n| n.node == s.job.node) {
                Some(i) => i,
                None => {
                    nodes.push(NodeRun {
                        node: s.job.node.clone(),
                        batch: self.batches.get(&s.job.node).cloned(),
                        packages: Vec::new(),
                        interrupt: None,
                        start_s,
                        end_s,
                    });
                    nodes.len() - 1
                }
            };
            let run = &mut nodes[i];
            run.end_s = run.end_s.max(end_s);
            let j = match run
                .packages
                .iter()
                .position(|p| p.package == s.job.package && p.version == s.job.version)
            {
                Some(j) => j,
                None => {
                    run.packages.push(PackageRun {
                        package: s.job.package.clone(),
                        version: s.job.version.clone(),
                        reason: Reason::New,
                        stages: Vec::new(),
                    });
                    run.packages.len() - 1
                }
            };
            let pkg = &mut run.packages[j];
            if !pkg.stages.contains(&s.job.stage) {
                pkg.stages.push(s.job.stage.clone());
            }
            if s.stage.is_interrupt() {
                let kind = interrupt_kind(f.skyhook, &s.job.package);
                let int = run.interrupt.get_or_insert_with(InterruptRun::default);
                if !int.kinds.contains(&kind) {
                    int.kinds.push(kind);
                }
            }
        }
        (nodes, without_history)
    }

    /// Why the node runs each package, and its cordon and drain.
    fn explain(&self, run: &mut NodeRun, f: &Finish) {
        for p in &mut run.packages {
            let stages: Vec<Stage> = p.stages.iter().filter_map(|s| s.parse().ok()).collect();
            p.reason = f.before.reason(&run.node, &p.package, &p.version, &stages);
        }
        let cordon = self.cordoned.contains(&run.node);
        let evictions: Vec<PodEviction> = self
            .evictions
            .iter()
            .filter(|e| e.node == run.node)
            .cloned()
            .collect();
        if cordon || !evictions.is_empty() {
            let int = run.interrupt.get_or_insert_with(InterruptRun::default);
            int.cordon = cordon;
            int.evictions = evictions;
        }
    }
}

/// The pass's evictions, each with the budget that refuses it now.
fn evictions(
    plan: &Plan,
    budgets: &[PodDisruptionBudget],
    pods: &BTreeMap<String, Vec<Pod>>,
) -> Vec<PodEviction> {
    plan.evictions
        .iter()
        .map(|e| {
            let pod = pods.get(&e.node).and_then(|l| {
                l.iter().find(|p| {
                    p.name_any() == e.pod && p.namespace().as_deref() == Some(&e.namespace)
                })
            });
            PodEviction {
                node: e.node.clone(),
                pod: format!("{}/{}", e.namespace, e.pod),
                refused_by: pod.and_then(|p| budgets::refusing(budgets, p)),
            }
        })
        .collect()
}

/// The interrupt a package asks for, as a word with its package (`reboot (driver)`).
fn interrupt_kind(sk: &Skyhook, package: &str) -> String {
    let Some(p) = sk.spec.packages.get(package) else {
        return format!("interrupt ({package})");
    };
    let mut kinds: Vec<String> = p
        .interrupt
        .iter()
        .chain(p.config_interrupts.values())
        .map(|i| {
            if i.services.is_empty() {
                i.kind.as_str().to_string()
            } else {
                format!("{} {}", i.kind.as_str(), i.services.join(","))
            }
        })
        .collect();
    kinds.dedup();
    format!("{} ({package})", kinds.join("|"))
}
