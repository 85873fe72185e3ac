//! Skyhook: a Rust re-implementation of the NVIDIA Skyhook operator and its kubectl plugin.
//!
//! The library is shared by both binaries. `schema` is the single home of every key of the
//! compatibility contract (labels, annotations, taints, name formats, the node-state JSON).

// Unit tests are case tables whose tuple types spell their columns out; an alias per table
// would only hide them.
#![cfg_attr(test, allow(clippy::type_complexity))]

pub mod controller;
pub mod crd;
pub mod interned;
pub mod jobs;
pub mod kubeconfig;
pub mod metrics;
pub mod node;
pub mod plan;
pub mod schema;
pub mod settings;
pub mod streamed;
