//! The operator process around the reconcile loop: start-up ([`startup`]), leadership
//! ([`leader`]), the metrics and probe servers ([`probes`], bounded by [`http`], /metrics
//! optionally authenticated by [`metrics_auth`]), and the task that keeps the DeploymentPolicy
//! in-use finalizer ([`policy_finalizer`]), and the mirror of legacy objects into the new group on
//! request ([`mirror`]).

pub mod around;
pub mod http;
pub mod leader;
pub mod metrics_auth;
pub mod mirror;
pub mod policy_finalizer;
pub mod probes;
pub mod startup;
