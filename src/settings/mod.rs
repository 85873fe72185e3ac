//! Operator settings: the reference operator's environment variables (same names, same defaults)
//! and matching command-line flags, validated once at start-up.

use std::time::Duration;

use clap::Args;
use thiserror::Error;

use crate::schema::{self, TaintSpec};

mod checked;
mod serving;

use checked::checked_duration;

pub use serving::{MetricsAuth, ServerLimits, Serving, ServingSettings};

#[derive(Debug, Error)]
#[error("invalid skyhook operator options: {}", .0.join("; "))]
pub struct SettingsError(pub Vec<String>);

/// Everything `skyhook-operator run` can be told. Flags win over the environment.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Namespace of the package Jobs and ConfigMaps.
    #[arg(long, env = "NAMESPACE", default_value = "skyhook")]
    pub namespace: String,
    /// Idle re-check interval (Go duration syntax, at least 1m).
    #[arg(long, env = "DEFAULT_INTERVAL", default_value = "10m")]
    pub default_interval: String,
    /// Single image pull secret for every Job's pods.
    #[arg(long, env = "IMAGE_PULL_SECRET", default_value = "")]
    pub image_pull_secret: String,
    /// Host directory package payloads are copied into.
    #[arg(long, env = "COPY_DIR_ROOT", default_value = "/var/lib/skyhook")]
    pub copy_dir_root: String,
    /// Host directory of the agent's step logs.
    #[arg(long, env = "AGENT_LOG_ROOT", default_value = "/var/log/skyhook")]
    pub agent_log_root: String,
    /// Reset a node's state when its boot id changes.
    #[arg(long, env = "REAPPLY_ON_REBOOT", default_value_t = false, action = clap::ArgAction::Set)]
    pub reapply_on_reboot: bool,
    /// Taint removed once every runtime-required Skyhook is complete on a node (kubectl syntax).
    #[arg(
        long,
        env = "RUNTIME_REQUIRED_TAINT",
        default_value = "skyhook.nvidia.com=runtime-required:NoSchedule"
    )]
    pub runtime_required_taint: String,
    /// Image of the pause container (kept for compatibility; Jobs do not need it).
    #[arg(
        long,
        env = "PAUSE_IMAGE",
        default_value = "registry.k8s.io/pause:3.10"
    )]
    pub pause_image: String,
    /// The Skyhook agent image that runs every stage.
    #[arg(
        long,
        env = "AGENT_IMAGE",
        default_value = "ghcr.io/nvidia/skyhook/agent:latest"
    )]
    pub agent_image: String,
    /// `priorityClassName` of every package and interrupt pod; empty leaves it unset. Package
    /// pods are bound to their node and never meet the scheduler, so only the kubelet's
    /// critical-pod admission can make room on a full node: `system-node-critical` and
    /// `system-cluster-critical` are the only names with an effect (upstream's semantics).
    #[arg(long, env = "PACKAGE_PRIORITY_CLASS_NAME", default_value = "")]
    pub package_priority_class_name: String,
    /// The metrics and probe servers: addresses, limits, authentication.
    #[command(flatten)]
    pub serving: ServingSettings,
    /// Deadline of one stage Job (activeDeadlineSeconds) for packages without `stageTimeout`;
    /// a hung attempt fails and is retried. 0: no deadline.
    #[arg(long, env = "STAGE_DEADLINE", default_value = "1h")]
    pub stage_deadline: String,
    /// Upstream v0.18's name for STAGE_DEADLINE; when set, it wins.
    #[arg(long, env = "JOB_STAGE_TIMEOUT")]
    pub job_stage_timeout: Option<String>,
    /// Failed attempts retried before a stage gives up and stays `erroring` until `package
    /// rerun`, a reset or a spec change (upstream v0.18). Unset: retried without end (v0.13).
    #[arg(long, env = "JOB_BACKOFF_LIMIT")]
    pub job_backoff_limit: Option<u32>,
    /// How long a successful Job is kept (ttlSecondsAfterFinished). Failed Jobs are kept.
    #[arg(long, env = "COMPLETED_JOB_TTL", default_value = "24h")]
    pub completed_job_ttl: String,
    /// Upstream v0.18's name for COMPLETED_JOB_TTL; when set, it wins.
    #[arg(long, env = "JOB_TTL_SUCCEEDED")]
    pub job_ttl_succeeded: Option<String>,
    /// Publish the per-object metric families under their `skyhook_*` names too (upstream's
    /// `PUBLISH_LEGACY_METRICS`); `false`: under their `nodewright_*` names only. The operator's
    /// own families (leader, pass time, API requests) have one name and are always published.
    #[arg(long, env = "PUBLISH_LEGACY_METRICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub publish_legacy_metrics: bool,
    /// Send rollout notifications (batch started, node erroring, rollout stopped, gate holding,
    /// rollout complete) to the webhook targets of the Secret `skyhook-notifications` in the
    /// operator's namespace.
    #[arg(long, env = "NOTIFICATIONS", default_value_t = false, action = clap::ArgAction::Set)]
    pub notifications: bool,
    /// Let an alert gate send its credentials (`alertGate.credentialsSecret`) over plain http.
    /// Off: credentials go only over https, and a gate with credentials and an http URL holds,
    /// saying why.
    #[arg(long, env = "ALERT_GATE_ALLOW_HTTP_CREDENTIALS", default_value_t = false, action = clap::ArgAction::Set)]
    pub alert_gate_allow_http_credentials: bool,
    /// The only hosts an alert gate may read, comma-separated: exact names or addresses, or
    /// `*.suffix` for any name under a domain. Empty: any host (link-local and cloud-metadata
    /// addresses are never reached).
    #[arg(long, env = "ALERT_GATE_ALLOWED_HOSTS", default_value = "")]
    pub alert_gate_allowed_hosts: String,
    /// Which APIs to reconcile, comma-separated: `skyhook` (Skyhooks, `skyhook.nvidia.com`),
    /// `nodewright` (NodeWrights, `nodewright.nvidia.com`, upstream v0.18 and later), or both;
    /// `auto`: Skyhooks, and NodeWrights once their CRD is installed.
    #[arg(long, env = "SERVE_APIS", default_value = "auto")]
    pub serve_apis: String,
    /// How long after a NodeWright took over the Skyhook of its name the legacy node keys of
    /// that name are removed (upstream's `LEGACY_CLEANUP_DELAY`); `0`: at once.
    #[arg(long, env = "LEGACY_CLEANUP_DELAY", default_value = "24h")]
    pub legacy_cleanup_delay: String,
    /// Mirror every Skyhook and DeploymentPolicy into the `nodewright.nvidia.com` group (upstream
    /// v0.18's migration): each NodeWright takes its Skyhook's nodes over once the Skyhook is not
    /// mid-rollout. Needs SERVE_APIS to serve both APIs.
    #[arg(long, env = "MIGRATE_TO_NODEWRIGHT", default_value_t = false, action = clap::ArgAction::Set)]
    pub migrate_to_nodewright: bool,
    /// How long a reboot interrupt whose agent exited 0 waits for the node to report a new boot
    /// id before post-interrupt runs or the node is uncordoned (agent v7 exits 0 while the host
    /// may still be going down). Past it the interrupt reads `erroring` and runs again; `0` takes
    /// the agent's word at once (nodes whose boot id never changes, such as virtual kubelets).
    #[arg(long, env = "REBOOT_CONFIRM_TIMEOUT", default_value = "10m")]
    pub reboot_confirm_timeout: String,
    /// How long a node whose interrupt waits for pods matching `podNonInterruptLabels` keeps its
    /// batch slot. Past it the next batch starts without it; it resumes, first in line, at a
    /// batch choice after its pods are gone. It is never interrupted while they run; `0` gives
    /// the slot back at once.
    #[arg(long, env = "NON_INTERRUPT_SLOT_RELEASE", default_value = "10m")]
    pub non_interrupt_slot_release: String,
    /// A node whose stage Job has run this long, and three times as long as that stage took on
    /// the nodes that finished it, stalls: it gives its batch slot back and resumes, first in
    /// line, at a batch choice after the Job ends. Never while it holds our cordon; `0` keeps
    /// every node in its batch until its work ends (upstream's behaviour).
    #[arg(long, env = "STALLED_NODE_SLOT_RELEASE", default_value = "30m")]
    pub stalled_node_slot_release: String,
    /// How many failed Jobs to keep per (package, stage, node).
    #[arg(long, env = "FAILED_JOBS_KEPT", default_value_t = 3)]
    pub failed_jobs_kept: usize,
    /// First retry delay after a failed stage; doubles per failure up to --retry-max.
    #[arg(long, env = "RETRY_BASE", default_value = "10s")]
    pub retry_base: String,
    /// Longest retry delay.
    #[arg(long, env = "RETRY_MAX", default_value = "5m")]
    pub retry_max: String,
    /// Only reconcile Skyhooks whose labels match this selector (empty: all). Lets a canary or a
    /// test operator own a subset of Skyhooks.
    #[arg(long, env = "SKYHOOK_SELECTOR", default_value = "")]
    pub skyhook_selector: String,
    /// Take part in leader election (the reference's variable and default); the manifests in
    /// deploy/ turn it on. Off, this process reconciles on its own: run only one. The flag alone
    /// means true; `--leader-elect` (kubebuilder's name) is the same flag.
    #[arg(
        long,
        alias = "leader-elect",
        env = "LEADER_ELECTION",
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub leader_election: bool,
    /// How long a Lease record must stay unchanged before another candidate takes over.
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s")]
    pub leader_election_lease_duration: String,
    /// A leader that has not renewed for this long stops (must be below the lease duration).
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s")]
    pub leader_election_renew_deadline: String,
    /// Between two renewals, or two attempts to acquire.
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s")]
    pub leader_election_retry_period: String,
    /// Most bytes of per-node entries (nodeState, nodeStatus, nodeBootIds, nodePriority) one
    /// Skyhook's status lists, as a count or with a Ki or Mi suffix; over it the nodes at work
    /// are listed first and a StatusTrimmed condition says so. Node annotations keep every node.
    #[arg(long, env = "STATUS_NODE_BUDGET", default_value = "768Ki")]
    pub status_node_budget: String,
    /// Log format: json or console.
    #[arg(long, env = "LOG_ENCODER", default_value = "json")]
    pub log_encoder: String,
    /// Log level (trace, debug, info, warn, error) or a tracing filter.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// `SERVE_APIS=auto`: Skyhooks, and NodeWrights once their CRD is installed.
