//! `/metrics` on the metrics address; `/healthz` and `/readyz` on the probe address. Both
//! servers are bounded ([`http`]); /metrics may ask for a token ([`metrics_auth`]), the probes
//! never do (the kubelet sends none).

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use tracing::info;

use super::http;
use super::metrics_auth::{self, Authorizer};
use crate::controller::error::Error;
use crate::settings::Serving;

/// What the server reports on.
pub trait Served: Send + Sync + 'static {
    /// The metrics, in the OpenMetrics text format.
    fn metrics(&self) -> String;
    /// Whether the process takes its share of work: its caches have filled, or it waits to
    /// lead (a follower is ready, or a rollout of the Deployment would wait for ever).
    fn ready(&self) -> bool;
}

/// Bind both listeners now (so a taken port fails start-up), then serve in the background.
/// `auth`, when set, decides who may read /metrics.
pub async fn spawn(
    serving: &Serving,
    auth: Option<Authorizer>,
    served: Arc<impl Served>,
) -> Result<(), Error> {
    let metrics = metrics_router(served.clone(), auth.map(Arc::new));
    let probes = probe_router(served);
    let ml = http::bind("metrics", &serving.metrics_addr).await?;
    let pl = http::bind("probes", &serving.probe_addr).await?;
    let limits = serving.limits;
    info!(
        metrics = %serving.metrics_addr,
        probes = %serving.probe_addr,
        auth = ?serving.metrics_auth,
        ?limits,
        "serving metrics and probes"
    );
    tokio::spawn(http::serve("metrics", ml, metrics, limits));
    tokio::spawn(http::serve("probes", pl, probes, limits));
    Ok(())
}

fn metrics_router(served: Arc<impl Served>, auth: Option<Arc<Authorizer>>) -> Router {
    Router::new().route(
        metrics_auth::METRICS_PATH,
        get(move |headers: HeaderMap| {
            let (served, auth) = (served.clone(), auth.clone());
            async move {
                if let Some(auth) = auth
                    && let Some(refused) = auth.refusal(&headers).await
                {
                    return refused;
                }
                metrics_response(served.metrics())
            }
        }),
    )
}

fn metrics_response(text: String) -> Response {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

fn probe_router(served: Arc<impl Served>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let r = served.clone();
                async move {
                    if r.ready() {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
                    }
                }
            }),
        )
}
