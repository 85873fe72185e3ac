//! The watched kinds as the operator decodes them: without `managedFields`, and without the
//! parts of a spec or status no pass reads. Decoding every watch event into the full
//! k8s-openapi types built a JSON tree for each object's managedFields (a tenth of the
//! operator's CPU at 300 nodes, more than the planner) and every Job's pod template, only for
//! the pruning that followed to drop them. Unknown fields are skipped by serde without being
//! built. Each lean object turns into its full type with the dropped parts empty, so caches
//! and the planner keep using the k8s-openapi types.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::PostParams;
use kube::core::Request;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

use crate::crd::{Skyhook, SkyhookSpec, SkyhookStatus};
use crate::schema::Api;

/// `ObjectMeta` without `managedFields`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

fn meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

/// A watched object as decoded: its metadata without managedFields, and only the parts of its
/// spec and status a pass reads (`Spec` and `Status`, kind by kind).
#[derive(Clone, Debug, Deserialize)]
pub struct Lean<Spec, Status> {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    spec: Spec,
    status: Status,
}

/// A lean type that stands for the full kind `$full` in requests (same group, version,
/// resource) and turns into it, its spec and status through the expressions given.
macro_rules! stands_for {
    ($lean:ty => $full:ident {
        spec: |$spec:ident| $to_spec:expr,
        status: |$status:ident| $to_status:expr $(,)?
    }) => {
        impl kube::Resource for $lean {
            type DynamicType = ();
            type Scope = <$full as kube::Resource>::Scope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl From<$lean> for $full {
            fn from(lean: $lean) -> $full {
                let Lean {
                    metadata,
                    spec: $spec,
                    status: $status,
                } = lean;
                $full {
                    metadata,
                    spec: $to_spec,
                    status: $to_status,
                }
            }
        }
    };
}

/// A Job: its metadata (identity, annotations) and status (conditions); never its spec, which
/// is skipped unbuilt.
pub type LeanJob = Lean<Option<IgnoredAny>, Option<JobStatus>>;
stands_for!(LeanJob => Job {
    spec: |_spec| None,
    status: |status| status,
});

/// Of a pod's spec, only the node it is bound to.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPodSpec {
    node_name: Option<String>,
}

/// A pod: its metadata, node and status (container states); not its containers or volumes.
pub type LeanPod = Lean<Option<LeanPodSpec>, Option<PodStatus>>;
stands_for!(LeanPod => Pod {
    spec: |spec| spec.map(|s| PodSpec {
        node_name: s.node_name,
        ..PodSpec::default()
    }),
    status: |status| status,
});

#[derive(Clone, Debug, Deserialize)]
struct BootId {
    #[serde(rename = "bootID")]
    boot_id: Option<String>,
}

/// Of a node's status, the Skyhook conditions, the boot id and the phase.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanNodeStatus {
    #[serde(default, deserialize_with = "skyhook_conditions")]
    conditions: Option<Vec<NodeCondition>>,
    node_info: Option<BootId>,
    phase: Option<String>,
}

/// Of a node's conditions, those of Skyhooks (`skyhook.nvidia.com/<name>/...`), and the kubelet's
/// `Ready` (a soaking batch fails on it) and those others set (health gates) as type and status
/// alone: the only ones a pass reads.
/// The kubelet's five, each with a message, were a fifth of a cached node; its heartbeat
/// times change every few minutes and are dropped.
fn skyhook_conditions<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<NodeCondition>>, D::Error> {
    let mut list: Option<Vec<NodeCondition>> = Option::deserialize(d)?;
    if let Some(list) = &mut list {
        // Conditions others set (node-problem-detector, a device plugin) are kept as type and
        // status alone, for health gates; the kubelet's pressure conditions are dropped.
        list.retain(|c| {
            crate::schema::is_operator_key(&c.type_)
                || c.type_ == "Ready"
                || !crate::node::is_kubelet_condition(&c.type_)
        });
        for c in list
            .iter_mut()
            .filter(|c| !crate::schema::is_operator_key(&c.type_))
        {
            *c = NodeCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                ..NodeCondition::default()
            };
        }
    }
    Ok(list)
}

