//! The campaign's invariants, checked on the history alone (issue 52): each violation is printed
//! with its evidence. Nothing here asks the operator what it thinks happened.
//!
//! - `once`: a stage ran at most once per (object, node, package, version, spec hash), unless it
//!   failed, and every retry follows a failure (or the cancellation of the Job before it).
//! - `interrupt-cordoned`: no interrupt pod started on a schedulable node, and no other stage pod
//!   of ours ran on that node meanwhile.
//! - `no-duplicate-jobs`: no two unfinished Jobs for the same run existed at once.
//! - `budget`: an object never had more nodes at work (an unfinished Job of it, or its cordon
//!   key) than its interruption budget or batch size.
//! - `settled`: at the end, every object is complete, every node it selects is complete on the
//!   node and in the object's status, with a finished Job for each stage of each package; no
//!   cordon, taint or bookkeeping key of ours is stranded.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::history::{
    Kind, PREFIXES, Record, RunKey, job_finished, ours, pod_active, run_key, str_at,
};

/// What the workload promises per object.
#[derive(Debug, Clone)]
pub struct Rule {
    pub object: String,
    /// At most this many nodes at work at once.
    pub limit: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub invariant: &'static str,
    pub evidence: String,
}

#[derive(Debug, Default, Serialize)]
pub struct Verdict {
    /// Invariant checks made, by invariant.
    pub checks: BTreeMap<&'static str, u64>,
    pub violations: Vec<Violation>,
    /// Stage Jobs that completed, and interrupt pods that started.
    pub stages_run: u64,
    pub interrupts: u64,
    /// Script runs the real nodes recorded, the reboots their interrupts asked for, and their
    /// service manager's calls (a service interrupt's restarts).
    pub host_steps: u64,
    pub host_reboots: u64,
    pub host_service_calls: u64,
    /// Audit events the audit checks read (successful writes in the campaign's namespace).
    pub audit_events: u64,
}

impl Verdict {
    /// The invariants the violations name, in order, each once per run of them.
    #[cfg(test)]
    pub fn named(&self) -> Vec<&'static str> {
        let mut out: Vec<&str> = self.violations.iter().map(|x| x.invariant).collect();
        out.dedup();
        out
    }

    pub(super) fn check(
        &mut self,
        invariant: &'static str,
        ok: bool,
        evidence: impl FnOnce() -> String,
    ) {
        *self.checks.entry(invariant).or_default() += 1;
        if !ok {
            self.violations.push(Violation {
                invariant,
                evidence: evidence(),
            });
        }
    }
}

struct JobSeen {
    key: RunKey,
    name: String,
    first: jiff::Timestamp,
    /// Some(true) complete, Some(false) failed.
    finished: Option<bool>,
    deleted: bool,
}

struct PodSeen {
    key: RunKey,
    name: String,
    running: bool,
}

fn cordon_key_of(node: &Value, object: &str) -> bool {
    let Some(a) = node.pointer("/metadata/annotations") else {
        return false;
    };
    ours(a, &format!("cordon_{object}")).is_some()
}

