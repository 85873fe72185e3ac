//! Command line: global kubectl-style flags and the command tree. What a command line clap or
//! the plugin rejects gets (one line, exit 2) is in `crate::usage`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use skyhook::schema::Stage;

use clap_complete::engine::ArgValueCandidates;

use crate::app::complete as completion;
use crate::app::global::{GlobalArgs, parse_duration};

/// How kubectl finds plugins: `kubectl skyhook` runs `kubectl-skyhook`.
const PLUGIN_EXECUTABLE: &str = "kubectl-skyhook";
const PLUGIN_INVOCATION: &str = "kubectl skyhook";
/// The same binary under upstream v0.18's plugin name (a copy or a symlink): it prefers
/// NodeWrights.
const NODEWRIGHT_EXECUTABLE: &str = "kubectl-nodewright";
const NODEWRIGHT_INVOCATION: &str = "kubectl nodewright";

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-skyhook",
    about = "Skyhook SRE plugin",
    long_about = "Skyhook SRE plugin\n\nkubectl-compatible helper for managing Skyhook deployments.",
    disable_version_flag = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    /// Print the plugin version and exit
    #[arg(long = "version")]
    pub version: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show plugin and Skyhook operator versions
    Version(VersionArgs),
    /// Pause a Skyhook: the operator starts no new work (running stages finish)
    #[command(
        after_help = "Examples:\n  kubectl skyhook pause gpu-init\n  kubectl skyhook pause gpu-init --confirm\n  kubectl skyhook pause gpu-init --dry-run"
    )]
    Pause(LifecycleArgs),
    /// Resume a paused Skyhook
    Resume(LifecycleArgs),
    /// Disable a Skyhook completely
    Disable(LifecycleArgs),
    /// Enable a disabled Skyhook
    Enable(LifecycleArgs),
    /// Hand a Skyhook its NodeWright took over back to the legacy engine, once no NodeWright of
    /// its name exists; says first what its next pass would run
    #[command(
        after_help = "Examples:\n  kubectl skyhook release gpu-init --dry-run\n  kubectl skyhook release gpu-init --confirm"
    )]
    Release(LifecycleArgs),
    /// Dry run of a new or changed Skyhook, NodeWright or DeploymentPolicy against the live
    /// cluster: the operator's own planner shows the nodes selected, what each runs and why,
    /// the cordons, drains and batches, and how long it would take. Nothing is written.
    #[command(
        after_help = "Examples:\n  kubectl skyhook plan -f gpu-init.yaml\n  kubectl skyhook plan -f gpu-init-v2.yaml --against gpu-init\n  kubectl skyhook plan -f policy.yaml -o json"
    )]
    Plan(PlanArgs),
    /// Inspect and manage nodes targeted by Skyhooks
    #[command(subcommand, subcommand_required = true, arg_required_else_help = true)]
    Node(NodeCommand),
    /// Inspect packages across nodes
    #[command(subcommand, subcommand_required = true, arg_required_else_help = true)]
    Package(PackageCommand),
    /// Remove a Skyhook's package state from every node (and reset its batch state) so every
    /// package runs again
    #[command(
        after_help = "Examples:\n  kubectl skyhook reset gpu-init --dry-run\n  kubectl skyhook reset gpu-init --confirm\n  kubectl skyhook reset gpu-init --skip-batch-reset -y"
    )]
    Reset(ResetArgs),
    /// DeploymentPolicy rollout state of a Skyhook
    #[command(
        subcommand,
        visible_alias = "dp",
        subcommand_required = true,
        arg_required_else_help = true
    )]
    DeploymentPolicy(PolicyCommand),
    /// List the Jobs of a rollout: every stage and attempt, with its outcome
    #[command(
        after_help = "Examples:\n  kubectl skyhook jobs --resource-id \"$SKYHOOK_RESOURCE_ID\"\n  kubectl skyhook jobs --skyhook gpu-init --node worker-1 --package tuning\n  kubectl skyhook jobs --skyhook gpu-init -o wide"
    )]
    Jobs(JobsArgs),
    /// Print the logs of a package's stage Jobs on a node, in stage order
    #[command(
        after_help = "Examples:\n  kubectl skyhook logs tuning --node worker-1\n  kubectl skyhook logs tuning --node worker-1 --skyhook gpu-init --stage config\n  kubectl skyhook logs tuning --node worker-1 -f"
    )]
    Logs(LogsArgs),
    /// Support tools
    #[command(subcommand, subcommand_required = true, arg_required_else_help = true)]
    Debug(DebugCommand),
    /// Print a shell completion script (bash, zsh, fish), or write kubectl's plugin completion
    /// helper (kubectl-plugin)
    #[command(
        after_help = "Examples:\n  source <(kubectl-skyhook completion bash)\n  kubectl-skyhook completion zsh > \"${fpath[1]}/_kubectl-skyhook\"\n  kubectl-skyhook completion fish > ~/.config/fish/completions/kubectl-skyhook.fish\n  kubectl-skyhook completion kubectl-plugin --dir ~/.local/bin   # kubectl skyhook <TAB>"
    )]
    Completion(CompletionArgs),
    /// Completion protocol of kubectl plugins (called by kubectl_complete-skyhook)
    #[command(name = "__complete", hide = true)]
    KubectlComplete {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        words: Vec<String>,
    },
    /// Write the man pages, one per command, into DIR (run by release/build-archives)
    #[command(name = "__man", hide = true)]
    Man {
        /// Directory to write the pages into (created if missing)
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// Name of the Skyhook
    #[arg(value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
    pub name: String,

    /// Skip the confirmation prompt
    #[arg(short = 'y', long)]
    pub confirm: bool,

    /// Keep the DeploymentPolicy batch state (compartment statuses)
    #[arg(long)]
    pub skip_batch_reset: bool,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Reset every compartment's batch state so the rollout starts again from batch 1
    #[command(
        after_help = "Examples:\n  kubectl skyhook deployment-policy reset gpu-init --dry-run\n  kubectl skyhook dp reset gpu-init -y"
    )]
    Reset(LifecycleArgs),
    /// Show how a Skyhook's rollout is cut: each compartment's nodes, ceiling, strategy, batch
    /// state and the batch at work or starting next, as the operator's planner computes it now
    #[command(
        after_help = "Examples:\n  kubectl skyhook deployment-policy preview gpu-init\n  kubectl skyhook dp preview gpu-init -o wide\n  kubectl skyhook dp preview gpu-init -o json"
    )]
    Preview(PreviewArgs),
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The manifest to plan, `-` for stdin: Skyhooks, NodeWrights and DeploymentPolicies, one or
    /// more YAML documents. A file with policies only plans the stored objects that use them.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: String,
    /// Plan the file's object as the next version of this stored one (its status, node state
    /// and policy) instead of the object of the file's name
    #[arg(long, value_name = "NAME", add = ArgValueCandidates::new(completion::skyhooks))]
    pub against: Option<String>,
}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// Name of the Skyhook
    #[arg(value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// A SKYHOOK_RESOURCE_ID (from a package pod's environment or a Job's
    /// skyhook.nvidia.com/resource-id annotation)
    #[arg(long, value_name = "ID", required_unless_present = "skyhook")]
    pub resource_id: Option<String>,

    /// Name of the Skyhook
    #[arg(long, visible_alias = "nodewright", value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
    pub skyhook: Option<String>,

    /// Only Jobs on this node
    #[arg(long, value_name = "NODE", add = ArgValueCandidates::new(completion::nodes))]
    pub node: Option<String>,

    /// Only Jobs of this package
    #[arg(long, value_name = "PACKAGE", add = ArgValueCandidates::new(completion::packages))]
    pub package: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// Package name
    #[arg(value_name = "PACKAGE", add = ArgValueCandidates::new(completion::packages))]
    pub package: String,

    /// Node name or regex pattern (default: every node the package ran on)
    #[arg(long, value_name = "NODE-PATTERN", add = ArgValueCandidates::new(completion::nodes))]
    pub node: Option<String>,

    /// Name of the Skyhook (default: any Skyhook with this package on the node)
    #[arg(long, visible_alias = "nodewright", value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
    pub skyhook: Option<String>,

    /// Only this stage
    #[arg(long, value_name = "STAGE", value_parser = parse_any_stage)]
    pub stage: Option<Stage>,

    /// Stream the running stage, then each following stage, until the package completes or
    /// errors
    #[arg(short = 'f', long)]
    pub follow: bool,

    /// Lines of recent log to show per container (-1: all)
    #[arg(long, default_value_t = -1, allow_negative_numbers = true, value_name = "N")]
    pub tail: i64,

    /// Only logs newer than this duration, e.g. 5m or 1h
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<Duration>,

    /// Prefix each line with its timestamp
    #[arg(long)]
    pub timestamps: bool,

    /// Logs of the previous instance of each container
    #[arg(short = 'p', long)]
    pub previous: bool,

    /// Every attempt of each stage (default: the newest attempt)
    #[arg(long)]
    pub all_attempts: bool,
}

