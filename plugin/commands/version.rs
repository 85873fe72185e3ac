//! `version`, and operator version discovery (also used by the lifecycle commands' gate).

use std::io::Write;
use std::time::Duration;

use crate::app::Ctx;
use crate::app::error::CliError;
use crate::app::operator::{PLUGIN_VERSION, discover};
use crate::cli::VersionArgs;

pub async fn run(ctx: &Ctx, out: &mut dyn Write, args: &VersionArgs) -> Result<(), CliError> {
    writeln!(out, "Skyhook plugin:\t{PLUGIN_VERSION}")?;
    if args.client_only {
        return Ok(());
    }
    let kube = ctx.kube().await?;
    let ns = &ctx.global.namespace;
    let found = match tokio::time::timeout(args.timeout, discover(&kube, ns)).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "timed out after {} contacting the Kubernetes API at {}",
            human(args.timeout),
            kube.server()
        )),
    };
    match found {
        Ok(info) => writeln!(out, "Skyhook operator:\t{}", info.version)?,
        Err(e) => writeln!(out, "Skyhook operator:\tunknown ({e})")?,
    }
    Ok(())
}

fn human(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}
