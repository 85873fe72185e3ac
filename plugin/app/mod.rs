//! What every command uses: the shared context, the API client, output, errors, prompts, and
//! the lookups several commands share. Commands (`crate::commands`) depend on this module and
//! never on each other.

pub mod access;
pub mod complete;
pub mod error;
pub mod global;
pub mod jobs;
pub mod kube;
pub mod nodes;
pub mod operator;
pub mod output;
pub mod packages;
pub mod prompt;
pub mod sort;

use error::CliError;
use global::GlobalArgs;
use kube::Kube;
use output::Painter;

/// What every command gets: the global flags and the colour decision.
pub struct Ctx {
    pub global: GlobalArgs,
    pub painter: Painter,
}

impl Ctx {
    pub async fn kube(&self) -> Result<Kube, CliError> {
        Kube::connect(&self.global).await
    }

    /// A warning on stderr, shown only with `-v`.
    pub fn warn(&self, message: &str) {
        if self.global.verbose {
            eprintln!("Warning: {message}");
        }
    }

    #[cfg(test)]
    pub fn for_tests() -> Ctx {
        use clap::Parser;
        let cli = crate::cli::Cli::parse_from(["kubectl-skyhook", "--no-color"]);
        Ctx {
            global: cli.global,
            painter: Painter::new(false),
        }
    }
}