const AUTO: schema::Served = schema::Served {
    skyhook: true,
    nodewright: true,
    nodewright_when_installed: true,
};

/// STATUS_NODE_BUDGET's default: about 1,200 nodes with four packages listed whole; the stored
/// object, managedFields included, measured 1.24 MiB at this budget, under etcd's default
/// 1.5 MiB request limit with room for the spec (docs/performance.md, "5,000 nodes").
pub const DEFAULT_STATUS_NODE_BUDGET: usize = 768 * 1024;
const MIN_STATUS_NODE_BUDGET: usize = 1024;
const MAX_STATUS_NODE_BUDGET: usize = 1024 * 1024;

/// The `PACKAGE_PRIORITY_CLASS_NAME` values the kubelet's critical-pod admission acts on.
pub const PRIORITY_CLASSES_WITH_EFFECT: [&str; 2] =
    ["system-node-critical", "system-cluster-critical"];

/// [`Settings`] parsed and checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub namespace: String,
    pub default_interval: Duration,
    pub image_pull_secret: Option<String>,
    pub copy_dir_root: String,
    pub agent_log_root: String,
    pub reapply_on_reboot: bool,
    /// REBOOT_CONFIRM_TIMEOUT; zero: no wait for a new boot id.
    pub reboot_confirm_timeout: Duration,
    /// NON_INTERRUPT_SLOT_RELEASE: how long a node waiting for protected pods holds its slot.
    pub non_interrupt_slot_release: Duration,
    /// STALLED_NODE_SLOT_RELEASE: how long a stage Job runs before its node may stall (zero:
    /// never).
    pub stalled_node_slot_release: Duration,
    pub runtime_required_taint: TaintSpec,
    pub pause_image: String,
    pub agent_image: String,
    /// `PACKAGE_PRIORITY_CLASS_NAME`, when set.
    pub package_priority_class_name: Option<String>,
    /// Where and how /metrics and the probes are served.
    pub serving: Serving,
    /// Zero: no deadline.
    pub stage_deadline: Duration,
    /// Failed attempts retried before a stage gives up; `None`: no end.
    pub job_backoff_limit: Option<u32>,
    pub completed_job_ttl: Duration,
    pub failed_jobs_kept: usize,
    /// Notifications go to the outbox and the targets of `skyhook-notifications`.
    pub notifications: bool,
    /// Where alert gates may send requests and credentials.
    pub alert_egress: AlertEgress,
    /// The APIs whose objects are reconciled.
    pub serve_apis: schema::Served,
    /// After a NodeWright's take-over, when the legacy node keys of its name go.
    pub legacy_cleanup_delay: Duration,
    /// Legacy objects are mirrored into the new group.
    pub migrate_to_nodewright: bool,
    /// `PUBLISH_LEGACY_METRICS`.
    pub publish_legacy_metrics: bool,
    /// Bytes of per-node entries in a Skyhook's status (see `plan::status_budget`).
    pub status_node_budget: usize,
    pub retry_base: Duration,
    pub retry_max: Duration,
    pub skyhook_selector: Option<String>,
    pub log_json: bool,
    pub log_level: String,
    /// `None` when leader election is off.
    pub leader: Option<LeaderTimings>,
    /// A bug planted on purpose (see [`Planted`]); none in a release build.
    pub planted: Planted,
}

