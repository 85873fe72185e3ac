//! What the node machine reads: the node, its Jobs, and the pass's timing.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::jobs::{GoPod, JobView};
use crate::plan::drain::PodInfo;
use crate::plan::spec::SpecView;
use crate::schema::{Folded, NodeState};

/// Retry timing after a failed stage.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub base: Duration,
    pub max: Duration,
    /// Failed attempts retried before a stage gives up (JOB_BACKOFF_LIMIT); `None`: no end.
    pub limit: Option<u32>,
}

impl RetryPolicy {
    /// Delay before attempt number `failures + 1`: base·2^(failures-1), capped.
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(20);
        self.base.saturating_mul(1 << exp).min(self.max)
    }
}

/// What the machine knows about the node itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Host<'a> {
    /// `spec.unschedulable` (set by us or by an administrator).
    pub cordoned: bool,
    /// Pods on the node; listed only for cordoned nodes (and, under the `pods-gone` cordon
    /// choice, nodes at work or waiting for protected pods).
    pub pods: Option<&'a [PodInfo]>,
    /// Since when the interrupt has waited for protected pods (`nonInterruptWait_<sh>`).
    pub protected_since: Option<jiff::Timestamp>,
    /// The Skyhook cordons a node only once its protected pods are gone
    /// ([`crate::schema::ProtectedCordon::PodsGone`]).
    pub cordon_when_pods_gone: bool,
    /// A Job of another Skyhook runs on the node.
    pub other_busy: bool,
    /// Another Skyhook's interrupt runs on the node (a reboot may be under way).
    pub other_interrupting: bool,
    /// This Skyhook's package and interrupt pods left on the node by the Go operator.
    pub go_pods: &'a [GoPod],
    /// The `resourceVersion` of the node copy the pass read, when it is a number.
    pub node_version: Option<u64>,
    /// When this Skyhook's drain of the node began (`drainStart_<sh>`), if it did.
    pub drain_started: Option<jiff::Timestamp>,
    /// `drainConfig.timeout`.
    pub drain_timeout: Option<Duration>,
    /// The node's boot id now, when it reports one.
    pub boot_id: Option<&'a str>,
    /// How long a reboot interrupt whose agent exited 0 waits for a new boot id
    /// (REBOOT_CONFIRM_TIMEOUT); zero takes the agent's word.
    pub reboot_confirm: Duration,
}

/// One node's input to the fold. The decision to start work is not part of it: the pass makes
/// that only after folding every node.
pub struct NodeInput<'a> {
    pub spec: &'a SpecView<'a>,
    pub state: NodeState,
    /// `<pkg>|<ver>` → spec hash of what the node completed.
    pub applied: BTreeMap<String, String>,
    /// Which Job attempts the stored state already holds.
    pub folded: Folded,
    pub host: Host<'a>,
    /// This Skyhook's Jobs on the node.
    pub jobs: &'a [&'a JobView],
    pub retry: RetryPolicy,
    pub failed_jobs_kept: usize,
    pub now: Timestamp,
}

/// What stays fixed while one node is stepped.
pub(crate) struct Machine<'a> {
    pub spec: &'a SpecView<'a>,
    pub jobs: &'a [&'a JobView],
    pub retry: RetryPolicy,
    pub now: Timestamp,
}
