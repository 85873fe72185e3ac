//! Deletion (§3.19, extended): everything this Skyhook wrote on nodes goes, cordons it holds
//! are lifted, its Jobs and ConfigMaps are deleted, then the finalizer is released.
//!
//! A node keeps its cordon while a Job of this Skyhook is still there (deleted in the
//! foreground, a Job stays until its pod is gone: an interrupt may be rebooting the node), and
//! while another Skyhook holds a cordon on it. The finalizer is released once no Job is left.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;

use super::{NodePatch, NodeView, Plan};
use crate::crd::Skyhook;
use crate::schema;

/// Deletion (§3.19, extended): remove every node key, label and condition this Skyhook wrote,
/// lift cordons it holds, delete its Jobs and ConfigMaps, then release the finalizer.
/// `jobs_on`: the nodes where a Job of this Skyhook still exists (being deleted included).
pub fn plan_delete(sk: &Skyhook, nodes: &[Arc<NodeView>], jobs_on: &BTreeSet<String>) -> Plan {
    let name = sk.name_any();
    let mut plan = Plan {
        delete_owned: true,
        remove_finalizer: jobs_on.is_empty()
            && sk.finalizers().iter().any(|f| f == schema::FINALIZER),
        ..Plan::default()
    };
    let cordon = schema::cordon_annotation(&name);
    let annotation_keys = [
        schema::node_state_annotation(&name),
        schema::status_annotation(&name),
        schema::node_version_annotation(&name),
        schema::applied_annotation(&name),
        schema::folded_annotation(&name),
        schema::drain_start_annotation(&name),
        schema::health_gate_annotation(&name),
        schema::protected_wait_annotation(&name),
        schema::taken_over_annotation(&name),
    ];
    for n in nodes {
        let mut patch = NodePatch::of(n);
        for k in &annotation_keys {
            if n.annotations.contains_key(k) {
                patch.annotations.insert(k.clone(), None);
            }
        }
        if n.annotations.contains_key(&cordon) && !jobs_on.contains(&n.name) {
            patch.annotations.insert(cordon.clone(), None);
            if !n.cordon_kept_by_others(&name) {
                patch.unschedulable = Some(false);
            }
        }
        let label = schema::status_label(&name);
        if n.labels.contains_key(&label) {
            patch.labels.insert(label, None);
        }
        if !patch.is_empty() {
            plan.node_patches.push(patch);
        }
        let conditions = n.condition_types_of(&name);
        if !conditions.is_empty() {
            plan.node_conditions
                .push((n.name.clone(), Vec::new(), conditions));
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use crate::plan::fixtures::{node, skyhook};

    /// Conditions of these types, all `True`.
    fn true_conditions(types: &[&str]) -> Value {
        types
            .iter()
            .map(|t| json!({"type": t, "status": "True"}))
            .collect()
    }

    #[test]
    fn plan_delete_removes_exactly_what_this_skyhook_wrote() {
        let ours = [
            schema::node_state_annotation("sh"),
            schema::status_annotation("sh"),
            schema::cordon_annotation("sh"),
            schema::node_version_annotation("sh"),
            schema::applied_annotation("sh"),
            schema::folded_annotation("sh"),
        ];
        let all_ours: serde_json::Map<String, Value> =
            ours.iter().map(|k| (k.clone(), json!("x"))).collect();
        let mut mixed = all_ours.clone();
        mixed.insert(schema::node_state_annotation("other"), json!("{}"));
        mixed.insert(schema::cordon_annotation("other"), json!("true"));
        mixed.insert(
            schema::auto_taint_annotation("skyhook.nvidia.com"),
            json!("true"),
        );
        mixed.insert("team".into(), json!("a"));
        let not_ready = schema::node_not_ready_condition("sh");
        let erroring = schema::node_erroring_condition("sh");
        let legacy = format!("{}Old", schema::node_condition_prefix("sh"));
        let label = schema::status_label("sh");
        let no_cordon: Vec<String> = ours[..2].to_vec();
        let only = |keys: &[String]| -> Value {
            keys.iter()
                .map(|k| (k.clone(), json!("x")))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        // (case, node, annotation removals, label removals, unschedulable write, conditions removed)
        let cases: Vec<(
            &str,
            Arc<NodeView>,
            Vec<String>,
            Vec<String>,
            Option<bool>,
            Vec<String>,
        )> = vec![
            (
                "every key, label and condition of ours; others' kept; their cordon keeps it cordoned",
                node("n")
                    .annotations(Value::Object(mixed))
                    .labels(json!({label.clone(): "complete", schema::status_label("other"): "complete", "role": "gpu"}))
                    .conditions(true_conditions(&[
                        &not_ready,
                        &erroring,
                        &legacy,
                        &schema::node_not_ready_condition("other"),
                        "Ready",
                    ]))
                    .cordoned(true)
                    .arc(),
                ours.to_vec(),
                vec![label.clone()],
                None,
                vec![not_ready.clone(), erroring.clone(), legacy.clone()],
            ),
            (
                "our cordon alone: lifted",
                node("n")
                    .annotations(Value::Object(all_ours.clone()))
                    .cordoned(true)
                    .arc(),
                ours.to_vec(),
                vec![],
                Some(false),
                vec![],
            ),
            (
                "an administrator's cordon is not lifted",
                node("n").annotations(only(&no_cordon)).cordoned(true).arc(),
                no_cordon.clone(),
                vec![],
                None,
                vec![],
            ),
            (
                "another Skyhook's cordon is not lifted",
                node("n")
                    .annotation(&schema::cordon_annotation("other"), "true")
                    .cordoned(true)
                    .arc(),
                vec![],
                vec![],
                None,
                vec![],
            ),
            (
                "an untouched node",
                node("n")
                    .annotation("team", "a")
                    .labels(json!({"role": "gpu"}))
                    .conditions(true_conditions(&["Ready"]))
                    .arc(),
                vec![],
                vec![],
                None,
                vec![],
            ),
            (
                "a Skyhook whose name starts with ours is not ours",
                node("n")
                    .annotations(json!({schema::node_state_annotation("sh2"): "{}", schema::cordon_annotation("sh2"): "true"}))
                    .labels(json!({schema::status_label("sh2"): "complete"}))
                    .conditions(true_conditions(&[&schema::node_not_ready_condition("sh2")]))
                    .cordoned(true)
                    .arc(),
                vec![],
                vec![],
                None,
                vec![],
            ),
            (
                "only a condition left",
                node("n").conditions(true_conditions(&[&erroring])).arc(),
                vec![],
                vec![],
                None,
                vec![erroring.clone()],
            ),
            (
                "only the label left",
                node("n").labels(json!({label.clone(): "waiting"})).arc(),
                vec![],
                vec![label.clone()],
                None,
                vec![],
            ),
        ];
        let sk = skyhook("sh").finalizers(json!([schema::FINALIZER])).build();
        for (name, n, annotations, labels, unschedulable, conditions) in cases {
            let plan = plan_delete(&sk, std::slice::from_ref(&n), &BTreeSet::new());
            let want_patch =
                !(annotations.is_empty() && labels.is_empty() && unschedulable.is_none());
            assert_eq!(
                plan.node_patches.len(),
                usize::from(want_patch),
                "case: {name}"
            );
            if let Some(p) = plan.node_patches.first() {
                let removals = |keys: Vec<String>| -> BTreeMap<String, Option<String>> {
                    keys.into_iter().map(|k| (k, None)).collect()
                };
                assert_eq!(p.node, "n", "case: {name}");
                assert_eq!(p.annotations, removals(annotations), "case: {name}");
                assert_eq!(p.labels, removals(labels), "case: {name}");
                assert_eq!(p.unschedulable, unschedulable, "case: {name}");
                assert_eq!(p.taints, None, "case: {name}");
            }
            let removed: Vec<(String, Vec<String>)> = plan
                .node_conditions
                .iter()
                .map(|(n, set, removed)| {
                    assert!(set.is_empty(), "case: {name}: nothing is set");
                    (n.clone(), removed.clone())
                })
                .collect();
            let want: Vec<(String, Vec<String>)> = if conditions.is_empty() {
                vec![]
            } else {
                vec![("n".to_string(), conditions)]
            };
            assert_eq!(removed, want, "case: {name}");
            assert!(plan.delete_owned, "case: {name}");
        }
    }

    #[test]
    fn plan_delete_releases_the_finalizer_only_when_held() {
        let cases = [
            ("our finalizer", json!([schema::FINALIZER]), true),
            (
                "ours among others",
                json!(["example.com/keep", schema::FINALIZER]),
                true,
            ),
            ("no finalizer", json!([]), false),
            ("another finalizer only", json!(["example.com/keep"]), false),
        ];
        for (name, finalizers, want) in cases {
            let plan = plan_delete(
                &skyhook("sh").finalizers(finalizers).build(),
                &[],
                &BTreeSet::new(),
            );
            assert_eq!(plan.remove_finalizer, want, "case: {name}");
            assert!(!plan.add_finalizer, "case: {name}");
            assert!(plan.delete_owned, "case: {name}");
            assert!(
                plan.node_patches.is_empty() && plan.node_conditions.is_empty(),
                "case: {name}"
            );
        }
    }

    /// While a Job of ours is still on the node (an interrupt pod may be rebooting it), the node
    /// keeps our cordon and the finalizer is kept; everything else of ours goes at once.
    #[test]
    fn plan_delete_keeps_the_cordon_while_our_jobs_remain() {
        let cordon = schema::cordon_annotation("sh");
        let state = schema::node_state_annotation("sh");
        let n = node("n")
            .annotations(json!({cordon.clone(): "true", state.clone(): "{}"}))
            .cordoned(true)
            .arc();
        let sk = skyhook("sh").finalizers(json!([schema::FINALIZER])).build();
        let busy: BTreeSet<String> = ["n".to_string()].into();
        let plan = plan_delete(&sk, std::slice::from_ref(&n), &busy);
        let p = &plan.node_patches[0];
        assert_eq!(p.unschedulable, None);
        assert!(!p.annotations.contains_key(&cordon), "{p:?}");
        assert_eq!(p.annotations.get(&state), Some(&None));
        assert!(!plan.remove_finalizer);
        assert!(plan.delete_owned);
        let plan = plan_delete(&sk, std::slice::from_ref(&n), &BTreeSet::new());
        assert_eq!(plan.node_patches[0].unschedulable, Some(false));
        assert!(plan.remove_finalizer);
    }
}