/// A node: metadata, spec (taints, unschedulable) and of its status the Skyhook conditions and
/// the boot id; not its images, addresses, capacities, volumes or the kubelet's conditions.
pub type LeanNode = Lean<Option<NodeSpec>, Option<LeanNodeStatus>>;
stands_for!(LeanNode => Node {
    spec: |spec| spec,
    status: |status| status.map(|s| NodeStatus {
        conditions: s.conditions,
        node_info: s.node_info.map(|i| NodeSystemInfo {
            boot_id: i.boot_id.unwrap_or_default(),
            ..NodeSystemInfo::default()
        }),
        phase: s.phase,
        ..NodeStatus::default()
    }),
});

/// A Skyhook without managedFields: after a status replace they name every field of every
/// node's state, more than the status itself.
pub type LeanSkyhook = Lean<SkyhookSpec, Option<SkyhookStatus>>;
stands_for!(LeanSkyhook => Skyhook {
    spec: |spec| spec,
    status: |status| status,
});

/// A watch event of a lean object as one of its full kind.
pub fn full<L: Into<K>, K>(event: watcher::Event<L>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.into()),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.into()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Creates the Job serialised in `body` in `namespace`. The answer (the whole Job back) is
/// decoded lean: a creation reads nothing of it.
pub async fn create_job(
    client: &Client,
    namespace: &str,
    body: Vec<u8>,
) -> Result<(), kube::Error> {
    let req = Request::new(Job::url_path(&(), Some(namespace)))
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    client.request::<LeanJob>(req).await.map(drop)
}

