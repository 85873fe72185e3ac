//! `kubectl-skyhook`: the Skyhook SRE plugin (`kubectl skyhook ...`).
//!
//! Reads node annotations and labels and Skyhook objects through the API server and patches
//! single annotation or label keys. Every failure is one line on stderr and exit code 1; usage
//! errors exit with 2.

mod app;
mod cli;
mod commands;
mod usage;

use std::io::{self, Write};
use std::process::ExitCode;

use crate::app::Ctx;
use crate::app::error::{CliError, one_line};
use crate::app::kube::Kube;
use crate::app::operator::{self, PLUGIN_VERSION};
use crate::app::output::Painter;
use crate::cli::{Command, DebugCommand, NodeCommand, PackageCommand, Parsed, PolicyCommand};
use crate::commands::lifecycle::Action;
use crate::commands::{
    completion, debug, jobs, lifecycle, logs, man, node, package, plan, preview, release, rerun,
    reset, version,
};
use skyhook::schema;

fn main() -> ExitCode {
    // `COMPLETE=<shell> kubectl-skyhook -- <words>`: the shell scripts of `completion` ask for
    // candidates this way; answered before anything else is printed.
    clap_complete::CompleteEnv::with_factory(|| {
        <cli::Cli as clap::CommandFactory>::command().bin_name(completion::EXECUTABLE)
    })
    .var(completion::COMPLETE_VAR)
    .complete();
    let cli = match usage::parse(std::env::args_os().collect()) {
        Parsed::Run(cli) => cli,
        Parsed::Exit { text, code } => {
            if code == 0 {
                let _ = io::stdout().write_all(text.as_bytes());
            } else {
                let _ = io::stderr().write_all(text.as_bytes());
            }
            return ExitCode::from(code);
        }
    };
    // Completion lookups run their own short-lived runtime, so they must not start inside one.
    if let Some(Command::KubectlComplete { words }) = &cli.command {
        let stdout = io::stdout();
        return match completion::kubectl_complete(&mut stdout.lock(), words) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(*cli)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            // `kubectl skyhook node status | head` closing the pipe is not a failure.
            if let Some(CliError::Output(io)) = err.downcast_ref::<CliError>()
                && io.kind() == io::ErrorKind::BrokenPipe
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", one_line(&format!("{err:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Runs one command; the exit code (0, or `debug collect`'s partial-failure code).
async fn run(cli: cli::Cli) -> anyhow::Result<u8> {
    let mut global = cli.global;
    let looks_for_namespace = global.api == schema::Api::NodeWright
        && !global.namespace_given
        && cli.command.as_ref().is_some_and(Command::uses_namespace);
    if looks_for_namespace {
        let kube = Kube::connect(&global).await?;
        global.namespace = operator::nodewright_namespace(&kube).await;
    }
    let ctx = Ctx {
        painter: Painter::detect(global.no_color).without_headers(global.no_headers),
        named: cli
            .command
            .as_ref()
            .and_then(Command::named)
            .map(str::to_string),
        global,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if cli.version {
        writeln!(out, "Skyhook plugin: {}", PLUGIN_VERSION).map_err(CliError::from)?;
        return Ok(0);
    }
    let Some(command) = cli.command else {
        return Ok(0);
    };
    let mut code = 0;
    match command {
        Command::Version(args) => version::run(&ctx, &mut out, &args).await?,
        Command::Pause(args) => lifecycle_cmd(&ctx, &mut out, Action::Pause, &args).await?,
        Command::Resume(args) => lifecycle_cmd(&ctx, &mut out, Action::Resume, &args).await?,
        Command::Disable(args) => lifecycle_cmd(&ctx, &mut out, Action::Disable, &args).await?,
        Command::Enable(args) => lifecycle_cmd(&ctx, &mut out, Action::Enable, &args).await?,
        Command::Plan(args) => plan::run(&ctx, &mut out, &args).await?,
        Command::Release(args) => {
            release::run(&ctx, &mut out, &mut io::stdin().lock(), &args).await?
        }
        Command::Node(cmd) => node_cmd(&ctx, &mut out, cmd).await?,
        Command::Package(PackageCommand::Logs(args)) => logs::run(&ctx, &mut out, &args).await?,
        Command::Package(cmd) => package_cmd(&ctx, &mut out, cmd).await?,
        Command::Logs(args) => logs::run(&ctx, &mut out, &args).await?,
        Command::Reset(args) => {
            reset::skyhook(&ctx, &mut out, &mut io::stdin().lock(), &args).await?
        }
        Command::DeploymentPolicy(PolicyCommand::Reset(args)) => {
            reset::batch_state(
                &ctx,
                &mut out,
                &mut io::stdin().lock(),
                &args.name,
                args.confirm,
            )
            .await?
        }
        Command::DeploymentPolicy(PolicyCommand::Preview(args)) => {
            preview::run(&ctx, &mut out, &args.name).await?
        }
        Command::Jobs(args) => jobs::run(&ctx, &mut out, &args).await?,
        Command::Debug(DebugCommand::Collect(args)) => {
            code = debug::collect(&ctx, &mut out, &args).await?
        }
        Command::Completion(args) => completion::run(&mut out, &args)?,
        Command::KubectlComplete { .. } => {}
        Command::Man { dir } => man::run(&mut out, &dir)?,
    }
    out.flush().map_err(CliError::from)?;
    Ok(code)
}

async fn node_cmd(ctx: &Ctx, out: &mut dyn Write, cmd: NodeCommand) -> Result<(), CliError> {
    match cmd {
        NodeCommand::List { skyhook } => node::list(ctx, out, &skyhook).await?,
        NodeCommand::Status { patterns, skyhook } => {
            node::status(ctx, out, &patterns, skyhook.as_deref()).await?
        }
        NodeCommand::Ignore { patterns, confirm } => {
            let input = &mut io::stdin().lock();
            node::ignore(ctx, out, input, &patterns, true, confirm).await?
        }
        NodeCommand::Unignore { patterns, confirm } => {
            let input = &mut io::stdin().lock();
            node::ignore(ctx, out, input, &patterns, false, confirm).await?
        }
        NodeCommand::Reset {
            patterns,
            skyhook,
            confirm,
        } => {
            reset::nodes(
                ctx,
                out,
                &mut io::stdin().lock(),
                &patterns,
                &skyhook,
                confirm,
            )
            .await?
        }
    }
    Ok(())
}

async fn package_cmd(ctx: &Ctx, out: &mut dyn Write, cmd: PackageCommand) -> Result<(), CliError> {
    match cmd {
        PackageCommand::Status {
            package,
            skyhook,
            nodes,
        } => package::status(ctx, out, &package, &skyhook, &nodes).await?,
        PackageCommand::Rerun {
            package,
            skyhook,
            nodes,
            stage,
            confirm,
        } => {
            let target = rerun::Target {
                package: &package,
                skyhook: &skyhook,
                patterns: &nodes,
                stage,
            };
            rerun::run(ctx, out, &mut io::stdin().lock(), &target, confirm).await?
        }
        PackageCommand::Logs(args) => logs::run(ctx, out, &args).await?,
    }
    Ok(())
}

async fn lifecycle_cmd(
    ctx: &Ctx,
    out: &mut dyn Write,
    action: Action,
    args: &cli::LifecycleArgs,
) -> Result<(), CliError> {
    lifecycle::run(ctx, out, &mut io::stdin().lock(), action, args).await
}
