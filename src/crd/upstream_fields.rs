//! Fields that upstream releases after v0.13 added to the `skyhook.nvidia.com` CRDs and that
//! this project serves too (issue 37): users of upstream v0.14 to v0.17 apply manifests carrying
//! them, and a CRD without them refuses those manifests (`kubectl apply` validates strictly) or
//! prunes the fields in silence. Each is optional and changes nothing when absent.
//!
//! The compatibility tests compare the generated schema with upstream v0.13's CRD and, for these
//! paths, with the schema the named upstream release gives them.

use serde_json::{Value, json};

/// A field added by a later upstream release.
pub struct UpstreamField {
    /// Schema path (as in [`super::admission`]).
    pub path: &'static str,
    /// The upstream release that added it.
    pub release: &'static str,
    /// The validation keywords upstream's CRD gives it.
    pub schema: Value,
}

/// Fields of this project's own (no upstream release has them), by schema root: the reference
/// operator prunes them if it takes over; docs/compatibility.md lists them as extensions.
pub fn extensions() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "spec.healthGate",
            "a Skyhook's health gate after each node's last stage (issue 38)",
        ),
        (
            "spec.windows",
            "maintenance windows of a DeploymentPolicy (issue 38)",
        ),
        (
            "spec.compartments.[].windows",
            "maintenance windows of a compartment (issue 38)",
        ),
        (
            "spec.alertGate",
            "the alert gate of a DeploymentPolicy (issue 38)",
        ),
        (
            "spec.soak",
            "soak between batches of a DeploymentPolicy (issue 38)",
        ),
        (
            "spec.compartments.[].soak",
            "soak between batches of a compartment (issue 38)",
        ),
        (
            "status.compartmentStatuses.*.batchState.soakUntil",
            "end of the soak of a compartment's finished batch (issue 38)",
        ),
        (
            "status.compartmentStatuses.*.batchState.soakNodes",
            "nodes of a compartment's soaking batch (issue 38)",
        ),
    ]
}

/// Values later releases added to an enum of the v0.13 CRD: (schema path, release, values).
pub fn skyhook_enum_additions() -> Vec<(&'static str, &'static str, Vec<Value>)> {
    vec![(
        "status.nodeState.*.*.stage",
        "v0.16.0",
        vec![json!("uninstall-interrupt")],
    )]
}

/// The Skyhook CRD's fields from later releases.
pub fn skyhook_fields() -> Vec<UpstreamField> {
    let added = |release: &'static str| {
        move |path: &'static str, schema: Value| UpstreamField {
            path,
            release,
            schema,
        }
    };
    let (v14, v15, v16) = (added("v0.14.0"), added("v0.15.0"), added("v0.16.0"));
    let (v18, v19) = (added("v0.18.0"), added("v0.19.0"));
    vec![
        v14(
            "spec.sequencing",
            json!({"type": "string", "enum": ["all", "node"], "default": "node"}),
        ),
        v15("status.nodeOrderOffset", json!({"type": "integer"})),
        v16(
            "spec.packages.*.uninstall",
            json!({"type": "object", "required": ["apply", "enabled"]}),
        ),
        v16(
            "spec.packages.*.uninstall.enabled",
            json!({"type": "boolean", "default": false}),
        ),
        v16(
            "spec.packages.*.uninstall.apply",
            json!({"type": "boolean", "default": false}),
        ),
        // The next ones upstream added to its NodeWright API (v0.18 on), with the shapes of
        // `../shared/reference/nodewright-delta.md` D26, D28 and D38; this project serves them on
        // the legacy API too, for manifests moving back from NodeWright.
        v18("spec.packages.*.stageTimeout", json!({"type": "string"})),
        v18(
            "spec.drainConfig",
            json!({"type": "object", "nullable": true}),
        ),
        v18(
            "spec.drainConfig.disableEviction",
            json!({"type": "boolean"}),
        ),
        v18(
            "spec.drainConfig.deleteEmptyDirData",
            json!({"type": "boolean"}),
        ),
        v18("spec.drainConfig.force", json!({"type": "boolean"})),
        v18(
            "spec.drainConfig.ignoreDaemonSets",
            json!({"type": "boolean"}),
        ),
        v18("spec.drainConfig.timeout", json!({"type": "string"})),
        v18("spec.drainConfig.gracePeriod", json!({"type": "string"})),
        v19(
            "spec.runtimeRequiredCordonAfter",
            json!({"type": "boolean", "default": false}),
        ),
    ]
}
