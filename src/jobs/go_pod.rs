//! The package and interrupt pods the Go operator left behind (§2.6, §4.2, §4.3), read the way
//! its `PodReconcile` reads them (§3.11), so that a hand-over neither loses their outcome nor
//! runs a Job beside them.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::schema::{self, PackageAnnotation, Stage};

/// What a Go pod's init containers say, as the reference classifies them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoOutcome {
    /// Not finished: running, waiting, or not started.
    Running,
    /// The last init container exited 0 (the pod then runs its pause container for ever).
    Succeeded { restarts: i32 },
    /// An init container exited non-zero or is in `CrashLoopBackOff`; with `restartPolicy:
    /// OnFailure` the kubelet retries it in place, so the pod does not end by itself.
    Failed {
        /// When the failing container last terminated (the pod's creation when unknown).
        at: Timestamp,
        restarts: i32,
        container: String,
        reason: String,
        message: String,
    },
}

/// One pod of the Go operator, identified by its labels and package annotation.
#[derive(Debug, Clone, PartialEq)]
pub struct GoPod {
    pub name: String,
    pub skyhook: String,
    pub package: String,
    pub version: String,
    pub stage: Stage,
    /// Package image from the annotation (without tag); empty on hand-made pods.
    pub image: String,
    pub container_sha: Option<String>,
    pub node: String,
    /// The Go operator marked it for deletion (§4.7).
    pub invalid: bool,
    pub deleting: bool,
    pub outcome: GoOutcome,
}

impl GoPod {
    /// A pod labelled `skyhook.nvidia.com/name` that is not one of our Job pods and carries a
    /// readable package annotation and a node; `None` for anything else.
    pub fn from_pod(pod: &Pod) -> Option<GoPod> {
        let meta = &pod.metadata;
        let labels = meta.labels.as_ref()?;
        labels.get(schema::NAME_LABEL)?;
        let ours = labels.get(schema::MANAGED_BY_LABEL).map(String::as_str)
            == Some(schema::MANAGED_BY_VALUE)
            || labels.contains_key(schema::JOB_NAME_LABEL)
            || meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Job");
        if ours {
            return None;
        }
        let raw = meta.annotations.as_ref()?.get(schema::PACKAGE_ANNOTATION)?;
        let pkg = PackageAnnotation::parse(raw).ok()?;
        let node = pod.spec.as_ref()?.node_name.clone()?;
        let created = meta
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
        Some(GoPod {
            name: meta.name.clone()?,
            skyhook: pkg.skyhook,
            package: pkg.name,
            version: pkg.version,
            stage: pkg.stage,
            image: pkg.image,
            container_sha: pkg.container_sha.filter(|s| !s.is_empty()),
            node,
            invalid: pkg.invalid,
            deleting: meta.deletion_timestamp.is_some(),
            outcome: outcome(pod, created),
        })
    }

    pub fn failed(&self) -> bool {
        matches!(self.outcome, GoOutcome::Failed { .. })
    }
}

/// §3.11 step 2 (`containerExitedSuccessfully`): the first failed init container decides, else
/// the last one. A pod without init containers (hand-made) is judged by its phase.
fn outcome(pod: &Pod, created: Timestamp) -> GoOutcome {
    let status = pod.status.as_ref();
    let inits = status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or_default();
    let mut last = None;
    for c in inits {
        let judged = judge(c, created);
        if matches!(judged, GoOutcome::Failed { .. }) {
            return judged;
        }
        last = Some(judged);
    }
    if let Some(judged) = last {
        return judged;
    }
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => GoOutcome::Succeeded { restarts: 0 },
        Some("Failed") => GoOutcome::Failed {
            at: created,
            restarts: 0,
            container: String::new(),
            reason: "Failed".into(),
            message: "the pod failed".into(),
        },
        _ => GoOutcome::Running,
    }
}

