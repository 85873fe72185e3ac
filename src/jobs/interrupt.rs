//! Interrupt Jobs: one batch/v1 Job per (merged) interrupt and node (§4.3 as a Job). Like
//! stage Jobs (see [`super::stage`] for the pod → Job deviation), the single `interrupt`
//! container is the pod's main container.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::pod::{
    JobIdentity, JobPlace, PULL_ALWAYS, SkyhookIds, agent_env, agent_image, build_job, pod_spec,
    privileged, root_mount, root_volume,
};
use crate::crd::Package;
use crate::schema::{self, InterruptType, Stage};
use crate::settings::Config;

/// Requests and limits of the interrupt container (§4.3, fixed by the reference). Memory is
/// upstream's 256Mi since about v0.18 (delta D35): with the reference's 64Mi the agent was
/// OOM-killed on 64K-page arm64 hosts, leaving nodes cordoned and not rebooted.
const INTERRUPT_CPU: &str = "500m";
const INTERRUPT_MEMORY: &str = "256Mi";

/// An interrupt Job to build.
#[derive(Debug, Clone, Copy)]
pub struct InterruptJob<'a> {
    pub place: JobPlace<'a>,
    /// The package the (merged) interrupt is run for: its identity, copy dir, resource id and
    /// agent image are used.
    pub owner: &'a Package,
    /// The merged interrupt ([`schema::merge_interrupts`]).
    pub interrupt: &'a schema::Interrupt,
    /// `interrupt`, or `uninstall-interrupt` after a requested uninstall (upstream v0.16).
    pub stage: Stage,
}

/// Builds the Job that runs a (merged) interrupt on a node for its owner package (§4.3 as a
/// Job): a single `interrupt` main container with the owner's agent image, only the agent env,
/// the host root mounted, fixed 500m/256Mi resources. No metadata volume (the reference's is
/// never mounted), no grace period, no package resources.
///
/// Like [`super::stage_job`], with a successful Job's TTL.
pub fn interrupt_job(req: &InterruptJob, cfg: &Config) -> Job {
    let place = req.place;
    let ids = SkyhookIds::of(place.skyhook);
    let owner = req.owner;
    let copy_dir = ids.copy_dir(owner, cfg);
    let name = schema::interrupt_job_name(
        ids.name,
        req.stage,
        req.interrupt.kind,
        (&owner.name, &owner.version),
        place.node,
        place.attempt,
    )
    .ok();

    let mut id = JobIdentity::of(place, &ids, owner, req.stage, name);
    id.labels.insert(
        schema::INTERRUPT_LABEL.to_owned(),
        schema::INTERRUPT_LABEL_VALUE.to_owned(),
    );

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
        env: Some(agent_env(&ids, cfg, &id.agent_id, place.node_order).to_vec()),
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
        ..pod_spec(place.skyhook, place.node, cfg)
    };
    let mut job = build_job(id, pod, cfg);
    if req.interrupt.kind == InterruptType::Reboot {
        survive_own_reboot(&mut job);
    }
    job
}

/// Attempts of a reboot interrupt that its own reboot may kill.
pub const REBOOT_KILLS_TOLERATED: i32 = 3;

