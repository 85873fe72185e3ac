//! Which PodDisruptionBudget would refuse an eviction now: the API server's rule (a budget
//! selecting the pod with no disruption allowed), read from the budgets' status.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

/// The name of the first budget in the pod's namespace that selects it and allows no
/// disruption now.
pub fn refusing(budgets: &[PodDisruptionBudget], pod: &Pod) -> Option<String> {
    budgets
        .iter()
        .filter(|b| b.namespace() == pod.namespace())
        .filter(|b| b.status.as_ref().is_none_or(|s| s.disruptions_allowed < 1))
        .find(|b| {
            b.spec
                .as_ref()
                .and_then(|s| s.selector.clone())
                .and_then(|s| Selector::try_from(s).ok())
                .is_some_and(|s| s.matches(pod.labels()))
        })
        .map(|b| b.name_any())
}