/// A bug planted on purpose, for the fault campaign's proof that its checker can fail (issue
/// 52, docs/testing.md). Only a debug build (the test suite's) reads `SKYHOOK_PLANTED_FAULT`:
/// the release build, the image and the archives cannot plant one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Planted {
    /// `skip-cordon`: the planner takes every node for cordoned, so an interrupt runs on a
    /// schedulable node.
    pub skip_cordon: bool,
}

impl Planted {
    pub const VARIABLE: &'static str = "SKYHOOK_PLANTED_FAULT";

    fn from_env() -> Planted {
        #[cfg(debug_assertions)]
        if std::env::var(Self::VARIABLE).as_deref() == Ok("skip-cordon") {
            return Planted { skip_cordon: true };
        }
        Planted::default()
    }
}

/// Where alert gates may send their requests (`ALERT_GATE_*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlertEgress {
    /// Credentials may go over plain http (`ALERT_GATE_ALLOW_HTTP_CREDENTIALS`).
    pub http_credentials: bool,
    /// Only these hosts: exact names or addresses, or `*.suffix` (`ALERT_GATE_ALLOWED_HOSTS`);
    /// empty: any host.
    pub allowed_hosts: Vec<String>,
}

/// Leader election timings, checked: retry period < renew deadline < lease duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderTimings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// The duration settings, parsed (a value that is invalid or too small reads as its minimum,
/// and is reported).
struct Durations {
    default_interval: Duration,
    reboot_confirm_timeout: Duration,
    non_interrupt_slot_release: Duration,
    stalled_node_slot_release: Duration,
    stage_deadline: Duration,
    completed_job_ttl: Duration,
    retry_base: Duration,
    retry_max: Duration,
    leader: LeaderTimings,
}

