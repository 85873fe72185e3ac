//! The Skyhook and DeploymentPolicy custom resources.
//!
//! * [`skyhook`], [`status`], [`policy`]: the Rust types (wire-compatible with the Go operator).
//! * [`generate`]: the served CRDs (derived schema, post-processed to match upstream, plus the
//!   admission rules of [`admission`]).
//! * [`validate`]: operator-side validation (everything admission checks, plus what CEL cannot).
//! * [`normalize`]: in-memory normalisation the Go webhook used to persist.

pub mod admission;
pub mod alert_gate;
mod cel;
pub mod config_size;
pub mod cron;
pub mod generate;
mod go_int;
pub mod health_gate;
mod later_rules;
pub mod messages;
pub mod normalize;
pub mod policy;
pub mod policy_in_use;
mod quantity;
pub mod resources;
pub mod skyhook;
pub mod status;
pub mod upstream_fields;
pub mod validate;
pub mod window;

#[cfg(test)]
mod tests;

pub use alert_gate::{AlertApi, AlertGate, Matcher, Unreachable};
pub use generate::{
    GenerateError, REGENERATE_COMMAND, all_crds, crd_files, crd_yaml, crds_yaml,
    deployment_policy_crd, skyhook_crd, write_crds,
};
pub use health_gate::{HealthCheck, HealthCondition, HealthGate, HealthPods};
pub use normalize::{normalize, normalize_image};
pub use policy::{
    Compartment, DEFAULT_COMPARTMENT, DeploymentBudget, DeploymentPolicy, DeploymentPolicySpec,
    DeploymentStrategy, EffectiveStrategy, ExponentialStrategy, FixedStrategy, LinearStrategy,
    MaintenanceWindow, PolicyDefault, StrategyKind, StrategyParams, WindowDay,
};
pub use resources::{object_resource, policy_resource};
pub use skyhook::{
    DeploymentPolicyOptions, DrainConfig, InterruptionBudget, Package, PackageResources,
    PackageUninstall, Sequencing, Skyhook, SkyhookSpec,
};
pub use status::{BatchState, CompartmentStatus, SkyhookStatus};

// The wire enums and node-state shapes live in `crate::schema` (shared with the node
// annotations); re-exported because the CRD types use them.
pub use crate::schema::{Interrupt, InterruptType, NodeState, PackageStatus, Stage, State, Status};
pub use validate::{
    ValidationError, dependency_cycles, format_errors, validate_deployment_policy, validate_skyhook,
};

/// API group of both resources.
pub const GROUP: &str = "skyhook.nvidia.com";
/// The only served (and storage) version.
pub const VERSION: &str = "v1alpha1";
