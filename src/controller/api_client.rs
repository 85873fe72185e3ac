//! The operator's HTTP stack to the API server: kube's own layers (base URI, authentication,
//! extra headers) over a connection pool whose per-connection buffers are bounded.
//!
//! kube's default stack lets each pooled connection's read buffer grow to about 400 KiB, and
//! a connection keeps what it grew to while idle. A pass writes 32 objects at a time beside 32
//! Job creations, and any of those connections may carry a Skyhook status replace, whose answer
//! is the whole Skyhook (a megabyte at a thousand nodes): at a thousand nodes the pool's idle
//! buffers were the largest item of the operator's heap (5 MiB over 43 connections). Bodies are
//! streamed through the buffer, so a small one only means more reads of a large body.

use std::time::Duration;

use hyper_util::client::legacy::Builder;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{ClientBuilder, ConfigExt};
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

use super::api_counter::CountLayer;

/// Largest read buffer of one connection (hyper's minimum is 8 KiB): an answer's headers must
/// fit in it; the API server's take well under 2 KiB.
pub const MAX_READ_BUFFER: usize = 16 * 1024;

/// How long an idle connection stays in the pool. Passes follow each other within seconds
/// during a rollout, so their bursts reuse the pool; between rollouts it empties.
pub const POOL_IDLE: Duration = Duration::from_secs(30);

/// A client for `config` with bounded connection buffers and request counting. A proxy is
/// left to kube's own stack, which supports it or says which feature it lacks.
pub fn build(config: Config) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() {
        let builder = ClientBuilder::try_from(config)?;
        return Ok(builder.with_layer(&CountLayer::global()).build());
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let pool = Builder::new(TokioExecutor::new())
        .http1_max_buf_size(MAX_READ_BUFFER)
        .pool_idle_timeout(POOL_IDLE)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(CountLayer::global())
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(pool);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}