/// Why a runtime-required taint key cannot name its `autoTaint_<key>` node annotation, if it
/// cannot (upstream v0.20 refuses such keys at start-up too, delta D45): with a `/` the key is
/// not a valid annotation name, and past [`MAX_AUTO_TAINT_KEY`] characters the annotation's name
/// part is over 63, so every auto-taint write would be refused and stall the rollouts.
fn auto_taint_key_problem(key: &str) -> Option<String> {
    let annotation = schema::auto_taint_annotation(key);
    if key.contains('/') {
        Some(format!(
            "the taint key {key:?} has a prefix; use a key without '/' (it names the node \
             annotation {annotation:?}, which must be a valid annotation key)"
        ))
    } else if key.len() > MAX_AUTO_TAINT_KEY {
        Some(format!(
            "the taint key {key:?} has {} characters, over {MAX_AUTO_TAINT_KEY}: it names the \
             node annotation {annotation:?}, whose name part is limited to 63 characters",
            key.len()
        ))
    } else {
        None
    }
}

/// Longest runtime-required taint key: `autoTaint_` and the key make a 63-character name.
pub const MAX_AUTO_TAINT_KEY: usize = 53;

impl Settings {
    /// Check every setting, reporting all problems at once (as the reference does).
    pub fn validate(&self) -> Result<Config, SettingsError> {
        let mut errs = Vec::new();
        let durations = self.durations(&mut errs);
        self.check_leader(&durations.leader, &mut errs);
        self.check_paths_and_images(&mut errs);
        let taint = TaintSpec::parse(&self.runtime_required_taint)
            .map_err(|e| e.to_string())
            .and_then(|t| match auto_taint_key_problem(&t.key) {
                None => Ok(t),
                Some(why) => Err(why),
            })
            .map_err(|why| errs.push(format!("RUNTIME_REQUIRED_TAINT: {why}")))
            .ok();
        let log_json = match self.log_encoder.as_str() {
            "json" => true,
            "console" => false,
            other => {
                errs.push(format!(
                    "LOG_ENCODER must be json or console, got {other:?}"
                ));
                true
            }
        };
        let budget = self.status_node_budget(&mut errs);
        let serving = self.serving.validate(&mut errs);
        if self.namespace.is_empty() {
            errs.push("NAMESPACE must not be empty".to_string());
        }
        let serve_apis = self.serve_apis(&mut errs);
        if self.migrate_to_nodewright && !(serve_apis.skyhook && serve_apis.nodewright) {
            errs.push(format!(
                "MIGRATE_TO_NODEWRIGHT=true needs SERVE_APIS to serve both APIs (auto, or \
                 skyhook,nodewright), got {:?}",
                self.serve_apis
            ));
        }
        let legacy_cleanup_delay = checked_duration(
            "LEGACY_CLEANUP_DELAY",
            &self.legacy_cleanup_delay,
            Duration::ZERO,
            &mut errs,
        );
        match (taint, errs.is_empty()) {
            (Some(taint), true) => Ok(Config {
                serve_apis,
                legacy_cleanup_delay,
                migrate_to_nodewright: self.migrate_to_nodewright,
                ..self.config(durations, taint, log_json, budget, serving)
            }),
            _ => Err(SettingsError(errs)),
        }
    }

