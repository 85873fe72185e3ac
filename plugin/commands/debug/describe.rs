//! Short `kubectl describe`-like summaries, and the decoded Skyhook state of a node: what a
//! support engineer reads first, before the full YAML beside it.

use std::fmt::Write as _;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use kube::ResourceExt;
use serde_json::{Value, json};
use skyhook::schema;

fn time(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    t.map_or_else(|| "-".into(), |t| t.0.to_string())
}

fn header(
    out: &mut String,
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) {
    let _ = writeln!(out, "{kind}:\t{}", meta.name.as_deref().unwrap_or("-"));
    let _ = writeln!(
        out,
        "Namespace:\t{}",
        meta.namespace.as_deref().unwrap_or("-")
    );
    let _ = writeln!(out, "Created:\t{}", time(meta.creation_timestamp.as_ref()));
    for (k, v) in meta
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| schema::is_skyhook_key(k))
    {
        let _ = writeln!(out, "Label:\t\t{k}={v}");
    }
}

pub fn job(job: &Job) -> String {
    let mut out = String::new();
    header(&mut out, "Job", &job.metadata);
    if let Some(s) = &job.status {
        let _ = writeln!(
            out,
            "Pods:\t\t{} active / {} succeeded / {} failed",
            s.active.unwrap_or(0),
            s.succeeded.unwrap_or(0),
            s.failed.unwrap_or(0)
        );
        let _ = writeln!(out, "Started:\t{}", time(s.start_time.as_ref()));
        let _ = writeln!(out, "Completed:\t{}", time(s.completion_time.as_ref()));
        let _ = writeln!(out, "Conditions:");
        for c in s.conditions.iter().flatten() {
            let _ = writeln!(
                out,
                "  {}={}\t{}\t{}",
                c.type_,
                c.status,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            );
        }
    }
    out
}

fn container_state(status: Option<&ContainerStatus>) -> String {
    let Some(s) = status else {
        return "no status".into();
    };
    let state = match s.state.as_ref() {
        Some(st) if st.running.is_some() => "Running".to_string(),
        Some(st) => match (&st.terminated, &st.waiting) {
            (Some(t), _) => format!(
                "Terminated (exit code {}, reason {})",
                t.exit_code,
                t.reason.as_deref().unwrap_or("-")
            ),
            (None, Some(w)) => format!("Waiting ({})", w.reason.as_deref().unwrap_or("-")),
            (None, None) => "unknown".into(),
        },
        None => "unknown".into(),
    };
    format!("{state}, restarts {}", s.restart_count)
}

pub fn pod(pod: &Pod) -> String {
    let mut out = String::new();
    header(&mut out, "Pod", &pod.metadata);
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let _ = writeln!(
        out,
        "Node:\t\t{}",
        spec.and_then(|s| s.node_name.as_deref()).unwrap_or("-")
    );
    let _ = writeln!(
        out,
        "Phase:\t\t{}",
        status.and_then(|s| s.phase.as_deref()).unwrap_or("-")
    );
    if let Some(reason) = status.and_then(|s| s.reason.as_deref()) {
        let _ = writeln!(out, "Reason:\t\t{reason}");
    }
    if let Some(message) = status.and_then(|s| s.message.as_deref()) {
        let _ = writeln!(out, "Message:\t{message}");
    }
    let groups = [
        (
            "Init Containers",
            spec.and_then(|s| s.init_containers.as_ref()),
            status.and_then(|s| s.init_container_statuses.as_ref()),
        ),
        (
            "Containers",
            spec.map(|s| &s.containers),
            status.and_then(|s| s.container_statuses.as_ref()),
        ),
    ];
    for (title, containers, statuses) in groups {
        let _ = writeln!(out, "{title}:");
        for c in containers.into_iter().flatten() {
            let st = statuses.into_iter().flatten().find(|s| s.name == c.name);
            let _ = writeln!(out, "  {}:\t{}", c.name, c.image.as_deref().unwrap_or("-"));
            let _ = writeln!(out, "    State:\t{}", container_state(st));
        }
    }
    let _ = writeln!(out, "Conditions:");
    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        let _ = writeln!(
            out,
            "  {}={}\t{}",
            c.type_,
            c.status,
            c.reason.as_deref().unwrap_or("")
        );
    }
    out
}

/// A node as Skyhook sees it: per Skyhook the decoded nodeState, status, cordon annotation
/// and the node conditions it owns, plus the node's taints and cordon flag.
pub fn node_state(node: &Node, skyhooks: &[String]) -> Value {
    let annotations = node.annotations();
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let mut per_skyhook = serde_json::Map::new();
    for sk in skyhooks {
        let raw = annotations.get(&schema::node_state_annotation(sk));
        let state = match raw.map(|r| serde_json::from_str::<Value>(r)) {
            None => Value::Null,
            Some(Ok(v)) => v,
            Some(Err(e)) => json!({"unparsable": raw, "error": e.to_string()}),
        };
        let prefix = schema::node_condition_prefix(sk);
        let owned: Vec<Value> = conditions
            .into_iter()
            .flatten()
            .filter(|c| c.type_.starts_with(&prefix))
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        per_skyhook.insert(
            sk.clone(),
            json!({
                "nodeState": state,
                "status": annotations.get(&schema::status_annotation(sk)),
                "statusLabel": node.labels().get(&schema::status_label(sk)),
                "cordon": annotations.get(&schema::cordon_annotation(sk)),
                "conditions": owned,
            }),
        );
    }
    let spec = node.spec.as_ref();
    json!({
        "name": node.name_any(),
        "unschedulable": spec.and_then(|s| s.unschedulable).unwrap_or(false),
        "taints": spec.and_then(|s| s.taints.as_ref()),
        "ignored": node.labels().get(schema::IGNORE_LABEL),
        "skyhooks": per_skyhook,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_state_is_decoded() {
        let sk = "gpu";
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "annotations": {
                schema::node_state_annotation(sk): r#"{"a|1.0.0":{"name":"a","state":"erroring"}}"#,
            }},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"conditions": [
                {"type": format!("{}NotReady", schema::node_condition_prefix(sk)), "status": "True"},
                {"type": "Ready", "status": "True"},
            ]},
        }))
        .unwrap();
        let v = node_state(&node, &[sk.to_string()]);
        assert_eq!(v["unschedulable"], true);
        assert_eq!(
            v["skyhooks"][sk]["nodeState"]["a|1.0.0"]["state"],
            "erroring"
        );
        assert_eq!(v["skyhooks"][sk]["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(v["taints"][0]["key"], "k");
    }
}
