//! The per-node package state machine (reference §3.2, §3.3, §3.6, §3.7, §3.10, §3.11) over
//! Jobs: fold finished Jobs into the node state, then decide which stage Jobs to start.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::crd::Package;
use crate::jobs::{JobView, Outcome};
use crate::schema::{self, Interrupt, NodeState, PackageStatus, Stage, State};

/// `<install>.<config>`: what a node must have completed for package `p` to be current. The
/// install part covers image, containerSHA, env and resources; the config part the configMap
/// data. Operator settings are left out on purpose: upgrading the operator must not re-run every
/// package on every node.
pub fn applied_hash(p: &Package) -> String {
    use sha2::{Digest, Sha256};
    let short = |v: serde_json::Value| {
        let d = Sha256::digest(v.to_string().as_bytes());
        d.iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let install = short(serde_json::json!({
        "image": p.image, "containerSHA": p.container_sha, "env": p.env, "resources": p.resources,
    }));
    format!("{install}.{}", config_hash(&p.config_map))
}

/// The config part of [`applied_hash`].
pub fn config_hash(data: &BTreeMap<String, String>) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(serde_json::json!(data).to_string().as_bytes());
    d.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// The spec as the node machine needs it: normalised packages and their current hashes.
pub struct SpecView<'a> {
    pub packages: &'a BTreeMap<String, Package>,
    pub spec_hashes: BTreeMap<String, String>,
    pub config_updates: &'a BTreeMap<String, Vec<String>>,
}

impl SpecView<'_> {
    /// Interrupts that apply to `p` right now: while a config rollout is recorded for a package
    /// only its matching configInterrupts count (§3.2).
    pub fn interrupts(&self, p: &Package) -> Vec<Interrupt> {
        match self
            .config_updates
            .get(&p.name)
            .filter(|keys| !keys.is_empty())
        {
            Some(keys) => {
                let mut out: Vec<Interrupt> = Vec::new();
                for (pattern, i) in &p.config_interrupts {
                    let hit = keys
                        .iter()
                        .any(|k| schema::glob_match(pattern, k).unwrap_or(false));
                    if hit && !out.contains(i) {
                        out.push(i.clone());
                    }
                }
                out
            }
            None => p.interrupt.iter().cloned().collect(),
        }
    }

    pub fn has_interrupt(&self, p: &Package) -> bool {
        !self.interrupts(p).is_empty()
    }

    pub fn package_complete(&self, state: &NodeState, p: &Package) -> bool {
        state.get(&p.name, &p.version).is_some_and(|e| {
            e.state == Some(State::Complete) && e.stage == Stage::terminal(self.has_interrupt(p))
        })
    }

    /// §3.2 nodeComplete: every spec package complete at its version, nothing left to uninstall.
    pub fn node_complete(&self, state: &NodeState) -> bool {
        let all_complete = self
            .packages
            .values()
            .all(|p| self.package_complete(state, p));
        let no_uninstall = state.iter().all(|(_, e)| e.stage != Stage::Uninstall);
        let no_strays = state.iter().all(|(_, e)| {
            self.packages
                .get(&e.name)
                .is_some_and(|p| p.version == e.version)
        });
        all_complete && no_uninstall && no_strays
    }
}

/// Retry timing after a failed stage.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub base: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    /// Delay before attempt number `failures + 1`: base·2^(failures-1), capped.
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(20);
        self.base.saturating_mul(1 << exp).min(self.max)
    }
}

/// A pod on a cordoned node, as the drain sees it (classified by the caller, §3.9.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    /// Matches `podNonInterruptLabels` and is Running or Pending: blocks the interrupt.
    pub protected: bool,
    /// Must be evicted before the interrupt.
    pub evictable: bool,
}

/// What the node machine knows about the node itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeFacts<'a> {
    /// `spec.unschedulable` (set by us or by an administrator).
    pub cordoned: bool,
    /// Pods on the node; listed only for cordoned nodes.
    pub pods: Option<&'a [PodInfo]>,
    /// A Job of another Skyhook runs on the node.
    pub other_busy: bool,
}

/// What the node machine wants done.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeAction {
    /// Start attempt `attempt` of `stage` for `package` (a spec package, or a synthesised old
    /// version for uninstalls).
    Run {
        package: Box<Package>,
        stage: Stage,
        attempt: u32,
        spec_hash: String,
        /// For the interrupt stage: the node's merged interrupt (§3.9.4).
        interrupt: Option<Interrupt>,
    },
    /// Mark a Job recorded and, when it succeeded, let the TTL controller collect it.
    Record { job: String, succeeded: bool },
    /// Fail a Job now (its pod can never start), naming why.
    FailNow {
        job: String,
        reason: String,
        message: String,
    },
    /// Remove a Job (a stale attempt, or failed attempts beyond the number kept).
    Delete { job: String },
}

/// Something worth an Event and a condition.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeNote {
    Started {
        package: String,
        version: String,
        stage: Stage,
    },
    Completed {
        package: String,
        version: String,
        stage: Stage,
    },
    Failed {
        package: String,
        version: String,
        stage: Stage,
        reason: String,
        message: String,
        restarts: i32,
    },
}

