//! The functional core of the operator: from a snapshot of the world to the list of writes for
//! one Skyhook. Nothing here does I/O, so unit tests drive it with hand-made objects.

pub mod node;
pub mod rollout;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeCondition, Taint, Toleration};
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

use crate::crd::{DeploymentPolicy, Package, Skyhook, SkyhookStatus};
use crate::jobs::{self, JobView};
use crate::schema::{self, NodeState, Stage, State, Status};
use crate::settings::Config;
use node::{NodeAction, NodeFacts, NodeNote, RetryPolicy, SpecView};

/// Everything the planner reads.
pub struct Inputs<'a> {
    /// The Skyhook being reconciled, as stored.
    pub skyhook: &'a Skyhook,
    pub skyhooks: &'a [Arc<Skyhook>],
    pub policies: &'a [Arc<DeploymentPolicy>],
    pub nodes: &'a [Arc<Node>],
    /// This Skyhook's Jobs.
    pub jobs: &'a [JobView],
    /// This Skyhook's package ConfigMaps as they are in the cluster.
    pub configmaps: &'a [Arc<ConfigMap>],
    /// Pods on the nodes that are cordoned (listed on demand for the drain).
    pub pods_on_nodes: &'a BTreeMap<String, Vec<node::PodInfo>>,
    /// Nodes where a Job of another Skyhook is running.
    pub busy_nodes: &'a BTreeSet<String>,
    /// Problems the operator-side validation found (empty when valid).
    pub invalid: &'a [String],
    pub config: &'a Config,
    pub operator_version: &'a str,
    pub now: Timestamp,
}

/// A metadata change of one node: `None` values remove the key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePatch {
    pub node: String,
    pub annotations: BTreeMap<String, Option<String>>,
    pub labels: BTreeMap<String, Option<String>>,
    pub unschedulable: Option<bool>,
    /// The node's whole taint list, when it changes.
    pub taints: Option<Vec<Taint>>,
}

impl NodePatch {
    pub fn is_empty(&self) -> bool {
        self.annotations.is_empty()
            && self.labels.is_empty()
            && self.unschedulable.is_none()
            && self.taints.is_none()
    }
}

/// Operations on existing Jobs.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOp {
    /// Folded into the node state; `ttl` lets the TTL controller collect a successful Job.
    Record {
        job: String,
        ttl: Option<u64>,
    },
    /// End a Job whose pod can never start, recording why.
    Fail {
        job: String,
        reason: String,
        message: String,
    },
    Delete {
        job: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Skyhook,
    Node,
}

/// An Event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub target: Target,
    /// Node name for node events.
    pub node: Option<String>,
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// Everything the executor must write, in this order: ConfigMaps, Jobs, Job operations, nodes,
/// node conditions, status, events.
#[derive(Debug, Default)]
pub struct Plan {
    pub add_finalizer: bool,
    pub remove_finalizer: bool,
    pub configmaps: Vec<ConfigMap>,
    pub create_jobs: Vec<Job>,
    pub job_ops: Vec<JobOp>,
    /// Pods to evict through the Eviction API (namespace, name).
    pub evictions: Vec<(String, String)>,
    /// Delete every Job and ConfigMap this Skyhook owns (deletion).
    pub delete_owned: bool,
    pub node_patches: Vec<NodePatch>,
    /// Conditions to set (by type) and condition types to remove, per node.
    pub node_conditions: Vec<(String, Vec<NodeCondition>, Vec<String>)>,
    pub status: Option<SkyhookStatus>,
    pub events: Vec<Note>,
    pub requeue_after: Option<Duration>,
}

/// Targeted nodes: `nodeSelectors` match (an empty selector selects every node).
pub fn targeted<'a>(skyhook: &Skyhook, nodes: &'a [Arc<Node>]) -> Vec<&'a Arc<Node>> {
    let Ok(sel) = Selector::try_from(skyhook.spec.node_selectors.clone()) else {
        return Vec::new();
    };
    let mut out: Vec<&Arc<Node>> = nodes.iter().filter(|n| sel.matches(n.labels())).collect();
    // Rollouts proceed oldest node first (§3.4), names break ties deterministically.
    out.sort_by(|a, b| {
        let ka = (
            a.metadata.creation_timestamp.as_ref().map(|t| t.0),
            a.name_any(),
        );
        let kb = (
            b.metadata.creation_timestamp.as_ref().map(|t| t.0),
            b.name_any(),
        );
        ka.cmp(&kb)
    });
    out
}

