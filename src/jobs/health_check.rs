//! The check Job of a Skyhook's health gate (issue 38): one container on the node, like a
//! package stage's pod (pinned to the node, tolerating its cordon and taints, no API token), and
//! read back as a [`CheckRun`]. It is not a package stage: no node state records it.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{env_var, job_spec, owner_reference, pod_spec, string_map};
use super::view::{Outcome, outcome};
use crate::crd::{HealthCheck, Skyhook};
use crate::schema;
use crate::settings::Config;

/// The container of a check Job (what `kubectl logs job/<name>` shows).
pub const CHECK_CONTAINER: &str = "check";

/// The shortest time a finished check Job is kept, whatever `JOB_TTL_SUCCEEDED` says: the newest
/// failed attempt carries the gate's attempt count, so it must outlive the longest retry delay
/// (5 minutes) or the next attempt would start again at 0, with no backoff.
pub const CHECK_JOB_MIN_TTL_SECONDS: i32 = 15 * 60;

/// One attempt of a node's health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    pub name: String,
    pub node: String,
    /// The start of the gate it checks.
    pub since: String,
    pub attempt: u32,
    pub outcome: Outcome,
}

impl CheckRun {
    /// A check Job of ours; `None` for any other Job.
    pub fn from_job(job: &Job) -> Option<CheckRun> {
        let meta = &job.metadata;
        let labels = meta.labels.as_ref()?;
        if labels.get(schema::STAGE_LABEL).map(String::as_str) != Some(schema::HEALTH_CHECK_STAGE) {
            return None;
        }
        let annotations = meta.annotations.as_ref()?;
        Some(CheckRun {
            name: meta.name.clone()?,
            node: annotations.get(schema::NODE_ANNOTATION)?.clone(),
            since: annotations
                .get(schema::HEALTH_CHECK_SINCE_ANNOTATION)?
                .clone(),
            attempt: annotations.get(schema::ATTEMPT_ANNOTATION)?.parse().ok()?,
            outcome: outcome(job, annotations),
        })
    }
}

/// Attempt `attempt` of the check for the gate of `node` that began at `since`; its deadline is
/// the gate's timeout. `None` past the last attempt a name allows.
pub fn health_check_job(
    skyhook: &Skyhook,
    check: &HealthCheck,
    node: &str,
    since: &str,
    attempt: u32,
    deadline_seconds: i64,
    cfg: &Config,
) -> Option<Job> {
    let sk = skyhook.metadata.name.clone().unwrap_or_default();
    let name = schema::health_check_job_name(&sk, node, since, attempt).ok()?;
    let labels: BTreeMap<String, String> = [
        (schema::NAME_LABEL, sk.clone()),
        (schema::NODE_LABEL, schema::label_value(node)),
        (schema::STAGE_LABEL, schema::HEALTH_CHECK_STAGE.to_owned()),
        (
            schema::MANAGED_BY_LABEL,
            schema::MANAGED_BY_VALUE.to_owned(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let pod = check_pod(skyhook, check, node, cfg);
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            annotations: Some(string_map([(
                schema::DEFAULT_CONTAINER_ANNOTATION,
                CHECK_CONTAINER,
            )])),
            ..Default::default()
        }),
        spec: Some(pod),
    };
    let attempt_text = attempt.to_string();
    Some(Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(labels),
            annotations: Some(string_map([
                (schema::NODE_ANNOTATION, node),
                (schema::ATTEMPT_ANNOTATION, attempt_text.as_str()),
                (schema::HEALTH_CHECK_SINCE_ANNOTATION, since),
            ])),
            owner_references: Some(vec![owner_reference(skyhook)]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            ttl_seconds_after_finished: Some(
                CHECK_JOB_MIN_TTL_SECONDS
                    .max(i32::try_from(cfg.completed_job_ttl.as_secs()).unwrap_or(i32::MAX)),
            ),
            ..job_spec(template, cfg, Some(deadline_seconds.max(1)))
        }),
        status: None,
    })
}

