//! What a dry run starts from: the world as read from the cluster, owned.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::crd::{DeploymentPolicy, Skyhook, SkyhookStatus};
use crate::jobs::JobView;
use crate::plan::Elsewhere;
use crate::schema::Api;
use crate::settings::Config;

/// What the dry run starts from, as read from the cluster.
pub struct Snapshot {
    pub api: Api,
    /// The object as it would be applied, normalised, in the canonical keys.
    pub skyhook: Skyhook,
    /// The status stored for it (`None` for a new object).
    pub status: Option<SkyhookStatus>,
    /// Every object of its API, itself included as it would be applied.
    pub skyhooks: Vec<Arc<Skyhook>>,
    pub policies: Vec<Arc<DeploymentPolicy>>,
    pub nodes: Vec<Node>,
    /// Its Jobs.
    pub jobs: Vec<Arc<JobView>>,
    /// Finished Jobs of every object: how long each package stage took.
    pub history: Vec<Arc<JobView>>,
    /// Its package ConfigMaps, canonical.
    pub configmaps: Vec<Arc<ConfigMap>>,
    /// Pods by node name.
    pub pods: BTreeMap<String, Vec<Pod>>,
    pub budgets: Vec<PodDisruptionBudget>,
    /// Where other objects' Jobs run now.
    pub elsewhere: Elsewhere,
    /// The operator's namespace.
    pub namespace: String,
    pub config: Config,
    pub operator_version: String,
    pub now: Timestamp,
}