fn annotation<'n>(node: &'n Node, key: &str) -> Option<&'n str> {
    node.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Whether a pod with these tolerations ignores a cordon (the `unschedulable` NoSchedule taint),
/// as the scheduler decides it: a keyless `Exists` toleration tolerates every taint.
pub fn tolerates_cordon(tolerations: &[Toleration]) -> bool {
    let cordon = Taint {
        key: schema::UNSCHEDULABLE_TAINT_KEY.to_string(),
        effect: "NoSchedule".to_string(),
        ..Default::default()
    };
    tolerations.iter().any(|t| tolerates(t, &cordon))
}

fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect_ok = t
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key_ok = match t.key.as_deref() {
        None | Some("") => t.operator.as_deref() == Some("Exists"),
        Some(k) => k == taint.key,
    };
    let value_ok = match t.operator.as_deref() {
        Some("Exists") => true,
        _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
    };
    effect_ok && key_ok && value_ok
}

/// Why a node cannot be worked on, if it cannot (§3.16).
fn blocked_reason(sk: &Skyhook, node: &Node, cfg: &Config) -> Option<&'static str> {
    if node.labels().get(schema::IGNORE_LABEL).map(String::as_str) == Some(schema::TRUE_VALUE) {
        return Some("ignored");
    }
    let mut tolerations = vec![Toleration {
        key: Some(schema::UNSCHEDULABLE_TAINT_KEY.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoSchedule".to_string()),
        ..Default::default()
    }];
    tolerations.extend(sk.spec.additional_tolerations.iter().cloned());
    if sk.spec.runtime_required {
        tolerations.push(cfg.runtime_required_taint.to_toleration());
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let untolerated = taints
        .iter()
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)));
    untolerated.then_some("taint")
}

/// §3.14: every non-disabled Skyhook ordered before this one that targets the node must be
/// complete there first.
fn gated(sk: &Skyhook, all: &[Arc<Skyhook>], node: &Node) -> bool {
    let key = |s: &Skyhook| (s.spec.priority, s.name_any());
    let mine = key(sk);
    all.iter().any(|other| {
        other.name_any() != sk.name_any()
            && key(other) < mine
            && other
                .annotations()
                .get(schema::DISABLE_ANNOTATION)
                .map(String::as_str)
                != Some(schema::TRUE_VALUE)
            && Selector::try_from(other.spec.node_selectors.clone())
                .is_ok_and(|s| s.matches(node.labels()))
            && annotation(node, &schema::status_annotation(&other.name_any()))
                != Some(Status::Complete.as_str())
    })
}

fn is_set(sk: &Skyhook, key: &str) -> bool {
    sk.annotations().get(key).map(String::as_str) == Some(schema::TRUE_VALUE)
}

