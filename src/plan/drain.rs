//! The drain decision (§3.9.1 step 5, §3.9.3): which pods on a cordoned node hold the interrupt
//! back, which are evicted, and when the node is ready. The controller only lists the pods.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

use super::select::tolerates_cordon;
use crate::schema;

/// A pod on a cordoned node, as the drain sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    /// Matches `podNonInterruptLabels` and is Running or Pending: blocks the interrupt.
    pub protected: bool,
    /// Must be evicted before the interrupt.
    pub evictable: bool,
}

/// The `podNonInterruptLabels` selector; `None` when empty (an empty selector protects nothing).
pub fn protection(selector: &LabelSelector) -> Option<Selector> {
    let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    if empty {
        None
    } else {
        Selector::try_from(selector.clone()).ok()
    }
}

/// Classifies the pods of one node; finished pods are left out (they hold nothing back).
pub fn classify<'p>(
    pods: impl IntoIterator<Item = &'p Pod>,
    protected: Option<&Selector>,
) -> Vec<PodInfo> {
    pods.into_iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            matches!(phase.unwrap_or("Pending"), "Running" | "Pending")
        })
        .map(|p| classify_one(p, protected))
        .collect()
}

/// Never evicted, as `kubectl drain` decides: DaemonSet and mirror pods, our own Jobs' pods,
/// pods that tolerate the cordon, kube-system, and pods already terminating.
fn classify_one(p: &Pod, protected: Option<&Selector>) -> PodInfo {
    let owned_by_ds = p.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = p.annotations().contains_key("kubernetes.io/config.mirror");
    let ours = p.labels().contains_key(schema::NAME_LABEL);
    let tolerates = p
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| tolerates_cordon(ts));
    let namespace = p.namespace().unwrap_or_default();
    let kept = owned_by_ds
        || mirror
        || ours
        || tolerates
        || namespace == "kube-system"
        || p.metadata.deletion_timestamp.is_some();
    PodInfo {
        protected: protected.is_some_and(|s| s.matches(p.labels())),
        evictable: !kept,
        namespace,
        name: p.name_any(),
    }
}

/// What the drain needs before an interrupt (§3.9.1 step 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Cordoned and empty of evictable and protected pods.
    Ready,
    /// Cordon first (persisted before anything runs).
    Cordon,
    /// The pods of the node are not known yet (listed on the next pass).
    Listing,
    /// Protected pods still run: wait, never evict them.
    Protected(Vec<String>),
    /// Evict these (namespace, name) and wait.
    Evict(Vec<(String, String)>),
}

/// Decides the drain of a node: cordon, then wait for protected pods, then evict the rest.
pub fn readiness(cordoned: bool, pods: Option<&[PodInfo]>) -> Readiness {
    if !cordoned {
        return Readiness::Cordon;
    }
    let Some(pods) = pods else {
        return Readiness::Listing;
    };
    let protected: Vec<String> = pods
        .iter()
        .filter(|p| p.protected)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    if !protected.is_empty() {
        return Readiness::Protected(protected);
    }
    let evict: Vec<(String, String)> = pods
        .iter()
        .filter(|p| p.evictable)
        .map(|p| (p.namespace.clone(), p.name.clone()))
        .collect();
    if evict.is_empty() {
        Readiness::Ready
    } else {
        Readiness::Evict(evict)
    }
}
