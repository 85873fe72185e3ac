//! Prometheus metrics with the reference's names and labels (§5.4), derived from each Skyhook's
//! status after a reconcile. Package gauges report true sums (the reference overwrites partial
//! counts: §10.3 item 26a).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::crd::{Skyhook, SkyhookStatus};
use crate::schema::{self, Stage, State, Status};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkyhookLabels {
    skyhook_name: String,
}

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
    skyhook_name: String,
    package_name: String,
    package_version: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PackageStageLabels {
    skyhook_name: String,
    package_name: String,
    package_version: String,
    stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RolloutLabels {
    skyhook_name: String,
    policy_name: String,
    compartment_name: String,
    strategy: String,
}

pub struct Metrics {
    registry: Registry,
    status: Family<StatusLabels, Gauge>,
    node_status: Family<StatusLabels, Gauge>,
    targets: Family<SkyhookLabels, Gauge>,
    package_state: Family<PackageStateLabels, Gauge>,
    package_stage: Family<PackageStageLabels, Gauge>,
    restarts: Family<PackageLabels, Gauge>,
    matched: Family<RolloutLabels, Gauge>,
    ceiling: Family<RolloutLabels, Gauge>,
    current_batch: Family<RolloutLabels, Gauge>,
    consecutive_failures: Family<RolloutLabels, Gauge>,
    should_stop: Family<RolloutLabels, Gauge>,
    in_progress: Family<RolloutLabels, Gauge>,
    completed: Family<RolloutLabels, Gauge>,
    progress: Family<RolloutLabels, Gauge>,
    /// Package label sets last emitted per Skyhook, so removed packages' series go away.
    emitted: Mutex<BTreeMap<String, BTreeSet<(String, String)>>>,
    /// Rollout label set last emitted per Skyhook (its policy name can change).
    emitted_policy: Mutex<BTreeMap<String, RolloutLabels>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let mut reg = |name: &str, help: &str, metric: &dyn Fn(&mut Registry, &str, &str)| {
            metric(&mut registry, name, help)
        };
        let status = Family::<StatusLabels, Gauge>::default();
        let node_status = Family::<StatusLabels, Gauge>::default();
        let targets = Family::<SkyhookLabels, Gauge>::default();
        let package_state = Family::<PackageStateLabels, Gauge>::default();
        let package_stage = Family::<PackageStageLabels, Gauge>::default();
        let restarts = Family::<PackageLabels, Gauge>::default();
        let matched = Family::<RolloutLabels, Gauge>::default();
        let ceiling = Family::<RolloutLabels, Gauge>::default();
        let current_batch = Family::<RolloutLabels, Gauge>::default();
        let consecutive_failures = Family::<RolloutLabels, Gauge>::default();
        let should_stop = Family::<RolloutLabels, Gauge>::default();
        let in_progress = Family::<RolloutLabels, Gauge>::default();
        let completed = Family::<RolloutLabels, Gauge>::default();
        let progress = Family::<RolloutLabels, Gauge>::default();
        reg(
            "skyhook_status",
            "1 for the Skyhook's current status, 0 for the others",
            &|r, n, h| r.register(n, h, status.clone()),
        );
        reg(
            "skyhook_node_status_count",
            "Targeted nodes per status",
            &|r, n, h| r.register(n, h, node_status.clone()),
        );
        reg("skyhook_node_target_count", "Targeted nodes", &|r, n, h| {
            r.register(n, h, targets.clone())
        });
        reg(
            "skyhook_package_state_count",
            "Nodes per package state",
            &|r, n, h| r.register(n, h, package_state.clone()),
        );
        reg(
            "skyhook_package_stage_count",
            "Nodes per package stage",
            &|r, n, h| r.register(n, h, package_stage.clone()),
        );
        reg(
            "skyhook_package_restarts_count",
            "Failed attempts summed over nodes",
            &|r, n, h| r.register(n, h, restarts.clone()),
        );
        reg(
            "skyhook_rollout_matched_nodes",
            "Nodes in the compartment",
            &|r, n, h| r.register(n, h, matched.clone()),
        );
        reg(
            "skyhook_rollout_ceiling",
            "Nodes the compartment may work on at once",
            &|r, n, h| r.register(n, h, ceiling.clone()),
        );
        reg(
            "skyhook_rollout_current_batch",
            "Current batch number",
            &|r, n, h| r.register(n, h, current_batch.clone()),
        );
        reg(
            "skyhook_rollout_consecutive_failures",
            "Consecutive failed batches",
            &|r, n, h| r.register(n, h, consecutive_failures.clone()),
        );
        reg(
            "skyhook_rollout_should_stop",
            "1 when the rollout is halted",
            &|r, n, h| r.register(n, h, should_stop.clone()),
        );
        reg(
            "skyhook_rollout_in_progress",
            "Compartment nodes in progress",
            &|r, n, h| r.register(n, h, in_progress.clone()),
        );
        reg(
            "skyhook_rollout_completed",
            "Compartment nodes complete",
            &|r, n, h| r.register(n, h, completed.clone()),
        );
        reg(
            "skyhook_rollout_progress_percent",
            "Compartment progress",
            &|r, n, h| r.register(n, h, progress.clone()),
        );
        Metrics {
            registry,
            status,
            node_status,
            targets,
            package_state,
            package_stage,
            restarts,
            matched,
            ceiling,
            current_batch,
            consecutive_failures,
            should_stop,
            in_progress,
            completed,
            progress,
            emitted: Mutex::new(BTreeMap::new()),
            emitted_policy: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Metrics {
    /// Set every series of one Skyhook from its status.
    /// `ceiling` is the number of nodes one batch may hold (the budget applied to the targets).
    pub fn observe(&self, sk: &Skyhook, st: &SkyhookStatus, ceiling: usize) {
        let name = sk.metadata.name.clone().unwrap_or_default();
        let current = st.status.unwrap_or(Status::Unknown);
        for s in Status::ALL {
            let l = StatusLabels {
                skyhook_name: name.clone(),
                status: s.as_str().into(),
            };
            self.status.get_or_create(&l).set(i64::from(s == current));
            let n = st.node_status.values().filter(|x| **x == s).count();
            self.node_status.get_or_create(&l).set(n as i64);
        }
        let targeted = st.node_status.len() as i64;
        self.targets
            .get_or_create(&SkyhookLabels {
                skyhook_name: name.clone(),
            })
            .set(targeted);
        let mut now_emitted = BTreeSet::new();
        for p in sk.spec.packages.values() {
            let key = (p.name.clone(), p.version.clone());
            now_emitted.insert(key.clone());
            let entries: Vec<_> = st
                .node_state
                .values()
                .filter_map(|ns| ns.get(&p.name, &p.version))
                .collect();
            for s in State::ALL {
                let n = entries.iter().filter(|e| e.state == Some(s)).count();
                self.package_state
                    .get_or_create(&self.psl(&name, &key, s.as_str()))
                    .set(n as i64);
            }
            for s in Stage::ALL {
                let n = entries.iter().filter(|e| e.stage == s).count();
                self.package_stage
                    .get_or_create(&self.pgl(&name, &key, s.as_str()))
                    .set(n as i64);
            }
            let r: i64 = entries.iter().map(|e| i64::from(e.restarts)).sum();
            self.restarts.get_or_create(&pl(&name, &key)).set(r);
        }
        let mut emitted = self.emitted.lock().unwrap_or_else(|e| e.into_inner());
        let old = emitted
            .insert(name.clone(), now_emitted.clone())
            .unwrap_or_default();
        for gone in old.difference(&now_emitted) {
            self.remove_package(&name, gone);
        }
        drop(emitted);
        let rl = RolloutLabels {
            skyhook_name: name.clone(),
            policy_name: sk
                .spec
                .deployment_policy
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| schema::LEGACY_POLICY_NAME.into()),
            compartment_name: schema::DEFAULT_COMPARTMENT.into(),
            strategy: "fixed".into(),
        };
        let complete = st
            .node_status
            .values()
            .filter(|x| **x == Status::Complete)
            .count() as i64;
        let busy = st
            .node_status
            .values()
            .filter(|x| **x == Status::InProgress)
            .count() as i64;
        self.matched.get_or_create(&rl).set(targeted);
        self.ceiling.get_or_create(&rl).set(ceiling as i64);
        // Batch bookkeeping is whatever the status carries (the CLI may reset it).
        let batch = st
            .compartment_statuses
            .get(schema::DEFAULT_COMPARTMENT)
            .and_then(|c| c.batch_state.clone())
            .unwrap_or_default();
        self.current_batch
            .get_or_create(&rl)
            .set(batch.current_batch);
        self.consecutive_failures
            .get_or_create(&rl)
            .set(batch.consecutive_failures);
        self.should_stop
            .get_or_create(&rl)
            .set(i64::from(batch.should_stop));
        self.in_progress.get_or_create(&rl).set(busy);
        self.completed.get_or_create(&rl).set(complete);
        self.progress.get_or_create(&rl).set(if targeted == 0 {
            0
        } else {
            complete * 100 / targeted
        });
    }

    fn forget_rollout(&self, l: &RolloutLabels) {
        for f in [
            &self.matched,
            &self.ceiling,
            &self.current_batch,
            &self.consecutive_failures,
            &self.should_stop,
            &self.in_progress,
            &self.completed,
            &self.progress,
        ] {
            f.remove(l);
        }
    }

    fn psl(&self, name: &str, key: &(String, String), state: &str) -> PackageStateLabels {
        PackageStateLabels {
            skyhook_name: name.into(),
            package_name: key.0.clone(),
            package_version: key.1.clone(),
            state: state.into(),
        }
    }

    fn pgl(&self, name: &str, key: &(String, String), stage: &str) -> PackageStageLabels {
        PackageStageLabels {
            skyhook_name: name.into(),
            package_name: key.0.clone(),
            package_version: key.1.clone(),
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
        for l in policies.iter() {
            self.forget_rollout(l);
        }
        self.targets.remove(&SkyhookLabels {
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
}

fn pl(name: &str, key: &(String, String)) -> PackageLabels {
    PackageLabels {
        skyhook_name: name.into(),
        package_name: key.0.clone(),
        package_version: key.1.clone(),
    }
}