    fn durations(&self, errs: &mut Vec<String>) -> Durations {
        let (secs, millis) = (Duration::from_secs, Duration::from_millis);
        // One row a setting, read as a table; checked, and reported, in this order.
        #[rustfmt::skip]
        let [
            default_interval, stage_deadline, completed_job_ttl, retry_base, retry_max,
            lease_duration, renew_deadline, retry_period, reboot_confirm_timeout,
            non_interrupt_slot_release, stalled_node_slot_release,
        ] = [
            ("DEFAULT_INTERVAL", &self.default_interval, secs(60)),
            match &self.job_stage_timeout {
                Some(t) => ("JOB_STAGE_TIMEOUT", t, Duration::ZERO),
                None => ("STAGE_DEADLINE", &self.stage_deadline, Duration::ZERO),
            },
            match &self.job_ttl_succeeded {
                Some(t) => ("JOB_TTL_SUCCEEDED", t, Duration::ZERO),
                None => ("COMPLETED_JOB_TTL", &self.completed_job_ttl, Duration::ZERO),
            },
            ("RETRY_BASE", &self.retry_base, millis(100)),
            ("RETRY_MAX", &self.retry_max, millis(100)),
            ("LEADER_ELECTION_LEASE_DURATION", &self.leader_election_lease_duration, secs(2)),
            ("LEADER_ELECTION_RENEW_DEADLINE", &self.leader_election_renew_deadline, secs(1)),
            ("LEADER_ELECTION_RETRY_PERIOD", &self.leader_election_retry_period, millis(100)),
            ("REBOOT_CONFIRM_TIMEOUT", &self.reboot_confirm_timeout, Duration::ZERO),
            ("NON_INTERRUPT_SLOT_RELEASE", &self.non_interrupt_slot_release, Duration::ZERO),
            ("STALLED_NODE_SLOT_RELEASE", &self.stalled_node_slot_release, Duration::ZERO),
        ]
        .map(|(name, value, min)| checked_duration(name, value, min, errs));
        Durations {
            default_interval,
            reboot_confirm_timeout,
            non_interrupt_slot_release,
            stalled_node_slot_release,
            stage_deadline,
            completed_job_ttl,
            retry_base,
            retry_max,
            leader: LeaderTimings {
                lease_duration,
                renew_deadline,
                retry_period,
            },
        }
    }

    /// The fencing argument of `controller::leader` holds only in this order.
    fn check_leader(&self, t: &LeaderTimings, errs: &mut Vec<String>) {
        if self.leader_election
            && !(t.retry_period < t.renew_deadline && t.renew_deadline < t.lease_duration)
        {
            errs.push(format!(
                "leader election needs LEADER_ELECTION_RETRY_PERIOD < LEADER_ELECTION_RENEW_DEADLINE \
                 < LEADER_ELECTION_LEASE_DURATION, got {:?} < {:?} < {:?}",
                t.retry_period, t.renew_deadline, t.lease_duration
            ));
        }
    }

