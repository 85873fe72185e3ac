//! The reference project's own chainsaw scenarios (`k8s-tests/chainsaw/` in NVIDIA/skyhook),
//! translated one test per scenario: the same objects, steps and assertions, with pods read as
//! Jobs. docs/compatibility.md lists every scenario with its result here.
//!
//! Each test's steps are `scenario_<name>`, which `nodewright::scenarios` runs a second time on
//! NodeWrights (`support::under`).

pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod lifecycle;
pub(crate) mod order;
pub(crate) mod policy;
pub(crate) mod rollout;
