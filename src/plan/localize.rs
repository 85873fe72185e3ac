//! A plan of a NodeWright written in its API: the planner plans in the canonical keys
//! ([`schema::Api`]), and this turns every key it writes (node metadata and conditions, its Jobs
//! and ConfigMaps; the writer does its status) into the object's own. Nothing to do for a
//! Skyhook.

use super::Plan;
use crate::crd::{Skyhook, SkyhookStatus};
use crate::jobs::localize::{localize_configmap, localize_job};
use crate::schema::Api;

/// Every key of `plan` in `api`.
pub fn localize(plan: &mut Plan, api: Api) -> Result<(), serde_json::Error> {
    if api == Api::Skyhook {
        return Ok(());
    }
    for patch in &mut plan.node_patches {
        api.localize(&mut patch.annotations);
        api.localize(&mut patch.labels);
    }
    for (_, set, remove) in &mut plan.node_conditions {
        for c in set.iter_mut() {
            c.type_ = api.local(&c.type_).into_owned();
        }
        for t in remove.iter_mut() {
            *t = api.local(t).into_owned();
        }
    }
    for cm in &mut plan.configmaps {
        localize_configmap(cm, api);
    }
    for job in &mut plan.health_check_jobs {
        localize_job(job, api);
    }
    for job in &mut plan.create_jobs {
        job.localize(api)?;
    }
    // The status stays canonical: the writer diffs it with the stored one, and keeps the
    // result for the next pass.
    Ok(())
}

/// The status conditions' types in `api`.
pub fn localize_status(status: &mut SkyhookStatus, api: Api) {
    for c in &mut status.conditions {
        c.type_ = api.local(&c.type_).into_owned();
    }
}

/// An object of `api` as the planner reads it: its annotations, labels, finalizers and status
/// conditions under the canonical keys.
pub fn canonical(sk: &mut Skyhook, api: Api) {
    if api == Api::Skyhook {
        return;
    }
    let meta = &mut sk.metadata;
    api.canonicalize(&mut meta.annotations);
    api.canonicalize(&mut meta.labels);
    if let Some(finalizers) = meta.finalizers.as_mut() {
        *finalizers = finalizers
            .iter()
            .filter_map(|f| api.canonical(f).map(|c| c.into_owned()))
            .collect();
    }
    for c in sk.status.iter_mut().flat_map(|s| s.conditions.iter_mut()) {
        if let Some(t) = api.canonical(&c.type_) {
            c.type_ = t.into_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::actions::NodePatch;
    use crate::schema;
    use k8s_openapi::api::core::v1::NodeCondition;

    #[test]
    fn a_nodewright_plan_writes_its_own_keys_and_a_skyhooks_is_untouched() {
        let build = || {
            let mut patch = NodePatch::new("n");
            patch
                .annotations
                .insert(schema::node_state_annotation("sh"), Some("{}".into()));
            patch.labels.insert(schema::status_label("sh"), None);
            Plan {
                node_patches: vec![patch],
                node_conditions: vec![(
                    "n".into(),
                    vec![NodeCondition {
                        type_: schema::node_not_ready_condition("sh"),
                        ..NodeCondition::default()
                    }],
                    vec![schema::node_erroring_condition("sh")],
                )],
                status: Some(SkyhookStatus {
                    conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                        type_: schema::TRANSITION_CONDITION.into(),
                        status: "True".into(),
                        reason: "r".into(),
                        message: String::new(),
                        observed_generation: None,
                        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            jiff::Timestamp::UNIX_EPOCH,
                        ),
                    }],
                    ..SkyhookStatus::default()
                }),
                ..Plan::default()
            }
        };
        let mut legacy = build();
        localize(&mut legacy, Api::Skyhook).unwrap();
        assert_eq!(legacy.node_patches, build().node_patches);
        let mut nw = build();
        localize(&mut nw, Api::NodeWright).unwrap();
        let p = &nw.node_patches[0];
        assert!(
            p.annotations
                .contains_key("nodewright.nvidia.com/nodeState_sh")
        );
        assert!(p.labels.contains_key("nodewright.nvidia.com/status_sh"));
        assert_eq!(
            nw.node_conditions[0].1[0].type_,
            "nodewright.nvidia.com/sh/NotReady"
        );
        assert_eq!(
            nw.node_conditions[0].2[0],
            "nodewright.nvidia.com/sh/Erroring"
        );
        let mut status = nw.status.clone().unwrap();
        assert_eq!(status.conditions[0].type_, schema::TRANSITION_CONDITION);
        localize_status(&mut status, Api::NodeWright);
        assert_eq!(
            status.conditions[0].type_,
            "nodewright.nvidia.com/Transition"
        );
    }

    #[test]
    fn a_stored_nodewright_reads_in_canonical_keys() {
        let mut sk: Skyhook = serde_json::from_value(serde_json::json!({
            "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
            "metadata": {"name": "sh",
                "annotations": {"nodewright.nvidia.com/pause": "true", "skyhook.nvidia.com/pause": "true"},
                "finalizers": ["nodewright.nvidia.com/nodewright"]},
            "spec": {},
            "status": {"conditions": [{"type": "nodewright.nvidia.com/Transition", "status": "True",
                "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        canonical(&mut sk, Api::NodeWright);
        let annotations = sk.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations[schema::PAUSE_ANNOTATION], "true");
        assert_eq!(
            sk.metadata.finalizers,
            Some(vec![schema::FINALIZER.to_string()])
        );
        let status = sk.status.unwrap();
        assert_eq!(status.conditions[0].type_, schema::TRANSITION_CONDITION);
    }
}
