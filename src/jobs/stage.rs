//! Stage Jobs: one batch/v1 Job per package stage (apply, config, upgrade, uninstall,
//! post-interrupt) and node.
//!
//! # The reference pod, lifted into a Job (§4.2, §4.3)
//!
//! The reference operator runs each stage as a bare pod with `restartPolicy: OnFailure`, three
//! init containers (copy, stage, check) and a `pause` main container that never exits, and
//! judges completion from the init containers. A Job completes only when its main container
//! exits, so here (**deviation**) the check container is the main container: the copy and stage
//! containers stay init containers, the `pause` container is gone. The agent sees exactly the
//! same containers, images, arguments, environment and mounts, in the same order (§11.3).
//! Interrupt Jobs likewise run their single `interrupt` container as the main container (see
//! [`super::interrupt`]). How failures and retries work is in [`super::pod`].

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EnvVar, PodSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::pod::{
    JobIdentity, JobPlace, PULL_ALWAYS, SkyhookIds, agent_env, agent_image, build_job, env_var,
    pod_spec, privileged, root_mount, root_volume,
};
use crate::crd::{Package, PackageResources};
use crate::schema::{self, Stage, parse_go_duration};
use crate::settings::Config;

/// A stage Job to build: `stage` is one of apply, config, upgrade, uninstall, post-interrupt.
#[derive(Debug, Clone, Copy)]
pub struct StageJob<'a> {
    pub place: JobPlace<'a>,
    /// The package to run. For uninstalls of versions no longer in the spec, the planner
    /// passes a synthesised minimal package (name, version, image only).
    pub package: &'a Package,
    pub stage: Stage,
}

/// Builds the Job that runs one stage of a package on a node (§4.2 as a Job, see the module
/// docs for the deviation: the check container is the main container, there is no `pause`).
///
/// An `attempt` above [`schema::MAX_JOB_ATTEMPT`] yields a Job without a name, which the API
/// server rejects; the planner never asks for one.
pub fn stage_job(req: &StageJob, cfg: &Config) -> Job {
    let place = req.place;
    let ids = SkyhookIds::of(place.skyhook);
    let pkg = req.package;
    let stage = req.stage;
    let name = schema::job_name(
        ids.name,
        &pkg.name,
        &pkg.version,
        stage,
        place.node,
        place.attempt,
    )
    .ok();
    let id = JobIdentity::of(place, &ids, pkg, stage, name);
    let (volumes, mounts) = stage_volumes(&ids, pkg, place.node);
    let agent = (id.agent_id.as_str(), place.node_order);
    let [copy, run, check] = stage_containers(&ids, pkg, stage, agent, &mounts, cfg);
    let pod = PodSpec {
        init_containers: Some(vec![copy, run]),
        // The main container: the Job completes when the check exits 0 (module docs).
        containers: vec![check],
        termination_grace_period_seconds: grace_period_seconds(pkg),
        volumes: Some(volumes),
        ..pod_spec(place.skyhook, place.node, cfg)
    };
    build_job(id, pod, cfg)
}

