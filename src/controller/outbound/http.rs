//! HTTP to services other than the API server (an alert source, notification receivers): one
//! pooled client, http or https (built-in and system roots), every request bounded by a timeout and
//! every answer by a size, so a slow or chatty service never stalls or bloats the operator.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

/// Largest answer read (an alert list of a large fleet fits; anything larger is refused).
pub const MAX_ANSWER: usize = 8 * 1024 * 1024;

/// Why an outbound request failed, in words for a condition or a log line.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    /// The URL is not shown: a notification target's URL is a credential.
    #[error("the target's URL is not a valid URL")]
    Url,
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
    /// Trusts the system's roots (or those `SSL_CERT_FILE`/`SSL_CERT_DIR` name) and the Mozilla
    /// roots built in, since the operator's image is `scratch`, with no certificate files; a
    /// receiver behind a private CA is reached by mounting its CA and naming it in
    /// `SSL_CERT_FILE`. Unreadable system roots are logged, never fatal.
    pub fn new() -> Result<Outbound, OutboundError> {
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::debug!(error = %e, "a system root certificate could not be read");
        }
        let (roots, refused) = trust(native.certs);
        tracing::info!(
            roots = roots.len(),
            refused,
            "outbound HTTPS trusts the built-in Mozilla roots and the system's"
        );
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| OutboundError::Transport(format!("setting up TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
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
        let uri: http::Uri = call.url.parse().map_err(|_| OutboundError::Url)?;
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

/// The built-in Mozilla roots and the system's; how many system certificates were refused
/// (not CA certificates rustls can use).
fn trust(system: Vec<CertificateDer<'static>>) -> (RootCertStore, usize) {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let (_, refused) = roots.add_parsable_certificates(system);
    (roots, refused)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_without_certificate_files_still_trusts_the_built_in_roots() {
        let (roots, refused) = trust(Vec::new());
        assert_eq!(refused, 0);
        assert!(roots.len() > 100, "{} roots", roots.len());
    }

    #[test]
    fn a_system_file_that_is_no_certificate_is_counted_and_skipped() {
        let (roots, refused) = trust(vec![CertificateDer::from(b"not a certificate".to_vec())]);
        assert_eq!(refused, 1);
        assert_eq!(roots.len(), webpki_roots::TLS_SERVER_ROOTS.len());
    }
}
