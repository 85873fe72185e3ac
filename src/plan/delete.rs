//! Deletion (§3.19, extended): everything this Skyhook wrote on nodes goes, cordons it holds
//! are lifted, its Jobs and ConfigMaps are deleted, then the finalizer is released.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::{NodePatch, Plan};
use crate::crd::Skyhook;
use crate::schema;

/// Deletion (§3.19, extended): remove every node key, label and condition this Skyhook wrote,
/// lift cordons it holds, delete its Jobs and ConfigMaps, then release the finalizer.
pub fn plan_delete(sk: &Skyhook, nodes: &[Arc<Node>]) -> Plan {
    let name = sk.name_any();
    let mut plan = Plan {
        delete_owned: true,
        remove_finalizer: sk.finalizers().iter().any(|f| f == schema::FINALIZER),
        ..Plan::default()
    };
    let annotation_keys = [
        schema::node_state_annotation(&name),
        schema::status_annotation(&name),
        schema::cordon_annotation(&name),
        schema::node_version_annotation(&name),
        schema::applied_annotation(&name),
    ];
    let condition_prefix = schema::node_condition_prefix(&name);
    for n in nodes {
        let mut patch = NodePatch::new(&n.name_any());
        for k in &annotation_keys {
            if n.annotations().contains_key(k) {
                patch.annotations.insert(k.clone(), None);
            }
        }
        if n.annotations()
            .contains_key(&schema::cordon_annotation(&name))
        {
            patch.unschedulable = Some(false);
        }
        let label = schema::status_label(&name);
        if n.labels().contains_key(&label) {
            patch.labels.insert(label, None);
        }
        if !patch.is_empty() {
            plan.node_patches.push(patch);
        }
        let conditions: Vec<String> = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|c| c.type_.starts_with(&condition_prefix))
            .map(|c| c.type_.clone())
            .collect();
        if !conditions.is_empty() {
            plan.node_conditions
                .push((n.name_any(), Vec::new(), conditions));
        }
    }
    plan
}
