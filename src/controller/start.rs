//! Start-up of `skyhook-operator run`: logging, the API client, signals.

use std::path::PathBuf;

use kube::Client;
use tracing_subscriber::EnvFilter;

use super::Error;
use super::api_counter::CountLayer;
use crate::settings::Config;

/// Where the operator finds its cluster: `--kubeconfig`/`KUBECONFIG` out of a cluster, the
/// ServiceAccount in one.
pub async fn client(kubeconfig: Option<PathBuf>, context: Option<String>) -> Result<Client, Error> {
    let source = crate::kubeconfig::Source {
        path: kubeconfig.as_deref(),
        context,
        ..Default::default()
    };
    let where_ = kubeconfig.as_ref().map_or_else(
        || "(KUBECONFIG, ~/.kube/config or in-cluster)".to_string(),
        |p| p.display().to_string(),
    );
    let config = crate::kubeconfig::load(&source)
        .await
        .map_err(|e| Error::Kubeconfig(where_, e.to_string()))?;
    // kube's default retry layer retries 429 up to 15 times with delays up to 1000 s: a PDB that
    // refuses an eviction (429) would freeze the single reconcile worker. The controller retries
    // failed reconciles itself, and a refused eviction must come back at once to be reported.
    let mut config = config;
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder.with_layer(&CountLayer::global()).build())
}

/// JSON or console logs at the configured level (`LOG_LEVEL` accepts a tracing filter too).
pub fn init_tracing(cfg: &Config) {
    let filter = EnvFilter::try_new(&cfg.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = if cfg.log_json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
