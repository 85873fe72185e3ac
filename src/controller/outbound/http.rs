//! HTTP to services other than the API server (an alert source, notification receivers): one
//! pooled client, http or https (the system's roots), every request bounded by a timeout and
//! every answer by a size, so a slow or chatty service never stalls or bloats the operator.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Largest answer read (an alert list of a large fleet fits; anything larger is refused).
pub const MAX_ANSWER: usize = 8 * 1024 * 1024;

/// Why an outbound request failed, in words for a condition or a log line.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error("{0} is not a valid URL")]
    Url(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Transport(String),
}

/// The client every outbound request goes through.
#[derive(Clone)]
pub struct Outbound {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// A request: method, URL, headers, body.
pub struct Call<'a> {
    pub method: Method,
    pub url: &'a str,
    pub headers: &'a [(String, String)],
    pub body: Vec<u8>,
    pub timeout: Duration,
}

impl Outbound {
    /// Errors only when the system's root certificates cannot be read at all.
    pub fn new() -> Result<Outbound, OutboundError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| {
                OutboundError::Transport(format!("reading the system's root certificates: {e}"))
            })?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .build(https);
        Ok(Outbound { client })
    }

    /// Sends the request; the status and the body (at most [`MAX_ANSWER`] bytes).
    pub async fn send(&self, call: Call<'_>) -> Result<(u16, Bytes), OutboundError> {
        let uri: http::Uri = call
            .url
            .parse()
            .map_err(|_| OutboundError::Url(call.url.to_string()))?;
        let mut req = Request::builder().method(call.method).uri(uri);
        for (k, v) in call.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(Full::new(Bytes::from(call.body)))
            .map_err(|e| OutboundError::Transport(e.to_string()))?;
        let exchange = async {
            let res = self
                .client
                .request(req)
                .await
                .map_err(|e| OutboundError::Transport(transport_words(&e)))?;
            let status = res.status().as_u16();
            let body = Limited::new(res.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| OutboundError::Transport(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(call.timeout, exchange)
            .await
            .map_err(|_| OutboundError::Timeout(call.timeout))?
    }
}

/// hyper-util's error with its cause (its own words alone are "client error (Connect)").
fn transport_words(e: &hyper_util::client::legacy::Error) -> String {
    let mut words = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        words.push_str(": ");
        words.push_str(&s.to_string());
        source = s.source();
    }
    words
}