fn judge(c: &ContainerStatus, created: Timestamp) -> GoOutcome {
    let restarts = c.restart_count;
    let state = c.state.as_ref();
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        if t.exit_code == 0 {
            return GoOutcome::Succeeded { restarts };
        }
        return GoOutcome::Failed {
            at: t.finished_at.as_ref().map_or(created, |f| f.0),
            restarts,
            container: c.name.clone(),
            reason: t.reason.clone().unwrap_or_else(|| "Error".into()),
            message: format!("container {} exited with code {}", c.name, t.exit_code),
        };
    }
    let waiting = state.and_then(|s| s.waiting.as_ref());
    if let Some(w) = waiting.filter(|w| w.reason.as_deref() == Some("CrashLoopBackOff")) {
        let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
        let code = last.map_or_else(|| "?".to_string(), |t| t.exit_code.to_string());
        return GoOutcome::Failed {
            at: last
                .and_then(|t| t.finished_at.as_ref())
                .map_or(created, |f| f.0),
            restarts,
            container: c.name.clone(),
            reason: "CrashLoopBackOff".into(),
            message: w
                .message
                .clone()
                .unwrap_or_else(|| format!("container {} exited with code {code}", c.name)),
        };
    }
    GoOutcome::Running
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(labels: Value, extra_meta: Value, status: Value) -> Pod {
        let annotation = r#"{"name":"spencer","version":"3.2.3","skyhook":"sh","stage":"apply","image":"ghcr.io/x/spencer"}"#;
        let mut meta = json!({
            "name": "sh-spencer-3-2-3-apply-n1-abc", "namespace": "skyhook",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": labels,
            "annotations": {schema::PACKAGE_ANNOTATION: annotation},
        });
        if let (Some(m), Some(e)) = (meta.as_object_mut(), extra_meta.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"nodeName": "n1", "containers": []},
            "status": status,
        }))
        .expect("pod")
    }

    fn go_labels() -> Value {
        json!({schema::NAME_LABEL: "sh", schema::PACKAGE_LABEL: "spencer-3.2.3"})
    }

    fn init(name: &str, state: Value, restarts: i32, last: Value) -> Value {
        json!({"name": name, "image": "i", "ready": false, "restartCount": restarts,
               "state": state, "lastState": last})
    }

    fn done(code: i32) -> Value {
        json!({"terminated": {"exitCode": code, "reason": if code == 0 {"Completed"} else {"Error"},
               "finishedAt": "2026-01-01T00:01:00Z"}})
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    #[test]
    fn reads_go_pods_and_only_them() {
        let job_owner = json!({"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
            "name": "j", "uid": "u"}]});
        let mut ours = go_labels();
        ours[schema::MANAGED_BY_LABEL] = json!(schema::MANAGED_BY_VALUE);
        let mut job_labelled = go_labels();
        job_labelled[schema::JOB_NAME_LABEL] = json!("j");
        // (case, labels, extra metadata, read)
        let cases = [
            ("a Go package pod", go_labels(), json!({}), true),
            ("our Job's pod", ours, json!({}), false),
            ("a pod owned by a Job", go_labels(), job_owner, false),
            (
                "labelled by the Job controller",
                job_labelled,
                json!({}),
                false,
            ),
            ("no skyhook label", json!({"app": "x"}), json!({}), false),
            (
                "an unreadable annotation",
                go_labels(),
                json!({"annotations": {schema::PACKAGE_ANNOTATION: "{"}}),
                false,
            ),
        ];
        for (case, labels, extra, read) in cases {
            let p = GoPod::from_pod(&pod(labels, extra, json!({})));
            assert_eq!(p.is_some(), read, "case: {case}");
        }
        let p = GoPod::from_pod(&pod(go_labels(), json!({}), json!({}))).expect("read");
        assert_eq!(
            (p.skyhook.as_str(), p.package.as_str(), p.version.as_str()),
            ("sh", "spencer", "3.2.3")
        );
        assert_eq!((p.stage, p.node.as_str()), (Stage::Apply, "n1"));
        assert_eq!(p.image, "ghcr.io/x/spencer");
    }

    #[test]
    fn outcome_as_pod_reconcile_reads_it() {
        let running = json!({"running": {"startedAt": "2026-01-01T00:00:10Z"}});
        let init_wait = json!({"waiting": {"reason": "PodInitializing"}});
        let crash = json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}});
        let created = at("2026-01-01T00:00:00Z");
        let finished = at("2026-01-01T00:01:00Z");
        let failed = |restarts: i32, reason: &str, message: &str| GoOutcome::Failed {
            at: finished,
            restarts,
            container: "p-apply".into(),
            reason: reason.into(),
            message: message.into(),
        };
        // (case, status, outcome)
        let cases = [
            (
                "no status yet",
                json!({"phase": "Pending"}),
                GoOutcome::Running,
            ),
            (
                "the stage runs, its check waits",
                json!({"phase": "Pending", "initContainerStatuses": [
                    init("p-init", done(0), 0, json!({})),
                    init("p-apply", running.clone(), 0, json!({})),
                    init("p-applycheck", init_wait.clone(), 0, json!({}))]}),
                GoOutcome::Running,
            ),
            (
                "every init container exited 0 (pause runs)",
                json!({"phase": "Running", "initContainerStatuses": [
                    init("p-init", done(0), 0, json!({})),
                    init("p-apply", done(0), 0, json!({})),
                    init("p-applycheck", done(0), 2, json!({}))]}),
                GoOutcome::Succeeded { restarts: 2 },
            ),
            (
                "crash-looping: the first failure decides, with its restart count",
                json!({"phase": "Pending", "initContainerStatuses": [
                    init("p-init", done(0), 0, json!({})),
                    init("p-apply", crash, 1, done(3)),
                    init("p-applycheck", init_wait, 0, json!({}))]}),
                failed(1, "CrashLoopBackOff", "back-off"),
            ),
            (
                "terminated non-zero (restartPolicy Never)",
                json!({"phase": "Failed", "initContainerStatuses": [
                    init("p-apply", done(5), 0, json!({}))]}),
                failed(0, "Error", "container p-apply exited with code 5"),
            ),
            (
                "no init containers: the phase decides",
                json!({"phase": "Succeeded"}),
                GoOutcome::Succeeded { restarts: 0 },
            ),
            (
                "no init containers, failed",
                json!({"phase": "Failed"}),
                GoOutcome::Failed {
                    at: created,
                    restarts: 0,
                    container: String::new(),
                    reason: "Failed".into(),
                    message: "the pod failed".into(),
                },
            ),
        ];
        for (case, status, want) in cases {
            let p = GoPod::from_pod(&pod(go_labels(), json!({}), status)).expect("read");
            assert_eq!(p.outcome, want, "case: {case}");
        }
    }
}
