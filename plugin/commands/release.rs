//! `release SKYHOOK`: hands a Skyhook its NodeWright took over back to the legacy engine (the
//! annotation `skyhook.nvidia.com/release-from-nodewright`, which the operator acts on once no
//! NodeWright of its name exists). It says first what the Skyhook's next pass would start, as
//! the operator's own planner computes it from the legacy node state as it is now.

use std::io::{BufRead, Write};

use kube::ResourceExt;
use skyhook::crd;
use skyhook::plan::Plan;
use skyhook::schema::{self, Api as ApiKind};

use crate::app::Ctx;
use crate::app::access::{self, Need};
use crate::app::error::CliError;
use crate::app::output::Field;
use crate::app::planner;
use crate::app::prompt::ask_inline;
use crate::cli::LifecycleArgs;

pub async fn run(
    ctx: &Ctx,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    args: &LifecycleArgs,
) -> Result<(), CliError> {
    let name = &args.name;
    let kube = ctx.kube().await?.in_api(ApiKind::Skyhook);
    let mut sk = kube.skyhook(name).await?;
    let Some(at) = sk.annotations().get(schema::TAKEN_OVER_ANNOTATION).cloned() else {
        return Err(CliError::NotTakenOver(name.to_string()));
    };
    let nodewright = kube.clone().in_api(ApiKind::NodeWright);
    let still_there = nodewright.skyhook_exists(name).await == Some(true);
    crd::normalize(&mut sk);
    let (plan, _) = planner::plan_now(&kube, &ctx.global.namespace, &sk).await?;
    writeln!(
        out,
        "Skyhook {name:?} was taken over by NodeWright {name:?} at {at}; it is frozen."
    )?;
    if still_there {
        writeln!(
            out,
            "NodeWright {name:?} still exists: the release takes effect once it is deleted \
             (kubectl delete nodewrights.nodewright.nvidia.com {name}); until then the Skyhook \
             stays frozen."
        )?;
    }
    write!(out, "{}", first_pass(ctx, &plan))?;
    if ctx.global.dry_run {
        writeln!(out, "[dry-run] Would release Skyhook {name:?}")?;
        return Ok(());
    }
    let what = format!("release skyhook {name:?}");
    access::require(&kube, &what, &[Need::PATCH_SKYHOOKS]).await?;
    if !args.confirm {
        let question = format!("This will release Skyhook {name:?} from its NodeWright.");
        ask_inline(out, input, &question)?;
    }
    kube.set_skyhook_annotation(
        name,
        schema::RELEASE_FROM_NODEWRIGHT_ANNOTATION,
        Some(schema::TRUE_VALUE),
    )
    .await?;
    writeln!(
        out,
        "Skyhook {name:?} released: the operator reconciles its spec again once no NodeWright of \
         its name exists"
    )?;
    Ok(())
}

/// What the Skyhook's next pass would start once released: its Jobs (interrupts included), by
/// node. Later stages and batches follow in the rollout's order.
fn first_pass(ctx: &Ctx, plan: &Plan) -> String {
    if plan.create_jobs.is_empty() {
        return "Released, its next pass would start nothing: its spec matches the legacy node \
                state on the nodes it may start now.\n"
            .to_string();
    }
    let rows: Vec<Vec<Field>> = plan
        .create_jobs
        .iter()
        .map(|j| {
            let v = &j.view;
            vec![
                v.node.to_string().into(),
                v.package.to_string().into(),
                v.version.to_string().into(),
                v.stage.as_str().into(),
            ]
        })
        .collect();
    format!(
        "Released, its next pass would start these stages (from the legacy node state; later \
         stages and nodes follow in the rollout's order):\n\n{}",
        ctx.painter
            .table(&["NODE", "PACKAGE", "VERSION", "STAGE"], &rows)
    )
}
