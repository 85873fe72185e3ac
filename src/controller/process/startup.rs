//! Start-up of `skyhook-operator run`: logging, the API client, signals.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams};
use tracing::warn;
use tracing_subscriber::EnvFilter;

use crate::controller::api::retry::{Backoff, is_transient};
use crate::controller::error::Error;
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
    Ok(crate::controller::api::client::build(config)?)
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

/// Waits until the API server serves the kind of `kind` (and accepts the selector, if any). Transient
/// errors are waited out for as long as they last; a CRD that is not served is waited for up to
/// `crd_wait` (it may be being installed right now); anything else ends start-up with what to fix.
pub async fn wait_for_skyhook_api(
    client: &Client,
    kind: crate::schema::Api,
    selector: Option<&str>,
    crd_wait: Duration,
) -> Result<(), Error> {
    let api: Api<kube::api::DynamicObject> =
        Api::all_with(client.clone(), &crate::crd::object_resource(kind));
    let mut lp = ListParams::default().limit(1);
    if let Some(sel) = selector {
        lp = lp.labels(sel);
    }
    let mut first_missing: Option<tokio::time::Instant> = None;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(15));
    loop {
        let e = match api.list(&lp).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        match &e {
            _ if is_transient(&e) => {
                warn!(error = %e, "the API server is not ready yet; waiting");
            }
            kube::Error::Api(s) if s.code == 404 => {
                let since = *first_missing.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= crd_wait {
                    return Err(Error::CrdMissing(
                        format!("{}.{}", kind.plural(), kind.group()),
                        crd_wait,
                    ));
                }
                warn!(
                    "the {} CRD is not served yet; waiting for it to be installed",
                    kind.kind()
                );
            }
            kube::Error::Api(s) if s.code == 400 && selector.is_some() => {
                return Err(Error::Selector(selector.unwrap_or_default().to_string(), e));
            }
            kube::Error::Api(s) if s.code == 401 || s.code == 403 => {
                return Err(Error::Forbidden(e.to_string()));
            }
            _ => return Err(e.into()),
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// Waits, quietly and for as long as it takes, until the API server serves the kind of `kind`:
/// with `SERVE_APIS=auto` the NodeWright engine starts once its CRD is installed.
pub async fn wait_until_served(client: &Client, kind: crate::schema::Api) {
    let api: Api<kube::api::DynamicObject> =
        Api::all_with(client.clone(), &crate::crd::object_resource(kind));
    let mut announced = false;
    loop {
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => {
                tracing::info!("the {} CRD is served; reconciling its objects", kind.kind());
                return;
            }
            Err(e) if !announced => {
                tracing::info!(error = %e, "the {} CRD is not served; its objects are reconciled once it is installed", kind.kind());
                announced = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(SERVED_RECHECK).await;
    }
}

/// How often an optional API's CRD is looked for.
const SERVED_RECHECK: Duration = Duration::from_secs(30);