/// The planner's entry point for a live (not deleting) Skyhook.
pub fn plan(inp: &Inputs) -> Plan {
    let sk = inp.skyhook;
    let name = sk.name_any();
    let cfg = inp.config;
    let mut plan = Plan::default();
    if !sk.finalizers().iter().any(|f| f == schema::FINALIZER) {
        plan.add_finalizer = true;
    }
    let paused = is_set(sk, schema::PAUSE_ANNOTATION);
    let disabled = is_set(sk, schema::DISABLE_ANNOTATION);
    let valid = inp.invalid.is_empty();
    let prior = sk.status.clone().unwrap_or_default();
    let nodes = targeted(sk, inp.nodes);
    let config_updates = config_updates(sk, inp, &prior, &nodes);
    let spec_view = SpecView {
        packages: &sk.spec.packages,
        spec_hashes: sk
            .spec
            .packages
            .iter()
            .map(|(k, p)| (k.clone(), node::applied_hash(p)))
            .collect(),
        config_updates: &config_updates,
    };
    let retry = RetryPolicy {
        base: cfg.retry_base,
        max: cfg.retry_max,
    };

    let mut by_node: BTreeMap<&str, Vec<&JobView>> = BTreeMap::new();
    for j in inp.jobs {
        by_node.entry(j.node.as_str()).or_default().push(j);
    }

    // Pass 1: observe only, to learn which nodes are busy.
    struct Seen<'n> {
        node: &'n Node,
        name: String,
        prior: NodeState,
        applied: BTreeMap<String, String>,
        blocked: Option<&'static str>,
        gated: bool,
        busy: bool,
        complete: bool,
        erroring: bool,
    }
    let mut seen: Vec<Seen> = Vec::new();
    let mut boot_ids: BTreeMap<String, String> = BTreeMap::new();
    let mut reboots: Vec<String> = Vec::new();
    for n in &nodes {
        let node_name = n.name_any();
        let boot = n
            .status
            .as_ref()
            .and_then(|st| st.node_info.as_ref())
            .map(|i| i.boot_id.clone())
            .unwrap_or_default();
        // §3.18: a new boot id means the node rebooted; with REAPPLY_ON_REBOOT it starts over.
        let rebooted = cfg.reapply_on_reboot
            && !boot.is_empty()
            && prior
                .node_boot_ids
                .get(&node_name)
                .is_some_and(|b| *b != boot);
        if !boot.is_empty() {
            boot_ids.insert(node_name.clone(), boot);
        }
        let prior_state = if rebooted {
            reboots.push(node_name.clone());
            NodeState::default()
        } else {
            annotation(n, &schema::node_state_annotation(&name))
                .and_then(|a| NodeState::parse(a).ok())
                .unwrap_or_default()
        };
        let applied: BTreeMap<String, String> = if rebooted {
            BTreeMap::new()
        } else {
            annotation(n, &schema::applied_annotation(&name))
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or_default()
        };
        let js = by_node.get(node_name.as_str()).cloned().unwrap_or_default();
        let o = node::step(
            &spec_view,
            prior_state.clone(),
            applied.clone(),
            node_facts(n, inp),
            &js,
            false,
            retry,
            cfg.failed_jobs_kept,
            inp.now,
        );
        let busy = o.active
            || n.annotations()
                .contains_key(&schema::cordon_annotation(&name))
            || o.state
                .iter()
                .any(|(_, e)| e.state == Some(State::InProgress));
        seen.push(Seen {
            node: n,
            complete: spec_view.node_complete(&o.state)
                && !node::has_drift(&spec_view, &o.state, &o.applied),
            erroring: o
                .state
                .iter()
                .any(|(_, e)| e.state == Some(State::Erroring)),
            name: node_name,
            prior: prior_state,
            applied,
            blocked: blocked_reason(sk, n, cfg),
            gated: gated(sk, inp.skyhooks, n),
            busy,
        });
    }

    // The batch: nodes already busy, else the next `size` candidates (§6.4 rule 2 and 3).
    let size = rollout::batch_size(sk, inp.policies, seen.len());
    let can_run = valid && !paused && !disabled;
    let busy: BTreeSet<&str> = seen
        .iter()
        .filter(|s| s.busy)
        .map(|s| s.name.as_str())
        .collect();
    let mut allowed: BTreeSet<String> = busy.iter().map(|s| s.to_string()).collect();
    if can_run && busy.is_empty() {
        let mut candidates: Vec<&Seen> = seen
            .iter()
            .filter(|s| !s.complete && s.blocked.is_none() && !s.gated)
            .collect();
        // Fresh nodes before ones that failed (§6.4's waiting/unknown before erroring).
        candidates.sort_by_key(|s| s.erroring);
        allowed.extend(candidates.iter().take(size).map(|s| s.name.clone()));
    }

    // Pass 2: decide.
    let mut node_states: BTreeMap<String, NodeState> = BTreeMap::new();
    let mut node_statuses: BTreeMap<String, Status> = BTreeMap::new();
    let mut retry_at: Option<Timestamp> = None;
    let mut any_active = false;
    let mut started: Vec<(String, String, String)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut blocked_nodes: Vec<&str> = Vec::new();
    let mut held: Vec<String> = Vec::new();
    let mut ignored_nodes: Vec<&str> = Vec::new();
    for s in &seen {
        let js = by_node.get(s.name.as_str()).cloned().unwrap_or_default();
        let may_start = can_run && allowed.contains(&s.name) && s.blocked.is_none() && !s.gated;
        let o = node::step(
            &spec_view,
            s.prior.clone(),
            s.applied.clone(),
            node_facts(s.node, inp),
            &js,
            may_start,
            retry,
            cfg.failed_jobs_kept,
            inp.now,
        );
        any_active |= o.active;
        if let Some(r) = o.retry_at {
            retry_at = Some(retry_at.map_or(r, |x: Timestamp| x.min(r)));
        }
        match s.blocked {
            Some("ignored") => ignored_nodes.push(&s.name),
            Some(_) => blocked_nodes.push(&s.name),
            None => {}
        }
        let mut wrote_metadata = false;
        for a in &o.actions {
            match a {
                NodeAction::Run {
                    package,
                    stage,
                    attempt,
                    spec_hash,
                    interrupt,
                } => {
                    if !wrote_metadata {
                        plan.configmaps.push(jobs::node_metadata_configmap(
                            sk,
                            s.node,
                            jobs::packages_json(sk, cfg),
                            cfg,
                        ));
                        wrote_metadata = true;
                    }
                    let job = if *stage == Stage::Interrupt {
                        let Some(merged) = interrupt else {
                            continue;
                        };
                        plan.events.push(Note {
                            target: Target::Skyhook,
                            node: None,
                            warning: false,
                            reason: schema::INTERRUPT_REASON.to_string(),
                            message: schema::skyhook_interrupt_message(
                                &s.name,
                                &package.name,
                                &package.version,
                                &name,
                            ),
                        });
                        jobs::interrupt_job(
                            &jobs::InterruptJob {
                                skyhook: sk,
                                owner: package,
                                interrupt: merged,
                                node: &s.name,
                                attempt: *attempt,
                                spec_hash,
                            },
                            cfg,
                        )
                    } else {
                        jobs::stage_job(
                            &jobs::StageJob {
                                skyhook: sk,
                                package,
                                stage: *stage,
                                node: &s.name,
                                attempt: *attempt,
                                spec_hash,
                            },
                            cfg,
                        )
                    };
                    plan.create_jobs.push(job);
                }
                NodeAction::Record { job, succeeded } => plan.job_ops.push(JobOp::Record {
                    job: job.clone(),
                    ttl: succeeded.then_some(cfg.completed_job_ttl.as_secs()),
                }),
                NodeAction::FailNow {
                    job,
                    reason,
                    message,
                } => plan.job_ops.push(JobOp::Fail {
                    job: job.clone(),
                    reason: reason.clone(),
                    message: message.clone(),
                }),
                NodeAction::Delete { job } => plan.job_ops.push(JobOp::Delete { job: job.clone() }),
            }
        }
        for note in &o.notes {
            match note {
                NodeNote::Started {
                    package,
                    version,
                    stage,
                } => {
                    started.push((package.clone(), version.clone(), s.name.clone()));
                    plan.events.push(Note {
                        target: Target::Node,
                        node: Some(s.name.clone()),
                        warning: false,
                        reason: schema::APPLY_REASON.to_string(),
                        message: schema::node_apply_message(package, version, &name, *stage),
                    });
                    plan.events.push(Note {
                        target: Target::Skyhook,
                        node: None,
                        warning: false,
                        reason: schema::APPLY_REASON.to_string(),
                        message: schema::skyhook_apply_message(package, version, &s.name, *stage),
                    });
                }
                NodeNote::Completed {
                    package, version, ..
                } => plan.events.push(Note {
                    target: Target::Node,
                    node: Some(s.name.clone()),
                    warning: false,
                    reason: schema::APPLY_REASON.to_string(),
                    message: schema::node_package_state_message(
                        package,
                        version,
                        State::Complete,
                        &name,
                    ),
                }),
                NodeNote::Failed {
                    package,
                    version,
                    stage,
                    reason,
                    message,
                    restarts,
                } => {
                    let text = format!(
                        "package {package}:{version} stage {} failed on node {} ({reason}, attempt {restarts}): {message}",
                        stage.as_str(),
                        s.name
                    );
                    failures.push(text.clone());
                    plan.events.push(Note {
                        target: Target::Node,
                        node: Some(s.name.clone()),
                        warning: true,
                        reason: schema::APPLY_REASON.to_string(),
                        message: schema::node_package_state_message(
                            package,
                            version,
                            State::Erroring,
                            &name,
                        ),
                    });
                    plan.events.push(Note {
                        target: Target::Skyhook,
                        node: None,
                        warning: true,
                        reason: reason.clone(),
                        message: text,
                    });
                }
            }
        }
        if let Some(why) = &o.blocked {
            held.push(format!("node {}: {why}", s.name));
        }
        if !o.evict.is_empty() {
            plan.evictions.extend(o.evict.iter().cloned());
            if let Some(pkg) = sk
                .spec
                .packages
                .values()
                .find(|p| spec_view.has_interrupt(p))
            {
                plan.events.push(Note {
                    target: Target::Node,
                    node: Some(s.name.clone()),
                    warning: false,
                    reason: schema::INTERRUPT_REASON.to_string(),
                    message: schema::node_drain_message(&s.name, &pkg.name, &pkg.version, &name),
                });
            }
        }
        let complete =
            spec_view.node_complete(&o.state) && !node::has_drift(&spec_view, &o.state, &o.applied);
        let st = status::node_status(&status::NodeFacts {
            disabled,
            paused,
            complete,
            blocked: s.blocked.is_some(),
            gated: s.gated,
            held: o.held,
            state: &o.state,
        });
        if complete && !spec_view.node_complete(&s.prior) {
            plan.events.push(Note {
                target: Target::Node,
                node: Some(s.name.clone()),
                warning: false,
                reason: schema::STATE_REASON.to_string(),
                message: schema::node_complete_message(&name),
            });
        }
        let mut patch = status::node_patch(&name, s.node, &o.state, st, inp.operator_version);
        let holds_cordon = s
            .node
            .annotations()
            .contains_key(&schema::cordon_annotation(&name));
        if o.cordon {
            // Persisted before any Job of an interrupt package; an administrator's own cordon
            // (already unschedulable) is never marked as ours, so it is never lifted.
            patch.unschedulable = Some(true);
            patch.annotations.insert(
                schema::cordon_annotation(&name),
                Some(schema::TRUE_VALUE.to_string()),
            );
        } else if complete && holds_cordon {
            patch.unschedulable = Some(false);
            patch
                .annotations
                .insert(schema::cordon_annotation(&name), None);
        }
        runtime_required(sk, inp, s.node, complete, &mut patch);
        if o.applied != s.applied {
            let value = (!o.applied.is_empty())
                .then(|| serde_json::to_string(&o.applied).unwrap_or_default());
            patch
                .annotations
                .insert(schema::applied_annotation(&name), value);
        }
        if !patch.is_empty() {
            plan.node_patches.push(patch);
        }
        if let Some(c) = status::node_conditions(&name, s.node, &o.state, complete, inp.now) {
            plan.node_conditions.push((s.name.clone(), c, Vec::new()));
        }
        node_states.insert(s.name.clone(), o.state);
        node_statuses.insert(s.name.clone(), st);
    }

    for node in &reboots {
        plan.events.push(Note {
            target: Target::Skyhook,
            node: None,
            warning: false,
            reason: schema::REBOOT_REASON.to_string(),
            message: schema::skyhook_reboot_message(node),
        });
        plan.events.push(Note {
            target: Target::Node,
            node: Some(node.clone()),
            warning: false,
            reason: schema::REBOOT_REASON.to_string(),
            message: schema::node_reboot_message(&name),
        });
    }
    let mut prior_for_status = prior.clone();
    prior_for_status.config_updates = config_updates.clone();
    prior_for_status.node_boot_ids = boot_ids;
    let desired = status::skyhook_status(&status::SkyhookFacts {
        skyhook: sk,
        prior: &prior_for_status,
        node_states,
        node_statuses,
        paused,
        disabled,
        invalid: inp.invalid,
        started: &started,
        failures: &failures,
        held: &held,
        blocked_nodes: &blocked_nodes,
        ignored_nodes: &ignored_nodes,
        now: inp.now,
    });
    if let Some((old, new)) = status::transition(&prior, &desired) {
        plan.events.push(Note {
            target: Target::Skyhook,
            node: None,
            warning: false,
            reason: schema::STATE_REASON.to_string(),
            message: schema::skyhook_transition_message(old, new),
        });
    }
    if let Some(msg) = status::newly_held(&prior, &desired) {
        plan.events.push(Note {
            target: Target::Skyhook,
            node: None,
            warning: true,
            reason: schema::DRAIN_BLOCKED_REASON.to_string(),
            message: msg,
        });
    }
    if status::newly_invalid(&prior, &desired) {
        plan.events.push(Note {
            target: Target::Skyhook,
            node: None,
            warning: true,
            reason: schema::INVALID_SPEC_REASON.to_string(),
            message: inp.invalid.join("; "),
        });
    }
    if desired != prior {
        plan.status = Some(desired);
    }
    if !valid {
        // An invalid Skyhook is never acted upon: only its status says why.
        plan.node_patches.clear();
        plan.node_conditions.clear();
        plan.configmaps.clear();
        plan.create_jobs.clear();
        plan.evictions.clear();
        plan.requeue_after = Some(cfg.default_interval);
        return plan;
    }
    for p in sk
        .spec
        .packages
        .values()
        .filter(|p| !p.config_map.is_empty())
    {
        let cm = jobs::package_configmap(sk, p, cfg);
        let current = inp
            .configmaps
            .iter()
            .find(|c| c.name_any() == cm.name_any());
        if current.and_then(|c| c.data.as_ref()) != cm.data.as_ref() {
            plan.configmaps.push(cm);
        }
    }

    plan.requeue_after = Some(if !held.is_empty() {
        // Pods on other namespaces are not watched: look again soon.
        Duration::from_secs(3)
    } else if any_active || !plan.create_jobs.is_empty() {
        Duration::from_secs(30)
    } else if let Some(r) = retry_at {
        let wait = r.duration_since(inp.now);
        Duration::from_millis(wait.as_millis().clamp(200, 3_600_000) as u64)
    } else {
        cfg.default_interval
    });
    plan
}