/// A reboot kills the agent that asked for it: SIGTERM or SIGKILL (exit 143 or 137), or, as
/// containerd reports a task the reboot took away, exit 255 with reason `Unknown` (seen on this
/// project's real test nodes). That is the interrupt working, not failing: the Job makes a new pod once the node is back, whose
/// agent finds the reboot done and completes, so the node never reads `erroring` and a batch
/// never counts a failure (upstream v0.20, delta D40). Up to [`REBOOT_KILLS_TOLERATED`] such
/// kills; any other non-zero exit still fails the Job at once.
fn survive_own_reboot(job: &mut Job) {
    let Some(spec) = job.spec.as_mut() else {
        return;
    };
    spec.backoff_limit = Some(REBOOT_KILLS_TOLERATED);
    if let Some(policy) = spec.pod_failure_policy.as_mut() {
        let killed = PodFailurePolicyRule {
            action: "Count".to_owned(),
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: Some(schema::INTERRUPT_CONTAINER.to_owned()),
                operator: "In".to_owned(),
                values: vec![137, 143, 255],
            }),
            on_pod_conditions: None,
        };
        // Before the rule that fails the Job on any non-zero exit: the first match decides.
        let at = policy.rules.len().saturating_sub(1);
        policy.rules.insert(at, killed);
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::json;

    use super::*;
    use crate::jobs::tests::{AGENT_ID, COPY_DIR, cfg, dexter, pod, skyhook};
    use crate::schema::{Interrupt, InterruptType};

    #[test]
    fn interrupt_job_spec() {
        let mut p = dexter();
        p.agent_image_override = Some("my/agent:v7".into());
        p.interrupt = Some(Interrupt::new(InterruptType::Reboot));
        let sk = skyhook(&[&p]);
        let merged = Interrupt::new(InterruptType::Reboot);
        let job = interrupt_job(
            &InterruptJob {
                place: crate::jobs::JobPlace {
                    skyhook: &sk,
                    node: "kind-worker",
                    attempt: 3,
                    spec_hash: "ih",
                    node_order: 0,
                },
                owner: &p,
                interrupt: &merged,
                stage: Stage::Interrupt,
            },
            &crate::settings::Config {
                package_priority_class_name: Some("system-cluster-critical".into()),
                ..cfg()
            },
        );
        assert_eq!(
            pod(&job).priority_class_name.as_deref(),
            Some("system-cluster-critical"),
            "PACKAGE_PRIORITY_CLASS_NAME reaches interrupt pods too"
        );
        assert_eq!(
            job.metadata.name.as_deref(),
            Some(
                schema::interrupt_job_name(
                    "simple-skyhook",
                    Stage::Interrupt,
                    InterruptType::Reboot,
                    ("dexter", "1.2.3"),
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
        let keys: Vec<&str> = spec
            .tolerations
            .iter()
            .flatten()
            .filter_map(|t| t.key.as_deref())
            .collect();
        assert_eq!(
            keys,
            [
                "node.kubernetes.io/unschedulable",
                "skyhook.nvidia.com",
                "nodewright.nvidia.com",
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
                "nvidia.com/gpu",
            ]
        );
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
                    {"name": "SKYHOOK_NODE_ORDER", "value": "0"},
                ],
                "volumeMounts": [
                    {"name": "root-mount", "mountPath": "/root", "mountPropagation": "HostToContainer"}
                ],
                "resources": {
                    "requests": {"cpu": "500m", "memory": "256Mi"},
                    "limits": {"cpu": "500m", "memory": "256Mi"},
                },
                "securityContext": {"privileged": true},
            })
        );
        let decoded = STANDARD.decode(arg).unwrap();
        assert_eq!(decoded, br#"{"type":"node_restart"}"#);
        let js = job.spec.as_ref().unwrap();
        assert_eq!(js.ttl_seconds_after_finished, Some(86_400));
        // A reboot survives its own agent being killed (delta D40), up to three times.
        assert_eq!(js.backoff_limit, Some(REBOOT_KILLS_TOLERATED));
        let rules = serde_json::to_value(&js.pod_failure_policy.as_ref().unwrap().rules).unwrap();
        assert_eq!(
            rules,
            json!([
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "Count", "onExitCodes": {"containerName": "interrupt", "operator": "In", "values": [137, 143, 255]}},
                {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
            ])
        );
    }

    /// Other interrupts fail at the first non-zero exit, like the stages.
    #[test]
    fn only_a_reboot_tolerates_its_agent_being_killed() {
        let mut p = dexter();
        p.interrupt = Some(Interrupt::new(InterruptType::Service));
        let sk = skyhook(&[&p]);
        let merged = Interrupt::new(InterruptType::Service);
        let job = interrupt_job(
            &InterruptJob {
                place: crate::jobs::JobPlace {
                    skyhook: &sk,
                    node: "kind-worker",
                    attempt: 0,
                    spec_hash: "",
                    node_order: 0,
                },
                owner: &p,
                interrupt: &merged,
                stage: Stage::Interrupt,
            },
            &cfg(),
        );
        let js = job.spec.as_ref().unwrap();
        assert_eq!(js.backoff_limit, Some(0));
        assert_eq!(js.pod_failure_policy.as_ref().unwrap().rules.len(), 2);
    }
}