/// The volumes of a stage pod and the mounts every one of its containers gets, in order: the
/// host root, the node metadata ConfigMap, and the package ConfigMap when it has data.
fn stage_volumes(ids: &SkyhookIds, pkg: &Package, node: &str) -> (Vec<Volume>, Vec<VolumeMount>) {
    let metadata_volume = schema::metadata_volume_name(node);
    let mut volumes = vec![
        root_volume(),
        Volume {
            name: metadata_volume.clone(),
            config_map: Some(ConfigMapVolumeSource {
                name: schema::node_metadata_configmap_name(ids.name, node),
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
    (volumes, mounts)
}

/// The copy, stage and check containers, in the reference's order.
fn stage_containers(
    ids: &SkyhookIds,
    pkg: &Package,
    stage: Stage,
    (agent_id, node_order): (&str, i64),
    mounts: &[VolumeMount],
    cfg: &Config,
) -> [Container; 3] {
    let copy_dir = ids.copy_dir(pkg, cfg);
    let resources = package_resources(pkg.resources.as_ref());
    let container = |name: String, image: String, env: Vec<EnvVar>| Container {
        name,
        image: Some(image),
        image_pull_policy: Some(PULL_ALWAYS.to_owned()),
        env: Some(env),
        volume_mounts: Some(mounts.to_vec()),
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
    env.extend(agent_env(ids, cfg, agent_id, node_order));
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
    [copy, run, check]
}

/// `terminationGracePeriodSeconds` from the package's `gracefulShutdown`: whole seconds,
/// truncated (§1.3). A value that does not parse, or is beyond Go's duration range, sets none
/// rather than failing the build: validation rejects such a Skyhook before it is acted on
/// (`crate::crd::admission::MAX_GRACEFUL_SHUTDOWN`), so this only guards against panics.
fn grace_period_seconds(pkg: &Package) -> Option<i64> {
    pkg.graceful_shutdown
        .as_deref()
        .and_then(|d| parse_go_duration(d).ok())
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::{Value, json};

    use super::*;
    use crate::jobs::tests::{
        AGENT, AGENT_ID, AGENTLESS, COPY_DIR, all_containers, build, cfg, dexter, pod, skyhook,
    };
    use crate::schema::PackageAnnotation;

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
            {"name": "SKYHOOK_NODE_ORDER", "value": "0"},
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
                "ttlSecondsAfterFinished": 86400,
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
                        "annotations": {
                            "skyhook.nvidia.com/package": annotation,
                            "kubectl.kubernetes.io/default-container": "dexter-apply",
                        },
                    },
                    "spec": {
                        "nodeName": "kind-worker",
                        "restartPolicy": "Never",
                        "hostPID": true,
                        "automountServiceAccountToken": false,
                        "hostNetwork": true,
                        "tolerations": [
                            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
                            {"key": "skyhook.nvidia.com", "operator": "Equal",
                             "value": "runtime-required", "effect": "NoSchedule"},
                            {"key": "nodewright.nvidia.com", "operator": "Equal",
                             "value": "runtime-required", "effect": "NoSchedule"},
                            {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute"},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute"},
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
                                "args": ["-c", "mkdir -p /root/${SKYHOOK_DIR} && cp -rf /skyhook-package/* /root/${SKYHOOK_DIR}"],
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
        // A successful Job's TTL at creation (COMPLETED_JOB_TTL), no manual selector.
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.ttl_seconds_after_finished, Some(86_400));
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
        c.package_priority_class_name = Some("system-node-critical".into());
        let job = stage_job(
            &StageJob {
                place: crate::jobs::JobPlace {
                    skyhook: &sk,
                    node: "kind-worker",
                    attempt: 0,
                    spec_hash: "h",
                    node_order: 0,
                },
                package: &p,
                stage: Stage::Apply,
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
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        let annotation = &job.metadata.annotations.as_ref().unwrap()[schema::PACKAGE_ANNOTATION];
        let parsed = PackageAnnotation::parse(annotation).unwrap();
        assert_eq!(parsed.container_sha.as_deref(), Some("sha256:abcd"));
        assert_eq!(parsed.image, AGENTLESS);

        p.graceful_shutdown = Some("30s".into());
        let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
        assert_eq!(pod(&job).termination_grace_period_seconds, Some(30));
        assert!(pod(&job).image_pull_secrets.is_none());
        assert_eq!(pod(&job).priority_class_name, None, "unset by default");
        p.graceful_shutdown = None;
        let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
        assert_eq!(pod(&job).termination_grace_period_seconds, None);
    }

    #[test]
    fn unparseable_or_huge_grace_period_is_left_unset() {
        let mut p = dexter();
        let sk = skyhook(&[&p]);
        // Validation rejects all of these; building a Job from one must still not panic.
        for bad in ["", "abc", "-5s", "1000000000h", "2562048h", "30"] {
            p.graceful_shutdown = Some(bad.into());
            let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
            assert_eq!(pod(&job).termination_grace_period_seconds, None, "{bad}");
        }
        // Go's ceiling itself parses; whole seconds, truncated.
        p.graceful_shutdown = Some("2562047h".into());
        let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
        assert_eq!(
            pod(&job).termination_grace_period_seconds,
            Some(2_562_047 * 3600)
        );
        p.graceful_shutdown = Some("1.9s".into());
        let job = build(&sk, &p, Stage::Apply, "kind-worker", 0);
        assert_eq!(pod(&job).termination_grace_period_seconds, Some(1));
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
        assert_eq!(check.env.as_ref().unwrap().len(), 5);
        assert_eq!(check.volume_mounts.as_ref().unwrap().len(), 2);
        assert_eq!(
            spec.init_containers.as_ref().unwrap()[0].image.as_deref(),
            Some("ghcr.io/nvidia/skyhook/agentless:1.0.0")
        );
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[schema::PACKAGE_LABEL], "dexter-1.0.0");
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
        assert_eq!(v.as_object().unwrap().len(), 2);
        // `kubectl logs job/<name>` reads the stage's own container.
        assert_eq!(
            v[schema::DEFAULT_CONTAINER_ANNOTATION],
            schema::stage_container_name("dexter", Stage::Apply)
        );
    }

    #[test]
    fn stage_timeout_bounds_each_attempt_and_zero_lifts_the_bound() {
        let mut p = dexter();
        let sk = skyhook(&[&p]);
        let deadline = |p: &Package| {
            let job = build(&sk, p, Stage::Apply, "kind-worker", 0);
            job.spec.unwrap().active_deadline_seconds
        };
        assert_eq!(deadline(&p), Some(3600), "STAGE_DEADLINE when unset");
        for (timeout, want) in [
            ("30s", Some(30)),
            ("1.2s", Some(2)),
            ("0", None),
            ("0s", None),
        ] {
            p.stage_timeout = Some(timeout.into());
            assert_eq!(deadline(&p), want, "{timeout}");
        }
        // A value admission refuses (stored before the rule) falls back to the deadline.
        p.stage_timeout = Some("soon".into());
        assert_eq!(deadline(&p), Some(3600));
    }
}
