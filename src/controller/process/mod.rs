//! The operator process around the reconcile loop: start-up ([`startup`]), leadership
//! ([`leader`]), the metrics and probe server ([`probes`]), and the task that keeps the
//! DeploymentPolicy in-use finalizer ([`policy_finalizer`]).

pub mod leader;
pub mod policy_finalizer;
pub mod probes;
pub mod startup;