/// The check's pod: one container on the node. Unlike a package stage, a check needs the host
/// only when its gate says so, and it runs on a Ready node: it does not outlast a NotReady or
/// unreachable node as an interrupt must.
fn check_pod(skyhook: &Skyhook, check: &HealthCheck, node: &str, cfg: &Config) -> PodSpec {
    let sk = skyhook.metadata.name.as_deref().unwrap_or_default();
    let mut env = vec![env_var("NODE_NAME", node), env_var("SKYHOOK_NAME", sk)];
    env.extend(check.env.iter().cloned());
    let container = Container {
        name: CHECK_CONTAINER.to_owned(),
        image: Some(check.image.clone()),
        command: (!check.command.is_empty()).then(|| check.command.clone()),
        args: (!check.args.is_empty()).then(|| check.args.clone()),
        env: Some(env),
        ..Default::default()
    };
    let mut pod = pod_spec(skyhook, node, cfg);
    pod.containers = vec![container];
    let host = check.host_namespaces.then_some(true);
    (pod.host_network, pod.host_pid) = (host, host);
    if let Some(tolerations) = pod.tolerations.as_mut() {
        tolerations.retain(|t| {
            !matches!(
                t.key.as_deref(),
                Some(schema::NOT_READY_TAINT_KEY | schema::UNREACHABLE_TAINT_KEY)
            )
        });
    }
    pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::HealthCheck;

    #[test]
    fn a_check_job_runs_on_the_node_and_reads_back() {
        let mut sk = Skyhook::new("sh", Default::default());
        sk.metadata.uid = Some("u".into());
        let check = HealthCheck {
            image: "example.com/check:1".into(),
            command: vec!["/check".into()],
            ..Default::default()
        };
        let cfg = crate::plan::fixtures::config();
        let since = "2026-11-28T10:00:00Z";
        let job = health_check_job(&sk, &check, "n1", since, 2, 600, &cfg).expect("job");
        let pod = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pod");
        assert_eq!(pod.node_name.as_deref(), Some("n1"));
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("example.com/check:1")
        );
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(
            (pod.host_network, pod.host_pid),
            (None, None),
            "no host namespaces unless the gate asks"
        );
        let tolerated: Vec<&str> = pod
            .tolerations
            .iter()
            .flatten()
            .filter_map(|t| t.key.as_deref())
            .collect();
        assert!(
            tolerated.contains(&schema::UNSCHEDULABLE_TAINT_KEY),
            "{tolerated:?}"
        );
        assert!(
            !tolerated.contains(&schema::NOT_READY_TAINT_KEY),
            "{tolerated:?}"
        );
        assert!(
            !tolerated.contains(&schema::UNREACHABLE_TAINT_KEY),
            "{tolerated:?}"
        );
        let host = HealthCheck {
            host_namespaces: true,
            ..check.clone()
        };
        let host_job = health_check_job(&sk, &host, "n1", since, 0, 600, &cfg).expect("job");
        let host_pod = host_job.spec.and_then(|s| s.template.spec).expect("pod");
        assert_eq!(
            (host_pod.host_network, host_pod.host_pid),
            (Some(true), Some(true))
        );
        assert_eq!(
            job.spec.as_ref().and_then(|s| s.active_deadline_seconds),
            Some(600)
        );
        let run = CheckRun::from_job(&job).expect("a check run");
        assert_eq!(
            (run.node.as_str(), run.since.as_str(), run.attempt),
            ("n1", since, 2)
        );
        assert_eq!(run.outcome, Outcome::Running);
        // Another gate of the same node never takes this one's Jobs for its own.
        let later =
            health_check_job(&sk, &check, "n1", "2026-11-29T10:00:00Z", 2, 600, &cfg).expect("job");
        assert_ne!(later.metadata.name, job.metadata.name);
    }

    /// A short JOB_TTL_SUCCEEDED never deletes the newest failed attempt before the next is due
    /// (which would restart the count at 0 and skip the backoff); a longer one is kept.
    #[test]
    fn a_check_job_outlives_the_longest_retry_delay() {
        let mut sk = Skyhook::new("sh", Default::default());
        sk.metadata.uid = Some("u".into());
        let check = HealthCheck {
            image: "example.com/check:1".into(),
            ..Default::default()
        };
        let ttl = |secs: u64| {
            let mut cfg = crate::plan::fixtures::config();
            cfg.completed_job_ttl = std::time::Duration::from_secs(secs);
            let job = health_check_job(&sk, &check, "n1", "2026-11-28T10:00:00Z", 0, 60, &cfg);
            job.and_then(|j| j.spec)
                .and_then(|s| s.ttl_seconds_after_finished)
        };
        assert_eq!(ttl(10), Some(CHECK_JOB_MIN_TTL_SECONDS));
        assert_eq!(ttl(86_400), Some(86_400));
    }
}
