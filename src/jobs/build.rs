//! Builds the objects the operator creates for a Skyhook: one batch/v1 Job per package stage
//! (or interrupt) and node, the package ConfigMaps and the node metadata ConfigMaps.
//!
//! Everything here is pure: the same inputs give the same object, so the planner can compare and
//! the executor can create without reading anything back. Every key, name and format comes from
//! [`crate::schema`]; [`crate::jobs::JobView`] reads the Jobs back from exactly the labels and
//! annotations written here.
//!
//! # The reference pod, lifted into a Job (§4.2, §4.3)
//!
//! The reference operator runs each stage as a bare pod with `restartPolicy: OnFailure`, three
//! init containers (copy, stage, check) and a `pause` main container that never exits, and
//! judges completion from the init containers. A Job completes only when its main container
//! exits, so here (**deviation**) the check container is the main container: the copy and stage
//! containers stay init containers, the `pause` container is gone. The agent sees exactly the
//! same containers, images, arguments, environment and mounts, in the same order (§11.3).
//! Interrupt Jobs likewise run their single `interrupt` container as the main container.
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
    ConfigMap, ConfigMapVolumeSource, Container, EnvVar, HostPathVolumeSource,
    LocalObjectReference, Node, PodSpec, PodTemplateSpec, ResourceRequirements, SecurityContext,
    Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::crd::{Package, PackageResources, Skyhook};
use crate::schema::parse_go_duration;
use crate::schema::{self, PackageAnnotation, Stage};
use crate::settings::Config;

/// Requests and limits of the interrupt container (§4.3, fixed by the reference).
const INTERRUPT_CPU: &str = "500m";
const INTERRUPT_MEMORY: &str = "64Mi";
/// `imagePullPolicy` of every container (the reference always pulls).
const PULL_ALWAYS: &str = "Always";
/// Mount propagation of the host root, so mounts made on the host show up in the container.
const HOST_TO_CONTAINER: &str = "HostToContainer";
/// Required by `podFailurePolicy`; the reference's `OnFailure` retried in place forever.
const RESTART_NEVER: &str = "Never";
/// Bumped whenever the Job template changes shape, so every existing Job reads as stale.
const SPEC_HASH_FORMAT: u32 = 1;
/// Hex digits kept of the SHA-256 in a spec hash.
const SPEC_HASH_LEN: usize = 16;

/// A stage Job to build: `stage` is one of apply, config, upgrade, uninstall, post-interrupt.
#[derive(Debug, Clone, Copy)]
pub struct StageJob<'a> {
    pub skyhook: &'a Skyhook,
    /// The package to run. For uninstalls of versions no longer in the spec, the planner
    /// passes a synthesised minimal package (name, version, image only).
    pub package: &'a Package,
    pub stage: Stage,
    pub node: &'a str,
    /// Attempt index, also the Job name suffix; at most [`schema::MAX_JOB_ATTEMPT`].
    pub attempt: u32,
    /// [`spec_hash`] of the package (the planner uses `""` for uninstalls).
    pub spec_hash: &'a str,
}

/// An interrupt Job to build.
#[derive(Debug, Clone, Copy)]
pub struct InterruptJob<'a> {
    pub skyhook: &'a Skyhook,
    /// The package the (merged) interrupt is run for: its identity, copy dir, resource id and
    /// agent image are used.
    pub owner: &'a Package,
    /// The merged interrupt ([`schema::merge_interrupts`]).
    pub interrupt: &'a schema::Interrupt,
    pub node: &'a str,
    /// Attempt index, also the Job name suffix; at most [`schema::MAX_JOB_ATTEMPT`].
    pub attempt: u32,
    pub spec_hash: &'a str,
}

/// The Skyhook facts every object derives from.
struct SkyhookIds<'a> {
    name: &'a str,
    uid: &'a str,
    generation: i64,
}

impl<'a> SkyhookIds<'a> {
    fn of(skyhook: &'a Skyhook) -> Self {
        let meta = &skyhook.metadata;
        SkyhookIds {
            name: meta.name.as_deref().unwrap_or_default(),
            uid: meta.uid.as_deref().unwrap_or_default(),
            generation: meta.generation.unwrap_or_default(),
        }
    }

    /// `<sh>-<uid>-<gen>_<pkg>_<ver>`, the agent's `SKYHOOK_RESOURCE_ID`.
    fn agent_resource_id(&self, package: &Package) -> String {
        let id = schema::resource_id(self.name, self.uid, self.generation);
        schema::agent_resource_id(&id, &package.name, &package.version)
    }