pub struct NodeOutcome {
    pub state: NodeState,
    /// `<pkg>|<ver>` → [`applied_hash`] of what the node completed.
    pub applied: BTreeMap<String, String>,
    pub actions: Vec<NodeAction>,
    pub notes: Vec<NodeNote>,
    /// The earliest moment a retry becomes due.
    pub retry_at: Option<Timestamp>,
    /// A Job of this Skyhook is running on the node.
    pub active: bool,
    /// Cordon the node before anything else (it is not yet unschedulable).
    pub cordon: bool,
    /// Pods to evict (namespace, name).
    pub evict: Vec<(String, String)>,
    /// Why interrupt work waits on this node, for humans.
    pub blocked: Option<String>,
    /// Held back by a protected pod or a drain that cannot finish (reported as `blocked`).
    pub held: bool,
}

/// Fold Jobs into `state` and decide the next Jobs. `may_start` is false when the node is
/// outside the current batch, paused, disabled, gated or blocked: running work is still
/// observed, but nothing new starts.
#[allow(clippy::too_many_arguments)]
pub fn step(
    spec: &SpecView,
    mut state: NodeState,
    mut applied: BTreeMap<String, String>,
    facts: NodeFacts,
    jobs: &[&JobView],
    may_start: bool,
    retry: RetryPolicy,
    failed_jobs_kept: usize,
    now: Timestamp,
) -> NodeOutcome {
    let mut out = NodeOutcome {
        state: NodeState::default(),
        applied: BTreeMap::new(),
        actions: Vec::new(),
        notes: Vec::new(),
        retry_at: None,
        active: false,
        cordon: false,
        evict: Vec::new(),
        blocked: None,
        held: false,
    };
    migrate_legacy(spec, &mut state);
    observe(spec, &mut state, &mut applied, jobs, &mut out, now);
    prune_failed(jobs, failed_jobs_kept, &mut out);
    out.active = jobs.iter().any(|j| !j.finished() && !j.deleting);
    // Complete packages with no record (state written by the Go operator, or before this
    // bookkeeping existed) are taken as current rather than re-run.
    for p in spec.packages.values() {
        let key = schema::package_key(&p.name, &p.version);
        if spec.package_complete(&state, p) && !applied.contains_key(&key) {
            applied.insert(key, applied_hash(p));
        }
    }
    applied.retain(|k, _| state.0.contains_key(k));
    if may_start {
        version_changes(spec, &mut state);
        drift(spec, &mut state, &applied);
        let work = wanted(spec, &state);
        // §3.9.4: the merge spans every incomplete package at the frontier, including those
        // already `skipped` at the interrupt stage.
        let candidates: Vec<(String, Vec<Interrupt>)> = frontier(spec, &state)
            .into_iter()
            .map(|p| (p.name.clone(), spec.interrupts(p)))
            .collect();
        let merged =
            schema::merge_interrupts(candidates.iter().map(|(n, i)| (n.as_str(), i.iter())))
                .map(|(i, owner)| (i, owner.to_string()));
        for (pkg, stage) in work {
            let adopting = current(jobs, &pkg.name, &pkg.version, stage)
                .last()
                .is_some_and(|j| !j.finished());
            if stage == Stage::Interrupt && !adopting {
                match &merged {
                    Some((interrupt, owner)) if *owner == pkg.name => {
                        // The interrupt runs alone on the node (§3.9.5).
                        let others = out.active || facts.other_busy;
                        if others {
                            out.blocked = Some("waiting for other stages on the node to finish before the interrupt".into());
                            continue;
                        }
                        start(
                            spec,
                            &mut state,
                            jobs,
                            &pkg,
                            stage,
                            Some(interrupt),
                            retry,
                            now,
                            &mut out,
                        );
                    }
                    _ => mark(&mut state, &pkg, Stage::Interrupt, State::Skipped, 0),
                }
                continue;
            }
            // Cordon and drain before the stages that lead to an interrupt (a config re-run whose
            // keys match a configInterrupt included: §3.9.1 step 5).
            let needs_drain = matches!(stage, Stage::Apply | Stage::Upgrade | Stage::Config)
                && spec.has_interrupt(&pkg);
            if needs_drain && !adopting && !ready_for_interrupt(facts, &mut out) {
                continue;
            }
            start(
                spec, &mut state, jobs, &pkg, stage, None, retry, now, &mut out,
            );
        }
    }
    out.state = state;
    out.applied = applied;
    out
}

/// Packages complete on the node whose spec changed since: the node is not complete.
pub fn has_drift(spec: &SpecView, state: &NodeState, applied: &BTreeMap<String, String>) -> bool {
    spec.packages.values().any(|p| {
        let key = schema::package_key(&p.name, &p.version);
        spec.package_complete(state, p)
            && applied
                .get(&key)
                .is_some_and(|done| *done != applied_hash(p))
    })
}

/// A complete package whose spec changed since the node completed it runs again: from `apply`
/// when the image, env or resources changed, only `config` when only the configMap did.
fn drift(spec: &SpecView, state: &mut NodeState, applied: &BTreeMap<String, String>) {
    for p in spec.packages.values() {
        let key = schema::package_key(&p.name, &p.version);
        let Some(e) = state.get(&p.name, &p.version).cloned() else {
            continue;
        };
        let settled = e.state == Some(State::Complete)
            && matches!(
                e.stage,
                Stage::Config | Stage::Interrupt | Stage::PostInterrupt
            );
        let (Some(done), true) = (applied.get(&key), settled) else {
            continue;
        };
        let want = applied_hash(p);
        if *done == want {
            continue;
        }
        let install_changed = done.split('.').next() != want.split('.').next();
        let stage = if install_changed {
            Stage::Apply
        } else {
            Stage::Config
        };
        set(state, &e, stage, State::InProgress, 0);
    }
}

