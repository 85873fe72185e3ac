//! Fixtures shared by the unit tests of the Job builders, and the round trip from a built Job
//! back to its [`JobView`].

use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{Container, PodSpec, Toleration};

use super::pod::env_var;
use super::{InterruptJob, JobView, Outcome, StageJob, interrupt_job, stage_job};
use crate::crd::{Package, Skyhook, SkyhookSpec};
use crate::schema::{self, Interrupt, InterruptType, Stage};
use crate::settings::Config;

pub(super) const AGENT: &str = "ghcr.io/nvidia/skyhook/agent:v6.4.1";
pub(super) const AGENTLESS: &str = "ghcr.io/nvidia/skyhook/agentless";
pub(super) const COPY_DIR: &str = "/var/lib/skyhook/simple-skyhook/dexter-1.2.3-uid-1-2";
pub(super) const AGENT_ID: &str = "simple-skyhook-uid-1-2_dexter_1.2.3";

/// Settings as the operator parses them (flags win over the environment), so new
/// settings fields do not break these tests.
pub(super) fn cfg() -> Config {
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

pub(super) fn dexter() -> Package {
    Package {
        name: "dexter".into(),
        version: "1.2.3".into(),
        image: AGENTLESS.into(),
        env: vec![env_var("FOO", "bar")],
        config_map: [("a.conf".to_string(), "x=1".to_string())].into(),
        ..Default::default()
    }
}

pub(super) fn skyhook(packages: &[&Package]) -> Skyhook {
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

pub(super) fn build(sk: &Skyhook, p: &Package, stage: Stage, node: &str, attempt: u32) -> Job {
    stage_job(
        &StageJob {
            place: crate::jobs::JobPlace {
                skyhook: sk,
                node,
                attempt,
                spec_hash: "0123456789abcdef",
                node_order: 0,
            },
            package: p,
            stage,
        },
        &cfg(),
    )
}

pub(super) fn pod(job: &Job) -> &PodSpec {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .unwrap()
}

pub(super) fn all_containers(job: &Job) -> Vec<&Container> {
    let p = pod(job);
    p.init_containers
        .iter()
        .flatten()
        .chain(p.containers.iter())
        .collect()
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
    assert_eq!(*view.name, *job.metadata.name.clone().unwrap());
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
            place: crate::jobs::JobPlace {
                skyhook: &sk,
                node: "kind-worker",
                attempt: 0,
                spec_hash: "ih",
                node_order: 0,
            },
            owner: &p,
            interrupt: &reboot,
            stage: Stage::Interrupt,
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