/// Replaces the status of `sk` (guarded by its resourceVersion) and returns it as stored: the
/// Skyhook sent, with the resourceVersion the answer carries. A guarded status replace stores
/// the status as sent and keeps the metadata and spec the guard vouches for, so of the answer
/// (every node's state again, and managedFields naming each of their fields) only that version
/// is read; decoding all of it held a second copy of the largest object the operator keeps.
pub async fn replace_status(
    client: &Client,
    api: Api,
    mut sk: Skyhook,
) -> Result<Skyhook, kube::Error> {
    let body = match api {
        Api::Skyhook => serde_json::to_vec(&sk),
        Api::NodeWright => serde_json::to_value(&sk).and_then(|mut v| {
            v["apiVersion"] = api.api_version().into();
            v["kind"] = api.kind().into();
            serde_json::to_vec(&v)
        }),
    }
    .map_err(kube::Error::SerdeError)?;
    let req = Request::new(api.url_path())
        .replace_subresource("status", &sk.name_any(), &PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    let stored = crate::streamed::request::<VersionOnly>(client, req).await?;
    sk.metadata.resource_version = stored.metadata.resource_version;
    Ok(sk)
}

/// Patches the status of Skyhook `name` with `ops` (a JSON patch that also guards the
/// resourceVersion: [`crate::controller::write::status_patch`]) and returns the resourceVersion the answer
/// carries, read as for [`replace_status`].
pub async fn patch_status(
    client: &Client,
    api: Api,
    name: &str,
    ops: &[serde_json::Value],
) -> Result<Option<String>, kube::Error> {
    let body = serde_json::to_vec(ops).map_err(kube::Error::SerdeError)?;
    let url = format!("{}/{name}/status", api.url_path());
    let req = http::Request::patch(url)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    let stored = crate::streamed::request::<VersionOnly>(client, req).await?;
    Ok(stored.metadata.resource_version)
}

/// An answer read for its resourceVersion; serde skips everything else without building it.
#[derive(Deserialize)]
struct VersionOnly {
    metadata: VersionMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VersionMeta {
    resource_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn managed() -> serde_json::Value {
        json!([{"manager": "kube-controller-manager", "operation": "Update",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}}])
    }

    #[test]
    fn a_lean_job_keeps_every_field_a_pass_reads_and_drops_the_rest() {
        let raw = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "skyhook", "uid": "u1",
                "resourceVersion": "7", "generation": 2,
                "creationTimestamp": "2026-11-25T10:00:00Z",
                "deletionTimestamp": "2026-11-25T10:05:00Z",
                "labels": {"a": "1"}, "annotations": {"b": "2"},
                "finalizers": ["f"], "ownerReferences": [{"apiVersion": "skyhook.nvidia.com/v1alpha1",
                    "kind": "Skyhook", "name": "s", "uid": "u0", "controller": true}],
                "managedFields": managed()},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]},
        });
        let full: Job = serde_json::from_value(raw.clone()).expect("full");
        let lean: Job = serde_json::from_value::<LeanJob>(raw).expect("lean").into();
        let mut want = full.metadata.clone();
        want.managed_fields = None;
        assert_eq!(lean.metadata, want);
        assert_eq!(lean.status, full.status);
        assert!(lean.spec.is_none());
    }

    #[test]
    fn a_lean_pod_keeps_its_node_and_container_states() {
        let raw = json!({
            "metadata": {"name": "p", "labels": {"a": "1"}, "managedFields": managed()},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "c", "image": "i",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ErrImagePull"}}}]},
        });
        let full: Pod = serde_json::from_value(raw.clone()).expect("full");
        let lean: Pod = serde_json::from_value::<LeanPod>(raw).expect("lean").into();
        assert_eq!(lean.status, full.status);
        let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
        assert_eq!(node(&lean), Some("n1".to_string()));
        assert!(lean.metadata.managed_fields.is_none());
        assert_eq!(lean.metadata.labels, full.metadata.labels);
    }

    #[test]
    fn a_lean_node_keeps_taints_skyhook_conditions_ready_and_boot_id() {
        let raw = json!({
            "metadata": {"name": "n1", "annotations": {"x": "y"}, "managedFields": managed()},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False",
                        "reason": "KubeletNotReady", "message": "long words",
                        "lastHeartbeatTime": "2026-11-28T12:00:00Z"},
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "skyhook.nvidia.com/s/NotReady", "status": "True"}],
                "nodeInfo": {"bootID": "b1", "machineID": "m", "systemUUID": "s",
                    "kernelVersion": "k", "osImage": "o", "containerRuntimeVersion": "c",
                    "kubeletVersion": "v", "kubeProxyVersion": "v",
                    "operatingSystem": "linux", "architecture": "amd64"},
                "capacity": {"cpu": "4"}, "images": [{"names": ["i"], "sizeBytes": 1}]},
        });
        let full: Node = serde_json::from_value(raw.clone()).expect("full");
        let lean: Node = serde_json::from_value::<LeanNode>(raw)
            .expect("lean")
            .into();
        assert_eq!(lean.spec, full.spec);
        let status = lean.status.expect("status");
        // The kubelet's Ready as type and status alone, the Skyhook's whole, no other.
        let mut ours = full.status.and_then(|s| s.conditions).unwrap_or_default();
        ours.remove(1);
        ours[0] = NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..NodeCondition::default()
        };
        assert_eq!(status.conditions, Some(ours));
        assert_eq!(status.node_info.map(|i| i.boot_id), Some("b1".into()));
        assert!(status.capacity.is_none() && status.images.is_none());
        assert_eq!(lean.metadata.annotations.map(|a| a.len()), Some(1));
    }

    #[test]
    fn a_lean_skyhook_is_the_skyhook_without_managed_fields() {
        let raw = json!({
            "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
            "metadata": {"name": "s", "generation": 3, "managedFields": managed()},
            "spec": {"packages": {"p": {"version": "1.0.0", "image": "img"}}},
            "status": {"status": "in_progress", "completeNodes": "1/2",
                "nodeState": {"n1": {"p|1.0.0": {"name": "p", "version": "1.0.0",
                    "image": "img", "stage": "apply", "state": "in_progress"}}}},
        });
        let mut full: Skyhook = serde_json::from_value(raw.clone()).expect("full");
        full.metadata.managed_fields = None;
        let lean: Skyhook = serde_json::from_value::<LeanSkyhook>(raw)
            .expect("lean")
            .into();
        assert_eq!(lean, full);
    }
}
