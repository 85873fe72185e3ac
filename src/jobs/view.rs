//! What the planner needs to know about one of our Jobs: its identity (from labels and
//! annotations, never from its name) and its outcome (from the Job's conditions, plus the
//! waiting reason of its pod for failures the Job controller cannot see, such as image pulls).

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

use super::GoPod;
use crate::interned::Shared;
use crate::schema::{self, PackageAnnotation, Stage};

/// Waiting reasons that never resolve on their own: the package is `erroring` as soon as one is
/// seen (the reference leaves these `in_progress` forever, §10.1.1).
pub const STUCK_WAITING_REASONS: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Running,
    Complete {
        at: Timestamp,
    },
    Failed {
        at: Timestamp,
        reason: String,
        message: String,
    },
}

/// Kept for every Job of ours until it is deleted (a day after it finished): the strings that
/// many Jobs repeat are [`Shared`], and what only a stuck pod has is boxed.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    /// Shared with the Job cache's key.
    pub name: Arc<str>,
    /// The API of the object that owns it (its labels' prefix).
    pub api: schema::Api,
    pub skyhook: Shared,
    pub package: Shared,
    pub version: Shared,
    pub stage: Stage,
    pub node: Shared,
    pub attempt: u32,
    pub outcome: Outcome,
    /// The operator has folded this Job's outcome into the node state.
    pub recorded: bool,
    /// This failed attempt is already counted in the node state's `restarts`.
    pub counted: bool,
    /// Hash of the inputs the Job was built from; a different current hash means it is stale.
    pub spec_hash: Shared,
    pub created: Option<Timestamp>,
    pub deleting: bool,
    /// [`schema::NODE_VERSION_ANNOTATION`], when it is a number.
    pub node_version: Option<u64>,
    /// A pod container stuck waiting: (container, reason, message).
    pub stuck: Option<Box<(String, String, String)>>,
    /// A reboot interrupt's [`schema::BOOT_ID_ANNOTATION`]: the boot it must see end.
    pub boot_id: Option<Shared>,
}

impl JobView {
    /// Read a Job the operator created; `None` for anything else (missing or foreign metadata).
    pub fn from_job(job: &Job, pod: Option<&Pod>) -> Option<JobView> {
        let meta = &job.metadata;
        let api = schema::Api::of_owned(meta.labels.as_ref());
        let canonical;
        let annotations = match api {
            schema::Api::Skyhook => meta.annotations.as_ref()?,
            schema::Api::NodeWright => {
                canonical = api.canonical_map(meta.annotations.as_ref()?);
                &canonical
            }
        };
        let pkg = PackageAnnotation::parse(annotations.get(schema::PACKAGE_ANNOTATION)?).ok()?;
        let node = Shared::new(annotations.get(schema::NODE_ANNOTATION)?);
        let attempt = annotations.get(schema::ATTEMPT_ANNOTATION)?.parse().ok()?;
        let outcome = outcome(job, annotations);
        let stuck = match outcome {
            Outcome::Running => pod.and_then(stuck_container).map(Box::new),
            _ => None,
        };
        Some(JobView {
            name: meta.name.as_deref()?.into(),
            api,
            skyhook: pkg.skyhook.into(),
            package: pkg.name.into(),
            version: pkg.version.into(),
            stage: pkg.stage,
            node,
            attempt,
            outcome,
            recorded: annotations.contains_key(schema::RECORDED_ANNOTATION),
            counted: annotations.contains_key(schema::COUNTED_ANNOTATION),
            spec_hash: Shared::new(
                annotations
                    .get(schema::SPEC_HASH_ANNOTATION)
                    .map_or("", String::as_str),
            ),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            deleting: meta.deletion_timestamp.is_some(),
            node_version: annotations
                .get(schema::NODE_VERSION_ANNOTATION)
                .and_then(|v| v.parse().ok()),
            stuck,
            boot_id: annotations
                .get(schema::BOOT_ID_ANNOTATION)
                .filter(|b| !b.is_empty())
                .map(|b| Shared::new(b)),
        })
    }

