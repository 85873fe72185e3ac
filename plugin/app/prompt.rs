//! Confirmation prompts of the commands that change something.

use std::io::{BufRead, Write};

use super::error::CliError;

/// Only `y`/`yes` (any case) confirms; other input aborts; end of input is an error, so a
/// script that forgot `--confirm` fails instead of silently doing nothing.
pub fn read_confirmation(input: &mut dyn BufRead) -> Result<bool, CliError> {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) => Err(CliError::Confirmation("EOF".into())),
        Ok(_) => {
            let answer = line.trim().to_ascii_lowercase();
            Ok(answer == "y" || answer == "yes")
        }
        Err(e) => Err(CliError::Confirmation(e.to_string())),
    }
}

/// Prints `lines`, then `Continue? [y/N]: `, and reads the answer; `Aborted` when declined.
pub fn ask(
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    lines: &[String],
) -> Result<bool, CliError> {
    for line in lines {
        writeln!(out, "{line}")?;
    }
    write!(out, "Continue? [y/N]: ")?;
    out.flush()?;
    let yes = read_confirmation(input)?;
    if !yes {
        writeln!(out, "Aborted")?;
    }
    Ok(yes)
}

/// Under `--dry-run`, says that nothing was changed: the caller stops there.
pub fn dry_run_stop(dry_run: bool, out: &mut dyn Write) -> Result<bool, CliError> {
    if dry_run {
        writeln!(out, "\n[dry-run] No changes applied")?;
    }
    Ok(dry_run)
}

/// Whether a change goes ahead: not under `--dry-run` ([`dry_run_stop`]), and confirmed by
/// `--confirm` or else at the prompt ([`ask`]).
pub fn go_ahead(
    dry_run: bool,
    confirm: bool,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    lines: &[String],
) -> Result<bool, CliError> {
    if dry_run_stop(dry_run, out)? {
        return Ok(false);
    }
    Ok(confirm || ask(out, input, lines)?)
}