/// §3.9.1 step 5: cordon first (persisted before anything runs), then wait while protected
/// pods run, then evict the rest. True when the node is ready.
fn ready_for_interrupt(facts: NodeFacts, out: &mut NodeOutcome) -> bool {
    if !facts.cordoned {
        out.cordon = true;
        return false;
    }
    let Some(pods) = facts.pods else {
        out.blocked = Some("listing the pods on the node".into());
        return false;
    };
    let protected: Vec<String> = pods
        .iter()
        .filter(|p| p.protected)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    if !protected.is_empty() {
        out.held = true;
        out.blocked = Some(format!(
            "waiting for protected pod(s) {} (podNonInterruptLabels) to finish",
            protected.join(", ")
        ));
        return false;
    }
    let evict: Vec<(String, String)> = pods
        .iter()
        .filter(|p| p.evictable)
        .map(|p| (p.namespace.clone(), p.name.clone()))
        .collect();
    if !evict.is_empty() {
        let names: Vec<String> = evict.iter().map(|(n, p)| format!("{n}/{p}")).collect();
        out.held = true;
        out.blocked = Some(format!("draining: evicting {}", names.join(", ")));
        for e in evict {
            if !out.evict.contains(&e) {
                out.evict.push(e);
            }
        }
        return false;
    }
    true
}

/// §7.1: pre-v0.5 entries are keyed by bare name and lack an image.
fn migrate_legacy(spec: &SpecView, state: &mut NodeState) {
    let legacy: Vec<(String, PackageStatus)> = state
        .legacy_entries()
        .map(|(k, e)| (k.to_string(), e.clone()))
        .collect();
    for (key, mut entry) in legacy {
        state.0.remove(&key);
        if let Some(p) = spec
            .packages
            .get(&entry.name)
            .filter(|p| p.version == entry.version)
        {
            entry.image = p.image.clone();
            state.upsert(entry);
        }
    }
}

/// Jobs of `stage` for (name, version) not yet folded into the state, oldest attempt first.
fn current<'j>(jobs: &[&'j JobView], name: &str, version: &str, stage: Stage) -> Vec<&'j JobView> {
    let mut v: Vec<&JobView> = jobs
        .iter()
        .copied()
        .filter(|j| j.package == name && j.version == version && j.stage == stage && !j.recorded)
        .collect();
    v.sort_by_key(|j| j.attempt);
    v
}

fn failures(jobs: &[&JobView]) -> usize {
    jobs.iter()
        .filter(|j| matches!(j.outcome, Outcome::Failed { .. }))
        .count()
}

fn observe(
    spec: &SpecView,
    state: &mut NodeState,
    applied: &mut BTreeMap<String, String>,
    jobs: &[&JobView],
    out: &mut NodeOutcome,
    now: Timestamp,
) {
    let entries: Vec<PackageStatus> = state.iter().map(|(_, e)| e.clone()).collect();
    for e in entries {
        if !matches!(e.state, Some(State::InProgress) | Some(State::Erroring)) {
            continue;
        }
        let run = current(jobs, &e.name, &e.version, e.stage);
        let Some(latest) = run.last() else { continue };
        if let Some(done) = run
            .iter()
            .find(|j| matches!(j.outcome, Outcome::Complete { .. }))
        {
            let restarts = failures(&run) as i32;
            succeed(spec, state, &e, restarts);
            let key = schema::package_key(&e.name, &e.version);
            record(applied, key, e.stage, &done.spec_hash);
            out.notes.push(NodeNote::Completed {
                package: e.name.clone(),
                version: e.version.clone(),
                stage: e.stage,
            });
            for j in &run {
                let succeeded = j.name == done.name;
                out.actions.push(NodeAction::Record {
                    job: j.name.clone(),
                    succeeded,
                });
            }
            continue;
        }
        let failed = failures(&run) as i32;
        match &latest.outcome {
            Outcome::Running => {
                if let Some((container, reason, message)) = &latest.stuck {
                    let message = format!("container {container}: {message}");
                    out.actions.push(NodeAction::FailNow {
                        job: latest.name.clone(),
                        reason: reason.clone(),
                        message: message.clone(),
                    });
                    set(state, &e, e.stage, State::Erroring, failed + 1);
                    out.notes.push(NodeNote::Failed {
                        package: e.name.clone(),
                        version: e.version.clone(),
                        stage: e.stage,
                        reason: reason.clone(),
                        message,
                        restarts: failed + 1,
                    });
                } else if e.state != Some(State::InProgress) || e.restarts != failed {
                    set(state, &e, e.stage, State::InProgress, failed);
                }
            }
            Outcome::Failed {
                reason, message, ..
            } => {
                if e.state != Some(State::Erroring) || e.restarts != failed {
                    set(state, &e, e.stage, State::Erroring, failed);
                    out.notes.push(NodeNote::Failed {
                        package: e.name.clone(),
                        version: e.version.clone(),
                        stage: e.stage,
                        reason: reason.clone(),
                        message: message.clone(),
                        restarts: failed,
                    });
                }
            }
            Outcome::Complete { .. } => {}
        }
    }
    let _ = now;
}

