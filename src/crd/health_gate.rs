//! `spec.healthGate` (this project's extension, issue 38): what a node must show after its last
//! stage before it is complete, uncordoned and counted done in its batch.

use std::time::Duration;

use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How long a node may take to pass its health gate when `timeout` is not set.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(600);

/// After its last stage (post-interrupt included) a node stays cordoned and in its batch until
/// it is Ready and passes every check given here (pods, node condition, check Job); past `timeout` it is `erroring` and counts as
/// a failed node of its batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthGate {
    /// How long a node may take to pass, as a Go duration (default 10m, at most a week).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Pods on the node that must be Ready (at least one, and every one that matches), e.g. a
    /// device plugin or the DCGM exporter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<HealthPods>,
    /// A node condition that must have the given status, e.g. one node-problem-detector sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_condition: Option<HealthCondition>,
    /// A check run on the node as a Job: the gate passes once an attempt completes; a failed
    /// attempt is retried until the timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<HealthCheck>,
}

/// A check Job's one container: pinned to the node, tolerating its cordon and taints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Run the check in the node's network and PID namespaces (`hostNetwork`, `hostPID`), for
    /// a check that must see the host's processes or listeners. Off by default: a check is an
    /// ordinary pod on the node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_namespaces: bool,
}

/// The pods a health gate waits for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthPods {
    /// Only pods of this namespace; every namespace when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Which pods (must not be empty).
    pub selector: LabelSelector,
}

/// A node condition and the status it must have.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

impl HealthGate {
    /// The timeout, or the default when unset or unreadable (validation reports the latter).
    pub fn timeout(&self) -> Duration {
        self.timeout
            .as_deref()
            .and_then(|t| crate::schema::parse_go_duration(t).ok())
            .unwrap_or(DEFAULT_HEALTH_TIMEOUT)
    }
}
