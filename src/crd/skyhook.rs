//! `Skyhook` (`skyhooks.skyhook.nvidia.com`): the package DAG and how it is rolled out.
//!
//! Field names, optionality and zero-value handling mirror the Go API types so that objects the Go
//! operator (and its mutating webhook) persisted read and re-serialise unchanged. The schema these
//! derives produce is post-processed by [`crate::crd::generate`] into the served CRD.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::go_int::GoInt;
use super::status::SkyhookStatus;
use crate::schema::{Interrupt, package_key};

/// Default of `spec.priority`; lower runs first.
pub const DEFAULT_PRIORITY: i64 = 200;

fn default_priority() -> i64 {
    DEFAULT_PRIORITY
}

/// Desired state of a Skyhook: which packages go to which nodes, and how fast.
// The lint mistakes the repeated `type_` of the separate printcolumn(...) groups for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "skyhook.nvidia.com",
    version = "v1alpha1",
    kind = "Skyhook",
    plural = "skyhooks",
    singular = "skyhook",
    status = "SkyhookStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Skyhook rolls a DAG of host packages out to the nodes it selects.",
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Nodes In-Progress",
        type_ = "integer",
        json_path = ".status.nodesInProgress"
    ),
    printcolumn(
        name = "Complete Nodes",
        type_ = "string",
        json_path = ".status.completeNodes"
    ),
    printcolumn(name = "Packages", type_ = "string", json_path = ".status.packageList"),
    printcolumn(
        name = "Policy",
        type_ = "string",
        json_path = ".spec.deploymentPolicy"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SkyhookSpec {
    /// When true, only one package pod is started per reconcile pass.
    #[serde(default)]
    pub serial: bool,

    /// Deprecated and ignored: pausing is done with the `skyhook.nvidia.com/pause` annotation.
    #[serde(default)]
    pub pause: bool,

    /// Pods matching this selector on a node block cordon, drain and interrupts there. An empty
    /// selector blocks nothing.
    // Go uses a value (not a pointer) here, so stored objects carry `{}`; a plain field with a
    // default reads both shapes and an empty selector means the same as an absent one.
    #[serde(default)]
    pub pod_non_interrupt_labels: LabelSelector,

    /// Nodes whose labels match are targeted; an empty selector targets every node.
    #[serde(default)]
    pub node_selectors: LabelSelector,

    /// Name of the cluster-scoped DeploymentPolicy that controls the rollout. Mutually exclusive
    /// with interruptionBudget.percent/count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_policy: Option<String>,

    /// Per-Skyhook overrides of the DeploymentPolicy settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_policy_options: Option<DeploymentPolicyOptions>,

    /// Legacy rollout budget used when no deploymentPolicy is set.
    #[serde(default)]
    pub interruption_budget: InterruptionBudget,

    /// The packages, keyed by package name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, Package>,

    /// Extra tolerations for every package and interrupt pod; also used to decide whether a
    /// node's taints are tolerable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_tolerations: Vec<Toleration>,

    /// Keep the runtime-required taint on a node until every runtimeRequired Skyhook is
    /// complete there.
    #[serde(default)]
    pub runtime_required: bool,

    /// With runtimeRequired: taint nodes that join the cluster so nothing schedules before the
    /// packages are in place.
    #[serde(default)]
    pub auto_taint_new_nodes: bool,

    /// Ordering among Skyhooks (lower first, ties by name).
    #[serde(default = "default_priority")]
    #[schemars(with = "GoInt", range(min = 1))]
    pub priority: i64,

    /// How this Skyhook holds back the Skyhooks ordered after it (upstream v0.14): `node`, per
    /// node (a node goes on once this Skyhook is complete there), or `all` (no node goes on
    /// until this Skyhook is complete on every node it targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequencing: Option<Sequencing>,

    /// How nodes are drained before an interrupt (upstream v0.18); absent, the v0.13 drain:
    /// evict, emptyDir data and unmanaged pods included, DaemonSet pods left, no timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_config: Option<DrainConfig>,

    /// With runtimeRequired: when the runtime-required taint leaves a node, cordon it and mark
    /// it `nodewright.nvidia.com/runtimeRequiredCordon`, so it takes no work until an
    /// administrator uncordons it (upstream v0.19).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub runtime_required_cordon_after: bool,

    /// What a node must show after its last stage before it is complete (an extension of this
    /// project, issue 38): Ready, selected pods Ready, a node condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_gate: Option<super::health_gate::HealthGate>,
}

/// How a node is drained before an interrupt (upstream v0.18 `drainConfig`). Every field is
/// optional; the defaults are the v0.13 drain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainConfig {
    /// Delete pods instead of evicting them, so PodDisruptionBudgets do not apply (default
    /// false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_eviction: Option<bool>,
    /// Drain pods that use emptyDir volumes, losing that data (default true); false holds the
    /// drain while such a pod runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_empty_dir_data: Option<bool>,
    /// Drain pods no controller owns (default true); false holds the drain while such a pod
    /// runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Leave DaemonSet pods running (default true); false evicts them too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_daemon_sets: Option<bool>,
    /// How long a drain may take, as a Go duration; past it the node is `erroring`, stays
    /// cordoned and no more pods are evicted. Unset or 0: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Grace period given to each drained pod, as a Go duration (rounded up to whole
    /// seconds); unset: the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<String>,
}