    pub fn finished(&self) -> bool {
        !matches!(self.outcome, Outcome::Running)
    }

    /// A recent failure not yet folded, with only the Job controller's word for it
    /// ("BackoffLimitExceeded"): its pod may say more (the kubelet refused it). Failed Jobs that
    /// nothing folds any more (an old version's, a node's that left) are past `since` and never
    /// read again.
    pub fn failure_unexplained(&self, since: Timestamp) -> bool {
        matches!(&self.outcome, Outcome::Failed { reason, at, .. }
            if !self.counted && !self.recorded && !self.deleting && *at >= since
                && GENERIC_JOB_FAILURES.contains(&reason.as_str()))
    }

    /// When the Job failed (`None`: it did not).
    pub fn failed_at(&self) -> Option<Timestamp> {
        match self.outcome {
            Outcome::Failed { at, .. } => Some(at),
            _ => None,
        }
    }

    /// This Job with its pod's `refusal` ([`refusal`]) as the reason and message of its failure.
    pub fn explained(&self, (reason, message): (String, String)) -> JobView {
        let mut out = self.clone();
        if let Outcome::Failed { at, .. } = self.outcome {
            out.outcome = Outcome::Failed {
                at,
                reason,
                message,
            };
        }
        out
    }
}

/// The Job controller's reasons for a failed Job that say nothing of why its pod failed.
const GENERIC_JOB_FAILURES: [&str; 2] = ["BackoffLimitExceeded", "PodFailurePolicy"];

/// Why the kubelet refused a failed pod at admission (`status.reason`, e.g. `OutOfcpu`), with
/// its message; `None` for a pod whose containers failed, and for a pod that was disrupted
/// (evicted, preempted, shut down: condition `DisruptionTarget`), which the Job's pod failure
/// policy ignores and replaces, so its reason is not the Job's. A node too full for a package
/// pod gets the setting that makes room named.
pub fn refusal(pod: &Pod) -> Option<(String, String)> {
    let status = pod.status.as_ref()?;
    let disrupted = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "DisruptionTarget" && c.status == "True");
    if status.phase.as_deref() != Some("Failed") || disrupted {
        return None;
    }
    let reason = status.reason.clone().filter(|r| !r.is_empty())?;
    let mut message = status.message.clone().unwrap_or_default();
    let classless = pod
        .spec
        .as_ref()
        .is_none_or(|s| s.priority_class_name.is_none());
    if reason.starts_with("OutOf") && classless {
        message.push_str(
            " (the node is full: PACKAGE_PRIORITY_CLASS_NAME=system-node-critical lets package \
             pods in by preempting workloads, see docs/operations.md)",
        );
    }
    Some((reason, message))
}

/// What a pass reads of a pod labelled with a Skyhook's name: a container of one of our Jobs
/// stuck waiting, or a pod of the Go operator. Every other pod says nothing its Job does not.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    /// The API of its owner (its labels' prefix).
    pub api: schema::Api,
    /// The Skyhook its `skyhook.nvidia.com/name` label names.
    pub skyhook: String,
    /// The Job it runs for (`batch.kubernetes.io/job-name`).
    pub job: Option<String>,
    /// A container stuck waiting: (container, reason, message).
    pub stuck: Option<(String, String, String)>,
    pub go: Option<GoPod>,
}

impl PodView {
    /// `None` for a pod that says nothing worth keeping.
    pub fn from_pod(pod: &Pod) -> Option<PodView> {
        let labels = pod.metadata.labels.as_ref()?;
        let api = schema::Api::of_owned(Some(labels));
        let skyhook = labels.get(api.local(schema::NAME_LABEL).as_ref())?.clone();
        let go = GoPod::from_pod(pod);
        let stuck = stuck_container(pod);
        if go.is_none() && stuck.is_none() {
            return None;
        }
        Some(PodView {
            api,
            skyhook,
            job: labels.get(schema::JOB_NAME_LABEL).cloned(),
            stuck,
            go,
        })
    }
}

