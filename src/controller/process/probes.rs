//! `/metrics` on the metrics address; `/healthz` and `/readyz` on the probe address.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tracing::{error, info};

use crate::controller::error::Error;

/// What the server reports on.
pub trait Served: Send + Sync + 'static {
    /// The metrics, in the OpenMetrics text format.
    fn metrics(&self) -> String;
    /// Whether the process takes its share of work: its caches have filled, or it waits to
    /// lead (a follower is ready, or a rollout of the Deployment would wait for ever).
    fn ready(&self) -> bool;
}

async fn bind(what: &'static str, addr: &str) -> Result<tokio::net::TcpListener, Error> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve {
            what,
            addr: addr.to_string(),
            source,
        })
}

/// Bind both listeners now (so a taken port fails start-up), then serve in the background.
pub async fn spawn(
    metrics_addr: String,
    probe_addr: String,
    served: Arc<impl Served>,
) -> Result<(), Error> {
    let m = served.clone();
    let metrics = Router::new().route(
        "/metrics",
        get(move || {
            let m = m.clone();
            async move {
                (
                    [(
                        "content-type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    m.metrics(),
                )
            }
        }),
    );
    let r = served;
    let probes = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let r = r.clone();
                async move {
                    if r.ready() {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
                    }
                }
            }),
        );
    let ml = bind("metrics", &metrics_addr).await?;
    let pl = bind("probes", &probe_addr).await?;
    info!(metrics = %metrics_addr, probes = %probe_addr, "serving metrics and probes");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(ml, metrics).await {
            error!(error = %e, "metrics server stopped");
        }
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(pl, probes).await {
            error!(error = %e, "probe server stopped");
        }
    });
    Ok(())
}
