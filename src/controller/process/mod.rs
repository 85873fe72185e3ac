//! The operator process around the reconcile loop: start-up ([`startup`]), leadership
//! ([`leader`]), the metrics and probe servers ([`probes`], bounded by [`http`], /metrics
//! optionally authenticated by [`metrics_auth`]), and the task that keeps the DeploymentPolicy
//! in-use finalizer ([`policy_finalizer`]).

pub mod http;
pub mod leader;
pub mod metrics_auth;
pub mod policy_finalizer;
pub mod probes;
pub mod startup;
