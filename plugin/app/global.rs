//! The flags every command accepts (kubectl's), and the duration syntax of flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use skyhook::schema::parse_go_duration;

use super::output::OutputFormat;
use super::sort::SortKey;

/// Namespace the operator runs in (reference default; the kubeconfig namespace is not used).
pub const DEFAULT_NAMESPACE: &str = "skyhook";

/// Help section of the flags every command accepts.
const GLOBAL: &str = "Global options";

/// Flags every command accepts, before or after the subcommand.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)
    #[arg(long, global = true, value_name = "PATH", help_heading = GLOBAL)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use
    #[arg(long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    pub context: Option<String>,

    /// The kubeconfig cluster to use
    #[arg(long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    pub cluster: Option<String>,

    /// The kubeconfig user to use
    #[arg(long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    pub user: Option<String>,

    /// The address and port of the Kubernetes API server (https:// unless a scheme is given)
    #[arg(short = 's', long, global = true, value_name = "URL", help_heading = GLOBAL)]
    pub server: Option<String>,

    /// Bearer token for the API server; replaces the kubeconfig user's credentials
    #[arg(long, global = true, value_name = "TOKEN", help_heading = GLOBAL)]
    pub token: Option<String>,

    /// User to impersonate, e.g. system:serviceaccount:<namespace>:<name>
    #[arg(long = "as", global = true, value_name = "USER", help_heading = GLOBAL)]
    pub as_user: Option<String>,

    /// Group to impersonate (repeatable; needs --as)
    #[arg(long = "as-group", global = true, value_name = "GROUP", requires = "as_user", help_heading = GLOBAL)]
    pub as_group: Vec<String>,

    /// Path to a PEM file of the certificate authority that signed the API server's certificate
    #[arg(long, global = true, value_name = "PATH", conflicts_with = "insecure_skip_tls_verify", help_heading = GLOBAL)]
    pub certificate_authority: Option<PathBuf>,

    /// Do not verify the API server's certificate (insecure)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub insecure_skip_tls_verify: bool,

    /// Namespace the Skyhook operator runs in
    #[arg(short = 'n', long, global = true, default_value = DEFAULT_NAMESPACE, value_name = "NAMESPACE", help_heading = GLOBAL)]
    pub namespace: String,

    /// Output format: table, wide, json, yaml or name (kind/name lines)
    #[arg(short = 'o', long = "output", global = true, value_name = "FORMAT", help_heading = GLOBAL)]
    pub output_arg: Option<String>,

    /// `-o` read as a format (every command but `debug collect`, where a path is deprecated).
    #[arg(skip)]
    pub output: OutputFormat,

    /// Print tables without their header line (and without the summary above them)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub no_headers: bool,

    /// Sort listings by a field of their JSON output, e.g. .status or .metadata.name (node
    /// list, node status, package status, jobs)
    #[arg(long, global = true, value_name = "JSONPATH", help_heading = GLOBAL)]
    pub sort_by: Option<String>,

    /// `--sort-by` checked against the command's fields.
    #[arg(skip)]
    pub sort_key: Option<SortKey>,

    /// Disable colours (also disabled by NO_COLOR or when stdout is not a terminal)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub no_color: bool,

    /// Time limit for each request to the API server, e.g. 30s or 1m ("0" waits forever)
    #[arg(long, global = true, value_name = "DURATION", default_value = "0", value_parser = parse_timeout, help_heading = GLOBAL)]
    pub request_timeout: Timeout,

    /// Print warnings, e.g. about nodes whose Skyhook annotations cannot be read
    #[arg(short = 'v', long, global = true, help_heading = GLOBAL)]
    pub verbose: bool,

    /// Show what would change without changing anything
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub dry_run: bool,

    /// The API the invocation prefers: NodeWrights when run as `kubectl nodewright`.
    #[arg(skip)]
    pub api: skyhook::schema::Api,

    /// `-n` was given (else `kubectl nodewright` looks for the operator in `nodewright`, then
    /// in `skyhook`, as upstream's CLI does).
    #[arg(skip)]
    pub namespace_given: bool,
}

/// A parsed `--request-timeout`; `None` means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout(pub Option<Duration>);

/// `--request-timeout` as kubectl reads it: `0` is no limit, a bare number is seconds.
pub fn parse_timeout(s: &str) -> Result<Timeout, String> {
    let d = parse_duration(s)?;
    Ok(Timeout((!d.is_zero()).then_some(d)))
}

/// Go duration syntax (`10s`, `1m30s`, `250ms`: the schema's one parser); a bare number means
/// seconds, as kubectl's `--request-timeout` accepts.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let invalid = || format!("invalid duration {s:?} (use e.g. 30s, 2m, 1h30m)");
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    parse_go_duration(s).map_err(|_| invalid())
}