/// What a node has applied, updated as each stage succeeds: `apply`/`upgrade` install the whole
/// spec; later stages only deliver the config (so an install change after `apply` still shows).
fn record(applied: &mut BTreeMap<String, String>, key: String, stage: Stage, job_hash: &str) {
    match stage {
        Stage::Uninstall => {
            applied.remove(&key);
        }
        Stage::Apply | Stage::Upgrade => {
            applied.insert(key, job_hash.to_string());
        }
        _ => {
            let config = job_hash.split('.').nth(1).unwrap_or_default();
            let install = applied
                .get(&key)
                .and_then(|h| h.split('.').next().map(str::to_string))
                .unwrap_or_else(|| job_hash.split('.').next().unwrap_or_default().to_string());
            applied.insert(key, format!("{install}.{config}"));
        }
    }
}

fn set(state: &mut NodeState, e: &PackageStatus, stage: Stage, s: State, restarts: i32) {
    let mut n = e.clone();
    n.stage = stage;
    n.state = Some(s);
    n.restarts = restarts;
    state.upsert(n);
}

/// §3.11 step 3: what a successful stage means for the node state.
fn succeed(spec: &SpecView, state: &mut NodeState, e: &PackageStatus, restarts: i32) {
    match e.stage {
        Stage::Interrupt => {
            let skipped: Vec<PackageStatus> = state
                .iter()
                .map(|(_, x)| x.clone())
                .filter(|x| x.stage == Stage::Interrupt && x.state == Some(State::Skipped))
                .filter(|x| {
                    spec.packages
                        .get(&x.name)
                        .is_some_and(|p| spec.has_interrupt(p))
                })
                .collect();
            for x in skipped {
                set(state, &x, Stage::Interrupt, State::Complete, x.restarts);
            }
            set(state, e, Stage::Interrupt, State::Complete, restarts);
        }
        Stage::Upgrade => {
            let others: Vec<String> = state
                .iter()
                .filter(|(_, x)| x.name == e.name && x.version != e.version)
                .map(|(_, x)| x.version.clone())
                .collect();
            for v in others {
                state.remove(&e.name, &v);
            }
            set(state, e, Stage::Upgrade, State::Complete, restarts);
        }
        Stage::Uninstall => {
            if let Some(p) = spec
                .packages
                .get(&e.name)
                .filter(|p| p.version != e.version)
            {
                let mut next =
                    state
                        .get(&p.name, &p.version)
                        .cloned()
                        .unwrap_or_else(|| PackageStatus {
                            name: p.name.clone(),
                            version: p.version.clone(),
                            image: p.image.clone(),
                            container_sha: p.container_sha.clone(),
                            stage: Stage::Uninstall,
                            state: None,
                            restarts: 0,
                        });
                next.stage = Stage::Uninstall;
                next.state = Some(State::Complete);
                state.upsert(next);
            }
            state.remove(&e.name, &e.version);
        }
        stage => set(state, e, stage, State::Complete, restarts),
    }
}

/// Keep only the newest `kept` failed, recorded-or-not Jobs per (package, version, stage).
fn prune_failed(jobs: &[&JobView], kept: usize, out: &mut NodeOutcome) {
    let mut groups: BTreeMap<(String, String, &str), Vec<&JobView>> = BTreeMap::new();
    for j in jobs
        .iter()
        .filter(|j| matches!(j.outcome, Outcome::Failed { .. }) && !j.deleting)
    {
        groups
            .entry((j.package.clone(), j.version.clone(), j.stage.as_str()))
            .or_default()
            .push(j);
    }
    for (_, mut g) in groups {
        g.sort_by_key(|j| std::cmp::Reverse(j.attempt));
        for j in g.into_iter().skip(kept) {
            out.actions.push(NodeAction::Delete {
                job: j.name.clone(),
            });
        }
    }
}

