//! Confirmation prompts of the commands that change something.

use std::io::{BufRead, Write};

use super::error::CliError;

/// Only `y`/`yes` (any case) confirms; other input declines; end of input is an error, so a
/// script that forgot `--confirm` fails instead of silently doing nothing.
pub fn read_confirmation(input: &mut dyn BufRead) -> Result<bool, CliError> {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) => Err(CliError::NoAnswer),
        Ok(_) => {
            let answer = line.trim().to_ascii_lowercase();
            Ok(answer == "y" || answer == "yes")
        }
        Err(e) => Err(CliError::Confirmation(e.to_string())),
    }
}

/// Prints `lines`, then `Continue? [y/N]: `, and reads the answer. Declined, it prints
/// `Aborted` and fails: an emergency brake that did nothing must not look like success.
pub fn ask(out: &mut dyn Write, input: &mut dyn BufRead, lines: &[String]) -> Result<(), CliError> {
    for line in lines {
        writeln!(out, "{line}")?;
    }
    write!(out, "Continue? [y/N]: ")?;
    answer(out, input, "Aborted")
}

/// [`ask`] on one line: `<question> Continue? [y/N]: `, `Aborted.` when declined (the
/// reference's pause/resume/disable/enable wording).
pub fn ask_inline(
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    question: &str,
) -> Result<(), CliError> {
    write!(out, "{question} Continue? [y/N]: ")?;
    answer(out, input, "Aborted.")
}

fn answer(out: &mut dyn Write, input: &mut dyn BufRead, aborted: &str) -> Result<(), CliError> {
    out.flush()?;
    if read_confirmation(input)? {
        return Ok(());
    }
    writeln!(out, "{aborted}")?;
    Err(CliError::Declined)
}

/// Under `--dry-run`, says that nothing was changed: the caller stops there.
pub fn dry_run_stop(dry_run: bool, out: &mut dyn Write) -> Result<bool, CliError> {
    if dry_run {
        writeln!(out, "\n[dry-run] No changes applied")?;
    }
    Ok(dry_run)
}
