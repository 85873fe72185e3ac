//! Single home of every key of the compatibility contract.
//!
//! Everything the reference Skyhook operator, its kubectl plugin and its agent read or write is
//! spelled here and nowhere else: label/annotation/finalizer/taint keys ([`keys`]), condition
//! and event vocabulary ([`conditions`], [`event_reasons`]), the wire enums ([`Status`], [`State`],
//! [`Stage`], [`InterruptType`]), the JSON documents stored on nodes, pods and ConfigMaps
//! (byte-identical to Go's `encoding/json`), object names, and the small Go-compatible
//! algorithms both binaries need (semver, `filepath.Match`, taint specs, node patterns).
//!
//! The modules are re-exported flat, so callers write `schema::node_state_annotation(..)`.

pub mod agent;
pub mod api;
pub mod conditions;
pub mod digest;
pub mod duration;
mod error;
pub mod event_reasons;
pub mod folded;
pub mod glob;
pub mod go_json;
pub mod interrupt;
pub mod keys;
pub mod labels;
pub mod names;
pub mod node_metadata;
pub mod node_pattern;
pub mod node_state;
pub mod package_annotation;
pub mod protected_wait;
pub mod semver;
pub mod short_list;
pub mod stage;
pub mod status;
pub mod taint;
pub mod validation;
mod wire_enum;

pub use agent::*;
pub use api::{
    Api, NODEWRIGHT_FINALIZER, NODEWRIGHT_PREFIX, Served, is_operator_key, name_scoped_annotations,
    notifications_configmap_name_in,
};
pub use conditions::*;
pub use digest::sha256_hex;
pub use duration::{DurationError, MAX_GO_DURATION, parse_go_duration};
pub use error::SchemaError;
pub use event_reasons::*;
pub use folded::{Folded, fold, folded_key, is_folded, is_folded_key};
pub use glob::glob_match;
pub use interrupt::{Interrupt, InterruptType, interrupt_arg, merge_interrupts};
pub use keys::*;
pub use labels::{label_value, package_label, resource_id_label};
pub use names::{
    MAX_JOB_ATTEMPT, agent_resource_id, copy_dir, health_check_job_name, interrupt_job_name,
    interrupt_pod_name, job_name, metadata_volume_name, node_metadata_configmap_name,
    package_configmap_name, package_configmap_volume_name, parse_agent_resource_id, resource_id,
    safe_name, stage_pod_name,
};
pub use node_metadata::{
    NodeMetadataPackage, NodeMetadataPackages, agent_version, string_map_json,
};
pub use node_pattern::NodePattern;
pub use node_state::{
    NodeState, PackageStatus, installed_key, is_legacy_key, package_key, split_package_key,
};
pub use package_annotation::PackageAnnotation;
pub use protected_wait::{NON_INTERRUPT_CORDON_ANNOTATION, ProtectedCordon, ProtectedWait};
pub use semver::{is_valid_semver, major_minor, semver_compare};
pub use short_list::short_list;
pub use stage::Stage;
pub use status::{State, Status};
pub use taint::{RuntimeTaints, TaintEffect, TaintSpec};
pub use validation::{
    is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_label_value,
};
