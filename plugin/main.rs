//! `kubectl-skyhook`: the Skyhook SRE plugin (`kubectl skyhook ...`).
//!
//! Reads node annotations and labels and Skyhook objects through the API server and patches
//! single annotation or label keys. Every failure is one line on stderr and exit code 1; usage
//! errors exit with 2.

mod cli;
mod completion;
mod debug;
mod error;
mod jobs;
mod kube;
mod lifecycle;
mod logs;
mod node;
mod output;
mod package;
mod rerun;
mod reset;
mod version;

use std::io::{self, Write};
use std::process::ExitCode;

use crate::cli::{
    Command, DebugCommand, GlobalArgs, NodeCommand, PackageCommand, Parsed, PolicyCommand,
};
use crate::error::{CliError, one_line};
use crate::kube::Kube;
use crate::lifecycle::Action;
use crate::output::Painter;

/// What every command gets: the global flags and the colour decision.
pub struct Ctx {
    pub global: GlobalArgs,
    pub painter: Painter,
}

impl Ctx {
    pub async fn kube(&self) -> Result<Kube, CliError> {
        Kube::connect(&self.global).await
    }

    /// A warning on stderr, shown only with `-v`.
    pub fn warn(&self, message: &str) {
        if self.global.verbose {
            eprintln!("Warning: {message}");
        }
    }

    #[cfg(test)]
    pub fn for_tests() -> Ctx {
        use clap::Parser;
        let cli = cli::Cli::parse_from(["kubectl-skyhook", "--no-color"]);
        Ctx {
            global: cli.global,
            painter: Painter::new(false),
        }
    }
}

fn main() -> ExitCode {
    // `COMPLETE=<shell> kubectl-skyhook -- <words>`: the shell scripts of `completion` ask for
    // candidates this way; answered before anything else is printed.
    clap_complete::CompleteEnv::with_factory(|| {
        <cli::Cli as clap::CommandFactory>::command().bin_name(completion::EXECUTABLE)
    })
    .var(completion::COMPLETE_VAR)
    .complete();
    let cli = match cli::parse(std::env::args_os().collect()) {
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
    let ctx = Ctx {
        painter: Painter::detect(cli.global.no_color),
        global: cli.global,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if cli.version {
        writeln!(out, "Skyhook plugin: {}", version::PLUGIN_VERSION).map_err(CliError::from)?;
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
        Command::Node(NodeCommand::List { skyhook }) => {
            node::list(&ctx, &mut out, &skyhook).await?
        }
        Command::Node(NodeCommand::Status { patterns, skyhook }) => {
            node::status(&ctx, &mut out, &patterns, skyhook.as_deref()).await?
        }
        Command::Node(NodeCommand::Ignore { patterns }) => {
            node::ignore(&ctx, &mut out, &patterns, true).await?
        }
        Command::Node(NodeCommand::Unignore { patterns }) => {
            node::ignore(&ctx, &mut out, &patterns, false).await?
        }
        Command::Node(NodeCommand::Reset {
            patterns,
            skyhook,
            confirm,
        }) => {
            let stdin = io::stdin();
            let mut input = stdin.lock();
            reset::nodes(&ctx, &mut out, &mut input, &patterns, &skyhook, confirm).await?
        }
        Command::Package(PackageCommand::Status {
            package,
            skyhook,
            nodes,
        }) => package::status(&ctx, &mut out, &package, &skyhook, &nodes).await?,
        Command::Package(PackageCommand::Rerun {
            package,
            skyhook,
            nodes,
            stage,
            confirm,
        }) => {
            let stdin = io::stdin();
            let mut input = stdin.lock();
            let target = rerun::Target {
                package: &package,
                skyhook: &skyhook,
                patterns: &nodes,
                stage,
            };
            rerun::run(&ctx, &mut out, &mut input, &target, confirm).await?
        }
        Command::Package(PackageCommand::Logs(args)) | Command::Logs(args) => {
            logs::run(&ctx, &mut out, &args).await?
        }
        Command::Reset(args) => {
            let stdin = io::stdin();
            let mut input = stdin.lock();
            reset::skyhook(&ctx, &mut out, &mut input, &args).await?
        }
        Command::DeploymentPolicy(PolicyCommand::Reset(args)) => {
            let stdin = io::stdin();
            let mut input = stdin.lock();
            reset::batch_state(&ctx, &mut out, &mut input, &args.name, args.confirm).await?
        }
        Command::Jobs(args) => jobs::run(&ctx, &mut out, &args).await?,
        Command::Debug(DebugCommand::Collect(args)) => {
            code = debug::collect(&ctx, &mut out, &args).await?
        }
        Command::Completion(args) => completion::run(&mut out, &args)?,
        Command::KubectlComplete { .. } => {}
    }
    out.flush().map_err(CliError::from)?;
    Ok(code)
}

async fn lifecycle_cmd(
    ctx: &Ctx,
    out: &mut dyn Write,
    action: Action,
    args: &cli::LifecycleArgs,
) -> Result<(), CliError> {
    let stdin = io::stdin();
    let mut input = stdin.lock();
    lifecycle::run(ctx, out, &mut input, action, args).await
}
