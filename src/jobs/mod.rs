//! Package stages run as batch/v1 Jobs: how they are built and how they are read back.
//!
//! The builders make the objects the operator creates for a Skyhook: one batch/v1 Job per
//! package stage (`stage.rs`, which also explains how the reference pod became a Job) or
//! interrupt (`interrupt.rs`) and node, the package ConfigMaps and the node metadata ConfigMaps
//! (`configmaps.rs`), from the pod and Job pieces they share (`pod.rs`: failure policy,
//! deadline, labels, agent environment).
//!
//! Everything here is pure: the same inputs give the same object, so the planner can compare and
//! the executor can create without reading anything back. Every key, name and format comes from
//! [`crate::schema`]; [`JobView`] (`view.rs`) reads the Jobs back from exactly the labels and
//! annotations written here. [`GoPod`] (`go_pod.rs`) reads the pods the Go operator left, for
//! the hand-over.

mod configmaps;
pub mod go_pod;
mod health_check;
mod interrupt;
pub mod localize;
mod planned;
mod pod;
mod stage;
pub mod view;

pub use configmaps::{node_metadata_configmap, package_configmap, packages_json};
pub use go_pod::{GoOutcome, GoPod};
pub use health_check::{CHECK_CONTAINER, CheckRun, health_check_job};
pub use interrupt::{InterruptJob, interrupt_job};
pub use planned::PlannedJob;
#[cfg(test)]
pub use planned::minimal_job;
pub use pod::JobPlace;
pub use stage::{StageJob, stage_job};
pub use view::{JobView, Outcome, PodView, STUCK_WAITING_REASONS};

#[cfg(test)]
mod tests;