/// §3.6 per node: removals and downgrades become uninstalls, upgrades an `upgrade` stage.
fn version_changes(spec: &SpecView, state: &mut NodeState) {
    let entries: Vec<PackageStatus> = state.iter().map(|(_, e)| e.clone()).collect();
    for e in entries {
        match spec.packages.get(&e.name) {
            None if e.stage != Stage::Uninstall => {
                let mut n = e.clone();
                n.stage = Stage::Uninstall;
                n.state = Some(State::InProgress);
                n.restarts = 0;
                n.container_sha = None;
                state.upsert(n);
            }
            Some(p) if p.version != e.version => {
                match schema::semver_compare(&p.version, &e.version) {
                    std::cmp::Ordering::Greater => {
                        let already = state.get(&p.name, &p.version).is_some_and(|x| {
                            x.stage == Stage::Upgrade || x.state == Some(State::Complete)
                        });
                        if !already && e.stage != Stage::Uninstall {
                            state.upsert(PackageStatus {
                                name: p.name.clone(),
                                version: p.version.clone(),
                                image: p.image.clone(),
                                container_sha: p.container_sha.clone(),
                                stage: Stage::Upgrade,
                                state: Some(State::InProgress),
                                restarts: 0,
                            });
                        }
                    }
                    _ if e.stage != Stage::Uninstall => {
                        let mut old = e.clone();
                        old.stage = Stage::Uninstall;
                        old.state = Some(State::InProgress);
                        old.restarts = 0;
                        state.upsert(old);
                        if state.get(&p.name, &p.version).is_none() {
                            state.upsert(PackageStatus {
                                name: p.name.clone(),
                                version: p.version.clone(),
                                image: p.image.clone(),
                                container_sha: p.container_sha.clone(),
                                stage: Stage::Uninstall,
                                state: Some(State::Skipped),
                                restarts: 0,
                            });
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

/// The (package, stage) pairs to run now: uninstalls first, then the dependency frontier
/// (packages whose dependencies are all complete and that are not complete themselves).
fn wanted(spec: &SpecView, state: &NodeState) -> Vec<(Package, Stage)> {
    let mut out = Vec::new();
    for (_, e) in state.iter() {
        if e.stage == Stage::Uninstall
            && matches!(e.state, Some(State::InProgress) | Some(State::Erroring))
        {
            out.push((uninstall_package(spec, e), Stage::Uninstall));
        }
    }
    let complete: BTreeSet<&str> = spec
        .packages
        .values()
        .filter(|p| spec.package_complete(state, p))
        .map(|p| p.name.as_str())
        .collect();
    for p in spec.packages.values() {
        if complete.contains(p.name.as_str()) {
            continue;
        }
        let deps_done = p.depends_on.keys().all(|d| complete.contains(d.as_str()));
        // An uninstall of another version of this package goes first (downgrades).
        let uninstalling = state.iter().any(|(_, e)| {
            e.name == p.name && e.version != p.version && e.stage == Stage::Uninstall
        });
        if !deps_done || uninstalling {
            continue;
        }
        if let Some(stage) = next_stage(spec, state, p) {
            out.push((p.clone(), stage));
        }
    }
    out
}

/// Spec packages whose dependencies are complete and that are not complete themselves.
fn frontier<'a>(spec: &'a SpecView, state: &NodeState) -> Vec<&'a Package> {
    let complete: BTreeSet<&str> = spec
        .packages
        .values()
        .filter(|p| spec.package_complete(state, p))
        .map(|p| p.name.as_str())
        .collect();
    spec.packages
        .values()
        .filter(|p| !complete.contains(p.name.as_str()))
        .filter(|p| p.depends_on.keys().all(|d| complete.contains(d.as_str())))
        .collect()
}

/// The stage package `p` should be in next on this node, if any.
fn next_stage(spec: &SpecView, state: &NodeState, p: &Package) -> Option<Stage> {
    let Some(e) = state.get(&p.name, &p.version) else {
        return Some(Stage::Apply);
    };
    match e.state {
        Some(State::Complete) => e.stage.next(spec.has_interrupt(p)),
        Some(State::Skipped) => None,
        _ => Some(e.stage),
    }
}

/// Uninstalls run with the old version's identity only (§3.6): no env, configMap or resources.
fn uninstall_package(spec: &SpecView, e: &PackageStatus) -> Package {
    let mut p = spec.packages.get(&e.name).cloned().unwrap_or_default();
    p.name = e.name.clone();
    p.version = e.version.clone();
    p.image = e.image.clone();
    p.container_sha = None;
    p.env = Vec::new();
    p.config_map = BTreeMap::new();
    p.resources = None;
    p.interrupt = None;
    p.config_interrupts = BTreeMap::new();
    p.depends_on = BTreeMap::new();
    p
}

#[allow(clippy::too_many_arguments)]
fn start(
    spec: &SpecView,
    state: &mut NodeState,
    jobs: &[&JobView],
    p: &Package,
    stage: Stage,
    interrupt: Option<&Interrupt>,
    retry: RetryPolicy,
    now: Timestamp,
    out: &mut NodeOutcome,
) {
    let hash = if stage == Stage::Uninstall {
        String::new()
    } else {
        spec.spec_hashes.get(&p.name).cloned().unwrap_or_default()
    };
    let run = current(jobs, &p.name, &p.version, stage);
    let failed = failures(&run) as u32;
    if let Some(latest) = run.last() {
        match &latest.outcome {
            // Built from an older spec: replace it (the reference invalidates such pods, §4.7).
            Outcome::Running if stage != Stage::Uninstall && latest.spec_hash != hash => {
                if !latest.deleting {
                    out.actions.push(NodeAction::Delete {
                        job: latest.name.clone(),
                    });
                }
                mark(state, p, stage, State::InProgress, failed as i32);
                return;
            }
            // Being failed this pass (its pod cannot start): it stays erroring.
            Outcome::Running if latest.stuck.is_some() => return,
            // Running (or just created): adopt it, never start a twin.
            Outcome::Running => {
                mark(state, p, stage, State::InProgress, failed as i32);
                return;
            }
            Outcome::Complete { .. } => return,
            Outcome::Failed { at, .. } => {
                // A spec change retries at once; otherwise wait out the backoff.
                let stale = stage != Stage::Uninstall && latest.spec_hash != hash;
                let due = *at + retry.delay(failed);
                if !stale && now < due {
                    out.retry_at = Some(out.retry_at.map_or(due, |r: Timestamp| r.min(due)));
                    return;
                }
            }
        }
    }
    let attempt = jobs
        .iter()
        .filter(|j| j.package == p.name && j.version == p.version && j.stage == stage)
        .map(|j| j.attempt + 1)
        .max()
        .unwrap_or(0);
    if attempt > schema::MAX_JOB_ATTEMPT {
        return;
    }
    let prior = state
        .get(&p.name, &p.version)
        .map(|e| e.restarts)
        .unwrap_or(0);
    let restarts = if run.is_empty() {
        0
    } else {
        prior.max(failed as i32)
    };
    mark(state, p, stage, State::InProgress, restarts);
    out.notes.push(NodeNote::Started {
        package: p.name.clone(),
        version: p.version.clone(),
        stage,
    });
    out.actions.push(NodeAction::Run {
        package: Box::new(p.clone()),
        stage,
        attempt,
        spec_hash: hash,
        interrupt: interrupt.cloned(),
    });
}

fn mark(state: &mut NodeState, p: &Package, stage: Stage, s: State, restarts: i32) {
    let mut e = state
        .get(&p.name, &p.version)
        .cloned()
        .unwrap_or_else(|| PackageStatus {
            name: p.name.clone(),
            version: p.version.clone(),
            image: p.image.clone(),
            container_sha: None,
            stage,
            state: None,
            restarts: 0,
        });
    e.stage = stage;
    e.state = Some(s);
    e.restarts = restarts;
    if stage != Stage::Uninstall {
        e.image = p.image.clone();
        e.container_sha = p.container_sha.clone();
    }
    state.upsert(e);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn package(name: &str, version: &str, extra: serde_json::Value) -> Package {
        let mut v = json!({"name": name, "version": version, "image": format!("ghcr.io/x/{name}")});
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(v).expect("package")
    }

    fn spec(packages: &[Package]) -> BTreeMap<String, Package> {
        packages
            .iter()
            .map(|p| (p.name.clone(), p.clone()))
            .collect()
    }

    fn view<'a>(
        packages: &'a BTreeMap<String, Package>,
        updates: &'a BTreeMap<String, Vec<String>>,
    ) -> SpecView<'a> {
        SpecView {
            packages,
            spec_hashes: packages
                .iter()
                .map(|(k, p)| (k.clone(), applied_hash(p)))
                .collect(),
            config_updates: updates,
        }
    }

    fn entry(p: &Package, stage: Stage, state: State) -> PackageStatus {
        PackageStatus {
            name: p.name.clone(),
            version: p.version.clone(),
            image: p.image.clone(),
            container_sha: None,
            stage,
            state: Some(state),
            restarts: 0,
        }
    }

    fn job(p: &Package, stage: Stage, attempt: u32, outcome: Outcome) -> JobView {
        JobView {
            name: format!("{}-{}-{attempt}", p.name, stage.as_str()),
            skyhook: "sk".into(),
            package: p.name.clone(),
            version: p.version.clone(),
            stage,
            node: "n1".into(),
            attempt,
            outcome,
            recorded: false,
            spec_hash: applied_hash(p),
            created: None,
            deleting: false,
            stuck: None,
        }
    }

    const RETRY: RetryPolicy = RetryPolicy {
        base: Duration::from_secs(10),
        max: Duration::from_secs(300),
    };

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("time")
    }

    fn runs(o: &NodeOutcome) -> Vec<(String, Stage, u32)> {
        o.actions
            .iter()
            .filter_map(|a| match a {
                NodeAction::Run {
                    package,
                    stage,
                    attempt,
                    ..
                } => Some((package.name.clone(), *stage, *attempt)),
                _ => None,
            })
            .collect()
    }

    fn state_of(o: &NodeOutcome, p: &Package) -> (Stage, Option<State>, i32) {
        let e = o.state.get(&p.name, &p.version).expect("entry");
        (e.stage, e.state, e.restarts)
    }

    #[test]
    fn fresh_install_starts_roots_only_then_follows_dependencies() {
        let a = package("alpha", "1.0.0", json!({}));
        let b = package("bravo", "1.0.0", json!({"dependsOn": {"alpha": "1.0.0"}}));
        let c = package("charlie", "2.0.0", json!({}));
        let pk = spec(&[a.clone(), b.clone(), c.clone()]);
        let none = BTreeMap::new();
        let sv = view(&pk, &none);
        let o = step(
            &sv,
            NodeState::default(),
            BTreeMap::new(),
            NodeFacts::default(),
            &[],
            true,
            RETRY,
            3,
            t(0),
        );
        assert_eq!(
            runs(&o),
            vec![
                ("alpha".into(), Stage::Apply, 0),
                ("charlie".into(), Stage::Apply, 0)
            ]
        );
        assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::InProgress), 0));

        // alpha's apply Job completed: record it and move to config; bravo still waits.
        let done = job(&a, Stage::Apply, 0, Outcome::Complete { at: t(5) });
        let running = job(&c, Stage::Apply, 0, Outcome::Running);
        let o = step(
            &sv,
            o.state,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&done, &running],
            true,
            RETRY,
            3,
            t(6),
        );
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Config, 0)]);
        assert!(o.actions.contains(&NodeAction::Record {
            job: done.name.clone(),
            succeeded: true
        }));
        assert!(o.active);

        // alpha complete at config: bravo starts, and alpha's spec is recorded as applied.
        let mut st = o.state.clone();
        st.upsert(entry(&a, Stage::Config, State::Complete));
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&running],
            true,
            RETRY,
            3,
            t(7),
        );
        assert_eq!(runs(&o), vec![("bravo".into(), Stage::Apply, 0)]);
        assert_eq!(o.applied.get("alpha|1.0.0"), Some(&applied_hash(&a)));
    }

    #[test]
    fn outside_the_batch_jobs_are_observed_but_nothing_starts() {
        let a = package("alpha", "1.0.0", json!({}));
        let pk = spec(std::slice::from_ref(&a));
        let none = BTreeMap::new();
        let sv = view(&pk, &none);
        let mut st = NodeState::default();
        st.upsert(entry(&a, Stage::Apply, State::InProgress));
        let done = job(&a, Stage::Apply, 0, Outcome::Complete { at: t(1) });
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&done],
            false,
            RETRY,
            3,
            t(2),
        );
        assert!(runs(&o).is_empty());
        assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Complete), 0));
    }

    #[test]
    fn failures_retry_with_capped_backoff_and_never_twin() {
        let a = package("alpha", "1.0.0", json!({}));
        let pk = spec(std::slice::from_ref(&a));
        let none = BTreeMap::new();
        let sv = view(&pk, &none);
        let mut st = NodeState::default();
        st.upsert(entry(&a, Stage::Apply, State::InProgress));
        let failed = |attempt, at| {
            job(
                &a,
                Stage::Apply,
                attempt,
                Outcome::Failed {
                    at,
                    reason: "PodFailurePolicy".into(),
                    message: "exit 1".into(),
                },
            )
        };
        let f0 = failed(0, t(0));
        let o = step(
            &sv,
            st.clone(),
            BTreeMap::new(),
            NodeFacts::default(),
            &[&f0],
            true,
            RETRY,
            3,
            t(1),
        );
        assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Erroring), 1));
        assert!(runs(&o).is_empty(), "retried before the backoff");
        assert_eq!(o.retry_at, Some(t(10)));
        assert!(
            o.notes
                .iter()
                .any(|n| matches!(n, NodeNote::Failed { restarts: 1, .. }))
        );

        let o = step(
            &sv,
            o.state,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&f0],
            true,
            RETRY,
            3,
            t(10),
        );
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 1)]);
        assert_eq!(state_of(&o, &a).2, 1, "restarts survive the retry");

        // The retry is running: adopt it, never a second one.
        let r1 = job(&a, Stage::Apply, 1, Outcome::Running);
        let o = step(
            &sv,
            o.state,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&f0, &r1],
            true,
            RETRY,
            3,
            t(11),
        );
        assert!(runs(&o).is_empty());
        assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::InProgress), 1));

        // Backoff doubles: after two failures the wait is 20 s; the cap is 300 s.
        assert_eq!(RETRY.delay(2), Duration::from_secs(20));
        assert_eq!(RETRY.delay(12), Duration::from_secs(300));
    }

    #[test]
    fn a_spec_change_retries_at_once_and_replaces_stale_running_jobs() {
        let old = package(
            "alpha",
            "1.0.0",
            json!({"env": [{"name": "EXIT_CODE", "value": "1"}]}),
        );
        let new = package("alpha", "1.0.0", json!({}));
        let pk = spec(std::slice::from_ref(&new));
        let none = BTreeMap::new();
        let sv = view(&pk, &none);
        let mut st = NodeState::default();
        st.upsert(entry(&new, Stage::Apply, State::Erroring));
        let failed = job(
            &old,
            Stage::Apply,
            0,
            Outcome::Failed {
                at: t(0),
                reason: "x".into(),
                message: String::new(),
            },
        );
        let o = step(
            &sv,
            st.clone(),
            BTreeMap::new(),
            NodeFacts::default(),
            &[&failed],
            true,
            RETRY,
            3,
            t(1),
        );
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 1)]);

        let mut st = NodeState::default();
        st.upsert(entry(&new, Stage::Apply, State::InProgress));
        let stale = job(&old, Stage::Apply, 0, Outcome::Running);
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&stale],
            true,
            RETRY,
            3,
            t(1),
        );
        assert!(o.actions.contains(&NodeAction::Delete {
            job: stale.name.clone()
        }));
        assert!(runs(&o).is_empty());
    }

    #[test]
    fn stuck_pods_fail_the_job_with_their_reason() {
        let a = package("alpha", "1.0.0", json!({}));
        let pk = spec(std::slice::from_ref(&a));
        let none = BTreeMap::new();
        let sv = view(&pk, &none);
        let mut st = NodeState::default();
        st.upsert(entry(&a, Stage::Apply, State::InProgress));
        let mut j = job(&a, Stage::Apply, 0, Outcome::Running);
        j.stuck = Some((
            "alpha-init".into(),
            "ImagePullBackOff".into(),
            "back-off".into(),
        ));
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&j],
            true,
            RETRY,
            3,
            t(1),
        );
        assert!(o.actions.iter().any(
            |a| matches!(a, NodeAction::FailNow { reason, .. } if reason == "ImagePullBackOff")
        ));
        assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Erroring), 1));
    }

    #[test]
    fn upgrade_downgrade_and_removal() {
        let v1 = package("alpha", "1.0.0", json!({}));
        let v2 = package("alpha", "1.1.0", json!({}));
        let gone = package("old", "3.0.0", json!({}));
        let none = BTreeMap::new();

        // Upgrade: the new version runs `upgrade`; on success the old entry goes.
        let pk = spec(std::slice::from_ref(&v2));
        let sv = view(&pk, &none);
        let mut st = NodeState::default();
        st.upsert(entry(&v1, Stage::Config, State::Complete));
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            NodeFacts::default(),
            &[],
            true,
            RETRY,
            3,
            t(0),
        );
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Upgrade, 0)]);
        let done = job(&v2, Stage::Upgrade, 0, Outcome::Complete { at: t(1) });
        let o = step(
            &sv,
            o.state,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&done],
            true,
            RETRY,
            3,
            t(2),
        );
        assert!(o.state.get("alpha", "1.0.0").is_none());
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Config, 0)]);

        // Downgrade: the old version uninstalls first while the new one is skipped.
        let pk = spec(std::slice::from_ref(&v1));
        let sv = view(&pk, &none);
        let mut st = NodeState::default();
        st.upsert(entry(&v2, Stage::Config, State::Complete));
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            NodeFacts::default(),
            &[],
            true,
            RETRY,
            3,
            t(0),
        );
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Uninstall, 0)]);
        assert_eq!(
            state_of(&o, &v1),
            (Stage::Uninstall, Some(State::Skipped), 0)
        );
        let done = job(&v2, Stage::Uninstall, 0, Outcome::Complete { at: t(1) });
        let o = step(
            &sv,
            o.state,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&done],
            true,
            RETRY,
            3,
            t(2),
        );
        assert!(o.state.get("alpha", "1.1.0").is_none());
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 0)]);

        // Removal: uninstall with the old image, then the entry disappears.
        let pk = spec(&[]);
        let sv = view(&pk, &none);
        let mut st = NodeState::default();
        st.upsert(entry(&gone, Stage::Config, State::Complete));
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            NodeFacts::default(),
            &[],
            true,
            RETRY,
            3,
            t(0),
        );
        let uninstall = o.actions.iter().find_map(|a| match a {
            NodeAction::Run {
                package,
                stage: Stage::Uninstall,
                ..
            } => Some(package.clone()),
            _ => None,
        });
        let uninstall = uninstall.expect("an uninstall");
        assert_eq!(
            (uninstall.version.as_str(), uninstall.image.as_str()),
            ("3.0.0", "ghcr.io/x/old")
        );
        let done = job(&gone, Stage::Uninstall, 0, Outcome::Complete { at: t(1) });
        let o = step(
            &sv,
            o.state,
            BTreeMap::new(),
            NodeFacts::default(),
            &[&done],
            true,
            RETRY,
            3,
            t(2),
        );
        assert!(o.state.is_empty());
        assert!(sv.node_complete(&o.state));
    }

    #[test]
    fn drift_reruns_config_or_apply_and_unrecorded_state_is_adopted() {
        let a = package("alpha", "1.0.0", json!({"configMap": {"k": "new"}}));
        let old = package("alpha", "1.0.0", json!({"configMap": {"k": "old"}}));
        let pk = spec(std::slice::from_ref(&a));
        let none = BTreeMap::new();
        let sv = view(&pk, &none);
        let mut st = NodeState::default();
        st.upsert(entry(&a, Stage::Config, State::Complete));

        // No record (e.g. Go-operator state): adopted as current, nothing re-runs.
        let o = step(
            &sv,
            st.clone(),
            BTreeMap::new(),
            NodeFacts::default(),
            &[],
            true,
            RETRY,
            3,
            t(0),
        );
        assert!(runs(&o).is_empty());
        assert_eq!(o.applied.get("alpha|1.0.0"), Some(&applied_hash(&a)));

        // Config-only drift re-runs config.
        let applied: BTreeMap<String, String> =
            [("alpha|1.0.0".to_string(), applied_hash(&old))].into();
        assert!(has_drift(&sv, &st, &applied));
        let o = step(
            &sv,
            st.clone(),
            applied,
            NodeFacts::default(),
            &[],
            true,
            RETRY,
            3,
            t(0),
        );
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Config, 0)]);

        // Install drift (env) re-runs apply.
        let other = package(
            "alpha",
            "1.0.0",
            json!({"configMap": {"k": "new"}, "env": [{"name": "X", "value": "1"}]}),
        );
        let applied: BTreeMap<String, String> =
            [("alpha|1.0.0".to_string(), applied_hash(&other))].into();
        let o = step(
            &sv,
            st,
            applied,
            NodeFacts::default(),
            &[],
            true,
            RETRY,
            3,
            t(0),
        );
        assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 0)]);
    }

    #[test]
    fn legacy_unversioned_entries_are_migrated() {
        let a = package("alpha", "1.0.0", json!({}));
        let pk = spec(std::slice::from_ref(&a));
        let none = BTreeMap::new();
        let sv = view(&pk, &none);
        let st = NodeState::parse(r#"{"alpha":{"name":"alpha","version":"1.0.0","image":"","stage":"config","state":"complete"},"gone":{"name":"gone","version":"1","image":"","stage":"config","state":"complete"}}"#)
            .expect("legacy state");
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            NodeFacts::default(),
            &[],
            false,
            RETRY,
            3,
            t(0),
        );
        assert_eq!(o.state.0.keys().collect::<Vec<_>>(), vec!["alpha|1.0.0"]);
        assert_eq!(
            o.state.get("alpha", "1.0.0").map(|e| e.image.as_str()),
            Some("ghcr.io/x/alpha")
        );
    }
}
