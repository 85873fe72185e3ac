//! Which pods a Skyhook's health gate waits for (issue 38), read as the drain lists a node's
//! pods. A leaf: the drain's listing and the health gate's verdict both use it.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

use crate::crd::Skyhook;

/// The pods a Skyhook's health gate selects.
#[derive(Debug, Clone)]
pub struct PodGate {
    namespace: Option<String>,
    selector: Selector,
}

impl PodGate {
    /// `None` without a pod check (or with a selector validation refuses).
    pub fn of(sk: &Skyhook) -> Option<PodGate> {
        let pods = sk.spec.health_gate.as_ref()?.pods.as_ref()?;
        let sel = &pods.selector;
        let empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
        if empty {
            return None;
        }
        Some(PodGate {
            namespace: pods.namespace.clone().filter(|n| !n.is_empty()),
            selector: Selector::try_from(sel.clone()).ok()?,
        })
    }

    /// Whether a selected pod is Ready; `None` for a pod the gate does not select.
    pub fn read(&self, p: &Pod) -> Option<bool> {
        if let Some(ns) = &self.namespace
            && p.namespace().as_deref() != Some(ns.as_str())
        {
            return None;
        }
        if !self.selector.matches(p.labels()) {
            return None;
        }
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        Some(
            conditions
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
        )
    }
}