fn unschedulable(node: &Value) -> bool {
    node.pointer("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Replays `history` and checks every invariant. `rules`: the objects and their limits.
pub fn check(history: &[Record], rules: &[Rule]) -> Verdict {
    let mut v = Verdict::default();
    let mut sorted: Vec<&Record> = history.iter().collect();
    sorted.sort_by_key(|r| r.t);
    let mut nodes: BTreeMap<String, Value> = BTreeMap::new();
    let mut objects: BTreeMap<String, Value> = BTreeMap::new();
    let mut jobs: BTreeMap<String, JobSeen> = BTreeMap::new();
    let mut pods: BTreeMap<String, PodSeen> = BTreeMap::new();
    let mut over_budget: BTreeSet<String> = BTreeSet::new();
    let mut reported_pairs: BTreeSet<(String, String)> = BTreeSet::new();
    for r in sorted {
        match r.kind {
            Kind::Node => {
                if r.deleted {
                    nodes.remove(r.name());
                } else {
                    nodes.insert(r.name().to_string(), r.obj.clone());
                }
            }
            Kind::Object => {
                if r.deleted {
                    objects.remove(r.name());
                } else {
                    objects.insert(r.name().to_string(), r.obj.clone());
                }
            }
            Kind::Job => {
                let Some(key) = run_key(&r.obj) else { continue };
                let finished = job_finished(&r.obj);
                let e = jobs.entry(r.uid().to_string()).or_insert(JobSeen {
                    key: key.clone(),
                    name: r.name().to_string(),
                    first: r.t,
                    finished: None,
                    deleted: false,
                });
                if e.finished.is_none() {
                    e.finished = finished;
                }
                e.deleted |= r.deleted;
                if e.finished.is_none() && !e.deleted {
                    let uid = r.uid().to_string();
                    let twins: Vec<&JobSeen> = jobs
                        .iter()
                        .filter(|(u, j)| {
                            **u != uid && j.key == key && j.finished.is_none() && !j.deleted
                        })
                        .map(|(_, j)| j)
                        .collect();
                    let first_twin = twins.first().map(|j| j.name.clone());
                    let fresh = first_twin
                        .as_ref()
                        .is_none_or(|t| reported_pairs.insert((t.clone(), r.name().to_string())));
                    if fresh {
                        v.check("no-duplicate-jobs", first_twin.is_none(), || {
                            format!(
                                "at {}: Jobs {} and {} both unfinished for {key}",
                                r.t,
                                first_twin.clone().unwrap_or_default(),
                                r.name()
                            )
                        });
                    }
                }
            }
            Kind::Pod => {
                let Some(key) = run_key(&r.obj) else { continue };
                let running = !r.deleted && pod_active(&r.obj);
                let was = pods.get(r.uid()).is_some_and(|p| p.running);
                pods.insert(
                    r.uid().to_string(),
                    PodSeen {
                        key: key.clone(),
                        name: r.name().to_string(),
                        running,
                    },
                );
                if running && !was {
                    started(&mut v, r, &key, &nodes, &pods);
                }
            }
        }
        for rule in rules {
            let mut at_work: BTreeSet<&str> = jobs
                .values()
                .filter(|j| j.key.object == rule.object && j.finished.is_none() && !j.deleted)
                .map(|j| j.key.node.as_str())
                .collect();
            at_work.extend(
                nodes
                    .iter()
                    .filter(|(_, n)| cordon_key_of(n, &rule.object))
                    .map(|(name, _)| name.as_str()),
            );
            let over = at_work.len() > rule.limit;
            // One violation per excursion over the limit, not one per record during it.
            let new = if over {
                over_budget.insert(rule.object.clone())
            } else {
                over_budget.remove(&rule.object);
                false
            };
            if !over || new {
                v.check("budget", !over, || {
                    format!(
                        "at {}: {} has {} nodes at work ({}), its limit is {}",
                        r.t,
                        rule.object,
                        at_work.len(),
                        at_work.iter().copied().collect::<Vec<_>>().join(", "),
                        rule.limit
                    )
                });
            }
        }
    }
    once(&mut v, &jobs);
    settled(&mut v, &nodes, &objects, &jobs);
    v
}

/// A stage pod just started running.
fn started(
    v: &mut Verdict,
    r: &Record,
    key: &RunKey,
    nodes: &BTreeMap<String, Value>,
    pods: &BTreeMap<String, PodSeen>,
) {
    let others = |interrupt_only: bool| -> Vec<String> {
        pods.iter()
            .filter(|(u, p)| {
                **u != r.uid()
                    && p.running
                    && p.key.node == key.node
                    && (!interrupt_only || p.key.stage == "interrupt")
            })
            .map(|(_, p)| p.name.clone())
            .collect()
    };
    if key.stage == "interrupt" {
        v.interrupts += 1;
        let cordoned = nodes.get(&key.node).is_some_and(unschedulable);
        v.check("interrupt-cordoned", cordoned, || {
            format!(
                "at {}: interrupt pod {} started on {} while it was schedulable",
                r.t,
                r.name(),
                key.node
            )
        });
        let during = others(false);
        v.check("interrupt-cordoned", during.is_empty(), || {
            format!(
                "at {}: interrupt pod {} started on {} while {} ran there",
                r.t,
                r.name(),
                key.node,
                during.join(", ")
            )
        });
    } else {
        let interrupts = others(true);
        v.check("interrupt-cordoned", interrupts.is_empty(), || {
            format!(
                "at {}: pod {} ({}) started on {} during interrupt {}",
                r.t,
                r.name(),
                key.stage,
                key.node,
                interrupts.join(", ")
            )
        });
    }
}

fn once(v: &mut Verdict, jobs: &BTreeMap<String, JobSeen>) {
    let mut by_key: BTreeMap<&RunKey, Vec<&JobSeen>> = BTreeMap::new();
    for j in jobs.values() {
        by_key.entry(&j.key).or_default().push(j);
        if j.finished == Some(true) {
            v.stages_run += 1;
        }
    }
    // Completed uninstalls and installs, by (object, node, package): a package removed and
    // installed again runs each stage again, so a run after a completed uninstall (an uninstall
    // after a completed install) is new.
    let cycles: Vec<(&RunKey, jiff::Timestamp)> = jobs
        .values()
        .filter(|j| {
            matches!(j.key.stage.as_str(), "uninstall" | "apply" | "upgrade")
                && j.finished == Some(true)
        })
        .map(|j| (&j.key, j.first))
        .collect();
    for (key, mut runs) in by_key {
        runs.sort_by_key(|j| j.first);
        if runs.len() == 1 {
            v.check("once", true, String::new);
        }
        for pair in runs.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            let cycled = cycles.iter().any(|(u, t)| {
                let opposite = if key.stage == "uninstall" {
                    u.stage != "uninstall"
                } else {
                    u.stage == "uninstall"
                };
                opposite
                    && u.object == key.object
                    && u.node == key.node
                    && u.package == key.package
                    && *t > before.first
                    && *t < after.first
            });
            let retry_ok = before.finished == Some(false)
                || (before.deleted && before.finished.is_none())
                || cycled;
            v.check("once", retry_ok, || {
                format!(
                    "{key}: Job {} ({}) followed by {} without a failure",
                    before.name,
                    match before.finished {
                        Some(true) => "complete",
                        Some(false) => "failed",
                        None => "unfinished",
                    },
                    after.name
                )
            });
        }
    }
}

fn selects(object: &Value, node: &Value) -> bool {
    let Some(want) = object
        .pointer("/spec/nodeSelectors/matchLabels")
        .and_then(Value::as_object)
    else {
        return false;
    };
    let labels = node.pointer("/metadata/labels");
    want.iter().all(|(k, val)| {
        labels
            .and_then(|l| l.get(k))
            .is_some_and(|have| have == val)
    })
}

const BOOKKEEPING: [&str; 4] = ["cordon_", "drainStart_", "nonInterruptWait_", "healthGate_"];

fn settled(
    v: &mut Verdict,
    nodes: &BTreeMap<String, Value>,
    objects: &BTreeMap<String, Value>,
    jobs: &BTreeMap<String, JobSeen>,
) {
    let done: BTreeSet<(&str, &str, &str, &str, &str)> = jobs
        .values()
        .filter(|j| j.finished == Some(true))
        .map(|j| {
            let k = &j.key;
            let stage = if k.stage == "upgrade" {
                "apply"
            } else {
                &k.stage
            };
            (&*k.object, &*k.node, &*k.package, &*k.version, stage)
        })
        .collect();
    for (name, obj) in objects {
        let status = str_at(obj, "/status/status");
        v.check("settled", status == "complete", || {
            format!("{name} ends {status:?}, not complete")
        });
        for (node_name, node) in nodes.iter().filter(|(_, n)| selects(obj, n)) {
            let on_node = node
                .pointer("/metadata/annotations")
                .and_then(|a| ours(a, &format!("status_{name}")))
                .unwrap_or("");
            let in_status = str_at(obj, &format!("/status/nodeStatus/{node_name}"));
            v.check("settled", on_node == "complete" && in_status == on_node, || {
                format!(
                    "{node_name} ends {on_node:?} for {name} on the node and {in_status:?} in its status"
                )
            });
            let packages = obj.pointer("/spec/packages").and_then(Value::as_object);
            for (pkg, spec) in packages.into_iter().flatten() {
                let version = str_at(spec, "/version");
                let mut stages = vec!["apply", "config"];
                if spec.get("interrupt").is_some_and(|i| !i.is_null()) {
                    stages.extend(["interrupt", "post-interrupt"]);
                }
                for stage in stages {
                    let ran =
                        done.contains(&(name.as_str(), node_name.as_str(), pkg, version, stage));
                    v.check("settled", ran, || {
                        format!("{name}: no finished {stage} Job of {pkg}@{version} on {node_name}")
                    });
                }
            }
        }
    }
    for (name, node) in nodes {
        v.check("settled", !unschedulable(node), || {
            format!("{name} ends cordoned")
        });
        let taints = node.pointer("/spec/taints").and_then(Value::as_array);
        let ours_left: Vec<&str> = taints
            .into_iter()
            .flatten()
            .map(|t| str_at(t, "/key"))
            .filter(|k| {
                PREFIXES
                    .iter()
                    .any(|p| k.starts_with(p.trim_end_matches('/')))
            })
            .collect();
        v.check("settled", ours_left.is_empty(), || {
            format!("{name} ends with our taints {ours_left:?}")
        });
        let annotations = node
            .pointer("/metadata/annotations")
            .and_then(Value::as_object);
        let stranded: Vec<&String> = annotations
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .filter(|k| {
                PREFIXES.iter().any(|p| {
                    k.strip_prefix(p)
                        .is_some_and(|rest| BOOKKEEPING.iter().any(|b| rest.starts_with(b)))
                })
            })
            .collect();
        v.check("settled", stranded.is_empty(), || {
            format!("{name} ends with bookkeeping keys {stranded:?}")
        });
    }
}
