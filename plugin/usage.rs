//! Usage errors: a command line clap accepts but the plugin does not, and clap's own errors
//! folded into one line. All of them exit with code 2.

use std::ffi::{OsStr, OsString};

use clap::{CommandFactory, FromArgMatches};

use clap::error::ErrorKind;

use crate::app::global::GlobalArgs;
use crate::app::output::OutputFormat;
use crate::app::sort::Sortable;
use crate::cli::{
    Cli, Command, DebugCommand, NodeCommand, PackageCommand, Parsed, display_name, preferred_api,
};
use crate::commands::jobs::JobRow;
use crate::commands::node::{NodeListEntry, NodeSkyhookSummary};
use crate::commands::package::NodePackageStatus;

/// `-o` is a format for every command but `debug collect`, where it is the deprecated spelling
/// of `--output-file`; clap cannot give one global flag two types, so the format is checked
/// here, with clap's own error.
pub fn resolve_output(cmd: &clap::Command, cli: &mut Cli) -> Result<(), clap::Error> {
    if let Some(Command::Debug(DebugCommand::Collect(args))) = &cli.command {
        if args.output_file.is_some() && cli.global.output_arg.is_some() {
            return Err(cmd.clone().error(
                ErrorKind::ArgumentConflict,
                "the argument '--output-file <PATH>' cannot be used with '--output <PATH>'",
            ));
        }
        return Ok(());
    }
    let Some(raw) = cli.global.output_arg.as_deref() else {
        return Ok(());
    };
    let arg = cmd
        .get_arguments()
        .find(|a| a.get_id() == "output_arg")
        .cloned()
        .unwrap_or_else(|| clap::Arg::new("output_arg").long("output"))
        .value_name("FORMAT")
        .ignore_case(true);
    let parser = clap::builder::EnumValueParser::<OutputFormat>::new();
    cli.global.output =
        clap::builder::TypedValueParser::parse_ref(&parser, cmd, Some(&arg), OsStr::new(raw))?;
    Ok(())
}

/// The listings that take `-o name` and `--sort-by`, for the error that names them.
const LISTINGS: &str = "node list, node status, package status and jobs";

/// A listing's command words and its rows' fields; each row type owns its list so that a
/// renamed JSON field and its `--sort-by` name change together.
fn listing(command: Option<&Command>) -> Option<(&'static str, Sortable)> {
    match command? {
        Command::Node(NodeCommand::List { .. }) => Some(("node list", NodeListEntry::SORTABLE)),
        Command::Node(NodeCommand::Status { .. }) => {
            Some(("node status", NodeSkyhookSummary::SORTABLE))
        }
        Command::Package(PackageCommand::Status { .. }) => {
            Some(("package status", NodePackageStatus::SORTABLE))
        }
        Command::Jobs(_) => Some(("jobs", JobRow::SORTABLE)),
        _ => None,
    }
}

/// `-o name` and `--sort-by` only mean something for listings; `--sort-by` must name one of the
/// listing's fields. The error text (exit 2) when not.
pub fn check_listing_flags(
    global: &mut GlobalArgs,
    command: Option<&Command>,
    bin: &str,
) -> Result<(), String> {
    let found = listing(command);
    if global.output == OutputFormat::Name && found.is_none() {
        return Err(format!(
            "error: -o name only applies to {LISTINGS}; see '{bin} --help'\n"
        ));
    }
    let Some(raw) = global.sort_by.as_deref() else {
        return Ok(());
    };
    let Some((words, sortable)) = found else {
        return Err(format!(
            "error: --sort-by only applies to {LISTINGS}; see '{bin} --help'\n"
        ));
    };
    match sortable.key(raw) {
        Ok(key) => {
            global.sort_key = Some(key);
            Ok(())
        }
        Err(why) => Err(format!(
            "error: invalid value '{raw}' for '--sort-by <JSONPATH>': {why}; {words} sorts by {}; see '{bin} {words} --help'\n",
            sortable.describe()
        )),
    }
}

/// Help goes to stdout with exit 0; every other clap error is a usage error.
pub fn from_clap_error(err: &clap::Error, bin: &str) -> Parsed {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Parsed::Exit {
            text: err.render().to_string(),
            code: 0,
        },
        // `kubectl skyhook node` without a subcommand: the full help is the useful answer.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => Parsed::Exit {
            text: err.render().to_string(),
            code: 2,
        },
        _ => Parsed::Exit {
            text: format!("{}\n", usage_error_line(&err.render().to_string(), bin)),
            code: 2,
        },
    }
}

