//! What the node machine decides: Jobs to start or clean up, Events, and the drain.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::crd::Package;
use crate::schema::{Folded, Interrupt, NodeState, PackageStatus, Stage, State};

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
    /// Mark a failed Job counted in `restarts` (after the node state says so).
    Counted { job: String },
    /// Fail a Job now (its pod can never start), naming why.
    FailNow {
        job: String,
        reason: String,
        message: String,
    },
    /// Remove a Job (a stale attempt, or failed attempts beyond the number kept).
    Delete { job: String },
    /// Remove a pod of the Go operator: its outcome is recorded, or it is stale.
    DeleteGoPod { pod: String },
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

#[derive(Debug, Default, Clone)]
pub struct NodeOutcome {
    pub state: NodeState,
    /// `<pkg>|<ver>` → spec hash of what the node completed.
    pub applied: BTreeMap<String, String>,
    /// Which Job attempts `state` holds; stored with it.
    pub folded: Folded,
    pub actions: Vec<NodeAction>,
    pub notes: Vec<NodeNote>,
    /// The earliest moment a retry becomes due.
    pub retry_at: Option<Timestamp>,
    /// A Job of this Skyhook is running on the node.
    pub active: bool,
    /// Cordon the node before anything else (it is not yet unschedulable).
    pub cordon: bool,
    /// Work of this pass relies on the node's existing cordon (drained, or draining, for an
    /// interrupt): when another Skyhook holds it, this one takes a share, so the first to finish
    /// cannot lift it under the other.
    pub relies_on_cordon: bool,
    /// Pods to evict (namespace, name).
    pub evict: Vec<(String, String)>,
    /// Why interrupt work waits on this node, for humans.
    pub blocked: Option<String>,
    /// Held back by a protected pod or a drain that cannot finish (reported as `blocked`).
    pub held: bool,
    /// Pods matching `podNonInterruptLabels` that hold the interrupt (`ns/name`).
    pub protected_pods: Vec<String>,
    /// The drain clock (`drainStart_<sh>`): `None` leaves it as stored, `Some(None)` removes it
    /// (the drain is over), `Some(Some(t))` keeps or starts it at `t`.
    pub drain_start: Option<Option<Timestamp>>,
    /// The protected pods' wait (`nonInterruptWait_<sh>`), as `drain_start`: `Some(Some(t))`
    /// keeps or starts it at `t` with [`NodeOutcome::protected_pods`].
    pub protected_since: Option<Option<Timestamp>>,
    /// A reboot interrupt's agent exited 0 and the node still reports the boot it began in:
    /// nothing else starts, post-interrupt waits, the node stays cordoned.
    pub awaiting_reboot: bool,
    /// The drain took longer than `drainConfig.timeout`: nothing more is evicted and the node
    /// reads `erroring` until the node empties or the clock is reset.
    pub drain_timed_out: bool,
}

impl NodeOutcome {
    pub fn any_state(&self, s: State) -> bool {
        self.state.iter().any(|(_, e)| e.state == Some(s))
    }
}

/// A new node-state entry for the package, not restarted.
pub(super) fn fresh_entry(p: &Package, stage: Stage, state: Option<State>) -> PackageStatus {
    PackageStatus {
        name: p.name.as_str().into(),
        version: p.version.as_str().into(),
        image: p.image.as_str().into(),
        container_sha: p.container_sha.clone(),
        stage,
        state,
        restarts: 0,
    }
}
