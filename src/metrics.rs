//! Prometheus metrics with the reference's names and labels (§5.4), derived from each Skyhook's
//! status after a reconcile. Package gauges report true sums (the reference overwrites partial
//! counts: §10.3 item 26a).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{LazyLock, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::crd::{Skyhook, SkyhookStatus};
use crate::plan::CompartmentPlan;
use crate::plan::census::Census;
use crate::schema;
use crate::schema::{Stage, State, Status};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

/// 5 ms to about 80 s: a pass over a few nodes to one over thousands on a saturated API server.
fn pass_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkyhookLabels {
    skyhook_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateLabels {
    skyhook_name: String,
    gate: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HealthLabels {
    skyhook_name: String,
    state: String,
}

/// The rollout gates (issue 38), each with the condition that says it holds.
const GATES: [(&str, &str); 4] = [
    ("window", schema::MAINTENANCE_WINDOW_CONDITION),
    ("alert", schema::ALERT_GATE_CONDITION),
    ("soak", schema::SOAKING_CONDITION),
    ("health", schema::HEALTH_GATE_CONDITION),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    skyhook_name: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PackageLabels {
    skyhook_name: String,
    package_name: String,
    package_version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PackageStateLabels {
    #[prometheus(flatten)]
    package: PackageLabels,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PackageStageLabels {
    #[prometheus(flatten)]
    package: PackageLabels,
    stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RolloutLabels {
    skyhook_name: String,
    policy_name: String,
    compartment_name: String,
    strategy: String,
}

/// Registers each `(name, help, metric)` in turn; a macro because the metrics differ in type.
macro_rules! register_all {
    ($registry:expr; $(($name:literal, $help:literal, $metric:expr)),+ $(,)?) => {
        $($registry.register($name, $help, $metric.clone());)+
    };
}

pub struct Metrics {
    registry: Registry,
    status: Family<StatusLabels, Gauge>,
    node_status: Family<StatusLabels, Gauge>,
    targets: Family<SkyhookLabels, Gauge>,
    write_failures: Family<SkyhookLabels, Gauge>,
    package_state: Family<PackageStateLabels, Gauge>,
    package_stage: Family<PackageStageLabels, Gauge>,
    restarts: Family<PackageLabels, Gauge>,
    matched: Family<RolloutLabels, Gauge>,
    ceiling: Family<RolloutLabels, Gauge>,
    current_batch: Family<RolloutLabels, Gauge>,
    consecutive_failures: Family<RolloutLabels, Gauge>,
    should_stop: Family<RolloutLabels, Gauge>,
    window_open: Family<RolloutLabels, Gauge>,
    gate_holding: Family<GateLabels, Gauge>,
    gate_held_seconds: Family<GateLabels, Gauge>,
    health_nodes: Family<HealthLabels, Gauge>,
    in_progress: Family<RolloutLabels, Gauge>,
    completed: Family<RolloutLabels, Gauge>,
    progress: Family<RolloutLabels, Gauge>,
    /// 1 while this process leads (or runs without leader election), 0 while it waits.
    pub leader: Gauge,
    pass_seconds: Family<PhaseLabels, Histogram, fn() -> Histogram>,
    /// Package label sets last emitted per Skyhook, so removed packages' series go away.
    emitted: Mutex<BTreeMap<String, BTreeSet<(String, String)>>>,
    /// Rollout label sets last emitted per Skyhook (policy, compartments and strategies change).
    emitted_policy: Mutex<BTreeMap<String, Vec<RolloutLabels>>>,
}

impl Default for Metrics {
    /// Every family registered, in the reference's order.
    fn default() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            status: Family::default(),
            node_status: Family::default(),
            targets: Family::default(),
            write_failures: Family::default(),
            package_state: Family::default(),
            package_stage: Family::default(),
            restarts: Family::default(),
            matched: Family::default(),
            ceiling: Family::default(),
            current_batch: Family::default(),
            consecutive_failures: Family::default(),
            should_stop: Family::default(),
            window_open: Family::default(),
            gate_holding: Family::default(),
            gate_held_seconds: Family::default(),
            health_nodes: Family::default(),
            in_progress: Family::default(),
            completed: Family::default(),
            progress: Family::default(),
            leader: Gauge::default(),
            pass_seconds: Family::new_with_constructor(pass_histogram),
            emitted: Mutex::new(BTreeMap::new()),
            emitted_policy: Mutex::new(BTreeMap::new()),
        };
        m.register_families();
        m
    }
}

impl Metrics {
    /// One pass's time in `phase` (`plan` or `write`).
    /// How many writes of the Skyhook's last pass failed for good.
    pub fn write_failures(&self, name: &str, failed: usize) {
        let labels = SkyhookLabels {
            skyhook_name: name.to_owned(),
        };
        self.write_failures
            .get_or_create(&labels)
            .set(failed as i64);
    }

    pub fn pass_phase(&self, phase: &str, seconds: f64) {
        let labels = PhaseLabels {
            phase: phase.to_string(),
        };
        self.pass_seconds.get_or_create(&labels).observe(seconds);
    }

    /// Every family, in the reference's order (ours last).
    fn register_families(&mut self) {
        let r = &mut self.registry;
        register_all!(r;
            ("skyhook_status", "1 for the Skyhook's current status, 0 for the others", self.status),
            ("skyhook_node_status_count", "Targeted nodes per status", self.node_status),
            ("skyhook_node_target_count", "Targeted nodes", self.targets),
            ("skyhook_package_state_count", "Nodes per package state", self.package_state),
            ("skyhook_package_stage_count", "Nodes per package stage", self.package_stage),
            ("skyhook_package_restarts_count", "Failed attempts summed over nodes", self.restarts),
            ("skyhook_rollout_matched_nodes", "Nodes in the compartment", self.matched),
            ("skyhook_rollout_ceiling", "Nodes the compartment may work on at once", self.ceiling),
            ("skyhook_rollout_current_batch", "Current batch number", self.current_batch),
            ("skyhook_rollout_consecutive_failures", "Consecutive failed batches", self.consecutive_failures),
            ("skyhook_rollout_should_stop", "1 when the rollout is halted", self.should_stop),
            ("skyhook_rollout_in_progress", "Compartment nodes in progress", self.in_progress),
            ("skyhook_rollout_completed", "Compartment nodes complete", self.completed),
            ("skyhook_rollout_progress_percent", "Compartment progress", self.progress),
            ("skyhook_operator_leader", "1 while this operator process reconciles (it leads, or leader election is off), 0 while it waits to lead", self.leader),
            ("skyhook_operator_pass_seconds", "Time a reconcile pass spends reading the caches and planning (phase=plan), then writing (phase=write)", self.pass_seconds),
            ("skyhook_api_requests", "Requests this operator sent to the API server, by verb, resource and response class", API_REQUESTS),
            ("skyhook_write_failures", "Objects whose write failed for good in the Skyhook's last pass (the WriteFailed condition names them)", self.write_failures),
            ("skyhook_rollout_window_open", "1 while the compartment may start nodes by its maintenance windows (always, without windows), 0 outside them", self.window_open),
            ("skyhook_rollout_gate_holding", "1 while a rollout gate (window, alert, soak, health) holds the Skyhook, 0 otherwise", self.gate_holding),
            ("skyhook_rollout_gate_held_seconds", "How long the gate has held the Skyhook without a break (0 while it does not)", self.gate_held_seconds),
            ("skyhook_health_gate_nodes", "Nodes waiting for the Skyhook's health gate (state=holding) or past its timeout (state=failed)", self.health_nodes),
            ("skyhook_notifications_dropped", "Notifications dropped before every target had them: the outbox over its size (outbox_full), undelivered for a day (expired), or its write refused (outbox_refused)", NOTIFICATIONS_DROPPED),
        );
    }

    /// Set every series of one Skyhook: node counts from `census` (every targeted node, even
    /// those a trimmed status leaves out), the rest from its status. `policy` is the
    /// `policy_name` label and `compartments` the (compartment, strategy) pairs of this pass.
    pub fn observe(
        &self,
        sk: &Skyhook,
        st: &SkyhookStatus,
        census: &Census,
        policy: &str,
        compartments: &[CompartmentPlan],
    ) {
        let name = sk.metadata.name.clone().unwrap_or_default();
        self.observe_statuses(&name, st, census);
        self.observe_packages(&name, census);
        self.observe_rollout(&name, st, policy, compartments);
        self.observe_gates(&name, st, census);
    }

    /// Each gate's hold and how long it has held (from its condition), and the health gate's
    /// nodes.
    fn observe_gates(&self, name: &str, st: &SkyhookStatus, census: &Census) {
        let now = jiff::Timestamp::now();
        for (gate, kind) in GATES {
            let holding = st
                .conditions
                .iter()
                .find(|c| c.type_ == kind && c.status == "True");
            let held = holding.map_or(0, |c| {
                now.duration_since(c.last_transition_time.0)
                    .as_secs()
                    .max(0)
            });
            let l = GateLabels {
                skyhook_name: name.to_owned(),
                gate: gate.to_owned(),
            };
            self.gate_holding
                .get_or_create(&l)
                .set(i64::from(holding.is_some()));
            self.gate_held_seconds.get_or_create(&l).set(held);
        }
        for (state, n) in [
            ("holding", census.health_holding),
            ("failed", census.health_failed),
        ] {
            let l = HealthLabels {
                skyhook_name: name.to_owned(),
                state: state.to_owned(),
            };
            self.health_nodes.get_or_create(&l).set(n as i64);
        }
    }

    /// The Skyhook's status, nodes per status, and targeted nodes.
    fn observe_statuses(&self, name: &str, st: &SkyhookStatus, census: &Census) {
        let current = st.status.unwrap_or(Status::Unknown);
        for (s, n) in Status::ALL.iter().zip(census.statuses) {
            let l = StatusLabels {
                skyhook_name: name.to_owned(),
                status: s.as_str().into(),
            };
            self.status.get_or_create(&l).set(i64::from(*s == current));
            self.node_status.get_or_create(&l).set(n as i64);
        }
        self.targets
            .get_or_create(&SkyhookLabels {
                skyhook_name: name.to_owned(),
            })
            .set(census.targeted as i64);
    }

    /// Nodes per state and stage, and restarts, of every spec package; the series of packages
    /// no longer in the spec are removed.
    fn observe_packages(&self, name: &str, census: &Census) {
        let mut now_emitted = BTreeSet::new();
        for p in &census.packages {
            let key = (p.name.clone(), p.version.clone());
            now_emitted.insert(key.clone());
            for (s, n) in State::ALL.iter().zip(p.states) {
                self.package_state
                    .get_or_create(&self.psl(name, &key, s.as_str()))
                    .set(n as i64);
            }
            for (s, n) in Stage::ALL.iter().zip(p.stages) {
                self.package_stage
                    .get_or_create(&self.pgl(name, &key, s.as_str()))
                    .set(n as i64);
            }
            self.restarts.get_or_create(&pl(name, &key)).set(p.restarts);
        }
        let mut emitted = self.emitted.lock().unwrap_or_else(|e| e.into_inner());
        let old = emitted
            .insert(name.to_owned(), now_emitted.clone())
            .unwrap_or_default();
        for gone in old.difference(&now_emitted) {
            self.remove_package(name, gone);
        }
    }

    /// The rollout gauges of every compartment, from `status.compartmentStatuses` (which the
    /// CLI may reset); series of compartments gone are removed.
    fn observe_rollout(
        &self,
        name: &str,
        st: &SkyhookStatus,
        policy: &str,
        compartments: &[CompartmentPlan],
    ) {
        let mut now_emitted = Vec::new();
        for cp in compartments {
            let Some(c) = st.compartment_statuses.get(&cp.name) else {
                continue;
            };
            let rl = RolloutLabels {
                skyhook_name: name.to_owned(),
                policy_name: policy.to_owned(),
                compartment_name: cp.name.clone(),
                strategy: cp.strategy.clone(),
            };
            let batch = c.batch_state.clone().unwrap_or_default();
            self.matched.get_or_create(&rl).set(c.matched);
            self.ceiling.get_or_create(&rl).set(c.ceiling);
            self.in_progress.get_or_create(&rl).set(c.in_progress);
            self.completed.get_or_create(&rl).set(c.completed);
            self.progress.get_or_create(&rl).set(c.progress_percent);
            self.current_batch
                .get_or_create(&rl)
                .set(batch.current_batch);
            self.consecutive_failures
                .get_or_create(&rl)
                .set(batch.consecutive_failures);
            self.should_stop
                .get_or_create(&rl)
                .set(i64::from(batch.should_stop));
            let closed = cp.window.as_deref().is_some_and(|w| w != "open");
            self.window_open.get_or_create(&rl).set(i64::from(!closed));
            now_emitted.push(rl);
        }
        let mut emitted = self
            .emitted_policy
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let old = emitted
            .insert(name.to_owned(), now_emitted.clone())
            .unwrap_or_default();
        for gone in old.iter().filter(|l| !now_emitted.contains(l)) {
            self.forget_rollout(gone);
        }
    }

    fn forget_rollout(&self, l: &RolloutLabels) {
        for f in [
            &self.matched,
            &self.ceiling,
            &self.current_batch,
            &self.consecutive_failures,
            &self.should_stop,
            &self.window_open,
            &self.in_progress,
            &self.completed,
            &self.progress,
        ] {
            f.remove(l);
        }
    }

    fn psl(&self, name: &str, key: &(String, String), state: &str) -> PackageStateLabels {
        PackageStateLabels {
            package: pl(name, key),
            state: state.into(),
        }
    }

    fn pgl(&self, name: &str, key: &(String, String), stage: &str) -> PackageStageLabels {
        PackageStageLabels {
            package: pl(name, key),
            stage: stage.into(),
        }
    }

    fn remove_package(&self, name: &str, key: &(String, String)) {
        for s in State::ALL {
            self.package_state.remove(&self.psl(name, key, s.as_str()));
        }
        for s in Stage::ALL {
            self.package_stage.remove(&self.pgl(name, key, s.as_str()));
        }
        self.restarts.remove(&pl(name, key));
    }

    /// Drop every series of a deleted Skyhook.
    pub fn forget(&self, name: &str) {
        for s in Status::ALL {
            let l = StatusLabels {
                skyhook_name: name.into(),
                status: s.as_str().into(),
            };
            self.status.remove(&l);
            self.node_status.remove(&l);
        }
        let policies = self
            .emitted_policy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        for l in policies.iter().flatten() {
            self.forget_rollout(l);
        }
        self.targets.remove(&SkyhookLabels {
            skyhook_name: name.into(),
        });
        for (gate, _) in GATES {
            let l = GateLabels {
                skyhook_name: name.into(),
                gate: gate.into(),
            };
            self.gate_holding.remove(&l);
            self.gate_held_seconds.remove(&l);
        }
        for state in ["holding", "failed"] {
            self.health_nodes.remove(&HealthLabels {
                skyhook_name: name.into(),
                state: state.into(),
            });
        }
        self.write_failures.remove(&SkyhookLabels {
            skyhook_name: name.into(),
        });
        let old = self
            .emitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
            .unwrap_or_default();
        for key in &old {
            self.remove_package(name, key);
        }
    }

    /// OpenMetrics text of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// [`Metrics::encode`], the per-object families under `names`: upstream v0.18's names are
    /// `nodewright_<suffix>` with label `nodewright_name` (delta D30), the same values. The
    /// operator's own families (leader, pass time, API requests) have one name only.
    pub fn encode_named(&self, names: Names) -> String {
        let text = self.encode();
        if names == Names::Legacy {
            return text;
        }
        let body = text.strip_suffix("# EOF\n").unwrap_or(&text);
        let mut out = String::with_capacity(text.len() * 2);
        if names == Names::Both {
            out.push_str(body);
        }
        for line in body.lines() {
            match twin_line(line) {
                Some(twin) => out.push_str(&twin),
                None if names == Names::NodeWright => out.push_str(line),
                None => continue,
            }
            out.push('\n');
        }
        out.push_str("# EOF\n");
        out
    }
}

/// The names the per-object families are published under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    /// `skyhook_*` (no NodeWright served).
    Legacy,
    /// `skyhook_*` and `nodewright_*`: upstream's dual publication.
    Both,
    /// `nodewright_*` only (`PUBLISH_LEGACY_METRICS=false`).
    NodeWright,
}

/// The families of the operator process rather than of the objects it reconciles.
const PROCESS_FAMILIES: [&str; 3] = [
    "skyhook_operator_leader",
    "skyhook_operator_pass_seconds",
    "skyhook_api_requests",
];

/// A line of a per-object family under its `nodewright_` name; `None` for any other line.
fn twin_line(line: &str) -> Option<String> {
    let (comment, rest) = match line.strip_prefix("# ") {
        Some(c) => {
            let (keyword, rest) = c.split_once(' ')?;
            (Some(keyword), rest)
        }
        None => (None, line),
    };
    let name_end = rest.find(['{', ' ']).unwrap_or(rest.len());
    let name = &rest[..name_end];
    let suffix = name.strip_prefix("skyhook_")?;
    if PROCESS_FAMILIES.iter().any(|f| name.starts_with(f)) {
        return None;
    }
    let tail = rest[name_end..].replacen("{skyhook_name=\"", "{nodewright_name=\"", 1);
    Some(match comment {
        Some(keyword) => format!("# {keyword} nodewright_{suffix}{tail}"),
        None => format!("nodewright_{suffix}{tail}"),
    })
}

fn pl(name: &str, key: &(String, String)) -> PackageLabels {
    PackageLabels {
        skyhook_name: name.into(),
        package_name: key.0.clone(),
        package_version: key.1.clone(),
    }
}

/// `skyhook_api_requests_total`: counted by the client's tower layer
/// (`controller::api::counter`), registered here.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// The plural resource, with `/<subresource>` when there is one (`skyhooks/status`).
    pub resource: String,
    /// `2xx`, `4xx`, `5xx`, or `error` when no response came back.
    pub code: String,
}

/// The counter family, shared by the client layer and the metrics registry (a `Family` clone
/// shares its series).
pub type ApiRequests = Family<RequestLabels, Counter>;

/// The process's one family: one client, one registry.
pub static API_REQUESTS: LazyLock<ApiRequests> = LazyLock::new(Family::default);

/// `skyhook_notifications_dropped_total`: counted by the notification outbox, by why.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedLabels {
    pub reason: String,
}

pub static NOTIFICATIONS_DROPPED: LazyLock<Family<DroppedLabels, Counter>> =
    LazyLock::new(Family::default);

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> Skyhook {
        let text = include_str!("../tests/fixtures/valid/go-stored-skyhook.yaml");
        serde_saphyr::from_str(text).unwrap()
    }

    fn has(text: &str, line: &str) -> bool {
        text.lines().any(|l| l == line)
    }

    #[test]
    fn twins_carry_upstreams_names_and_label_and_leave_the_process_alone() {
        let sk = stored();
        let st = sk.status.clone().unwrap();
        let m = Metrics::default();
        m.observe(&sk, &st, &Census::of(&sk, &st), "legacy", &[]);
        m.leader.set(1);
        assert_eq!(m.encode_named(Names::Legacy), m.encode());
        let text = m.encode_named(Names::Both);
        for line in [
            r#"skyhook_status{skyhook_name="stored-by-go",status="in_progress"} 1"#,
            r#"nodewright_status{nodewright_name="stored-by-go",status="in_progress"} 1"#,
            r#"nodewright_package_restarts_count{nodewright_name="stored-by-go",package_name="dexter",package_version="1.2.3"} 3"#,
            "# TYPE nodewright_node_target_count gauge",
            "skyhook_operator_leader 1",
        ] {
            assert!(has(&text, line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("nodewright_operator"), "{text}");
        assert!(!text.contains("nodewright_api_requests"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# EOF\n"));

        // PUBLISH_LEGACY_METRICS=false: the per-object families under the new names only.
        let only = m.encode_named(Names::NodeWright);
        for line in [
            r#"nodewright_status{nodewright_name="stored-by-go",status="in_progress"} 1"#,
            "skyhook_operator_leader 1",
        ] {
            assert!(has(&only, line), "{line} missing from\n{only}");
        }
        assert!(!only.contains("skyhook_name"), "{only}");
        assert!(!only.contains("skyhook_status"), "{only}");
        assert_eq!(only.matches("# EOF").count(), 1);
        assert!(only.ends_with("# EOF\n"));
    }

    #[test]
    fn series_follow_the_status() {
        let sk = stored();
        let st = sk.status.clone().unwrap();
        let m = Metrics::default();
        let compartments = [CompartmentPlan {
            window: None,
            name: "__default__".into(),
            strategy: "fixed".into(),
            budget: Default::default(),
            ceiling: 1,
            nodes: Vec::new(),
            batch_state: Default::default(),
            batch: Vec::new(),
        }];
        m.observe(&sk, &st, &Census::of(&sk, &st), "legacy", &compartments);
        let text = m.encode();
        let rollout = r#"skyhook_name="stored-by-go",policy_name="legacy",compartment_name="__default__",strategy="fixed""#;
        for line in [
            r#"skyhook_status{skyhook_name="stored-by-go",status="in_progress"} 1"#.to_owned(),
            r#"skyhook_status{skyhook_name="stored-by-go",status="complete"} 0"#.to_owned(),
            r#"skyhook_node_status_count{skyhook_name="stored-by-go",status="erroring"} 1"#.to_owned(),
            r#"skyhook_node_target_count{skyhook_name="stored-by-go"} 2"#.to_owned(),
            r#"skyhook_package_state_count{skyhook_name="stored-by-go",package_name="dexter",package_version="1.2.3",state="erroring"} 1"#.to_owned(),
            r#"skyhook_package_stage_count{skyhook_name="stored-by-go",package_name="dexter",package_version="1.2.3",stage="post-interrupt"} 1"#.to_owned(),
            r#"skyhook_package_restarts_count{skyhook_name="stored-by-go",package_name="dexter",package_version="1.2.3"} 3"#.to_owned(),
            format!("skyhook_rollout_matched_nodes{{{rollout}}} 2"),
            format!("skyhook_rollout_ceiling{{{rollout}}} 1"),
            format!("skyhook_rollout_current_batch{{{rollout}}} 2"),
            format!("skyhook_rollout_completed{{{rollout}}} 1"),
            format!("skyhook_rollout_progress_percent{{{rollout}}} 50"),
        ] {
            assert!(has(&text, &line), "{line} missing from\n{text}");
        }
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            // Process-wide counters, which other tests of this process may have counted.
            .filter(|f| !f.starts_with("skyhook_notifications_dropped"))
            .collect();
        assert_eq!(
            families,
            [
                "skyhook_status",
                "skyhook_node_status_count",
                "skyhook_node_target_count",
                "skyhook_package_state_count",
                "skyhook_package_stage_count",
                "skyhook_package_restarts_count",
                "skyhook_rollout_matched_nodes",
                "skyhook_rollout_ceiling",
                "skyhook_rollout_current_batch",
                "skyhook_rollout_consecutive_failures",
                "skyhook_rollout_should_stop",
                "skyhook_rollout_in_progress",
                "skyhook_rollout_completed",
                "skyhook_rollout_progress_percent",
                "skyhook_operator_leader",
                "skyhook_rollout_window_open",
                "skyhook_rollout_gate_holding",
                "skyhook_rollout_gate_held_seconds",
                "skyhook_health_gate_nodes",
            ]
        );
        for gate in ["window", "alert", "soak", "health"] {
            let line = format!(
                r#"skyhook_rollout_gate_holding{{skyhook_name="stored-by-go",gate="{gate}"}} 0"#
            );
            assert!(has(&text, &line), "{line} missing from\n{text}");
        }

        // A package gone from the spec loses its series; a deleted Skyhook its status series.
        let mut without_dexter = sk.clone();
        without_dexter.spec.packages.remove("dexter");
        m.observe(
            &without_dexter,
            &st,
            &Census::of(&without_dexter, &st),
            "legacy",
            &compartments,
        );
        let text = m.encode();
        assert!(!text.contains(r#"package_name="dexter""#), "{text}");
        assert!(text.contains(r#"package_name="foobar""#), "{text}");
        // A compartment gone from the pass loses its series.
        m.observe(
            &without_dexter,
            &st,
            &Census::of(&without_dexter, &st),
            "legacy",
            &[],
        );
        assert!(!m.encode().contains("skyhook_rollout_matched_nodes{"));
        m.forget("stored-by-go");
        let text = m.encode();
        assert!(!text.contains("skyhook_status{"), "{text}");
        assert!(!text.contains("package_name="), "{text}");
    }
}