/// Folds clap's multi-line error into one line that ends with where to get help.
pub fn usage_error_line(rendered: &str, bin: &str) -> String {
    let mut line = String::new();
    let mut command = bin.to_string();
    for raw in rendered.lines() {
        let text = raw.trim();
        if let Some(usage) = text.strip_prefix("Usage:") {
            command = command_path(usage, bin);
            break;
        }
        // The "to pass '--x' as a value, use '-- --x'" tip only adds noise.
        if text.is_empty()
            || text.starts_with("For more information")
            || text.starts_with("tip: to pass")
        {
            continue;
        }
        if line.is_empty() {
            line.push_str(text);
        } else if line.ends_with(':') || text.starts_with('[') {
            line.push(' ');
            line.push_str(text);
        } else {
            line.push_str("; ");
            line.push_str(text);
        }
    }
    if !line.starts_with("error:") {
        line = format!("error: {line}");
    }
    format!("{line}; see '{command} --help'")
}

/// The command words of a usage line (`kubectl skyhook node status [OPTIONS] ...`).
fn command_path(usage: &str, bin: &str) -> String {
    let words: Vec<&str> = usage
        .split_whitespace()
        .take_while(|w| {
            !w.starts_with(['[', '<', '-'])
                && !w.chars().any(|c| c.is_ascii_uppercase())
                && !w.ends_with("...")
        })
        .collect();
    if words.is_empty() {
        bin.to_string()
    } else {
        words.join(" ")
    }
}

