//! Man pages (`clap_mangen`): `kubectl-skyhook __man <DIR>` (hidden) writes one roff page per
//! visible command, `kubectl-skyhook.1`, `kubectl-skyhook-node-status.1`, ... The release script
//! (`release/build-archives`) runs it on the binary it just built, so the pages always describe
//! that build's command line; nothing generated is checked in.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::app::error::CliError;
use crate::app::operator::PLUGIN_VERSION;
use crate::cli::Cli;

/// How the pages show the command: kubectl runs the plugin as `kubectl skyhook`.
const INVOCATION: &str = "kubectl skyhook";

/// Writes every page into `dir` (created if missing) and returns their paths, parents first.
pub fn write_pages(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let fail = |what: &Path, e: std::io::Error| CliError::Man(format!("{}: {e}", what.display()));
    fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    let mut cmd = Cli::command()
        .bin_name(INVOCATION)
        .disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_tree(cmd, dir, &mut written).map_err(|e| fail(dir, e))?;
    Ok(written)
}

fn write_tree(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("skyhook {PLUGIN_VERSION}"))
        .manual("kubectl skyhook");
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)?;
    fs::write(&path, page)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_tree(sub.clone(), dir, written)?;
    }
    Ok(())
}

pub fn run(out: &mut dyn Write, dir: &Path) -> Result<(), CliError> {
    for path in write_pages(dir)? {
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kubectl-skyhook-<path>` of every visible command, from the definition itself.
    fn visible(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        out.push(format!("{prefix}.1"));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            visible(sub, &format!("{prefix}-{}", sub.get_name()), out);
        }
    }

    #[test]
    fn one_page_per_visible_command() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_pages(dir.path()).unwrap();
        let mut names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        let mut want = Vec::new();
        visible(&Cli::command(), "kubectl-skyhook", &mut want);
        names.sort();
        want.sort();
        assert_eq!(names, want);
        for page in [
            "kubectl-skyhook.1",
            "kubectl-skyhook-node-status.1",
            "kubectl-skyhook-version.1",
            "kubectl-skyhook-debug-collect.1",
        ] {
            assert!(names.iter().any(|n| n == page), "{page}: {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("__")), "hidden: {names:?}");

        let top = fs::read_to_string(dir.path().join("kubectl-skyhook.1")).unwrap();
        assert!(top.starts_with(".ie \\n(.g .ds Aq"), "{top}");
        assert!(top.contains(".TH kubectl-skyhook 1"), "{top}");
        assert!(top.contains(&format!("skyhook {PLUGIN_VERSION}")), "{top}");
        let status = fs::read_to_string(dir.path().join("kubectl-skyhook-node-status.1")).unwrap();
        assert!(status.contains("kubectl skyhook node status"), "{status}");
        assert!(status.contains("\\-\\-skyhook"), "{status}");
    }

    #[test]
    fn the_hidden_command_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("man1");
        let crate::cli::Parsed::Run(cli) = crate::usage::parse(vec![
            "kubectl-skyhook".into(),
            "__man".into(),
            target.clone().into(),
        ]) else {
            panic!("`__man <dir>` does not parse");
        };
        let Some(crate::cli::Command::Man { dir: got }) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(got, target);
        let mut out = Vec::new();
        run(&mut out, &got).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("kubectl-skyhook-version.1"), "{text}");
        assert!(target.join("kubectl-skyhook-jobs.1").is_file());
    }
}
