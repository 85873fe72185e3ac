//! Applies a [`Plan`]: the only place that writes to the API server for a reconcile. Order
//! matters for crash safety: ConfigMaps before the Jobs that mount them, Jobs before the node
//! state that says they run (a restart adopts a Job it finds; it never loses one).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::Error;
use crate::crd::Skyhook;
use crate::plan::{JobOp, Plan, Target};
use crate::schema;

const MANAGER: &str = "skyhook-operator";

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

pub async fn execute(
    client: &Client,
    recorder: &Recorder,
    namespace: &str,
    sk: &Skyhook,
    plan: Plan,
) -> Result<(), Error> {
    let name = sk.name_any();
    let skyhooks: Api<Skyhook> = Api::all(client.clone());
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let nodes: Api<Node> = Api::all(client.clone());

    // The status replace below must carry the newest resourceVersion.
    let mut resource_version = sk.resource_version();
    if plan.add_finalizer {
        let mut finalizers = sk.finalizers().to_vec();
        finalizers.push(schema::FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": sk.resource_version()}});
        let patched = skyhooks
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        resource_version = patched.resource_version();
    }

    let apply = PatchParams::apply(MANAGER).force();
    for cm in &plan.configmaps {
        let cm_name = cm.name_any();
        cms.patch(
            &cm_name,
            &apply,
            &Patch::Apply(with_kind(cm, "v1", "ConfigMap")),
        )
        .await?;
    }

    for job in &plan.create_jobs {
        match jobs.create(&PostParams::default(), job).await {
            Ok(_) => info!(skyhook = %name, job = %job.name_any(), "created Job"),
            // A deterministic name already taken means an earlier pass created it: adopt it.
            Err(e) if is_status(&e, 409) => debug!(job = %job.name_any(), "Job exists, adopting"),
            Err(e) => return Err(e.into()),
        }
    }

    for op in &plan.job_ops {
        let res = match op {
            JobOp::Record { job, ttl } => {
                let mut patch = json!({"metadata": {"annotations": {schema::RECORDED_ANNOTATION: schema::TRUE_VALUE}}});
                if let Some(ttl) = ttl {
                    patch["spec"] = json!({"ttlSecondsAfterFinished": ttl});
                }
                jobs.patch(job, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            JobOp::Fail {
                job,
                reason,
                message,
            } => {
                // Shrinking the deadline makes the Job controller fail it (and stop its pod)
                // while the Job stays for `kubectl describe`; our annotation keeps the real reason.
                let patch = json!({
                    "metadata": {"annotations": {
                        schema::FAILURE_REASON_ANNOTATION: reason,
                        schema::FAILURE_MESSAGE_ANNOTATION: message,
                    }},
                    "spec": {"activeDeadlineSeconds": 1},
                });
                warn!(skyhook = %name, %job, %reason, "failing a Job whose pod cannot start");
                jobs.patch(job, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            JobOp::Delete { job } => jobs.delete(job, &background()).await.map(|_| ()),
        };
        match res {
            Ok(()) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
    }

    for (ns, pod) in &plan.evictions {
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
        match pods.evict(pod, &kube::api::EvictParams::default()).await {
            Ok(_) => info!(skyhook = %name, pod = %format!("{ns}/{pod}"), "evicted"),
            Err(e) if is_status(&e, 404) => {}
            // A PodDisruptionBudget said no: honour it, retry next pass, never delete instead.
            Err(e) if is_status(&e, 429) => {
                let ev = Event {
                    type_: EventType::Warning,
                    reason: schema::DRAIN_BLOCKED_REASON.to_string(),
                    note: Some(format!(
                        "eviction of pod {ns}/{pod} is blocked by a PodDisruptionBudget; retrying"
                    )),
                    action: "Evict".to_string(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&ev, &sk.object_ref(&())).await {
                    warn!(error = %e, "could not publish an event");
                }
            }
            Err(e) => return Err(e.into()),
        }
    }

    if plan.delete_owned {
        let lp = ListParams::default().labels(&format!("{}={}", schema::NAME_LABEL, name));
        jobs.delete_collection(&background(), &lp).await?;
        cms.delete_collection(&DeleteParams::default(), &lp).await?;
        let meta = ListParams::default().labels(&format!("{}={}", schema::NODE_META_LABEL, name));
        cms.delete_collection(&DeleteParams::default(), &meta)
            .await?;
    }

    for p in &plan.node_patches {
        let mut meta = serde_json::Map::new();
        if !p.annotations.is_empty() {
            meta.insert("annotations".into(), to_json_map(&p.annotations));
        }
        if !p.labels.is_empty() {
            meta.insert("labels".into(), to_json_map(&p.labels));
        }
        let mut body = json!({"metadata": meta});
        if let Some(u) = p.unschedulable {
            body["spec"]["unschedulable"] = json!(u);
        }
        if let Some(t) = &p.taints {
            // A merge patch replaces the list, so send all of it (null when empty).
            body["spec"]["taints"] = if t.is_empty() { Value::Null } else { json!(t) };
        }
        match nodes
            .patch(&p.node, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
    }

    for (node, set, remove) in &plan.node_conditions {
        let mut list: Vec<Value> = set.iter().map(|c| json!(c)).collect();
        list.extend(
            remove
                .iter()
                .map(|t| json!({"type": t, "$patch": "delete"})),
        );
        let body = json!({"status": {"conditions": list}});
        match nodes
            .patch_status(node, &PatchParams::default(), &Patch::Strategic(&body))
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
    }

    if let Some(status) = plan.status {
        // A full replace (guarded by resourceVersion) drops map keys a merge patch would keep.
        let mut obj = sk.clone();
        obj.status = Some(status);
        obj.metadata.managed_fields = None;
        obj.metadata.resource_version = resource_version;
        skyhooks
            .replace_status(&name, &PostParams::default(), &obj)
            .await?;
    }

    if plan.remove_finalizer {
        let finalizers: Vec<String> = sk
            .finalizers()
            .iter()
            .filter(|f| *f != schema::FINALIZER)
            .cloned()
            .collect();
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": sk.resource_version()}});
        match skyhooks
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => info!(skyhook = %name, "released the finalizer"),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
    }

    for note in &plan.events {
        let reference = match (note.target, &note.node) {
            (Target::Node, Some(n)) => Node {
                metadata: kube::api::ObjectMeta {
                    name: Some(n.clone()),
                    ..Default::default()
                },
                ..Default::default()
            }
            .object_ref(&()),
            _ => sk.object_ref(&()),
        };
        let ev = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.clone(),
            note: Some(note.message.clone()),
            action: note.reason.clone(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&ev, &reference).await {
            warn!(error = %e, "could not publish an event");
        }
    }
    Ok(())
}

fn background() -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    }
}

fn to_json_map(m: &BTreeMap<String, Option<String>>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String)))
            .collect(),
    )
}

/// Server-side apply bodies must carry apiVersion and kind.
fn with_kind<T: serde::Serialize>(obj: &T, api_version: &str, kind: &str) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
            meta.remove("resourceVersion");
        }
    }
    v
}