/// Parses `args` (including the executable name). Usage errors become one line, exit code 2.
pub fn parse(args: Vec<OsString>) -> Parsed {
    let name = display_name(args.first());
    let mut cmd = Cli::command().bin_name(name.clone());
    let matches = match cmd.try_get_matches_from_mut(args) {
        Ok(m) => m,
        Err(err) => return from_clap_error(&err, &name),
    };
    let parsed = Cli::from_arg_matches(&matches).map(|mut cli| {
        cli.global.api = preferred_api(&name);
        cli.global.namespace_given =
            matches.value_source("namespace") == Some(clap::parser::ValueSource::CommandLine);
        cli
    });
    match parsed {
        Ok(cli) if cli.command.is_none() && !cli.version => Parsed::Exit {
            text: cmd.render_help().to_string(),
            code: 0,
        },
        Ok(mut cli) => match resolve_output(&cmd, &mut cli) {
            Ok(()) => match check_listing_flags(&mut cli.global, cli.command.as_ref(), &name) {
                Ok(()) => Parsed::Run(Box::new(cli)),
                Err(text) => Parsed::Exit { text, code: 2 },
            },
            Err(err) => from_clap_error(&err, &name),
        },
        Err(err) => from_clap_error(&err, &name),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    pub(crate) fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    pub(crate) fn exit_of(list: &[&str]) -> (String, u8) {
        match parse(args(list)) {
            Parsed::Exit { text, code } => (text, code),
            Parsed::Run(cli) => panic!("expected an exit, parsed {cli:?}"),
        }
    }

    pub(crate) fn run_of(list: &[&str]) -> Cli {
        match parse(args(list)) {
            Parsed::Run(cli) => *cli,
            Parsed::Exit { text, code } => panic!("{list:?}: exit {code}: {text}"),
        }
    }

    #[test]
    fn usage_errors_are_one_line_with_exit_code_2() {
        for (argv, want) in [
            (
                &["kubectl-skyhook", "node", "list"][..],
                "error: the following required arguments were not provided: --skyhook <SKYHOOK>; see 'kubectl skyhook node list --help'",
            ),
            (
                &["kubectl-skyhook", "-o", "xml", "version"][..],
                "error: invalid value 'xml' for '--output <FORMAT>' [possible values: table, wide, json, yaml, name]; tip: a similar value exists: 'yaml'; see 'kubectl skyhook --help'",
            ),
            (
                &["kubectl-skyhook", "frobnicate"][..],
                "error: unrecognized subcommand 'frobnicate'; see 'kubectl skyhook --help'",
            ),
            (
                &["kubectl-skyhook", "pause"][..],
                "error: the following required arguments were not provided: <SKYHOOK>; see 'kubectl skyhook pause --help'",
            ),
        ] {
            let (text, code) = exit_of(argv);
            assert_eq!(code, 2, "{argv:?}");
            assert_eq!(text.lines().count(), 1, "{argv:?}: {text}");
            assert_eq!(text.trim_end(), want, "{argv:?}");
        }
        let (text, code) = exit_of(&["kubectl-skyhook", "node", "status", "--bogus"]);
        assert_eq!(code, 2);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.starts_with("error: unexpected argument '--bogus' found"),
            "{text}"
        );
        assert!(
            text.trim_end()
                .ends_with("see 'kubectl skyhook node status --help'")
        );
    }

    #[test]
    fn debug_collect_takes_a_path_for_dash_o() {
        let Parsed::Run(cli) = parse(args(&[
            "kubectl-skyhook",
            "debug",
            "collect",
            "-o",
            "ticket.tar.gz",
        ])) else {
            panic!("did not parse");
        };
        assert_eq!(cli.global.output_arg.as_deref(), Some("ticket.tar.gz"));
        let (text, code) = exit_of(&[
            "kubectl-skyhook",
            "jobs",
            "--skyhook",
            "s",
            "-o",
            "ticket.tar.gz",
        ]);
        assert_eq!(code, 2);
        assert!(
            text.starts_with("error: invalid value 'ticket.tar.gz' for '--output <FORMAT>'"),
            "{text}"
        );
    }

    #[test]
    fn output_name_no_headers_and_sort_by() {
        for line in [
            "node list --skyhook s -o name",
            "node status -o name --sort-by .status",
            "package status p --skyhook s -o name --sort-by {.metadata.name}",
            "jobs --skyhook s -o name --sort-by .startTime",
            "node status --no-headers --sort-by skyhookName",
            "pause s --no-headers",
        ] {
            let mut argv = vec!["kubectl-skyhook"];
            argv.extend(line.split_whitespace());
            run_of(&argv);
        }
        let cli = run_of(&[
            "kubectl-skyhook",
            "node",
            "list",
            "--skyhook",
            "s",
            "--sort-by",
            ".metadata.name",
            "-o",
            "name",
            "--no-headers",
        ]);
        assert_eq!(cli.global.output, OutputFormat::Name);
        assert!(cli.global.no_headers);
        assert_eq!(
            cli.global.sort_key,
            Some(crate::app::sort::SortKey(vec!["nodeName".into()]))
        );
        let cli = run_of(&[
            "kubectl-skyhook",
            "jobs",
            "--skyhook",
            "s",
            "--sort-by",
            ".metadata.name",
        ]);
        assert_eq!(
            cli.global.sort_key,
            Some(crate::app::sort::SortKey(vec!["jobName".into()]))
        );

        let (text, code) = exit_of(&[
            "kubectl-skyhook",
            "node",
            "list",
            "--skyhook",
            "s",
            "--sort-by",
            ".bogus",
        ]);
        assert_eq!(code, 2);
        assert_eq!(
            text,
            "error: invalid value '.bogus' for '--sort-by <JSONPATH>': unknown field \".bogus\"; node list sorts by .nodeName, .status, .packagesComplete, .packagesTotal, .restarts (or .metadata.name); see 'kubectl skyhook node list --help'\n"
        );
        let (text, code) = exit_of(&["kubectl-skyhook", "pause", "s", "--sort-by", ".status"]);
        assert_eq!(code, 2);
        assert_eq!(
            text,
            "error: --sort-by only applies to node list, node status, package status and jobs; see 'kubectl skyhook --help'\n"
        );
        let (text, code) = exit_of(&["kubectl-skyhook", "version", "-o", "name"]);
        assert_eq!(code, 2);
        assert!(
            text.starts_with("error: -o name only applies to node list"),
            "{text}"
        );
    }

    #[test]
    fn debug_collect_has_its_own_destination_flag() {
        let cli = run_of(&[
            "kubectl-skyhook",
            "debug",
            "collect",
            "--output-file",
            "t.tar.gz",
        ]);
        let Some(Command::Debug(DebugCommand::Collect(args))) = &cli.command else {
            panic!("not debug collect");
        };
        assert_eq!(args.output_file, Some(PathBuf::from("t.tar.gz")));
        assert_eq!(cli.global.output_arg, None);
        let (text, code) = exit_of(&[
            "kubectl-skyhook",
            "debug",
            "collect",
            "--output-file",
            "a.tgz",
            "-o",
            "b.tgz",
        ]);
        assert_eq!(code, 2);
        assert!(
            text.contains("'--output-file <PATH>' cannot be used with"),
            "{text}"
        );
    }
}
