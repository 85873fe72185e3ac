//! `bench-tool`: the two programs `bench/run` needs beside the operators it compares.
//!
//! * `floor` runs a Skyhook's stage Jobs with no operator: the same Jobs (built by the
//!   operator's own builder), in the same order (apply, then config, per package), under the
//!   same budget of nodes at work, with no node state, no status and no bookkeeping. Its rollout
//!   time is the limit set by the API server, the Job controller and kwok.
//! * `observe` watches one rollout (the package Jobs or, for the reference operator, its bare
//!   pods; the nodes' state annotation; the Skyhook's status) and, when it ends, writes the
//!   delays an SRE would feel: a stage finishing → the next stage of that package created, a
//!   stage finishing → the node state saying so, a node finishing → `completeNodes` counting it.
//!
//! Not part of the product: `cargo build --release --example bench-tool`.

mod floor;
mod observe;

use clap::Parser;

#[derive(Parser)]
#[command(name = "bench-tool", about = "The floor and the observer of bench/run")]
enum Cmd {
    /// Run a Skyhook's stage Jobs with no operator (the floor).
    Floor(Box<floor::Args>),
    /// Watch one rollout and write its delays as JSON.
    Observe(observe::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = skyhook::kubeconfig::load(&skyhook::kubeconfig::Source::default()).await?;
    let client = kube::Client::try_from(config)?;
    match Cmd::parse() {
        Cmd::Floor(args) => floor::run(client, *args).await,
        Cmd::Observe(args) => observe::run(client, args).await,
    }
}