    /// `<COPY_DIR_ROOT>/<sh>/<pkg>-<ver>-<uid>-<gen>`.
    fn copy_dir(&self, package: &Package, cfg: &Config) -> String {
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

/// Builds the Job that runs one stage of a package on a node (§4.2 as a Job, see the module
/// docs for the deviation: the check container is the main container, there is no `pause`).
///
/// The Job is created without `ttlSecondsAfterFinished`: the operator sets it when it records a
/// successful Job, so failed Jobs (and their pods' logs) stay until the planner prunes them.
/// An `attempt` above [`schema::MAX_JOB_ATTEMPT`] yields a Job without a name, which the API
/// server rejects; the planner never asks for one.
pub fn stage_job(req: &StageJob, cfg: &Config) -> Job {
    let ids = SkyhookIds::of(req.skyhook);
    let pkg = req.package;
    let stage = req.stage;
    let agent_id = ids.agent_resource_id(pkg);
    let copy_dir = ids.copy_dir(pkg, cfg);
    let name = schema::job_name(
        ids.name,
        &pkg.name,
        &pkg.version,
        stage,
        req.node,
        req.attempt,
    )
    .ok();

    let labels = job_labels(&ids, pkg, stage, req.node, &agent_id);
    let annotation = package_annotation(&ids, pkg, stage);

    let metadata_volume = schema::metadata_volume_name(req.node);
    let mut volumes = vec![
        root_volume(),
        Volume {
            name: metadata_volume.clone(),
            config_map: Some(ConfigMapVolumeSource {
                name: schema::node_metadata_configmap_name(ids.name, req.node),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    let mut mounts = vec![
        root_mount(),
        VolumeMount {
            name: metadata_volume,
            mount_path: schema::NODE_METADATA_MOUNT_PATH.to_owned(),
            ..Default::default()
        },
    ];
    if !pkg.config_map.is_empty() {
        let volume = schema::package_configmap_volume_name(&pkg.name).to_owned();
        volumes.push(Volume {
            name: volume.clone(),
            config_map: Some(ConfigMapVolumeSource {
                name: schema::package_configmap_name(ids.name, &pkg.name, &pkg.version),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: volume,
            mount_path: schema::CONFIGMAPS_MOUNT_PATH.to_owned(),
            ..Default::default()
        });
    }

    let resources = package_resources(pkg.resources.as_ref());
    let container = |name: String, image: String, env: Vec<EnvVar>| Container {
        name,
        image: Some(image),
        image_pull_policy: Some(PULL_ALWAYS.to_owned()),
        env: Some(env),
        volume_mounts: Some(mounts.clone()),
        resources: resources.clone(),
        security_context: Some(privileged()),
        ..Default::default()
    };

    // 1. Copy the payload of the package image onto the host at the copy dir.
    let copy = Container {
        command: Some(vec![schema::COPY_SHELL.to_owned()]),
        args: Some(vec!["-c".to_owned(), schema::COPY_SCRIPT.to_owned()]),
        ..container(
            schema::init_container_name(&pkg.name),
            schema::package_image(&pkg.image, &pkg.version, pkg.container_sha.as_deref()),
            vec![env_var(schema::SKYHOOK_DIR_ENV, &copy_dir)],
        )
    };
    // 2. and 3. The agent runs the stage, then its check. Package env first, then the agent's.
    let mut env = pkg.env.clone();
    env.extend(agent_env(&ids, cfg, &agent_id));
    let image = agent_image(pkg, cfg).to_owned();
    let run = Container {
        args: Some(schema::agent_args(stage.as_str(), &copy_dir)),
        ..container(
            schema::stage_container_name(&pkg.name, stage),
            image.clone(),
            env.clone(),
        )
    };
    let check = Container {
        args: Some(schema::agent_args(&schema::check_mode(stage), &copy_dir)),
        ..container(schema::check_container_name(&pkg.name, stage), image, env)
    };

    let termination_grace_period_seconds = pkg
        .graceful_shutdown
        .as_deref()
        .and_then(|d| parse_go_duration(d).ok())
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));

    let pod = PodSpec {
        init_containers: Some(vec![copy, run]),
        // The main container: the Job completes when the check exits 0 (module docs).
        containers: vec![check],
        termination_grace_period_seconds,
        volumes: Some(volumes),
        ..pod_spec(req.skyhook, req.node, cfg)
    };
    build_job(
        JobIdentity {
            skyhook: req.skyhook,
            name,
            labels,
            annotation,
            agent_id,
            node: req.node,
            attempt: req.attempt,
            spec_hash: req.spec_hash,
        },
        pod,
        cfg,
    )
}

/// Builds the Job that runs a (merged) interrupt on a node for its owner package (§4.3 as a
/// Job): a single `interrupt` main container with the owner's agent image, only the agent env,
/// the host root mounted, fixed 500m/64Mi resources. No metadata volume (the reference's is
/// never mounted), no grace period, no package resources.
///
/// Like [`stage_job`], created without `ttlSecondsAfterFinished`.
pub fn interrupt_job(req: &InterruptJob, cfg: &Config) -> Job {
    let ids = SkyhookIds::of(req.skyhook);
    let owner = req.owner;
    let agent_id = ids.agent_resource_id(owner);
    let copy_dir = ids.copy_dir(owner, cfg);
    let name = schema::interrupt_job_name(ids.name, req.interrupt.kind, req.node, req.attempt).ok();

    let mut labels = job_labels(&ids, owner, Stage::Interrupt, req.node, &agent_id);
    labels.insert(
        schema::INTERRUPT_LABEL.to_owned(),
        schema::INTERRUPT_LABEL_VALUE.to_owned(),
    );
    let annotation = package_annotation(&ids, owner, Stage::Interrupt);

    let fixed: BTreeMap<String, Quantity> = [
        ("cpu".to_owned(), Quantity(INTERRUPT_CPU.to_owned())),
        ("memory".to_owned(), Quantity(INTERRUPT_MEMORY.to_owned())),
    ]
    .into();
    let interrupt = Container {
        name: schema::INTERRUPT_CONTAINER.to_owned(),
        image: Some(agent_image(owner, cfg).to_owned()),
        image_pull_policy: Some(PULL_ALWAYS.to_owned()),
        args: Some(schema::interrupt_agent_args(
            &copy_dir,
            &schema::interrupt_arg(req.interrupt.kind, &req.interrupt.services),
        )),
        env: Some(agent_env(&ids, cfg, &agent_id).to_vec()),
        volume_mounts: Some(vec![root_mount()]),
        resources: Some(ResourceRequirements {
            requests: Some(fixed.clone()),
            limits: Some(fixed),
            ..Default::default()
        }),
        security_context: Some(privileged()),
        ..Default::default()
    };
    let pod = PodSpec {
        containers: vec![interrupt],
        volumes: Some(vec![root_volume()]),
        ..pod_spec(req.skyhook, req.node, cfg)
    };
    build_job(
        JobIdentity {
            skyhook: req.skyhook,
            name,
            labels,
            annotation,
            agent_id,
            node: req.node,
            attempt: req.attempt,
            spec_hash: req.spec_hash,
        },
        pod,
        cfg,
    )
}

/// Everything of a stage Job's template that can change between two generations of a package,
/// besides the generation itself (copy dir, resource id) and the attempt.
#[derive(Serialize)]
struct StageInputs<'a> {
    format: u32,
    name: &'a str,
    version: &'a str,
    image: &'a str,
    container_sha: Option<&'a str>,
    env: &'a [EnvVar],
    resources: Option<&'a PackageResources>,
    /// The effective agent image (`agentImageOverride` or `AGENT_IMAGE`).
    agent_image: &'a str,
    graceful_shutdown: Option<&'a str>,
    config_map: &'a BTreeMap<String, String>,
    additional_tolerations: &'a [Toleration],
    image_pull_secret: Option<&'a str>,
    copy_dir_root: &'a str,
    agent_log_root: &'a str,
}

/// Everything of an interrupt Job's template that can change, besides generation and attempt.
#[derive(Serialize)]
struct InterruptInputs<'a> {
    format: u32,
    kind: schema::InterruptType,
    services: &'a [String],
    agent_image: &'a str,
    additional_tolerations: &'a [Toleration],
    image_pull_secret: Option<&'a str>,
    copy_dir_root: &'a str,
    agent_log_root: &'a str,
}

/// Short stable hash (16 hex digits of SHA-256) of everything a stage Job of `package` is built
/// from except the attempt and the Skyhook generation: package image, containerSHA, version,
/// env, resources, effective agent image, gracefulShutdown, configMap data,
/// additionalTolerations, and the operator's pull secret, copy-dir and log roots. A Job whose
/// `spec-hash` annotation differs from the current value was built from an older spec.
pub fn spec_hash(skyhook: &Skyhook, package: &Package, cfg: &Config) -> String {
    hash(&StageInputs {
        format: SPEC_HASH_FORMAT,
        name: &package.name,
        version: &package.version,
        image: &package.image,
        container_sha: package.container_sha.as_deref().filter(|s| !s.is_empty()),
        env: &package.env,
        resources: package.resources.as_ref(),
        agent_image: agent_image(package, cfg),
        graceful_shutdown: package.graceful_shutdown.as_deref(),
        config_map: &package.config_map,
        additional_tolerations: &skyhook.spec.additional_tolerations,
        image_pull_secret: cfg.image_pull_secret.as_deref(),
        copy_dir_root: &cfg.copy_dir_root,
        agent_log_root: &cfg.agent_log_root,
    })
}

/// [`spec_hash`] for an interrupt Job: interrupt type and services, the owner's effective agent
/// image, additionalTolerations, and the operator's pull secret, copy-dir and log roots.
pub fn interrupt_spec_hash(
    skyhook: &Skyhook,
    owner: &Package,
    interrupt: &schema::Interrupt,
    cfg: &Config,
) -> String {
    hash(&InterruptInputs {
        format: SPEC_HASH_FORMAT,
        kind: interrupt.kind,
        services: &interrupt.services,
        agent_image: agent_image(owner, cfg),
        additional_tolerations: &skyhook.spec.additional_tolerations,
        image_pull_secret: cfg.image_pull_secret.as_deref(),
        copy_dir_root: &cfg.copy_dir_root,
        agent_log_root: &cfg.agent_log_root,
    })
}

fn hash<T: Serialize>(inputs: &T) -> String {
    // Serialising plain structs, strings, `BTreeMap`s and k8s-openapi types into memory cannot
    // fail; the empty fallback only avoids a panic path.
    let bytes = serde_json::to_vec(inputs).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .chars()
        .take(SPEC_HASH_LEN)
        .collect()
}

/// The package ConfigMap (§2.7): `lower(<sh>-<pkg>-<ver>)`, labelled with the Skyhook, annotated
/// with Skyhook, package name and version, data = the package's `configMap` verbatim.
pub fn package_configmap(skyhook: &Skyhook, package: &Package, cfg: &Config) -> ConfigMap {
    let ids = SkyhookIds::of(skyhook);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(schema::package_configmap_name(
                ids.name,
                &package.name,
                &package.version,
            )),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(string_map([(schema::NAME_LABEL, ids.name)])),
            annotations: Some(string_map([
                (schema::NAME_ANNOTATION, ids.name),
                (schema::PACKAGE_NAME_ANNOTATION, package.name.as_str()),
                (schema::PACKAGE_VERSION_ANNOTATION, package.version.as_str()),
            ])),
            owner_references: Some(vec![owner_reference(skyhook)]),
            ..Default::default()
        },
        data: Some(package.config_map.clone()),
        ..Default::default()
    }
}

/// The node metadata ConfigMap (§2.7) of one (Skyhook, node): exactly `annotations.json`,
/// `labels.json` (all of the node's, as Go marshals them) and `packages.json` (pass
/// [`packages_json`]).
pub fn node_metadata_configmap(
    skyhook: &Skyhook,
    node: &Node,
    packages_json: String,
    cfg: &Config,
) -> ConfigMap {
    let ids = SkyhookIds::of(skyhook);
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let data = BTreeMap::from([
        (
            schema::METADATA_ANNOTATIONS_KEY.to_owned(),
            schema::string_map_json(node.metadata.annotations.iter().flatten()),
        ),
        (
            schema::METADATA_LABELS_KEY.to_owned(),
            schema::string_map_json(node.metadata.labels.iter().flatten()),
        ),
        (schema::METADATA_PACKAGES_KEY.to_owned(), packages_json),
    ]);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(schema::node_metadata_configmap_name(ids.name, node_name)),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(string_map([(schema::NODE_META_LABEL, ids.name)])),
            annotations: Some(string_map([
                (schema::NAME_ANNOTATION, ids.name),
                (schema::NODE_NAME_ANNOTATION, node_name),
            ])),
            owner_references: Some(vec![owner_reference(skyhook)]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// `packages.json` of the node metadata ConfigMaps (§2.9): every spec package, keyed by name,
/// with `agentVersion` taken from `AGENT_IMAGE`.
pub fn packages_json(skyhook: &Skyhook, cfg: &Config) -> String {
    let packages = skyhook
        .spec
        .packages
        .iter()
        .map(|(key, p)| {
            let name = if p.name.is_empty() { key } else { &p.name };
            (
                key.clone(),
                schema::NodeMetadataPackage {
                    name: name.clone(),
                    version: p.version.clone(),
                    image: p.image.clone(),
                    agent_image_override: p.agent_image_override.clone().unwrap_or_default(),
                    interrupt: p.interrupt.clone(),
                    config_interrupts: p.config_interrupts.clone(),
                },
            )
        })
        .collect();
    schema::NodeMetadataPackages {
        agent_version: schema::agent_version(&cfg.agent_image).to_owned(),
        packages,
    }
    .to_json()
}

/// What distinguishes one Job from another: metadata on the Job (and, partly, its pods).
struct JobIdentity<'a> {
    skyhook: &'a Skyhook,
    /// `None` only for an attempt beyond `MAX_JOB_ATTEMPT`.
    name: Option<String>,
    labels: BTreeMap<String, String>,
    annotation: PackageAnnotation,
    agent_id: String,
    node: &'a str,
    attempt: u32,
    spec_hash: &'a str,
}

fn build_job(id: JobIdentity, pod: PodSpec, cfg: &Config) -> Job {
    let package_annotation = id.annotation.to_annotation();
    let annotations = string_map([
        (schema::PACKAGE_ANNOTATION, package_annotation.as_str()),
        (schema::RESOURCE_ID_ANNOTATION, id.agent_id.as_str()),
        (schema::NODE_ANNOTATION, id.node),
        (schema::ATTEMPT_ANNOTATION, id.attempt.to_string().as_str()),
        (schema::SPEC_HASH_ANNOTATION, id.spec_hash),
    ]);
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(id.labels.clone()),
            annotations: Some(string_map([(
                schema::PACKAGE_ANNOTATION,
                package_annotation.as_str(),
            )])),
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
            owner_references: Some(vec![owner_reference(id.skyhook)]),
            ..Default::default()
        },
        spec: Some(job_spec(template, cfg)),
        status: None,
    }
}

/// One pod, no retries in place, failed on the first non-zero exit, bounded by the stage
/// deadline. No `ttlSecondsAfterFinished`: the operator sets it only on success, so failed Jobs
/// are kept for inspection (and pruned by the planner).
fn job_spec(template: PodTemplateSpec, cfg: &Config) -> JobSpec {
    let deadline = i64::try_from(cfg.stage_deadline.as_secs())
        .unwrap_or(i64::MAX)
        .max(1);
    JobSpec {
        parallelism: Some(1),
        completions: Some(1),
        backoff_limit: Some(0),
        active_deadline_seconds: Some(deadline),
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
/// scheduler), host PID and network, tolerations, pull secret.
fn pod_spec(skyhook: &Skyhook, node: &str, cfg: &Config) -> PodSpec {
    PodSpec {
        node_name: Some(node.to_owned()),
        restart_policy: Some(RESTART_NEVER.to_owned()),
        host_pid: Some(true),
        host_network: Some(true),
        image_pull_secrets: cfg
            .image_pull_secret
            .as_ref()
            .map(|name| vec![LocalObjectReference { name: name.clone() }]),
        tolerations: Some(tolerations(skyhook, cfg)),
        ..Default::default()
    }
}

/// `node.kubernetes.io/unschedulable` (any effect), the runtime-required taint, then the
/// Skyhook's `additionalTolerations` verbatim.
fn tolerations(skyhook: &Skyhook, cfg: &Config) -> Vec<Toleration> {
    let mut all = vec![
        Toleration {
            key: Some(schema::UNSCHEDULABLE_TAINT_KEY.to_owned()),
            operator: Some("Exists".to_owned()),
            ..Default::default()
        },
        cfg.runtime_required_taint.to_toleration(),
    ];
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

/// The four agent variables of §4.4, in order.
fn agent_env(ids: &SkyhookIds, cfg: &Config, agent_id: &str) -> [EnvVar; 4] {
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
    ]
}

/// `agentImageOverride` when set (and non-empty, as Go tests it), else `AGENT_IMAGE`.
fn agent_image<'a>(package: &'a Package, cfg: &'a Config) -> &'a str {
    package
        .agent_image_override
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(&cfg.agent_image)
}

/// The package's overrides on every container when all four are set; otherwise none, and the
/// namespace LimitRange applies (§4.6). Admission rejects partial overrides.
fn package_resources(resources: Option<&PackageResources>) -> Option<ResourceRequirements> {
    let r = resources?;
    let (Some(cpu_req), Some(cpu_lim), Some(mem_req), Some(mem_lim)) = (
        &r.cpu_request,
        &r.cpu_limit,
        &r.memory_request,
        &r.memory_limit,
    ) else {
        return None;
    };
    let pair = |cpu: &Quantity, memory: &Quantity| {
        BTreeMap::from([
            ("cpu".to_owned(), cpu.clone()),
            ("memory".to_owned(), memory.clone()),
        ])
    };
    Some(ResourceRequirements {
        requests: Some(pair(cpu_req, mem_req)),
        limits: Some(pair(cpu_lim, mem_lim)),
        ..Default::default()
    })
}

fn root_volume() -> Volume {
    Volume {
        name: schema::ROOT_MOUNT_VOLUME.to_owned(),
        host_path: Some(HostPathVolumeSource {
            path: schema::ROOT_MOUNT_HOST_PATH.to_owned(),
            type_: None,
        }),
        ..Default::default()
    }
}

fn root_mount() -> VolumeMount {
    VolumeMount {
        name: schema::ROOT_MOUNT_VOLUME.to_owned(),
        mount_path: schema::ROOT_MOUNT_PATH.to_owned(),
        mount_propagation: Some(HOST_TO_CONTAINER.to_owned()),
        ..Default::default()
    }
}

fn privileged() -> SecurityContext {
    SecurityContext {
        privileged: Some(true),
        ..Default::default()
    }
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn string_map<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Controller reference to the Skyhook (GC deletes our objects with it).
fn owner_reference(skyhook: &Skyhook) -> OwnerReference {
    OwnerReference {
        api_version: Skyhook::api_version(&()).into_owned(),
        kind: Skyhook::kind(&()).into_owned(),
        name: skyhook.metadata.name.clone().unwrap_or_default(),
        uid: skyhook.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use k8s_openapi::api::batch::v1::JobStatus;
    use serde_json::{Value, json};

    use super::*;
    use crate::crd::SkyhookSpec;
    use crate::jobs::{JobView, Outcome};
    use crate::schema::{Interrupt, InterruptType};

    const AGENT: &str = "ghcr.io/nvidia/skyhook/agent:v6.4.1";
    const AGENTLESS: &str = "ghcr.io/nvidia/skyhook/agentless";
    const COPY_DIR: &str = "/var/lib/skyhook/simple-skyhook/dexter-1.2.3-uid-1-2";
    const AGENT_ID: &str = "simple-skyhook-uid-1-2_dexter_1.2.3";

    /// Settings as the operator parses them (flags win over the environment), so new
    /// settings fields do not break these tests.
    fn cfg() -> Config {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            settings: crate::settings::Settings,
        }
        let cli = <Cli as clap::Parser>::parse_from([
            "skyhook-operator",
            "--namespace=skyhook",
            "--image-pull-secret=",
            "--copy-dir-root=/var/lib/skyhook",
            "--agent-log-root=/var/log/skyhook",
            "--runtime-required-taint=skyhook.nvidia.com=runtime-required:NoSchedule",
            "--agent-image=ghcr.io/nvidia/skyhook/agent:v6.4.1",
            "--stage-deadline=1h",
        ]);
        let cfg = cli.settings.validate().unwrap();
        assert_eq!(cfg.agent_image, AGENT);
        cfg
    }

    fn dexter() -> Package {
        Package {
            name: "dexter".into(),
            version: "1.2.3".into(),
            image: AGENTLESS.into(),
            env: vec![env_var("FOO", "bar")],
            config_map: [("a.conf".to_string(), "x=1".to_string())].into(),
            ..Default::default()
        }
    }

    fn skyhook(packages: &[&Package]) -> Skyhook {
        let mut sk = Skyhook::new(
            "simple-skyhook",
            SkyhookSpec {
                packages: packages
                    .iter()
                    .map(|p| (p.name.clone(), (*p).clone()))
                    .collect(),
                additional_tolerations: vec![Toleration {
                    key: Some("nvidia.com/gpu".into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoSchedule".into()),
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        sk.metadata.uid = Some("uid-1".into());
        sk.metadata.generation = Some(2);
        sk
    }

    fn build(sk: &Skyhook, p: &Package, stage: Stage, node: &str, attempt: u32) -> Job {
        stage_job(
            &StageJob {
                skyhook: sk,
                package: p,
                stage,
                node,
                attempt,
                spec_hash: "0123456789abcdef",
            },
            &cfg(),
        )
    }

    fn pod(job: &Job) -> &PodSpec {
        job.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .unwrap()
    }

    fn all_containers(job: &Job) -> Vec<&Container> {
        let p = pod(job);
        p.init_containers
            .iter()
            .flatten()
            .chain(p.containers.iter())
            .collect()
    }

    #[test]
    fn golden_stage_job() {
        let p = dexter();
        let sk = skyhook(&[&p]);
        let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
        let rid_label = schema::resource_id_label(AGENT_ID);
        assert!(
            rid_label.starts_with(&format!("{AGENT_ID}-")),
            "{rid_label}"
        );
        let labels = json!({
            "skyhook.nvidia.com/name": "simple-skyhook",
            "skyhook.nvidia.com/package": "dexter-1.2.3",
            "skyhook.nvidia.com/node": "kind-worker",
            "skyhook.nvidia.com/stage": "apply",
            "skyhook.nvidia.com/resource-id": rid_label,
            "app.kubernetes.io/managed-by": "skyhook-operator",
        });
        let annotation = r#"{"name":"dexter","version":"1.2.3","skyhook":"simple-skyhook","stage":"apply","image":"ghcr.io/nvidia/skyhook/agentless"}"#;
        let mounts = json!([
            {"name": "root-mount", "mountPath": "/root", "mountPropagation": "HostToContainer"},
            {"name": "metadata-kind-worker-8bfc3f3a", "mountPath": "/skyhook-package/node-metadata"},
            {"name": "dexter", "mountPath": "/skyhook-package/configmaps"},
        ]);
        let env = json!([
            {"name": "FOO", "value": "bar"},
            {"name": "SKYHOOK_LOG_DIR", "value": "/var/log/skyhook/simple-skyhook"},
            {"name": "SKYHOOK_ROOT_DIR", "value": "/var/lib/skyhook/simple-skyhook"},
            {"name": "COPY_RESOLV", "value": "false"},
            {"name": "SKYHOOK_RESOURCE_ID", "value": AGENT_ID},
        ]);
        let expected = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "simple-skyhook-dexter-1-2-3-apply-kind-worker-2555fea2-0",
                "namespace": "skyhook",
                "labels": labels,
                "annotations": {
                    "skyhook.nvidia.com/package": annotation,
                    "skyhook.nvidia.com/resource-id": AGENT_ID,
                    "skyhook.nvidia.com/node": "kind-worker",
                    "skyhook.nvidia.com/attempt": "0",
                    "skyhook.nvidia.com/spec-hash": "0123456789abcdef",
                },
                "ownerReferences": [{
                    "apiVersion": "skyhook.nvidia.com/v1alpha1",
                    "kind": "Skyhook",
                    "name": "simple-skyhook",
                    "uid": "uid-1",
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "activeDeadlineSeconds": 3600,
                "podReplacementPolicy": "Failed",
                "podFailurePolicy": {"rules": [
                    {"action": "Ignore",
                     "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    {"action": "FailJob",
                     "onExitCodes": {"operator": "NotIn", "values": [0]}},
                ]},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {"skyhook.nvidia.com/package": annotation},
                    },
                    "spec": {
                        "nodeName": "kind-worker",
                        "restartPolicy": "Never",
                        "hostPID": true,
                        "hostNetwork": true,
                        "tolerations": [
                            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
                            {"key": "skyhook.nvidia.com", "operator": "Equal",
                             "value": "runtime-required", "effect": "NoSchedule"},
                            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        ],
                        "volumes": [
                            {"name": "root-mount", "hostPath": {"path": "/"}},
                            {"name": "metadata-kind-worker-8bfc3f3a",
                             "configMap": {"name": "simple-skyhook-kind-worker-metadata-52688a8e"}},
                            {"name": "dexter", "configMap": {"name": "simple-skyhook-dexter-1.2.3"}},
                        ],
                        "initContainers": [
                            {
                                "name": "dexter-init",
                                "image": "ghcr.io/nvidia/skyhook/agentless:1.2.3",
                                "imagePullPolicy": "Always",
                                "command": ["/bin/sh"],
                                "args": ["-c", "mkdir -p /root/${SKYHOOK_DIR} && cp -r /skyhook-package/* /root/${SKYHOOK_DIR}"],
                                "env": [{"name": "SKYHOOK_DIR", "value": COPY_DIR}],
                                "volumeMounts": mounts,
                                "securityContext": {"privileged": true},
                            },
                            {
                                "name": "dexter-apply",
                                "image": AGENT,
                                "imagePullPolicy": "Always",
                                "args": ["apply", "/root", COPY_DIR],
                                "env": env,
                                "volumeMounts": mounts,
                                "securityContext": {"privileged": true},
                            },
                        ],
                        "containers": [{
                            "name": "dexter-applycheck",
                            "image": AGENT,
                            "imagePullPolicy": "Always",
                            "args": ["apply-check", "/root", COPY_DIR],
                            "env": env,
                            "volumeMounts": mounts,
                            "securityContext": {"privileged": true},
                        }],
                    },
                },
            },
        });
        let actual = serde_json::to_value(&job).unwrap();
        assert_eq!(
            actual,
            expected,
            "{}",
            serde_json::to_string_pretty(&actual).unwrap()
        );
        // No TTL at creation (set on success only), no manual selector.
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.ttl_seconds_after_finished, None);
        assert_eq!(spec.manual_selector, None);
    }

    #[test]
    fn post_interrupt_names_and_args() {
        let p = dexter();
        let sk = skyhook(&[&p]);
        let job = build(&sk, &p, Stage::PostInterrupt, "kind-worker", 7);
        let names: Vec<_> = all_containers(&job)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(
            names,
            [
                "dexter-init",
                "dexter-post-interrupt",
                "dexter-post-interruptcheck"
            ]
        );
        let check = &pod(&job).containers[0];
        assert_eq!(
            check.args.as_deref().unwrap(),
            ["post-interrupt-check", "/root", COPY_DIR]
        );
        assert!(job.metadata.name.as_deref().unwrap().ends_with("-7"));
        assert_eq!(
            job.metadata.labels.as_ref().unwrap()[schema::STAGE_LABEL],
            "post-interrupt"
        );
    }

    #[test]
    fn resource_overrides_on_every_container() {
        let mut p = dexter();
        p.resources = Some(PackageResources {
            cpu_request: Some(Quantity("50m".into())),
            cpu_limit: Some(Quantity("100m".into())),
            memory_request: Some(Quantity("32Mi".into())),
            memory_limit: Some(Quantity("64Mi".into())),
        });
        let sk = skyhook(&[&p]);
        let job = build(&sk, &p, Stage::Config, "kind-worker", 0);
        let containers = all_containers(&job);
        assert_eq!(containers.len(), 3);
        for c in containers {
            let r = serde_json::to_value(c.resources.as_ref().unwrap()).unwrap();
            assert_eq!(
                r,
                json!({"requests": {"cpu": "50m", "memory": "32Mi"},
                       "limits": {"cpu": "100m", "memory": "64Mi"}}),
                "{}",
                c.name
            );
        }

        // Without overrides (or with a partial set, which admission rejects) the LimitRange
        // applies: no resources at all.
        for resources in [
            None,
            Some(PackageResources {
                cpu_request: Some(Quantity("50m".into())),
                ..Default::default()
            }),
        ] {
            p.resources = resources;
            let job = build(&sk, &p, Stage::Config, "kind-worker", 0);
            assert!(all_containers(&job).iter().all(|c| c.resources.is_none()));
        }
    }

    #[test]
    fn container_sha_grace_period_and_pull_secret() {
        let mut p = dexter();
        p.container_sha = Some("sha256:abcd".into());
        p.graceful_shutdown = Some("1m30s".into());
        p.agent_image_override = Some("my/agent:v7".into());
        let sk = skyhook(&[&p]);
        let mut c = cfg();
        c.image_pull_secret = Some("regcred".into());
        let job = stage_job(
            &StageJob {
                skyhook: &sk,
                package: &p,
                stage: Stage::Apply,
                node: "kind-worker",
                attempt: 0,
                spec_hash: "h",
            },
            &c,
        );
        let spec = pod(&job);
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(
            init.image.as_deref(),
            Some("ghcr.io/nvidia/skyhook/agentless@sha256:abcd")
        );
        assert_eq!(
            spec.init_containers.as_ref().unwrap()[1].image.as_deref(),
            Some("my/agent:v7")
        );
        assert_eq!(spec.containers[0].image.as_deref(), Some("my/agent:v7"));
        assert_eq!(spec.termination_grace_period_seconds, Some(90));
        assert_eq!(
            spec.image_pull_secrets.as_ref().unwrap()[0].name,
            "regcred".to_string()
        );
        let annotation = &job.metadata.annotations.as_ref().unwrap()[schema::PACKAGE_ANNOTATION];
        let parsed = PackageAnnotation::parse(annotation).unwrap();
        assert_eq!(parsed.container_sha.as_deref(), Some("sha256:abcd"));
        assert_eq!(parsed.image, AGENTLESS);

        p.graceful_shutdown = Some("30s".into());
        let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
        assert_eq!(pod(&job).termination_grace_period_seconds, Some(30));
        assert!(pod(&job).image_pull_secrets.is_none());
        p.graceful_shutdown = None;
        let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
        assert_eq!(pod(&job).termination_grace_period_seconds, None);
    }

    #[test]
    fn minimal_uninstall_package() {
        let old = Package {
            name: "dexter".into(),
            version: "1.0.0".into(),
            image: AGENTLESS.into(),
            ..Default::default()
        };
        let sk = skyhook(&[&dexter()]);
        let job = build(&sk, &old, Stage::Uninstall, "kind-worker", 0);
        let spec = pod(&job);
        assert_eq!(spec.volumes.as_ref().unwrap().len(), 2);
        let check = &spec.containers[0];
        assert_eq!(check.name, "dexter-uninstallcheck");
        assert_eq!(check.env.as_ref().unwrap().len(), 4);
        assert_eq!(check.volume_mounts.as_ref().unwrap().len(), 2);
        assert_eq!(
            spec.init_containers.as_ref().unwrap()[0].image.as_deref(),
            Some("ghcr.io/nvidia/skyhook/agentless:1.0.0")
        );
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[schema::PACKAGE_LABEL], "dexter-1.0.0");
    }

    #[test]
    fn interrupt_job_spec() {
        let mut p = dexter();
        p.agent_image_override = Some("my/agent:v7".into());
        p.interrupt = Some(Interrupt::new(InterruptType::Reboot));
        let sk = skyhook(&[&p]);
        let merged = Interrupt::new(InterruptType::Reboot);
        let job = interrupt_job(
            &InterruptJob {
                skyhook: &sk,
                owner: &p,
                interrupt: &merged,
                node: "kind-worker",
                attempt: 3,
                spec_hash: "ih",
            },
            &cfg(),
        );
        assert_eq!(
            job.metadata.name.as_deref(),
            Some(
                schema::interrupt_job_name(
                    "simple-skyhook",
                    InterruptType::Reboot,
                    "kind-worker",
                    3
                )
                .unwrap()
                .as_str()
            )
        );
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[schema::INTERRUPT_LABEL], "True");
        assert_eq!(labels[schema::STAGE_LABEL], "interrupt");
        assert_eq!(labels[schema::PACKAGE_LABEL], "dexter-1.2.3");
        let annotations = job.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations[schema::PACKAGE_ANNOTATION],
            r#"{"name":"dexter","version":"1.2.3","skyhook":"simple-skyhook","stage":"interrupt","image":"ghcr.io/nvidia/skyhook/agentless"}"#
        );
        assert_eq!(annotations[schema::ATTEMPT_ANNOTATION], "3");
        let template_labels = job
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap();
        assert_eq!(template_labels.labels.as_ref(), Some(labels));

        let spec = pod(&job);
        assert!(spec.init_containers.is_none());
        assert_eq!(spec.termination_grace_period_seconds, None);
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.node_name.as_deref(), Some("kind-worker"));
        assert_eq!(spec.host_pid, Some(true));
        assert_eq!(spec.host_network, Some(true));
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 3);
        let volumes = serde_json::to_value(spec.volumes.as_ref().unwrap()).unwrap();
        assert_eq!(
            volumes,
            json!([{"name": "root-mount", "hostPath": {"path": "/"}}])
        );
        assert_eq!(spec.containers.len(), 1);
        let c = serde_json::to_value(&spec.containers[0]).unwrap();
        let arg = "eyJ0eXBlIjoibm9kZV9yZXN0YXJ0In0=";
        assert_eq!(
            c,
            json!({
                "name": "interrupt",
                "image": "my/agent:v7",
                "imagePullPolicy": "Always",
                "args": ["interrupt", "/root", COPY_DIR, arg],
                "env": [
                    {"name": "SKYHOOK_LOG_DIR", "value": "/var/log/skyhook/simple-skyhook"},
                    {"name": "SKYHOOK_ROOT_DIR", "value": "/var/lib/skyhook/simple-skyhook"},
                    {"name": "COPY_RESOLV", "value": "false"},
                    {"name": "SKYHOOK_RESOURCE_ID", "value": AGENT_ID},
                ],
                "volumeMounts": [
                    {"name": "root-mount", "mountPath": "/root", "mountPropagation": "HostToContainer"}
                ],
                "resources": {
                    "requests": {"cpu": "500m", "memory": "64Mi"},
                    "limits": {"cpu": "500m", "memory": "64Mi"},
                },
                "securityContext": {"privileged": true},
            })
        );
        let decoded = STANDARD.decode(arg).unwrap();
        assert_eq!(decoded, br#"{"type":"node_restart"}"#);
        let js = job.spec.as_ref().unwrap();
        assert_eq!(js.backoff_limit, Some(0));
        assert_eq!(js.ttl_seconds_after_finished, None);
        assert_eq!(js.pod_failure_policy.as_ref().unwrap().rules.len(), 2);
    }

    #[test]
    fn spec_hashes() {
        let p = dexter();
        let sk = skyhook(&[&p]);
        let c = cfg();
        let h = spec_hash(&sk, &p, &c);
        assert_eq!(h.len(), 16);
        assert!(
            h.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(h, spec_hash(&sk, &p.clone(), &c));

        // Neither the generation nor the attempt is an input; the Job carries the hash it is
        // given, whatever its attempt.
        let mut next = sk.clone();
        next.metadata.generation = Some(3);
        assert_eq!(spec_hash(&next, &p, &c), h);
        let jobs = [0, 1, 9].map(|attempt| {
            stage_job(
                &StageJob {
                    skyhook: &sk,
                    package: &p,
                    stage: Stage::Apply,
                    node: "n",
                    attempt,
                    spec_hash: &h,
                },
                &c,
            )
        });
        for j in &jobs {
            assert_eq!(
                j.metadata.annotations.as_ref().unwrap()[schema::SPEC_HASH_ANNOTATION],
                h
            );
        }

        let changed = |f: &dyn Fn(&mut Package, &mut Skyhook, &mut Config)| {
            let (mut p2, mut sk2, mut c2) = (p.clone(), sk.clone(), c.clone());
            f(&mut p2, &mut sk2, &mut c2);
            spec_hash(&sk2, &p2, &c2) != h
        };
        assert!(changed(&|p, _, _| p.env[0].value = Some("baz".into())));
        assert!(changed(&|p, _, _| p.env.push(env_var("X", "1"))));
        assert!(changed(&|p, _, _| p.image = "other".into()));
        assert!(changed(&|p, _, _| p.version = "1.2.4".into()));
        assert!(changed(&|p, _, _| p.container_sha = Some("sha256:1".into())));
        assert!(changed(
            &|p, _, _| p.agent_image_override = Some("a:1".into())
        ));
        assert!(changed(&|p, _, _| p.graceful_shutdown = Some("5s".into())));
        assert!(changed(&|p, _, _| {
            p.config_map.insert("b".into(), "2".into());
        }));
        assert!(changed(&|p, _, _| {
            p.resources = Some(PackageResources {
                cpu_request: Some(Quantity("1".into())),
                ..Default::default()
            })
        }));
        assert!(changed(&|_, sk, _| sk.spec.additional_tolerations.clear()));
        assert!(changed(&|_, _, c| c.agent_image = "a:2".into()));
        assert!(changed(&|_, _, c| c.image_pull_secret = Some("s".into())));
        assert!(changed(&|_, _, c| c.copy_dir_root = "/x".into()));
        assert!(changed(&|_, _, c| c.agent_log_root = "/y".into()));
        // Not template inputs: interrupts, dependencies, empty containerSHA, override = default.
        assert!(!changed(
            &|p, _, _| p.interrupt = Some(Interrupt::new(InterruptType::Noop))
        ));
        assert!(!changed(&|p, _, _| {
            p.depends_on.insert("x".into(), "1".into());
        }));
        assert!(!changed(&|p, _, _| p.container_sha = Some(String::new())));
        assert!(!changed(
            &|p, _, _| p.agent_image_override = Some(AGENT.into())
        ));

        let reboot = Interrupt::new(InterruptType::Reboot);
        let ih = interrupt_spec_hash(&sk, &p, &reboot, &c);
        assert_eq!(ih.len(), 16);
        assert_eq!(ih, interrupt_spec_hash(&next, &p, &reboot, &c));
        let service = Interrupt {
            kind: InterruptType::Service,
            services: vec!["containerd".into()],
        };
        assert_ne!(ih, interrupt_spec_hash(&sk, &p, &service, &c));
        let mut other = service.clone();
        other.services.push("kubelet".into());
        assert_ne!(
            interrupt_spec_hash(&sk, &p, &service, &c),
            interrupt_spec_hash(&sk, &p, &other, &c)
        );
        let mut p2 = p.clone();
        p2.agent_image_override = Some("a:1".into());
        assert_ne!(ih, interrupt_spec_hash(&sk, &p2, &reboot, &c));
        p2 = p.clone();
        p2.env.clear();
        assert_eq!(ih, interrupt_spec_hash(&sk, &p2, &reboot, &c));
    }

    #[test]
    fn job_view_reads_back_identity() {
        let p = dexter();
        let sk = skyhook(&[&p]);
        let long_node = "ip-100-96-5-57.eu-central-1.compute.internal.with.a.very.long.suffix";
        let mut job = build(&sk, &p, Stage::Config, long_node, 12);
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_ne!(labels[schema::NODE_LABEL], long_node);
        assert_eq!(labels[schema::NODE_LABEL], schema::label_value(long_node));
        assert!(schema::is_valid_label_value(&labels[schema::NODE_LABEL]));
        assert!(schema::is_dns1123_label(
            job.metadata.name.as_deref().unwrap()
        ));

        let view = JobView::from_job(&job, None).unwrap();
        assert_eq!(view.name, job.metadata.name.clone().unwrap());
        assert_eq!(view.skyhook, "simple-skyhook");
        assert_eq!(view.package, "dexter");
        assert_eq!(view.version, "1.2.3");
        assert_eq!(view.stage, Stage::Config);
        assert_eq!(view.node, long_node);
        assert_eq!(view.attempt, 12);
        assert_eq!(view.spec_hash, "0123456789abcdef");
        assert_eq!(view.outcome, Outcome::Running);
        assert!(!view.recorded);
        assert!(!view.finished());

        job.status = Some(JobStatus {
            conditions: Some(vec![k8s_openapi::api::batch::v1::JobCondition {
                type_: "Complete".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(JobView::from_job(&job, None).unwrap().finished());

        let reboot = Interrupt::new(InterruptType::Reboot);
        let ij = interrupt_job(
            &InterruptJob {
                skyhook: &sk,
                owner: &p,
                interrupt: &reboot,
                node: "kind-worker",
                attempt: 0,
                spec_hash: "ih",
            },
            &cfg(),
        );
        let view = JobView::from_job(&ij, None).unwrap();
        assert_eq!(
            (
                view.package.as_str(),
                view.stage,
                view.node.as_str(),
                view.attempt
            ),
            ("dexter", Stage::Interrupt, "kind-worker", 0)
        );
        assert_eq!(view.spec_hash, "ih");
    }

    #[test]
    fn attempt_beyond_the_limit_has_no_name() {
        let p = dexter();
        let sk = skyhook(&[&p]);
        let job = build(&sk, &p, Stage::Apply, "n", schema::MAX_JOB_ATTEMPT);
        assert!(job.metadata.name.as_deref().unwrap().ends_with("-999"));
        let job = build(&sk, &p, Stage::Apply, "n", schema::MAX_JOB_ATTEMPT + 1);
        assert_eq!(job.metadata.name, None);
    }

    #[test]
    fn configmaps() {
        let mut p = dexter();
        p.interrupt = Some(Interrupt::new(InterruptType::Reboot));
        let zed = Package {
            name: "zed".into(),
            version: "0.1.0".into(),
            image: "img/zed".into(),
            agent_image_override: Some("agent:v7".into()),
            ..Default::default()
        };
        let sk = skyhook(&[&p, &zed]);
        let c = cfg();

        let cm = serde_json::to_value(package_configmap(&sk, &p, &c)).unwrap();
        let owner = json!([{
            "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
            "name": "simple-skyhook", "uid": "uid-1",
            "controller": true, "blockOwnerDeletion": true,
        }]);
        assert_eq!(
            cm,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "simple-skyhook-dexter-1.2.3",
                    "namespace": "skyhook",
                    "labels": {"skyhook.nvidia.com/name": "simple-skyhook"},
                    "annotations": {
                        "skyhook.nvidia.com/name": "simple-skyhook",
                        "skyhook.nvidia.com/Package.Name": "dexter",
                        "skyhook.nvidia.com/Package.Version": "1.2.3",
                    },
                    "ownerReferences": owner,
                },
                "data": {"a.conf": "x=1"},
            })
        );

        let packages = packages_json(&sk, &c);
        assert_eq!(
            packages,
            concat!(
                r#"{"agentVersion":"v6.4.1","packages":{"#,
                r#""dexter":{"name":"dexter","version":"1.2.3","image":"ghcr.io/nvidia/skyhook/agentless","interrupt":{"type":"reboot"}},"#,
                r#""zed":{"name":"zed","version":"0.1.0","image":"img/zed","agentImageOverride":"agent:v7"}}}"#
            )
        );

        let node = Node {
            metadata: ObjectMeta {
                name: Some("kind-worker".into()),
                labels: Some(string_map([("kubernetes.io/hostname", "kind-worker")])),
                annotations: Some(string_map([("b", "<2>"), ("a", "1")])),
                ..Default::default()
            },
            ..Default::default()
        };
        let cm = serde_json::to_value(node_metadata_configmap(&sk, &node, packages.clone(), &c))
            .unwrap();
        assert_eq!(
            cm,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "simple-skyhook-kind-worker-metadata-52688a8e",
                    "namespace": "skyhook",
                    "labels": {"skyhook.nvidia.com/skyhook-node-meta": "simple-skyhook"},
                    "annotations": {
                        "skyhook.nvidia.com/name": "simple-skyhook",
                        "skyhook.nvidia.com/Node.name": "kind-worker",
                    },
                    "ownerReferences": owner,
                },
                "data": {
                    "annotations.json": r#"{"a":"1","b":"\u003c2\u003e"}"#,
                    "labels.json": r#"{"kubernetes.io/hostname":"kind-worker"}"#,
                    "packages.json": packages,
                },
            })
        );

        // A node without labels or annotations still gets the three keys.
        let bare = Node {
            metadata: ObjectMeta {
                name: Some("bare".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let cm = node_metadata_configmap(&sk, &bare, "{}".into(), &c);
        let data = cm.data.unwrap();
        assert_eq!(data.len(), 3);
        assert_eq!(data[schema::METADATA_LABELS_KEY], "{}");
        assert_eq!(data[schema::METADATA_ANNOTATIONS_KEY], "{}");
    }

    #[test]
    fn template_labels_match_job_labels() {
        let p = dexter();
        let sk = skyhook(&[&p]);
        let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
        let meta = job
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap();
        assert_eq!(meta.labels, job.metadata.labels);
        let v: Value = serde_json::to_value(&meta.annotations).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 1);
    }
}