#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Collect a support archive (.tar.gz): Skyhooks, node state, Jobs, pods, logs, Events,
    /// the operator's Deployment, logs and metrics
    #[command(
        after_help = "Examples:\n  kubectl skyhook debug collect\n  kubectl skyhook debug collect --skyhook gpu-init --node 'worker-.*' --output-file ticket-1234.tar.gz\n  kubectl skyhook debug collect --since 2h --max-log-bytes 1048576\n\nExit codes: 0 everything was collected; 3 the archive was written but some pieces failed\n(see the *-errors.json files and manifest.json inside); 1 no archive was written."
    )]
    Collect(CollectArgs),
}

#[derive(Debug, Args)]
pub struct CollectArgs {
    /// Where to write the archive (default: skyhook-debug-<time>.tar.gz in the current
    /// directory); `-o <path>` still works but is deprecated
    #[arg(long, value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
    pub output_file: Option<PathBuf>,

    /// Only this Skyhook (default: every Skyhook)
    #[arg(long, visible_alias = "nodewright", value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
    pub skyhook: Option<String>,

    /// Only nodes matching this name or regex pattern (repeatable; default: every node a
    /// collected Skyhook has state or Jobs on)
    #[arg(long = "node", value_name = "NODE-PATTERN", add = ArgValueCandidates::new(completion::nodes))]
    pub nodes: Vec<String>,

