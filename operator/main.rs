//! `skyhook-operator`: the Skyhook operator binary.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, Parser, Subcommand};

// jemalloc returns freed memory to the system and keeps fewer per-thread arenas than glibc's
// malloc, which held a quarter of the operator's resident set at 200 nodes.
#[cfg(not(feature = "heap-profile"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// One arena instead of four per core: memory a worker thread frees is reused by the other
// (peak 54 -> 45 MiB at 300 nodes); a background thread returns unused pages within a second.
// `_RJEM_MALLOC_CONF` in the environment still overrides any of these.
#[cfg(not(feature = "heap-profile"))]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 70] =
    b"narenas:1,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// Rolls host packages out to Kubernetes nodes (Rust re-implementation of NVIDIA Skyhook).
#[derive(Debug, Parser)]
#[command(
    name = "skyhook-operator",
    version,
    about,
    after_help = "With no subcommand, or options first (`skyhook-operator --leader-elect`), it \
                  runs the operator as `run` does: what the reference's /manager does, so its \
                  manifests work with only the image changed."
)]
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
    /// Write the man pages (`skyhook-operator.1`, one per subcommand) into DIR; run by
    /// release/build-archives.
    #[command(name = "__man", hide = true)]
    Man {
        /// Directory to write the pages into (created if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
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
    // Written when main returns: the operator must stop on SIGTERM, not be killed.
    #[cfg(feature = "heap-profile")]
    let _profiler = dhat::Profiler::new_heap();
    let cli = Cli::parse_from(default_to_run(std::env::args_os().collect()));
    let Some(command) = cli.command else {
        // Unreachable: `default_to_run` names a subcommand unless help or version was asked for,
        // and clap exits for those.
        let _ = Cli::command().print_help();
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

/// The reference's image runs `/manager` with no arguments (its settings all come from the
/// environment), and kubebuilder-style manifests add flags such as `--leader-elect`: both mean
/// `run`. So with no arguments, or an option first that is not help or version, `run` is put in
/// front; a first word (a subcommand, or a typo clap reports) is left alone.
fn default_to_run(mut args: Vec<OsString>) -> Vec<OsString> {
    if args.is_empty() {
        // execve with an empty argv: clap reads the first argument as the program's name.
        args.push(OsString::from("skyhook-operator"));
    }
    let first = args.get(1).map(|a| a.to_string_lossy().into_owned());
    let runs = match first.as_deref() {
        None => true,
        Some("-h" | "--help" | "-V" | "--version") => false,
        Some(a) => a.starts_with('-'),
    };
    if runs {
        args.insert(1, OsString::from("run"));
    }
    args
}

fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Crd(args) => crd(&args),
        Command::Run(args) => run(*args),
        Command::Man { dir } => {
            for path in man_pages(&dir)? {
                eprintln!("wrote {}", path.display());
            }
            Ok(())
        }
    }
}

