//! The reference project's own chainsaw scenarios (`k8s-tests/chainsaw/` in NVIDIA/skyhook),
//! translated one test per scenario: the same objects, steps and assertions, with pods read as
//! Jobs. docs/compatibility.md lists every scenario with its result here.

mod cli;
mod config;
mod lifecycle;
mod order;
mod policy;
mod rollout;
