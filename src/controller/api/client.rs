//! The operator's HTTP stack to the API server: kube's own layers (base URI, authentication,
//! extra headers) over a connection pool whose per-connection buffers are bounded.
//!
//! kube's default stack lets each pooled connection's read buffer grow to about 400 KiB, and
//! a connection keeps what it grew to while idle. A pass writes 32 objects at a time beside 32
//! Job creations, and any of those connections may carry a Skyhook status write, whose answer
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

use super::counter::CountLayer;

/// Largest read buffer of one connection (hyper's minimum is 8 KiB): an answer's headers must
/// fit in it; the API server's take well under 2 KiB.
pub const MAX_READ_BUFFER: usize = 16 * 1024;

/// How long an idle connection stays in the pool. Passes follow each other within seconds
/// during a rollout, so their bursts reuse the pool; between rollouts it empties.
pub const POOL_IDLE: Duration = Duration::from_secs(30);

/// Idle connections the pool keeps: one step of a pass's writes. A pass's writes beside the Job
/// creations behind it open twice that, and each connection holds its buffers, TLS state and
/// dispatch channel (~25 KiB) for as long as it stays in the pool.
pub const POOL_MAX_IDLE: usize = PARALLEL_WRITES;

/// Writes at once within one step of a pass. The API server's default in-flight limits (400
/// read, 200 mutating) leave room for several operators at this width.
pub const PARALLEL_WRITES: usize = 32;

/// A client for `config` with bounded connection buffers, counting its requests into
/// `skyhook_api_requests_total`. A proxy is left to kube's own stack, which supports it or says
/// which feature it lacks.
pub fn build(config: Config) -> Result<Client, kube::Error> {
    build_counted(config, CountLayer::global())
}

fn build_counted(config: Config, count: CountLayer) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() {
        let builder = ClientBuilder::try_from(config)?;
        return Ok(builder.with_layer(&count).build());
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
        .pool_max_idle_per_host(POOL_MAX_IDLE)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(count)
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(pool);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::routing::get;

    use super::*;

    /// A body many times the read buffer arrives whole, on a connection used again and again,
    /// and every request is counted.
    #[tokio::test]
    async fn answers_larger_than_the_read_buffer_arrive_whole() {
        let big = "x".repeat(64 * MAX_READ_BUFFER);
        let body = big.clone();
        let app = Router::new().route("/version", get(move || async move { body }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });

        let url: http::Uri = format!("http://127.0.0.1:{port}").parse().unwrap();
        // Counted apart from the operator's own series, which the metrics tests read.
        let requests = crate::metrics::ApiRequests::default();
        let count = CountLayer {
            requests: requests.clone(),
        };
        let client = build_counted(Config::new(url), count).unwrap();
        for _ in 0..3 {
            let req = http::Request::get("/version").body(Vec::new()).unwrap();
            assert_eq!(client.request_text(req).await.unwrap(), big);
        }
        let mut text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("requests", "", requests);
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.lines()
                .any(|l| l.starts_with("requests_total{") && l.ends_with(" 3")),
            "{text}"
        );
    }
}
