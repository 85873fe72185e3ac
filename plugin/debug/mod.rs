//! `debug collect`: a support archive.

use std::io::Write;

use crate::Ctx;
use crate::cli::CollectArgs;
use crate::error::CliError;

/// Returns the exit code: 0, or 3 when some pieces failed but the archive was written.
pub async fn collect(
    _ctx: &Ctx,
    _out: &mut dyn Write,
    _args: &CollectArgs,
) -> Result<u8, CliError> {
    Err(CliError::Api {
        action: "debug collect".into(),
        message: "being written (placeholder while the tree is under construction)".into(),
    })
}
