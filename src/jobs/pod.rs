//! The pieces stage and interrupt Jobs share: the Job around the pod (metadata, failure policy,
//! deadline), the pod fields common to both (node, host namespaces, tolerations, pull secret),
//! labels, the agent environment, the host-root mount and small builders.
//!
//! Failures are the Job controller's to see: `restartPolicy: Never`, `backoffLimit: 0` and a
//! pod failure policy that fails the Job on the first non-zero exit (so its `Failed` condition
//! names the container and exit code) but ignores disruptions (drain, preemption), for which the
//! Job simply makes a new pod. Retries are new Jobs (`attempt` + 1), decided by the planner.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    EnvVar, HostPathVolumeSource, LocalObjectReference, PodSpec, PodTemplateSpec, SecurityContext,
    Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::crd::{Package, Skyhook};
use crate::schema::{self, PackageAnnotation, RuntimeTaints, Stage, parse_go_duration};
use crate::settings::Config;

/// `imagePullPolicy` of every container (the reference always pulls).
pub(super) const PULL_ALWAYS: &str = "Always";
/// Mount propagation of the host root, so mounts made on the host show up in the container.
const HOST_TO_CONTAINER: &str = "HostToContainer";
/// Required by `podFailurePolicy`; the reference's `OnFailure` retried in place forever.
const RESTART_NEVER: &str = "Never";

/// The Skyhook facts every object derives from.
pub(super) struct SkyhookIds<'a> {
    pub(super) name: &'a str,
    uid: &'a str,
    generation: i64,
}

impl<'a> SkyhookIds<'a> {
    pub(super) fn of(skyhook: &'a Skyhook) -> Self {
        let meta = &skyhook.metadata;
        SkyhookIds {
            name: meta.name.as_deref().unwrap_or_default(),
            uid: meta.uid.as_deref().unwrap_or_default(),
            generation: meta.generation.unwrap_or_default(),
        }
    }

    /// `<sh>-<uid>-<gen>_<pkg>_<ver>`, the agent's `SKYHOOK_RESOURCE_ID`.
    pub(super) fn agent_resource_id(&self, package: &Package) -> String {
        let id = schema::resource_id(self.name, self.uid, self.generation);
        schema::agent_resource_id(&id, &package.name, &package.version)
    }

    /// `<COPY_DIR_ROOT>/<sh>/<pkg>-<ver>-<uid>-<gen>`.
    pub(super) fn copy_dir(&self, package: &Package, cfg: &Config) -> String {
        schema::copy_dir(
            &cfg.copy_dir_root,
            self.name,
            &package.name,
            &package.version,
            self.uid,
            self.generation,
        )
    }
}

/// Where and as which attempt a Job runs: what stage and interrupt Jobs have in common.
#[derive(Debug, Clone, Copy)]
pub struct JobPlace<'a> {
    pub skyhook: &'a Skyhook,
    pub node: &'a str,
    /// Attempt index, also the Job name suffix; at most [`schema::MAX_JOB_ATTEMPT`].
    pub attempt: u32,
    /// The package's spec hash as the planner computes it, written verbatim to the
    /// `spec-hash` annotation (the planner uses `""` for uninstalls).
    pub spec_hash: &'a str,
    /// The node's `SKYHOOK_NODE_ORDER` (delta D7).
    pub node_order: i64,
}

/// What distinguishes one Job from another: metadata on the Job (and, partly, its pods).
pub(super) struct JobIdentity<'a> {
    pub(super) place: JobPlace<'a>,
    /// `None` only for an attempt beyond `MAX_JOB_ATTEMPT`.
    pub(super) name: Option<String>,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) annotation: PackageAnnotation,
    pub(super) agent_id: String,
    /// The package's `stageTimeout`, when it sets one.
    pub(super) stage_timeout: Option<String>,
}

impl<'a> JobIdentity<'a> {
    /// The Job running `stage` of `package` at `place`, under `name`.
    pub(super) fn of(
        place: JobPlace<'a>,
        ids: &SkyhookIds,
        package: &Package,
        stage: Stage,
        name: Option<String>,
    ) -> Self {
        let agent_id = ids.agent_resource_id(package);
        JobIdentity {
            place,
            name,
            labels: job_labels(ids, package, stage, place.node, &agent_id),
            annotation: package_annotation(ids, package, stage),
            agent_id,
            stage_timeout: package.stage_timeout.clone(),
        }
    }
}