    /// SERVE_APIS: `auto`, or at least one of `skyhook` and `nodewright`.
    fn serve_apis(&self, errs: &mut Vec<String>) -> schema::Served {
        if self.serve_apis.trim() == "auto" {
            return AUTO;
        }
        let mut served = schema::Served {
            skyhook: false,
            nodewright: false,
            nodewright_when_installed: false,
        };
        for word in self
            .serve_apis
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty())
        {
            match schema::Api::from_word(word) {
                Some(schema::Api::Skyhook) => served.skyhook = true,
                Some(schema::Api::NodeWright) => served.nodewright = true,
                None => errs.push(format!(
                    "SERVE_APIS: {word:?} is no API; use auto, skyhook, nodewright or \
                     skyhook,nodewright"
                )),
            }
        }
        if !served.skyhook && !served.nodewright {
            errs.push(format!(
                "SERVE_APIS names no API ({:?}); use auto, skyhook, nodewright or \
                 skyhook,nodewright",
                self.serve_apis
            ));
        }
        served
    }

    /// STATUS_NODE_BUDGET in bytes (its default when invalid, and reported).
    fn status_node_budget(&self, errs: &mut Vec<String>) -> usize {
        let v = self.status_node_budget.trim();
        let (digits, unit) = match v.strip_suffix("Ki") {
            Some(d) => (d, 1024),
            None => match v.strip_suffix("Mi") {
                Some(d) => (d, 1024 * 1024),
                None => (v, 1),
            },
        };
        let range = MIN_STATUS_NODE_BUDGET..=MAX_STATUS_NODE_BUDGET;
        match digits.parse::<usize>().map(|n| n.saturating_mul(unit)) {
            Ok(n) if range.contains(&n) => n,
            _ => {
                errs.push(format!(
                    "STATUS_NODE_BUDGET must be a byte count from 1Ki to 1Mi (for example 768Ki), \
                     got {:?}: larger statuses are refused by etcd's default 1.5 MiB request \
                     limit once managedFields are added",
                    self.status_node_budget
                ));
                DEFAULT_STATUS_NODE_BUDGET
            }
        }
    }

    fn check_paths_and_images(&self, errs: &mut Vec<String>) {
        if !self.copy_dir_root.starts_with('/') {
            errs.push(format!(
                "COPY_DIR_ROOT must be an absolute path, got {:?}",
                self.copy_dir_root
            ));
        }
        // Hosts are matched without scheme, port or path: such an entry would match nothing.
        for host in self.alert_gate_allowed_hosts.split(',').map(str::trim) {
            if host.contains(['/', ':', ' ']) || host.contains("*") && !host.starts_with("*.") {
                errs.push(format!(
                    "ALERT_GATE_ALLOWED_HOSTS entry {host:?} must be a host name or address, or \
                     *.suffix (no scheme, port or path)"
                ));
            }
        }
        let class = self.package_priority_class_name.trim();
        if !class.is_empty() && !schema::is_dns1123_subdomain(class) {
            errs.push(format!(
                "PACKAGE_PRIORITY_CLASS_NAME must name a PriorityClass (a DNS subdomain such as \
                 system-node-critical), got {class:?}"
            ));
        }
        for (name, image) in [
            ("PAUSE_IMAGE", &self.pause_image),
            ("AGENT_IMAGE", &self.agent_image),
        ] {
            if image.is_empty() || !image.contains(':') {
                errs.push(format!(
                    "{name} must be an image reference with a tag, got {image:?}"
                ));
            }
        }
    }

    /// The checked settings as the operator uses them.
    fn config(
        &self,
        d: Durations,
        runtime_required_taint: TaintSpec,
        log_json: bool,
        status_node_budget: usize,
        serving: Serving,
    ) -> Config {
        Config {
            namespace: self.namespace.clone(),
            default_interval: d.default_interval,
            image_pull_secret: Some(self.image_pull_secret.clone()).filter(|s| !s.is_empty()),
            copy_dir_root: self.copy_dir_root.clone(),
            agent_log_root: self.agent_log_root.clone(),
            reapply_on_reboot: self.reapply_on_reboot,
            reboot_confirm_timeout: d.reboot_confirm_timeout,
            non_interrupt_slot_release: d.non_interrupt_slot_release,
            stalled_node_slot_release: d.stalled_node_slot_release,
            runtime_required_taint,
            pause_image: self.pause_image.clone(),
            agent_image: self.agent_image.clone(),
            package_priority_class_name: Some(self.package_priority_class_name.trim().to_string())
                .filter(|s| !s.is_empty()),
            serving,
            stage_deadline: d.stage_deadline,
            job_backoff_limit: self.job_backoff_limit,
            completed_job_ttl: d.completed_job_ttl,
            failed_jobs_kept: self.failed_jobs_kept.max(1),
            notifications: self.notifications,
            alert_egress: AlertEgress {
                http_credentials: self.alert_gate_allow_http_credentials,
                allowed_hosts: self
                    .alert_gate_allowed_hosts
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_owned)
                    .collect(),
            },
            serve_apis: AUTO,
            legacy_cleanup_delay: Duration::from_secs(24 * 3600),
            migrate_to_nodewright: false,
            publish_legacy_metrics: self.publish_legacy_metrics,
            status_node_budget,
            retry_base: d.retry_base,
            retry_max: d.retry_max,
            skyhook_selector: Some(self.skyhook_selector.clone()).filter(|s| !s.is_empty()),
            log_json,
            log_level: self.log_level.clone(),
            leader: self.leader_election.then_some(d.leader),
            planted: Planted::from_env(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }

    /// The settings of `x <args>`, validated.
    fn parse(args: &[&str]) -> Result<Config, SettingsError> {
        let mut all = vec!["x"];
        all.extend(args);
        Cli::parse_from(all).settings.validate()
    }

    #[test]
    fn serve_apis_and_the_cleanup_delay_are_checked_naming_the_setting() {
        let auto = parse(&[]).expect("defaults");
        assert!(auto.serve_apis.skyhook && auto.serve_apis.nodewright);
        assert!(!auto.serve_apis.required(schema::Api::NodeWright));
        let both = parse(&["--serve-apis=skyhook,nodewright"]).expect("both");
        assert!(both.serve_apis.required(schema::Api::NodeWright));
        let one = parse(&["--serve-apis=nodewright"]).expect("one");
        assert!(!one.serve_apis.serves(schema::Api::Skyhook));
        for (arg, says) in [
            (
                "--serve-apis=skyhooks",
                "SERVE_APIS: \"skyhooks\" is no API",
            ),
            ("--serve-apis=,", "SERVE_APIS names no API"),
            ("--legacy-cleanup-delay=soon", "LEGACY_CLEANUP_DELAY"),
        ] {
            let err = parse(&[arg]).expect_err(arg).to_string();
            assert!(err.contains(says), "{arg}: {err}");
        }
        let migrate = ["--migrate-to-nodewright=true", "--serve-apis=skyhook"];
        let err = parse(&migrate).expect_err("migrate").to_string();
        assert!(
            err.contains("MIGRATE_TO_NODEWRIGHT=true needs SERVE_APIS"),
            "{err}"
        );
        assert!(parse(&["--migrate-to-nodewright=true"]).is_ok());
        assert_eq!(
            parse(&["--legacy-cleanup-delay=0"])
                .expect("0")
                .legacy_cleanup_delay,
            Duration::ZERO
        );
    }

    #[test]
    fn alert_gate_settings_are_read_and_a_bad_host_is_named() {
        let d = parse(&[]).expect("defaults");
        assert_eq!(d.alert_egress, AlertEgress::default());
        let set = parse(&[
            "--alert-gate-allowed-hosts=prom.monitoring.svc, *.example.com",
            "--alert-gate-allow-http-credentials=true",
        ])
        .expect("valid");
        assert_eq!(
            set.alert_egress.allowed_hosts,
            ["prom.monitoring.svc", "*.example.com"]
        );
        assert!(set.alert_egress.http_credentials);
        for bad in ["http://prom", "prom:9090", "prom/api", "a*.example.com"] {
            let err = parse(&[&format!("--alert-gate-allowed-hosts={bad}")])
                .expect_err(bad)
                .to_string();
            assert!(
                err.contains("ALERT_GATE_ALLOWED_HOSTS") && err.contains(bad),
                "{err}"
            );
        }
    }

    #[test]
    fn upstreams_names_of_the_job_settings_win_and_legacy_metrics_can_be_dropped() {
        let d = parse(&[]).expect("defaults");
        assert_eq!(d.completed_job_ttl, Duration::from_secs(24 * 3600));
        assert!(d.publish_legacy_metrics);
        let upstream = parse(&[
            "--completed-job-ttl=24h",
            "--job-ttl-succeeded=1h",
            "--job-stage-timeout=30m",
            "--publish-legacy-metrics=false",
        ])
        .expect("upstream's settings");
        assert_eq!(upstream.completed_job_ttl, Duration::from_secs(3600));
        assert_eq!(upstream.stage_deadline, Duration::from_secs(1800));
        assert!(!upstream.publish_legacy_metrics);
        let err = parse(&["--job-ttl-succeeded=soon"]).expect_err("bad TTL");
        assert!(err.to_string().contains("JOB_TTL_SUCCEEDED"), "{err}");
    }

    #[test]
    fn a_package_priority_class_must_be_a_name() {
        assert_eq!(
            parse(&[]).expect("defaults").package_priority_class_name,
            None
        );
        let set = parse(&["--package-priority-class-name=system-node-critical"]).expect("valid");
        assert_eq!(
            set.package_priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        let err = parse(&["--package-priority-class-name=Not A Class"])
            .expect_err("invalid")
            .to_string();
        assert!(
            err.contains("PACKAGE_PRIORITY_CLASS_NAME") && err.contains("Not A Class"),
            "{err}"
        );
    }

    #[test]
    fn defaults_are_the_reference_defaults() {
        let cli = Cli::parse_from(["x"]);
        let c = cli.settings.validate().expect("defaults are valid");
        assert_eq!(c.namespace, "skyhook");
        assert_eq!(c.default_interval, Duration::from_secs(600));
        assert_eq!(c.copy_dir_root, "/var/lib/skyhook");
        assert_eq!(c.serving.metrics_addr, "0.0.0.0:8080");
        assert_eq!(c.serving.probe_addr, "0.0.0.0:8081");
        assert_eq!(c.image_pull_secret, None);
    }

    #[test]
    fn a_runtime_required_taint_key_must_name_a_valid_annotation() {
        let taint = |v: &str| {
            Cli::parse_from(["x".to_string(), format!("--runtime-required-taint={v}")])
                .settings
                .validate()
                .map(|c| c.runtime_required_taint.key)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            taint("nodewright.nvidia.com=runtime-required:NoSchedule").as_deref(),
            Ok("nodewright.nvidia.com")
        );
        let prefixed = taint("example.com/rr=x:NoSchedule").expect_err("prefixed key");
        assert!(prefixed.contains("has a prefix"), "{prefixed}");
        assert!(taint(&format!("{}=x:NoSchedule", "k".repeat(53))).is_ok());
        let long = taint(&format!("{}=x:NoSchedule", "k".repeat(54))).expect_err("long key");
        assert!(long.contains("54 characters, over 53"), "{long}");
    }

    #[test]
    fn every_problem_is_reported() {
        let cli = Cli::parse_from([
            "x",
            "--default-interval=30s",
            "--copy-dir-root=relative",
            "--agent-image=noTag",
            "--runtime-required-taint=key-",
        ]);
        let err = cli.settings.validate().expect_err("invalid").to_string();
        assert!(
            err.starts_with("invalid skyhook operator options: "),
            "{err}"
        );
        for want in [
            "DEFAULT_INTERVAL",
            "COPY_DIR_ROOT",
            "AGENT_IMAGE",
            "RUNTIME_REQUIRED_TAINT",
        ] {
            assert!(err.contains(want), "{err} lacks {want}");
        }
    }

    #[test]
    fn the_status_node_budget_takes_a_byte_count_within_its_bounds() {
        let budget = |v: &str| {
            Cli::parse_from(["x".to_string(), format!("--status-node-budget={v}")])
                .settings
                .validate()
                .map(|c| c.status_node_budget)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            Cli::parse_from(["x"])
                .settings
                .validate()
                .map(|c| c.status_node_budget)
                .ok(),
            Some(DEFAULT_STATUS_NODE_BUDGET)
        );
        assert_eq!(budget("768Ki"), Ok(786_432));
        assert_eq!(budget("1Mi"), Ok(1_048_576));
        assert_eq!(budget("4096"), Ok(4096));
        for bad in ["2Mi", "512", "much", "1.5Ki", ""] {
            let err = budget(bad).expect_err(bad);
            assert!(err.contains("STATUS_NODE_BUDGET"), "{bad}: {err}");
        }
    }

    #[test]
    fn leader_election_timings_are_checked_only_when_it_is_on() {
        let args = |on: &str, lease: &str, renew: &str, retry: &str| {
            Cli::parse_from([
                "x".to_string(),
                format!("--leader-election={on}"),
                format!("--leader-election-lease-duration={lease}"),
                format!("--leader-election-renew-deadline={renew}"),
                format!("--leader-election-retry-period={retry}"),
            ])
            .settings
            .validate()
        };
        let on = args("true", "15s", "10s", "2s").expect("defaults are valid");
        assert_eq!(
            on.leader,
            Some(LeaderTimings {
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            })
        );
        assert_eq!(args("false", "15s", "10s", "2s").expect("off").leader, None);
        // (case, lease, renew, retry)
        for (case, lease, renew, retry) in [
            ("renew deadline not below the lease", "10s", "10s", "2s"),
            (
                "retry period not below the renew deadline",
                "15s",
                "2s",
                "2s",
            ),
        ] {
            let err = args("true", lease, renew, retry)
                .expect_err(case)
                .to_string();
            assert!(
                err.contains("LEADER_ELECTION_RENEW_DEADLINE")
                    && err.contains("LEADER_ELECTION_LEASE_DURATION"),
                "case: {case}: {err}"
            );
            assert!(
                args("false", lease, renew, retry).is_ok(),
                "case: {case}: checked while off"
            );
        }
        let err = args("true", "soon", "10s", "2s")
            .expect_err("unparsable")
            .to_string();
        assert!(err.contains("LEADER_ELECTION_LEASE_DURATION"), "{err}");
    }
}