/// §3.17: with `runtimeRequired`, new nodes get the runtime-required taint (`autoTaintNewNodes`)
/// and lose it once every runtime-required Skyhook that targets them is complete there.
fn runtime_required(
    sk: &Skyhook,
    inp: &Inputs,
    node: &Node,
    complete: bool,
    patch: &mut NodePatch,
) {
    if !sk.spec.runtime_required {
        return;
    }
    let taint = &inp.config.runtime_required_taint;
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let tainted = taints.iter().any(|t| taint.matches(t));
    let touched = node.annotations().keys().any(|k| schema::is_skyhook_key(k));
    if !tainted && sk.spec.auto_taint_new_nodes && !touched {
        let mut next = taints;
        next.push(taint.to_taint());
        patch.taints = Some(next);
        patch.annotations.insert(
            schema::auto_taint_annotation(&taint.key),
            Some(schema::TRUE_VALUE.to_string()),
        );
        return;
    }
    if !tainted || !complete {
        return;
    }
    let me = sk.name_any();
    let others_done = inp.skyhooks.iter().all(|o| {
        o.name_any() == me
            || !o.spec.runtime_required
            || !Selector::try_from(o.spec.node_selectors.clone())
                .is_ok_and(|s| s.matches(node.labels()))
            || annotation(node, &schema::status_annotation(&o.name_any()))
                == Some(Status::Complete.as_str())
    });
    if others_done {
        patch.taints = Some(taints.into_iter().filter(|t| !taint.matches(t)).collect());
    }
}

