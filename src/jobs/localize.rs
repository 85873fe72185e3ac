//! The objects a pass builds, as an object of the other API writes them: every key of ours under
//! its prefix, and the owner reference naming its kind. The builders and the planner speak the
//! canonical keys only ([`Api`]).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::schema::Api;

/// Labels, annotations and the owner references to a Skyhook, in `api`.
pub fn localize_meta(meta: &mut ObjectMeta, api: Api) {
    if api == Api::Skyhook {
        return;
    }
    for map in [&mut meta.labels, &mut meta.annotations]
        .into_iter()
        .flatten()
    {
        api.localize(map);
    }
    for owner in meta.owner_references.iter_mut().flatten() {
        if owner.kind == Api::Skyhook.kind() && owner.api_version == Api::Skyhook.api_version() {
            owner.kind = api.kind().to_string();
            owner.api_version = api.api_version().to_string();
        }
    }
}

/// A Job and its pod template.
pub fn localize_job(job: &mut Job, api: Api) {
    localize_meta(&mut job.metadata, api);
    if let Some(template) = job.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
        localize_meta(template, api);
    }
}

pub fn localize_configmap(cm: &mut ConfigMap, api: Api) {
    localize_meta(&mut cm.metadata, api);
}

/// The label selector `key=value` of one of our keys, in `api`.
pub fn selector(api: Api, key: &str, value: &str) -> String {
    format!("{}={value}", api.local(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;
    use serde_json::json;

    #[test]
    fn a_nodewright_job_carries_its_keys_and_owner() {
        let mut job: Job = serde_json::from_value(json!({
            "metadata": {
                "name": "j",
                "labels": {schema::NAME_LABEL: "sh", "app.kubernetes.io/managed-by": "skyhook-operator"},
                "annotations": {schema::ATTEMPT_ANNOTATION: "0"},
                "ownerReferences": [{"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
                    "name": "sh", "uid": "u"}]
            },
            "spec": {"template": {"metadata": {"labels": {schema::STAGE_LABEL: "apply"}}, "spec": {"containers": []}}}
        }))
        .unwrap();
        let legacy = job.clone();
        localize_job(&mut job, Api::Skyhook);
        assert_eq!(job, legacy);
        localize_job(&mut job, Api::NodeWright);
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(v["metadata"]["labels"]["nodewright.nvidia.com/name"], "sh");
        assert_eq!(
            v["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "skyhook-operator"
        );
        assert_eq!(
            v["metadata"]["annotations"]["nodewright.nvidia.com/attempt"],
            "0"
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "NodeWright");
        assert_eq!(
            v["metadata"]["ownerReferences"][0]["apiVersion"],
            "nodewright.nvidia.com/v1alpha1"
        );
        assert_eq!(
            v["spec"]["template"]["metadata"]["labels"]["nodewright.nvidia.com/stage"],
            "apply"
        );
        assert_eq!(
            selector(Api::NodeWright, schema::NAME_LABEL, "sh"),
            "nodewright.nvidia.com/name=sh"
        );
    }
}