/// How this Skyhook holds back the Skyhooks ordered after it (upstream v0.14): `node` (a node
/// goes on once this Skyhook is complete there) or `all` (no node goes on until this Skyhook is
/// complete on every node it targets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Sequencing {
    /// Later Skyhooks wait, per node, until this one is complete on that node (v0.13).
    #[default]
    #[serde(rename = "node")]
    Node,
    /// Later Skyhooks wait until this one is complete on every node it targets, even on nodes
    /// it does not target.
    #[serde(rename = "all")]
    All,
}

impl Default for SkyhookSpec {
    /// An empty spec with the CRD defaults (priority 200).
    fn default() -> Self {
        Self {
            serial: false,
            pause: false,
            pod_non_interrupt_labels: LabelSelector::default(),
            node_selectors: LabelSelector::default(),
            deployment_policy: None,
            deployment_policy_options: None,
            interruption_budget: InterruptionBudget::default(),
            packages: BTreeMap::new(),
            additional_tolerations: Vec::new(),
            runtime_required: false,
            auto_taint_new_nodes: false,
            priority: DEFAULT_PRIORITY,
            sequencing: None,
            drain_config: None,
            runtime_required_cordon_after: false,
            health_gate: None,
        }
    }
}

/// Overrides of DeploymentPolicy settings for one Skyhook.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPolicyOptions {
    /// Reset the batch state when the rollout completes or the spec changes; overrides the
    /// policy's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_batch_state_on_completion: Option<bool>,
}

/// Legacy rollout budget: at most one of percent or count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterruptionBudget {
    /// Percentage of the targeted nodes worked on at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<GoInt>", range(min = 0, max = 100))]
    pub percent: Option<i64>,

    /// Number of nodes worked on at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<GoInt>", range(min = 0))]
    pub count: Option<i64>,
}

/// One package of the DAG.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// Package name; when set it must equal the key in spec.packages. Filled from the key.
    // Go stores `name` (its webhook writes it), but hand-written objects usually omit it: keep
    // the empty string as "absent" so both round-trip.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 43), regex(pattern = r"^[a-z][-a-z0-9]{0,41}[a-z]$"))]
    pub name: String,

    /// Package version, a semantic version (a leading v is optional); also the image tag.
    pub version: String,

    /// Package image repository, without tag (the tag is the version).
    pub image: String,

    /// Optional image digest (sha256:...); when set the image is pulled by digest.
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub container_sha: Option<String>,

    /// Full agent image reference used for this package's pods instead of the operator default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_image_override: Option<String>,

    /// Interrupt (reboot, service restart, ...) this package needs after apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<Interrupt>,

    /// Packages of this Skyhook that must be complete first: name -> exact version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub depends_on: BTreeMap<String, String>,

    /// Interrupt to run when a configMap key (or a glob with `*`) changes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_interrupts: BTreeMap<String, Interrupt>,

    /// Files handed to the package, keyed by file name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_map: BTreeMap<String, String>,

    /// Environment of the package's stage and check containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// CPU and memory requests/limits for the package's containers; all four or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<PackageResources>,

    /// Grace period of the package pods, as a Go duration (e.g. 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_shutdown: Option<String>,

    /// How long one attempt of a stage may run, as a Go duration (upstream v0.18); past it the
    /// attempt fails and is retried. 0: no limit. Unset: the operator's STAGE_DEADLINE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_timeout: Option<String>,

    /// Uninstall on request (upstream v0.16): with `enabled` and `apply`, the package is
    /// uninstalled from every node that has it and is not installed again until `apply` is
    /// false. Packages without it keep v0.13's meaning: removal and downgrade uninstall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall: Option<PackageUninstall>,
}

/// A package's uninstall switch (upstream v0.16).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackageUninstall {
    /// The package has uninstall scripts.
    #[serde(default)]
    pub enabled: bool,
    /// Uninstall the package now; needs `enabled`.
    #[serde(default)]
    pub apply: bool,
}

/// Resource overrides of a package's containers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackageResources {
    /// CPU request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<Quantity>,
    /// CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<Quantity>,
    /// Memory request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_request: Option<Quantity>,
    /// Memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<Quantity>,
}

impl SkyhookSpec {
    /// Whether batch state is reset when the rollout completes (or versions change): the
    /// Skyhook's option, else the policy's setting, else `false` (the Go operator's fallback,
    /// which differs from the CRD default of `true` when a policy omits the field).
    pub fn reset_batch_state_on_completion(
        &self,
        policy: Option<&super::policy::DeploymentPolicySpec>,
    ) -> bool {
        self.deployment_policy_options
            .as_ref()
            .and_then(|o| o.reset_batch_state_on_completion)
            .or_else(|| policy.and_then(|p| p.reset_batch_state_on_completion))
            .unwrap_or(false)
    }
}

impl Package {
    /// The unique package key `<name>|<version>` used for node state and the DAG.
    pub fn unique_key(&self) -> String {
        package_key(&self.name, &self.version)
    }

    /// Uninstall requested through the `uninstall` block (`enabled` and `apply`).
    pub fn uninstall_requested(&self) -> bool {
        self.uninstall
            .as_ref()
            .is_some_and(|u| u.enabled && u.apply)
    }
}