fn node_facts<'a>(n: &Node, inp: &'a Inputs) -> NodeFacts<'a> {
    let name = n.name_any();
    NodeFacts {
        cordoned: n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        pods: inp.pods_on_nodes.get(&name).map(Vec::as_slice),
        other_busy: inp.busy_nodes.contains(&name),
    }
}

/// §3.12: the configMap keys changed since the package ConfigMap was last written, kept in
/// `status.configUpdates` so configInterrupts know which keys moved. A new change while the last
/// one is still rolling out adds its keys; otherwise it replaces them.
fn config_updates(
    sk: &Skyhook,
    inp: &Inputs,
    prior: &SkyhookStatus,
    nodes: &[&Arc<Node>],
) -> BTreeMap<String, Vec<String>> {
    let mut updates = prior.config_updates.clone();
    updates.retain(|pkg, _| sk.spec.packages.contains_key(pkg));
    for p in sk.spec.packages.values() {
        let cm_name = schema::package_configmap_name(&sk.name_any(), &p.name, &p.version);
        let Some(current) = inp.configmaps.iter().find(|c| c.name_any() == cm_name) else {
            continue;
        };
        let old = current.data.clone().unwrap_or_default();
        let changed: Vec<String> = p
            .config_map
            .iter()
            .filter(|(k, v)| old.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect();
        if changed.is_empty() {
            continue;
        }
        // A node that has not applied the data being replaced is still in the last rollout.
        let old_hash = node::config_hash(&old);
        let applied_key = schema::package_key(&p.name, &p.version);
        let rolling = nodes.iter().any(|n| {
            annotation(n, &schema::applied_annotation(&sk.name_any()))
                .and_then(|a| serde_json::from_str::<BTreeMap<String, String>>(a).ok())
                .and_then(|m| m.get(&applied_key).cloned())
                .is_some_and(|h| h.split('.').nth(1) != Some(old_hash.as_str()))
        });
        let entry = updates.entry(p.name.clone()).or_default();
        if !rolling {
            entry.clear();
        }
        for k in changed {
            if !entry.contains(&k) {
                entry.push(k);
            }
        }
        entry.sort();
    }
    updates
}

/// Deletion (§3.19, extended): remove every node key, label and condition this Skyhook wrote,
/// lift cordons it holds, delete its Jobs and ConfigMaps, then release the finalizer.
pub fn plan_delete(sk: &Skyhook, nodes: &[Arc<Node>]) -> Plan {
    let name = sk.name_any();
    let mut plan = Plan {
        delete_owned: true,
        remove_finalizer: sk.finalizers().iter().any(|f| f == schema::FINALIZER),
        ..Plan::default()
    };
    let annotation_keys = [
        schema::node_state_annotation(&name),
        schema::status_annotation(&name),
        schema::cordon_annotation(&name),
        schema::node_version_annotation(&name),
        schema::applied_annotation(&name),
    ];
    let condition_prefix = schema::node_condition_prefix(&name);
    for n in nodes {
        let mut patch = NodePatch {
            node: n.name_any(),
            ..NodePatch::default()
        };
        for k in &annotation_keys {
            if n.annotations().contains_key(k) {
                patch.annotations.insert(k.clone(), None);
            }
        }
        if n.annotations()
            .contains_key(&schema::cordon_annotation(&name))
        {
            patch.unschedulable = Some(false);
        }
        let label = schema::status_label(&name);
        if n.labels().contains_key(&label) {
            patch.labels.insert(label, None);
        }
        if !patch.is_empty() {
            plan.node_patches.push(patch);
        }
        let conditions: Vec<String> = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|c| c.type_.starts_with(&condition_prefix))
            .map(|c| c.type_.clone())
            .collect();
        if !conditions.is_empty() {
            plan.node_conditions
                .push((n.name_any(), Vec::new(), conditions));
        }
    }
    plan
}

/// Packages in spec, by name (helper for tests and the executor).
pub fn package<'a>(sk: &'a Skyhook, name: &str) -> Option<&'a Package> {
    sk.spec.packages.get(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: Option<&str>, op: &str, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(str::to_string),
            operator: Some(op.to_string()),
            effect: effect.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn cordon_toleration_matches_like_the_scheduler() {
        let key = Some(schema::UNSCHEDULABLE_TAINT_KEY);
        assert!(tolerates_cordon(&[tol(key, "Exists", Some("NoSchedule"))]));
        assert!(tolerates_cordon(&[tol(key, "Exists", None)]));
        // A catch-all toleration tolerates the cordon too.
        assert!(tolerates_cordon(&[tol(None, "Exists", None)]));
        assert!(tolerates_cordon(&[tol(
            Some(""),
            "Exists",
            Some("NoSchedule")
        )]));
        assert!(!tolerates_cordon(&[tol(None, "Exists", Some("NoExecute"))]));
        assert!(!tolerates_cordon(&[tol(Some("other"), "Exists", None)]));
        assert!(!tolerates_cordon(&[]));
    }
}