pub(super) fn outcome(
    job: &Job,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Outcome {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    for c in conditions.iter().filter(|c| c.status == "True") {
        let at = c
            .last_transition_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH);
        match c.type_.as_str() {
            "Complete" => return Outcome::Complete { at },
            "Failed" => {
                // When the operator failed the Job itself (a stuck image pull), its own reason
                // is more useful than the Job controller's DeadlineExceeded.
                let reason = annotations
                    .get(schema::FAILURE_REASON_ANNOTATION)
                    .or(c.reason.as_ref())
                    .cloned()
                    .unwrap_or_else(|| "Failed".to_string());
                let message = annotations
                    .get(schema::FAILURE_MESSAGE_ANNOTATION)
                    .or(c.message.as_ref())
                    .cloned()
                    .unwrap_or_default();
                return Outcome::Failed {
                    at,
                    reason,
                    message,
                };
            }
            _ => {}
        }
    }
    Outcome::Running
}

/// The reason a pod whose sandbox is gone for good is failed under.
pub const SANDBOX_LOST_REASON: &str = "PodSandboxLost";

/// A pod whose init containers ran, whose sandbox is gone (the node rebooted, or its runtime lost
/// it) and whose main container never started: the kubelet does not make a new sandbox for a
/// `restartPolicy: Never` pod that already ran containers, so it stays Pending for good and its
/// Job never ends (the fault campaign found a node held so for 20 minutes). The waiting
/// container, to fail the Job under [`SANDBOX_LOST_REASON`].
fn sandbox_lost(pod: &Pod) -> Option<(String, String, String)> {
    let status = pod.status.as_ref()?;
    let never = pod.spec.as_ref()?.restart_policy.as_deref() == Some("Never");
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == kind)
            .map(|c| c.status.as_str())
    };
    let lost = never
        && status.phase.as_deref() == Some("Pending")
        && condition("Initialized") == Some("True")
        && condition("PodReadyToStartContainers") == Some("False");
    if !lost {
        return None;
    }
    let containers = status.container_statuses.iter().flatten();
    let started = containers.clone().any(|c| {
        c.state
            .as_ref()
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    });
    if started {
        return None;
    }
    let waiting = containers
        .map(|c| c.name.clone())
        .next()
        .unwrap_or_default();
    Some((
        waiting,
        SANDBOX_LOST_REASON.to_owned(),
        "its pod's sandbox is gone (the node rebooted or its runtime lost it) after the init \
         containers ran, and the kubelet makes no new one for a restartPolicy Never pod: failed \
         so that the stage runs again"
            .to_owned(),
    ))
}