    /// Only logs and Events newer than this duration, e.g. 2h
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<Duration>,

    /// Most bytes of log kept per container (the newest are kept)
    #[arg(long, value_name = "BYTES", default_value_t = 5 * 1024 * 1024)]
    pub max_log_bytes: u64,

    /// Do not redact: the archive then includes secrets as the cluster holds them, in env
    /// values, package configMap contents, stage and operator logs, Job and Event messages
    /// (default: scrubbed, best effort; redaction.txt in the archive lists what). Prints a
    /// warning
    #[arg(long)]
    pub no_redact: bool,
}

/// Shells `completion` writes scripts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
    /// The `kubectl_complete-skyhook` helper kubectl runs for `kubectl skyhook <TAB>`
    KubectlPlugin,
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// Shell
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: CompletionShell,

    /// kubectl-plugin: directory to write kubectl_complete-skyhook into (a directory on
    /// PATH; default: the directory of this executable)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Only print the plugin version, without querying the cluster
    #[arg(long)]
    pub client_only: bool,

    /// Time limit for discovering the operator version
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct LifecycleArgs {
    /// Name of the Skyhook
    #[arg(value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
    pub name: String,

    /// Skip the confirmation prompt
    #[arg(short = 'y', long)]
    pub confirm: bool,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List the nodes a Skyhook has state on, with a per-node summary
    List {
        /// Name of the Skyhook
        #[arg(long, visible_alias = "nodewright", value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
        skyhook: String,
    },
    /// Show all Skyhook activity on nodes (names or anchored regexes; default: every node)
    #[command(
        after_help = "Examples:\n  kubectl skyhook node status\n  kubectl skyhook node status worker-1 'gpu-.*' --skyhook gpu-init\n  kubectl skyhook node status worker-1 -o wide"
    )]
    Status {
        /// Node names or regex patterns
        #[arg(value_name = "NODE-PATTERN", add = ArgValueCandidates::new(completion::nodes))]
        patterns: Vec<String>,
        /// Only show this Skyhook
        #[arg(long, visible_alias = "nodewright", value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
        skyhook: Option<String>,
    },
    /// Make every Skyhook skip node(s) (label skyhook.nvidia.com/ignore=true)
    Ignore {
        /// Node names or regex patterns
        #[arg(value_name = "NODE-PATTERN", add = ArgValueCandidates::new(completion::nodes), required = true)]
        patterns: Vec<String>,
        /// Skip the confirmation prompt
        #[arg(short = 'y', long)]
        confirm: bool,
    },
    /// Remove the ignore label from node(s)
    Unignore {
        /// Node names or regex patterns
        #[arg(value_name = "NODE-PATTERN", add = ArgValueCandidates::new(completion::nodes), required = true)]
        patterns: Vec<String>,
        /// Skip the confirmation prompt
        #[arg(short = 'y', long)]
        confirm: bool,
    },
    /// Remove a Skyhook's package state from node(s) so every package re-runs
    #[command(
        after_help = "Examples:\n  kubectl skyhook node reset worker-1 --skyhook gpu-init\n  kubectl skyhook node reset 'gpu-.*' --skyhook gpu-init --confirm"
    )]
    Reset {
        /// Node names or regex patterns
        #[arg(value_name = "NODE-PATTERN", add = ArgValueCandidates::new(completion::nodes), required = true)]
        patterns: Vec<String>,
        /// Name of the Skyhook
        #[arg(long, visible_alias = "nodewright", value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
        skyhook: String,
        /// Skip the confirmation prompt
        #[arg(short = 'y', long)]
        confirm: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PackageCommand {
    /// Show a package's stage and state on every node
    #[command(
        after_help = "Examples:\n  kubectl skyhook package status tuning --skyhook gpu-init\n  kubectl skyhook package status tuning --skyhook gpu-init --node 'worker-.*' -o json"
    )]
    Status {
        /// Package name (all versions are shown)
        #[arg(value_name = "PACKAGE", add = ArgValueCandidates::new(completion::packages))]
        package: String,
        /// Name of the Skyhook
        #[arg(long, visible_alias = "nodewright", value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
        skyhook: String,
        /// Node name or regex pattern (repeatable)
        #[arg(long = "node", value_name = "NODE-PATTERN", add = ArgValueCandidates::new(completion::nodes))]
        nodes: Vec<String>,
    },
    /// Make a package run again on node(s), from the start or from one stage
    #[command(
        after_help = "Examples:\n  kubectl skyhook package rerun tuning --skyhook gpu-init --node worker-1\n  kubectl skyhook package rerun tuning --skyhook gpu-init --node 'worker-.*' --stage config -y"
    )]
    Rerun {
        /// Package name
        #[arg(value_name = "PACKAGE", add = ArgValueCandidates::new(completion::packages))]
        package: String,
        /// Name of the Skyhook
        #[arg(long, visible_alias = "nodewright", value_name = "SKYHOOK", add = ArgValueCandidates::new(completion::skyhooks))]
        skyhook: String,
        /// Node name or regex pattern (repeatable, at least one)
        #[arg(long = "node", value_name = "NODE-PATTERN", add = ArgValueCandidates::new(completion::nodes), required = true)]
        nodes: Vec<String>,
        /// Re-run from this stage (apply, config, interrupt, post-interrupt) instead of from
        /// the start
        #[arg(long, value_name = "STAGE", value_parser = parse_rerun_stage)]
        stage: Option<Stage>,
        /// Skip the confirmation prompt
        #[arg(short = 'y', long)]
        confirm: bool,
    },
    /// Print a package's stage logs (same as `kubectl skyhook logs`)
    Logs(LogsArgs),
}

