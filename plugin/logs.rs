//! `logs` / `package logs`: a package's stage Job logs on a node, in stage order.

use std::io::Write;

use crate::Ctx;
use crate::cli::LogsArgs;
use crate::error::CliError;

pub async fn run(_ctx: &Ctx, _out: &mut dyn Write, _args: &LogsArgs) -> Result<(), CliError> {
    Err(CliError::Api {
        action: "logs".into(),
        message: "being written (placeholder while the tree is under construction)".into(),
    })
}