fn stuck_container(pod: &Pod) -> Option<(String, String, String)> {
    if let Some(lost) = sandbox_lost(pod) {
        return Some(lost);
    }
    let status = pod.status.as_ref()?;
    let all = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in all {
        let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = w.reason.clone().unwrap_or_default();
        if STUCK_WAITING_REASONS.contains(&reason.as_str()) {
            return Some((
                c.name.clone(),
                reason,
                w.message.clone().unwrap_or_default(),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::fixtures::{job, now, package};

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn a_pod_whose_sandbox_is_gone_after_its_init_containers_is_stuck() {
        // As the fault campaign's real node left it after a reboot (seed 2).
        let lost = |policy: &str, phase: &str, ready: &str, main: serde_json::Value| {
            pod(json!({
                "spec": {"containers": [], "restartPolicy": policy},
                "status": {"phase": phase, "conditions": [
                    {"type": "PodReadyToStartContainers", "status": ready},
                    {"type": "Initialized", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}],
                  "initContainerStatuses": [{"name": "bravo-init", "image": "a", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0}}}],
                  "containerStatuses": [{"name": "bravo-applycheck", "image": "a", "imageID": "",
                    "ready": false, "restartCount": 0, "state": main}]},
            }))
        };
        let waiting = json!({"waiting": {"reason": "PodInitializing"}});
        let (container, reason, message) =
            stuck_container(&lost("Never", "Pending", "False", waiting.clone())).expect("stuck");
        assert_eq!(
            (&*container, &*reason),
            ("bravo-applycheck", SANDBOX_LOST_REASON)
        );
        assert!(message.contains("sandbox is gone"), "{message}");
        // (case, pod) that are not lost.
        for (case, p) in [
            (
                "sandbox ready",
                lost("Never", "Pending", "True", waiting.clone()),
            ),
            (
                "the kubelet makes a new sandbox",
                lost("OnFailure", "Pending", "False", waiting.clone()),
            ),
            (
                "already failed",
                lost("Never", "Failed", "False", waiting.clone()),
            ),
            (
                "main container ran",
                lost(
                    "Never",
                    "Pending",
                    "False",
                    json!({"terminated": {"exitCode": 0}}),
                ),
            ),
        ] {
            assert_eq!(stuck_container(&p), None, "{case}");
        }
    }

    #[test]
    fn a_pod_the_kubelet_refused_explains_its_failed_job() {
        let out_of_cpu = |class: Option<&str>| {
            pod(json!({
                "spec": {"containers": [], "priorityClassName": class},
                "status": {"phase": "Failed", "reason": "OutOfcpu",
                           "message": "Pod was rejected: Node didn't have enough resource: cpu"},
            }))
        };
        let (reason, message) = refusal(&out_of_cpu(None)).expect("a refusal");
        assert_eq!(reason, "OutOfcpu");
        assert!(message.starts_with("Pod was rejected: Node didn't have enough resource: cpu"));
        assert!(message.contains("PACKAGE_PRIORITY_CLASS_NAME=system-node-critical"));
        let (_, critical) = refusal(&out_of_cpu(Some("system-node-critical"))).expect("refused");
        assert!(
            !critical.contains("PACKAGE_PRIORITY_CLASS_NAME"),
            "no advice to set what is set"
        );
        // (case, pod) that say nothing beyond their Job.
        for (case, p) in [
            ("containers failed", json!({"status": {"phase": "Failed"}})),
            (
                "running",
                json!({"status": {"phase": "Running", "reason": "X"}}),
            ),
            ("no status", json!({})),
            (
                "preempted: the Job replaces it",
                json!({"status": {"phase": "Failed", "reason": "Preempting",
                    "conditions": [{"type": "DisruptionTarget", "status": "True"}]}}),
            ),
        ] {
            assert_eq!(refusal(&pod(p)), None, "{case}");
        }

        let failed = |reason: &str| {
            job(&package("drv").build(), crate::schema::Stage::Apply)
                .outcome(Outcome::Failed {
                    at: now(),
                    reason: reason.into(),
                    message: "Job has reached the specified backoff limit".into(),
                })
                .build()
        };
        let since = now() - jiff::SignedDuration::from_mins(10);
        let generic = failed("BackoffLimitExceeded");
        assert!(generic.failure_unexplained(since));
        let explained = generic.explained(("OutOfcpu".into(), "full".into()));
        assert!(matches!(&explained.outcome,
            Outcome::Failed { reason, message, .. } if reason == "OutOfcpu" && message == "full"));
        assert!(!explained.failure_unexplained(since));
        assert!(
            !failed("DeadlineExceeded").failure_unexplained(since),
            "the Job's own reason is the news"
        );
        let mut counted = failed("BackoffLimitExceeded");
        counted.counted = true;
        assert!(
            !counted.failure_unexplained(since),
            "folded already: never read again"
        );
        assert!(
            !generic.failure_unexplained(now() + jiff::SignedDuration::from_secs(1)),
            "an old failure nothing folds is not read again"
        );
    }
}