pub(super) fn build_job(id: JobIdentity, pod: PodSpec, cfg: &Config) -> Job {
    let package_annotation = id.annotation.to_annotation();
    let annotations = string_map([
        (schema::PACKAGE_ANNOTATION, package_annotation.as_str()),
        (schema::RESOURCE_ID_ANNOTATION, id.agent_id.as_str()),
        (schema::NODE_ANNOTATION, id.place.node),
        (
            schema::ATTEMPT_ANNOTATION,
            id.place.attempt.to_string().as_str(),
        ),
        (schema::SPEC_HASH_ANNOTATION, id.place.spec_hash),
    ]);
    // `kubectl logs job/<name>` reads this container: the stage's own (the second init
    // container of a stage pod, whose main container only idles), or the interrupt's.
    let main = pod
        .init_containers
        .as_ref()
        .and_then(|c| c.get(1))
        .or_else(|| pod.containers.first())
        .map(|c| c.name.clone())
        .unwrap_or_default();
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(id.labels.clone()),
            annotations: Some(string_map([
                (schema::PACKAGE_ANNOTATION, package_annotation.as_str()),
                (schema::DEFAULT_CONTAINER_ANNOTATION, main.as_str()),
            ])),
            ..Default::default()
        }),
        spec: Some(pod),
    };
    Job {
        metadata: ObjectMeta {
            name: id.name,
            namespace: Some(cfg.namespace.clone()),
            labels: Some(id.labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_reference(id.place.skyhook)]),
            ..Default::default()
        },
        spec: Some(job_spec(
            template,
            cfg,
            deadline_seconds(id.stage_timeout.as_deref(), cfg),
        )),
        status: None,
    }
}

/// `activeDeadlineSeconds` of a Job: the package's `stageTimeout` (upstream v0.18, delta D26),
/// else the operator's stage deadline; zero means none. Whole seconds, rounded up, so a
/// sub-second timeout still bounds the attempt. A value admission would refuse (only in
/// objects stored before the rule) falls back to the operator's deadline.
pub(super) fn deadline_seconds(stage_timeout: Option<&str>, cfg: &Config) -> Option<i64> {
    let d = stage_timeout
        .and_then(|t| parse_go_duration(t).ok())
        .unwrap_or(cfg.stage_deadline);
    if d.is_zero() {
        return None;
    }
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Some(i64::try_from(secs).unwrap_or(i64::MAX))
}

/// One pod, no retries in place, failed on the first non-zero exit, bounded by the stage
/// deadline. The TTL of a successful Job is set at creation: the node records which Jobs it
/// has folded, so a Job needs no write once it is done. The operator removes it from a failed
/// Job when it counts the failure, so failed Jobs are kept for inspection (and pruned by the
/// planner).
pub(super) fn job_spec(template: PodTemplateSpec, cfg: &Config, deadline: Option<i64>) -> JobSpec {
    JobSpec {
        ttl_seconds_after_finished: Some(
            i32::try_from(cfg.completed_job_ttl.as_secs()).unwrap_or(i32::MAX),
        ),
        parallelism: Some(1),
        completions: Some(1),
        backoff_limit: Some(0),
        active_deadline_seconds: deadline,
        // Required with a pod failure policy: no replacement pod while the old one terminates.
        pod_replacement_policy: Some("Failed".to_owned()),
        pod_failure_policy: Some(PodFailurePolicy {
            rules: vec![
                // A drain, eviction or preemption is not a package failure: the Job controller
                // does not count the pod and makes a new one.
                PodFailurePolicyRule {
                    action: "Ignore".to_owned(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".to_owned(),
                        status: "True".to_owned(),
                    }]),
                    on_exit_codes: None,
                },
                // Any non-zero exit fails the Job at once; its Failed condition then names the
                // container and the exit code.
                PodFailurePolicyRule {
                    action: "FailJob".to_owned(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: None,
                        operator: "NotIn".to_owned(),
                        values: vec![0],
                    }),
                    on_pod_conditions: None,
                },
            ],
        }),
        template,
        ..Default::default()
    }
}

/// The pod fields stage and interrupt Jobs share: pinned to the node (bypassing the
/// scheduler), host PID and network, tolerations, pull secret, and no API token: the
/// containers run a package author's code, which has no business with the namespace's
/// ServiceAccount (the agent needs none).
pub(super) fn pod_spec(skyhook: &Skyhook, node: &str, cfg: &Config) -> PodSpec {
    PodSpec {
        node_name: Some(node.to_owned()),
        automount_service_account_token: Some(false),
        restart_policy: Some(RESTART_NEVER.to_owned()),
        host_pid: Some(true),
        host_network: Some(true),
        image_pull_secrets: cfg
            .image_pull_secret
            .as_ref()
            .map(|name| vec![LocalObjectReference { name: name.clone() }]),
        tolerations: Some(tolerations(skyhook, cfg)),
        priority_class_name: cfg.package_priority_class_name.clone(),
        ..Default::default()
    }
}

