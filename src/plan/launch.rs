//! The machine's actions as API objects: Jobs to create (with the node's metadata ConfigMap
//! before the first of them) and operations on existing Jobs.

use super::facts::NodeFacts;
use super::stage::{NodeAction, NodeOutcome};
use super::{JobOp, Note, Plan};
use crate::crd::{Package, Skyhook};
use crate::jobs;
use crate::schema::{self, Interrupt, Stage};
use crate::settings::Config;

/// Adds the Jobs and Job operations of one node's outcome to the plan.
pub fn node_work(sk: &Skyhook, cfg: &Config, f: &NodeFacts, o: &NodeOutcome, plan: &mut Plan) {
    let mut wrote_metadata = false;
    for a in &o.actions {
        match a {
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
                run_job(sk, cfg, &f.name, &run, plan);
            }
            NodeAction::Counted { job } => plan.job_ops.push(JobOp::Counted { job: job.clone() }),
            NodeAction::Record { job, succeeded } => plan.job_ops.push(JobOp::Record {
                job: job.clone(),
                ttl: succeeded.then_some(cfg.completed_job_ttl.as_secs()),
            }),
            NodeAction::FailNow {
                job,
                reason,
                message,
            } => plan.job_ops.push(JobOp::Fail {
                job: job.clone(),
                reason: reason.clone(),
                message: message.clone(),
            }),
            NodeAction::Delete { job } => plan.job_ops.push(JobOp::Delete { job: job.clone() }),
        }
    }
}

struct Run<'a> {
    package: &'a Package,
    stage: Stage,
    attempt: u32,
    spec_hash: &'a str,
    interrupt: Option<&'a Interrupt>,
}

fn run_job(sk: &Skyhook, cfg: &Config, node: &str, run: &Run, plan: &mut Plan) {
    let package = run.package;
    if run.stage != Stage::Interrupt {
        let req = jobs::StageJob {
            skyhook: sk,
            package,
            stage: run.stage,
            node,
            attempt: run.attempt,
            spec_hash: run.spec_hash,
        };
        plan.create_jobs.push(jobs::stage_job(&req, cfg));
        return;
    }
    // The machine always passes the merged interrupt with an interrupt stage.
    let Some(merged) = run.interrupt else { return };
    let message =
        schema::skyhook_interrupt_message(node, &package.name, &package.version, &sk_name(sk));
    plan.events
        .push(Note::skyhook(schema::INTERRUPT_REASON, message));
    let req = jobs::InterruptJob {
        skyhook: sk,
        owner: package,
        interrupt: merged,
        node,
        attempt: run.attempt,
        spec_hash: run.spec_hash,
    };
    plan.create_jobs.push(jobs::interrupt_job(&req, cfg));
}

fn sk_name(sk: &Skyhook) -> String {
    sk.metadata.name.clone().unwrap_or_default()
}
