//! `skyhook-operator`: the Skyhook operator binary.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, Parser, Subcommand};

// jemalloc returns freed memory to the system and keeps fewer per-thread arenas than glibc's
// malloc, which held a quarter of the operator's resident set at 200 nodes.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Rolls host packages out to Kubernetes nodes (Rust re-implementation of NVIDIA Skyhook).
#[derive(Debug, Parser)]
#[command(name = "skyhook-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

/// Subcommands. Each variant is handled by one function in `run_command`.
#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions (Skyhook, DeploymentPolicy) as multi-document YAML,
    /// or write them as files.
    Crd(CrdArgs),
    /// Run the operator: reconcile Skyhooks by running each package stage as a Job.
    ///
    /// Out of a cluster it uses --kubeconfig or KUBECONFIG; in a cluster, its ServiceAccount.
    /// Every setting also reads the reference operator's environment variable.
    Run(Box<RunArgs>),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config, then the in-cluster ServiceAccount).
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    #[command(flatten)]
    settings: skyhook::settings::Settings,
}

#[derive(Debug, Args)]
struct CrdArgs {
    /// Write one file per CRD into this directory (e.g. deploy/crds) instead of printing.
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        // No default action yet: show what is available instead of doing nothing silently.
        let mut cmd = Cli::command();
        let _ = cmd.print_help();
        return ExitCode::from(2);
    };
    match run_command(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Crd(args) => crd(&args),
        Command::Run(args) => run(*args),
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = args.settings.validate()?;
    skyhook::controller::start::init_tracing(&config);
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        let client = skyhook::controller::start::client(args.kubeconfig, args.context).await?;
        let version = format!("v{}", env!("CARGO_PKG_VERSION"));
        skyhook::controller::run(
            client,
            config,
            version,
            skyhook::controller::start::shutdown_signal(),
        )
        .await?;
        Ok(())
    })
}

fn crd(args: &CrdArgs) -> anyhow::Result<()> {
    match &args.write {
        Some(dir) => {
            for path in skyhook::crd::write_crds(dir)
                .with_context(|| format!("writing CRDs into {}", dir.display()))?
            {
                eprintln!("wrote {}", path.display());
            }
        }
        None => {
            let yaml = skyhook::crd::crds_yaml().context("generating CRDs")?;
            std::io::stdout()
                .lock()
                .write_all(yaml.as_bytes())
                .context("writing to stdout")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