/// `node.kubernetes.io/unschedulable` (any effect), the runtime-required taints (the configured
/// one first, then the others recognised), `not-ready` and `unreachable` for good, then the
/// Skyhook's `additionalTolerations` verbatim.
///
/// A node being rebooted by its interrupt goes NotReady; without the last two the taint
/// manager evicts the stage's pod after 5 minutes, and the Job would start another pod, and
/// with it another reboot (upstream added them too, delta D35).
fn tolerations(skyhook: &Skyhook, cfg: &Config) -> Vec<Toleration> {
    let mut all = vec![Toleration {
        key: Some(schema::UNSCHEDULABLE_TAINT_KEY.to_owned()),
        operator: Some("Exists".to_owned()),
        ..Default::default()
    }];
    all.extend(RuntimeTaints::new(&cfg.runtime_required_taint).tolerations());
    for key in [schema::NOT_READY_TAINT_KEY, schema::UNREACHABLE_TAINT_KEY] {
        all.push(Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some("NoExecute".to_owned()),
            ..Default::default()
        });
    }
    all.extend(skyhook.spec.additional_tolerations.iter().cloned());
    all
}

/// Labels of a Job and its pods. Values that may not be valid label values (node names,
/// versions with build metadata, the resource id) use their label-safe forms; the full values
/// are in the Job's annotations.
fn job_labels(
    ids: &SkyhookIds,
    package: &Package,
    stage: Stage,
    node: &str,
    agent_id: &str,
) -> BTreeMap<String, String> {
    [
        (schema::NAME_LABEL, ids.name.to_owned()),
        (
            schema::PACKAGE_LABEL,
            schema::package_label(&package.name, &package.version),
        ),
        (schema::NODE_LABEL, schema::label_value(node)),
        (schema::STAGE_LABEL, stage.as_str().to_owned()),
        (
            schema::RESOURCE_ID_LABEL,
            schema::resource_id_label(agent_id),
        ),
        (
            schema::MANAGED_BY_LABEL,
            schema::MANAGED_BY_VALUE.to_owned(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn package_annotation(ids: &SkyhookIds, package: &Package, stage: Stage) -> PackageAnnotation {
    PackageAnnotation {
        name: package.name.clone(),
        version: package.version.clone(),
        skyhook: ids.name.to_owned(),
        stage,
        image: package.image.clone(),
        container_sha: package.container_sha.clone(),
        invalid: false,
    }
}

/// The four agent variables of §4.4, in order, then upstream v0.15's `SKYHOOK_NODE_ORDER`.
pub(super) fn agent_env(
    ids: &SkyhookIds,
    cfg: &Config,
    agent_id: &str,
    node_order: i64,
) -> [EnvVar; 5] {
    [
        env_var(
            schema::SKYHOOK_LOG_DIR_ENV,
            &schema::agent_log_dir(&cfg.agent_log_root, ids.name),
        ),
        env_var(
            schema::SKYHOOK_ROOT_DIR_ENV,
            &schema::agent_root_dir(&cfg.copy_dir_root, ids.name),
        ),
        env_var(schema::COPY_RESOLV_ENV, schema::COPY_RESOLV_VALUE),
        env_var(schema::SKYHOOK_RESOURCE_ID_ENV, agent_id),
        env_var(schema::SKYHOOK_NODE_ORDER_ENV, &node_order.to_string()),
    ]
}

/// `agentImageOverride` when set (and non-empty, as Go tests it), else `AGENT_IMAGE`.
pub(super) fn agent_image<'a>(package: &'a Package, cfg: &'a Config) -> &'a str {
    package
        .agent_image_override
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(&cfg.agent_image)
}

pub(super) fn root_volume() -> Volume {
    Volume {
        name: schema::ROOT_MOUNT_VOLUME.to_owned(),
        host_path: Some(HostPathVolumeSource {
            path: schema::ROOT_MOUNT_HOST_PATH.to_owned(),
            type_: None,
        }),
        ..Default::default()
    }
}

pub(super) fn root_mount() -> VolumeMount {
    VolumeMount {
        name: schema::ROOT_MOUNT_VOLUME.to_owned(),
        mount_path: schema::ROOT_MOUNT_PATH.to_owned(),
        mount_propagation: Some(HOST_TO_CONTAINER.to_owned()),
        ..Default::default()
    }
}

pub(super) fn privileged() -> SecurityContext {
    SecurityContext {
        privileged: Some(true),
        ..Default::default()
    }
}

pub(super) fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

pub(super) fn string_map<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Controller reference to the Skyhook (GC deletes our objects with it).
pub(super) fn owner_reference(skyhook: &Skyhook) -> OwnerReference {
    OwnerReference {
        api_version: Skyhook::api_version(&()).into_owned(),
        kind: Skyhook::kind(&()).into_owned(),
        name: skyhook.metadata.name.clone().unwrap_or_default(),
        uid: skyhook.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}
