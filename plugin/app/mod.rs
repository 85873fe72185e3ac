//! What every command uses: the shared context, the API client, output, errors, prompts, and
//! the lookups several commands share. Commands (`crate::commands`) depend on this module and
//! never on each other.

pub mod access;
pub mod complete;
pub mod error;
pub mod global;
pub mod jobs;
pub mod kube;
pub mod lens;
pub mod node_meta;
pub mod nodes;
pub mod operator;
pub mod output;
pub mod packages;
pub mod planner;
pub mod prompt;
pub mod sort;

use error::CliError;
use global::GlobalArgs;
use kube::Kube;
use output::Painter;

/// What every command gets: the global flags, the colour decision, and the Skyhook or
/// NodeWright the command names.
pub struct Ctx {
    pub global: GlobalArgs,
    pub painter: Painter,
    pub named: Option<String>,
}

impl Ctx {
    /// A client working in the API of the object the command names: the invocation's preferred
    /// API when it holds that name, else the other one when it does (so `kubectl skyhook pause x`
    /// pauses NodeWright `x` when there is no Skyhook `x`).
    pub async fn kube(&self) -> Result<Kube, CliError> {
        let kube = Kube::connect(&self.global).await?;
        let api = match &self.named {
            Some(name) => kube.api_of(name, self.global.api).await,
            None => self.global.api,
        };
        Ok(kube.in_api(api))
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
            named: None,
        }
    }
}