/// What parsing the command line ended in.
pub enum Parsed {
    Run(Box<Cli>),
    /// Help or usage errors: print `text` (to stdout when `code` is 0) and exit with `code`.
    Exit {
        text: String,
        code: u8,
    },
}

/// `kubectl-skyhook` is shown as `kubectl skyhook`; any other executable name as itself.
pub fn display_name(argv0: Option<&OsString>) -> String {
    let file = argv0
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
    match file.as_deref() {
        None | Some(PLUGIN_EXECUTABLE) => PLUGIN_INVOCATION.to_string(),
        Some(NODEWRIGHT_EXECUTABLE) => NODEWRIGHT_INVOCATION.to_string(),
        Some(other) => other.to_string(),
    }
}

/// The API an invocation prefers: NodeWrights under upstream v0.18's name.
pub fn preferred_api(display_name: &str) -> skyhook::schema::Api {
    if display_name.contains("nodewright") {
        skyhook::schema::Api::NodeWright
    } else {
        skyhook::schema::Api::Skyhook
    }
}

impl Command {
    /// The Skyhook or NodeWright the command names, if any: the command works in the API that
    /// holds it.
    pub fn named(&self) -> Option<&str> {
        match self {
            Command::Pause(a) | Command::Resume(a) | Command::Disable(a) | Command::Enable(a) => {
                Some(&a.name)
            }
            Command::Reset(a) => Some(&a.name),
            Command::DeploymentPolicy(PolicyCommand::Reset(a)) => Some(&a.name),
            Command::DeploymentPolicy(PolicyCommand::Preview(a)) => Some(&a.name),
            Command::Node(NodeCommand::List { skyhook }) => Some(skyhook),
            Command::Node(NodeCommand::Status { skyhook, .. }) => skyhook.as_deref(),
            Command::Node(NodeCommand::Reset { skyhook, .. }) => Some(skyhook),
            Command::Package(PackageCommand::Status { skyhook, .. })
            | Command::Package(PackageCommand::Rerun { skyhook, .. }) => Some(skyhook),
            Command::Package(PackageCommand::Logs(a)) | Command::Logs(a) => a.skyhook.as_deref(),
            Command::Jobs(a) => a.skyhook.as_deref(),
            Command::Debug(DebugCommand::Collect(a)) => a.skyhook.as_deref(),
            _ => None,
        }
    }

