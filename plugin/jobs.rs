//! `jobs`: the Jobs of one rollout, in stage order, with outcomes from their conditions.

use std::io::Write;

use crate::Ctx;
use crate::cli::JobsArgs;
use crate::error::CliError;

pub async fn run(_ctx: &Ctx, _out: &mut dyn Write, _args: &JobsArgs) -> Result<(), CliError> {
    Err(CliError::Api {
        action: "jobs".into(),
        message: "being written (placeholder while the tree is under construction)".into(),
    })
}
