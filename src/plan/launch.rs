//! The machine's actions as API objects: Jobs to create (with the node's metadata ConfigMap
//! before the first of them) and operations on existing Jobs.

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

use super::actions::{JobOp, Note, Plan};
use super::facts::NodeFacts;
use super::inputs::Inputs;
use super::stage::{NodeAction, NodeOutcome};
use crate::crd::{Package, Skyhook};
use crate::jobs::{self, PlannedJob};
use crate::schema::{self, Interrupt, InterruptType, Stage};
use crate::settings::Config;

/// Jobs on their way to the API server at most, those of earlier passes included; the rest wait
/// for a later pass, which follows within a second. A pass over a thousand fresh nodes would
/// otherwise queue thousands of creations ahead of the writes that store finished stages. A
/// node whose state says a stage runs before its Job exists is safe: a later pass creates it.
pub const MAX_JOB_CREATES_PER_PASS: usize = 200;

/// Adds the Jobs and Job operations of one node's outcome to the plan. Returns false when the
/// node's Jobs wait for the next pass (the pass's cap is reached): then nothing of its launch
/// is planned, neither its metadata ConfigMap nor the Events of its starts.
pub fn node_work(
    inp: &Inputs,
    f: &NodeFacts,
    o: &NodeOutcome,
    node_order: i64,
    plan: &mut Plan,
) -> bool {
    let (sk, cfg) = (inp.skyhook, inp.config);
    let runs = o
        .actions
        .iter()
        .filter(|a| matches!(a, NodeAction::Run { .. }))
        .count();
    let deferred = runs > 0 && plan.create_jobs.len() >= inp.create_room;
    if deferred {
        plan.deferred_jobs += runs;
    }
    let mut wrote_metadata = false;
    for a in &o.actions {
        match a {
            NodeAction::Run { .. } if deferred => {}
            NodeAction::Run {
                package,
                stage,
                attempt,
                spec_hash,
                interrupt,
            } => {
                if !wrote_metadata {
                    let packages = jobs::packages_json(sk, cfg);
                    let cm = jobs::node_metadata_configmap(sk, f.node, packages, cfg);
                    plan.configmaps.push(cm);
                    wrote_metadata = true;
                }
                let run = Run {
                    package,
                    stage: *stage,
                    attempt: *attempt,
                    spec_hash,
                    interrupt: interrupt.as_ref(),
                };
                let Some(mut job) = run_job(sk, cfg, (&f.name, node_order), &run, plan) else {
                    continue;
                };
                // The node copy this pass read; exec replaces it with the version its node
                // patch returns, when the patch stored this stage.
                if let Some(rv) = &f.node.resource_version {
                    job.annotations_mut()
                        .insert(schema::NODE_VERSION_ANNOTATION.to_string(), rv.clone());
                }
                // The boot this reboot must end (the machine waits for another boot id).
                if interrupt
                    .as_ref()
                    .is_some_and(|i| i.kind == InterruptType::Reboot)
                    && !f.node.boot_id.is_empty()
                {
                    job.annotations_mut().insert(
                        schema::BOOT_ID_ANNOTATION.to_string(),
                        f.node.boot_id.clone(),
                    );
                }
                // Always `Some` for the builders' Jobs (every plan test that counts the Jobs
                // created goes through here).
                plan.create_jobs.extend(PlannedJob::new(&job));
            }
            NodeAction::Counted { job } => {
                push_op(plan, &f.name, JobOp::Counted { job: job.clone() })
            }
            NodeAction::FailNow {
                job,
                reason,
                message,
            } => push_op(
                plan,
                &f.name,
                JobOp::Fail {
                    job: job.clone(),
                    reason: reason.clone(),
                    message: message.clone(),
                },
            ),
            NodeAction::Delete { job } => {
                push_op(plan, &f.name, JobOp::Delete { job: job.clone() })
            }
            NodeAction::DeleteGoPod { pod } => {
                push_op(plan, &f.name, JobOp::DeleteGoPod { pod: pod.clone() })
            }
        }
    }
    !deferred
}

/// A Job operation, as part of `node`'s work.
fn push_op(plan: &mut Plan, node: &str, op: JobOp) {
    plan.job_ops.push((node.to_string(), op));
}

struct Run<'a> {
    package: &'a Package,
    stage: Stage,
    attempt: u32,
    spec_hash: &'a str,
    interrupt: Option<&'a Interrupt>,
}

/// The Job of one run (and, for an interrupt, its Event on the Skyhook).
fn run_job(
    sk: &Skyhook,
    cfg: &Config,
    (node, node_order): (&str, i64),
    run: &Run,
    plan: &mut Plan,
) -> Option<Job> {
    let package = run.package;
    let place = jobs::JobPlace {
        skyhook: sk,
        node,
        attempt: run.attempt,
        spec_hash: run.spec_hash,
        node_order,
    };
    if !run.stage.is_interrupt() {
        let req = jobs::StageJob {
            place,
            package,
            stage: run.stage,
        };
        return Some(jobs::stage_job(&req, cfg));
    }
    // The machine always passes the merged interrupt with an interrupt stage.
    let merged = run.interrupt?;
    let message =
        schema::skyhook_interrupt_message(node, &package.name, &package.version, &sk_name(sk));
    plan.events
        .push(Note::skyhook(schema::INTERRUPT_REASON, message).about(node));
    let req = jobs::InterruptJob {
        place,
        owner: package,
        interrupt: merged,
        stage: run.stage,
    };
    Some(jobs::interrupt_job(&req, cfg))
}

fn sk_name(sk: &Skyhook) -> String {
    sk.metadata.name.clone().unwrap_or_default()
}