    /// Whether the command talks to the cluster's operator namespace (so `kubectl nodewright`
    /// looks for it first).
    pub fn uses_namespace(&self) -> bool {
        !matches!(
            self,
            Command::Version(VersionArgs {
                client_only: true,
                ..
            }) | Command::Completion(_)
                | Command::KubectlComplete { .. }
                | Command::Man { .. }
        )
    }
}

/// A stage name, any of the six.
fn parse_any_stage(s: &str) -> Result<Stage, String> {
    s.parse::<Stage>().map_err(|_| {
        let all: Vec<&str> = Stage::ALL.iter().map(|s| s.as_str()).collect();
        format!("invalid stage {s:?}: must be one of {}", all.join(", "))
    })
}

/// A stage `package rerun` can restart from (the reference's list).
fn parse_rerun_stage(s: &str) -> Result<Stage, String> {
    const RERUN: [Stage; 4] = [
        Stage::Apply,
        Stage::Config,
        Stage::Interrupt,
        Stage::PostInterrupt,
    ];
    match s.parse::<Stage>() {
        Ok(stage) if RERUN.contains(&stage) => Ok(stage),
        _ => Err(format!(
            "invalid stage {s:?}: must be one of apply, config, interrupt, post-interrupt"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::global::{DEFAULT_NAMESPACE, Timeout, parse_timeout};
    use crate::app::output::OutputFormat;
    use crate::usage::parse;
    use crate::usage::tests::{args, exit_of, run_of};
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("10x").is_err());
        assert_eq!(parse_timeout("0"), Ok(Timeout(None)));
        assert_eq!(
            parse_timeout("2s"),
            Ok(Timeout(Some(Duration::from_secs(2))))
        );
    }

    #[test]
    fn invoked_as_kubectl_plugin() {
        assert_eq!(
            display_name(Some(&OsString::from("/usr/local/bin/kubectl-skyhook"))),
            "kubectl skyhook"
        );
        assert_eq!(display_name(Some(&OsString::from("./skyhook"))), "skyhook");
        let (help, code) = exit_of(&["kubectl-skyhook", "--help"]);
        assert_eq!(code, 0);
        assert!(
            help.contains("Usage: kubectl skyhook [OPTIONS] [COMMAND]"),
            "{help}"
        );
        assert!(help.contains("kubectl-compatible helper for managing Skyhook deployments."));
    }

    #[test]
    fn global_flags_anywhere() {
        let Parsed::Run(cli) = parse(args(&[
            "kubectl-skyhook",
            "node",
            "status",
            "node-1",
            "-o",
            "JSON",
            "--namespace",
            "ops",
            "--no-color",
            "--request-timeout",
            "5s",
        ])) else {
            panic!("did not parse");
        };
        assert_eq!(cli.global.output, OutputFormat::Json);
        assert_eq!(cli.global.namespace, "ops");
        assert!(cli.global.no_color);
        assert_eq!(
            cli.global.request_timeout,
            Timeout(Some(Duration::from_secs(5)))
        );
        let Parsed::Run(cli) = parse(args(&["kubectl-skyhook", "pause", "sh", "-y"])) else {
            panic!("did not parse");
        };
        assert_eq!(cli.global.namespace, DEFAULT_NAMESPACE);
        assert!(
            matches!(cli.command, Some(Command::Pause(LifecycleArgs { ref name, confirm: true })) if name == "sh")
        );
    }

    /// Every command form of the reference plugin (spec §8.8) parses with the same flags.
    #[test]
    fn reference_command_lines_parse() {
        for line in [
            "version",
            "version --client-only --timeout 5s",
            "pause sh",
            "pause sh -y",
            "resume sh --confirm",
            "disable sh -y --dry-run",
            "enable sh -y",
            "reset sh",
            "reset sh -y --skip-batch-reset",
            "deployment-policy reset sh -y",
            "dp reset sh --confirm",
            "node list --skyhook sh",
            "node list --skyhook sh -o wide",
            "node status",
            "node status worker-1 gpu-.* --skyhook sh -o json",
            "node reset worker-1 --skyhook sh -y",
            "node ignore worker-1 worker-2",
            "node unignore gpu-.* --dry-run",
            "package status pkg --skyhook sh --node a --node b -o yaml",
            "package rerun pkg --skyhook sh --node a --node b --stage config -y",
            "package logs pkg --skyhook sh --node a --stage apply -f --tail 10",
            "package logs pkg --skyhook sh",
            "-n ops --context c --kubeconfig /k --request-timeout 30s -v node status",
        ] {
            let mut argv = vec!["kubectl-skyhook"];
            argv.extend(line.split_whitespace());
            match parse(args(&argv)) {
                Parsed::Run(_) => {}
                Parsed::Exit { text, code } => panic!("{line}: exit {code}: {text}"),
            }
        }
        let (text, code) = exit_of(&["kubectl-skyhook", "package", "rerun", "p", "--skyhook", "s"]);
        assert_eq!(code, 2);
        assert!(text.contains("--node <NODE-PATTERN>"), "{text}");
    }

    #[test]
    fn kubectl_connection_flags() {
        let cli = run_of(&[
            "kubectl-skyhook",
            "node",
            "status",
            "--cluster",
            "c",
            "--user",
            "u",
            "-s",
            "https://k:6443",
            "--token",
            "t",
            "--as",
            "system:serviceaccount:ns:sa",
            "--as-group",
            "g1",
            "--as-group=g2",
            "--certificate-authority",
            "/ca.crt",
        ]);
        let g = &cli.global;
        assert_eq!(g.cluster.as_deref(), Some("c"));
        assert_eq!(g.user.as_deref(), Some("u"));
        assert_eq!(g.server.as_deref(), Some("https://k:6443"));
        assert_eq!(g.token.as_deref(), Some("t"));
        assert_eq!(g.as_user.as_deref(), Some("system:serviceaccount:ns:sa"));
        assert_eq!(g.as_group, ["g1", "g2"]);
        assert_eq!(g.certificate_authority, Some(PathBuf::from("/ca.crt")));
        assert!(!g.insecure_skip_tls_verify);
        let cli = run_of(&[
            "kubectl-skyhook",
            "--server=k:6443",
            "--insecure-skip-tls-verify",
            "version",
        ]);
        assert!(cli.global.insecure_skip_tls_verify);
        assert_eq!(cli.global.server.as_deref(), Some("k:6443"));

        let (text, code) = exit_of(&["kubectl-skyhook", "node", "status", "--as-group", "g"]);
        assert_eq!(code, 2);
        assert!(text.contains("--as <USER>"), "{text}");
        let (text, code) = exit_of(&[
            "kubectl-skyhook",
            "node",
            "status",
            "--certificate-authority",
            "/ca",
            "--insecure-skip-tls-verify",
        ]);
        assert_eq!(code, 2);
        assert!(text.contains("cannot be used with"), "{text}");
    }

    #[test]
    fn bare_invocation_prints_help() {
        let (text, code) = exit_of(&["kubectl-skyhook"]);
        assert_eq!(code, 0);
        assert!(text.contains("Skyhook SRE plugin"));
        let Parsed::Run(cli) = parse(args(&["kubectl-skyhook", "--version"])) else {
            panic!("did not parse");
        };
        assert!(cli.version && cli.command.is_none());
    }
}