/// One roff page per visible command (`clap_mangen`), written into `dir`; parents first.
fn man_pages(dir: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
    fn write(
        cmd: clap::Command,
        dir: &std::path::Path,
        out: &mut Vec<PathBuf>,
    ) -> std::io::Result<()> {
        let man = clap_mangen::Man::new(cmd.clone())
            .source(format!("skyhook {}", env!("CARGO_PKG_VERSION")))
            .manual("Skyhook operator");
        let path = dir.join(man.get_filename());
        let mut page = Vec::new();
        man.render(&mut page)?;
        std::fs::write(&path, page)?;
        out.push(path);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            write(sub.clone(), dir, out)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write(cmd, dir, &mut written)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    Ok(written)
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = args.settings.validate()?;
    skyhook::controller::process::startup::init_tracing(&config);
    if config.planted.skip_cordon {
        tracing::warn!(
            "{}=skip-cordon: interrupts run on schedulable nodes (a planted bug for the fault campaign's checker)",
            skyhook::settings::Planted::VARIABLE
        );
    }
    // One thread: a pass is a few milliseconds of planning between watch events, and with a
    // worker per core, waking the other worker (futexes, context switches) was a fifth of the
    // operator's CPU at 300 nodes.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let client =
            skyhook::controller::process::startup::client(args.kubeconfig, args.context).await?;
        let version = format!("v{}", env!("CARGO_PKG_VERSION"));
        skyhook::controller::run(
            client,
            config,
            version,
            skyhook::controller::process::startup::shutdown_signal(),
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

    #[test]
    fn man_pages_cover_every_visible_command() {
        let dir = tempfile::tempdir().expect("temp dir");
        let target = dir.path().join("man1");
        let Some(Command::Man { dir: got }) = parse(&["x", "__man", &target.display().to_string()])
            .expect("__man parses")
            .command
        else {
            panic!("`__man <dir>` is not the man command");
        };
        let mut names: Vec<String> = man_pages(&got)
            .expect("pages")
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "skyhook-operator-crd.1",
                "skyhook-operator-run.1",
                "skyhook-operator.1"
            ]
        );
        let run = std::fs::read_to_string(target.join("skyhook-operator-run.1")).expect("run page");
        assert!(run.contains(".TH skyhook-operator-run 1"), "{run}");
        assert!(run.contains("\\-\\-kubeconfig"), "{run}");
        assert!(
            run.contains(concat!("skyhook ", env!("CARGO_PKG_VERSION"))),
            "{run}"
        );
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let args = args.iter().map(OsString::from).collect();
        Cli::try_parse_from(default_to_run(args))
    }

    fn run_args(args: &[&str]) -> RunArgs {
        match parse(args).expect("parses").command {
            Some(Command::Run(run)) => *run,
            other => panic!("{args:?} parsed as {other:?}, not `run`"),
        }
    }

    #[test]
    fn no_arguments_runs_the_operator() {
        // The image's entrypoint is `/manager` with no arguments, as the reference's is.
        run_args(&["/manager"]);
        // Not even a program name (execve with an empty argv).
        assert!(matches!(
            Cli::try_parse_from(default_to_run(Vec::new())).map(|c| c.command),
            Ok(Some(Command::Run(_)))
        ));
    }

    #[test]
    fn the_reference_flags_run_the_operator() {
        // What kubebuilder-scaffolded manifests pass to /manager.
        let run = run_args(&[
            "/manager",
            "--leader-elect",
            "--health-probe-bind-address=:9091",
            "--metrics-bind-address",
            "127.0.0.1:9090",
        ]);
        assert!(run.settings.leader_election);
        assert_eq!(run.settings.serving.health_probe_bind_address, ":9091");
        assert_eq!(run.settings.serving.metrics_bind_address, "127.0.0.1:9090");
        for (flag, on) in [
            ("--leader-elect=false", false),
            ("--leader-elect=true", true),
            ("--leader-election", true),
            ("--leader-election=false", false),
        ] {
            let run = run_args(&["/manager", flag, "--log-level=debug"]);
            assert_eq!(run.settings.leader_election, on, "{flag}");
            assert_eq!(run.settings.log_level, "debug", "{flag}");
        }
        // The existing spelling with a separate value still works.
        let leader = |value| run_args(&["x", "run", "--leader-election", value]);
        assert!(leader("true").settings.leader_election);
        assert!(!leader("false").settings.leader_election);
    }

    #[test]
    fn subcommands_help_and_version_are_left_alone() {
        assert!(matches!(
            parse(&["x", "crd"]).expect("crd").command,
            Some(Command::Crd(_))
        ));
        run_args(&["x", "run", "--namespace=other"]);
        for (flag, kind) in [
            ("--version", clap::error::ErrorKind::DisplayVersion),
            ("-V", clap::error::ErrorKind::DisplayVersion),
            ("--help", clap::error::ErrorKind::DisplayHelp),
            ("-h", clap::error::ErrorKind::DisplayHelp),
        ] {
            let err = parse(&["x", flag]).expect_err(flag);
            assert_eq!(err.kind(), kind, "{flag}");
        }
        let err = parse(&["x", "rnu"]).expect_err("a typo is an error, not `run`");
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidSubcommand);
    }
}
