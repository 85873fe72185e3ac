//! HTTP to services other than the API server (an alert source, notification receivers): one
//! pooled client, http or https (built-in and system roots), every request bounded by a timeout and
//! every answer by a size, so a slow or chatty service never stalls or bloats the operator.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
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
    /// The address is one the client never connects to.
    #[error("{0}")]
    Refused(String),
}

/// The client every outbound request goes through.
#[derive(Clone)]
pub struct Outbound {
    client: Client<HttpsConnector<HttpConnector<Resolver>>, Full<Bytes>>,
    /// Refuse link-local and cloud-metadata addresses (see [`forbidden`]).
    guarded: bool,
}

/// Link-local addresses (169.254.0.0/16, fe80::/10: where clouds serve instance metadata and
/// credentials), the metadata addresses outside them (Alibaba's 100.100.100.200, AWS's IPv6
/// fd00:ec2::254), and the unspecified address. A guarded client never connects to one, by
/// literal or by name.
pub fn forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local() || v4.is_unspecified() || v4 == Ipv4Addr::new(100, 100, 100, 200)
        }
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.is_unspecified()
                || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|m| forbidden(IpAddr::V4(m)))
        }
    }
}

/// The system resolver; guarded, it drops the [`forbidden`] addresses a name resolves to, so
/// the check holds for the address actually connected to (a name cannot be re-pointed between
/// a check and the connection).
#[derive(Clone)]
pub struct Resolver {
    guarded: bool,
}

type Resolving =
    Pin<Box<dyn Future<Output = Result<std::vec::IntoIter<SocketAddr>, std::io::Error>> + Send>>;

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Resolving;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let guarded = self.guarded;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| !guarded || !forbidden(a.ip()))
                .collect();
            if kept.is_empty() && !all.is_empty() {
                return Err(std::io::Error::other(format!(
                    "{host} resolves only to link-local or cloud-metadata addresses, which the \
                     operator never connects to"
                )));
            }
            Ok(kept.into_iter())
        })
    }
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
        Outbound::build(false)
    }

    /// Like [`Outbound::new`], but it never connects to a [`forbidden`] address, given as a
    /// literal or resolved from a name: for URLs that users other than the administrator choose.
    pub fn guarded() -> Result<Outbound, OutboundError> {
        Outbound::build(true)
    }

    fn build(guarded: bool) -> Result<Outbound, OutboundError> {
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
        let mut http = HttpConnector::new_with_resolver(Resolver { guarded });
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .build(https);
        Ok(Outbound { client, guarded })
    }

    /// Sends the request; the status and the body (at most [`MAX_ANSWER`] bytes).
    pub async fn send(&self, call: Call<'_>) -> Result<(u16, Bytes), OutboundError> {
        let uri: http::Uri = call.url.parse().map_err(|_| OutboundError::Url)?;
        // A literal address is connected to without the resolver: checked here.
        let literal = uri
            .host()
            .map(|h| h.trim_matches(['[', ']']))
            .and_then(|h| h.parse::<IpAddr>().ok());
        if self.guarded
            && let Some(ip) = literal.filter(|ip| forbidden(*ip))
        {
            return Err(OutboundError::Refused(format!(
                "{ip} is a link-local or cloud-metadata address, which the operator never \
                 connects to"
            )));
        }
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
    fn link_local_and_metadata_addresses_are_forbidden() {
        for bad in [
            "169.254.169.254",
            "169.254.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "::",
        ] {
            assert!(forbidden(bad.parse().expect(bad)), "{bad}");
        }
        for fine in [
            "127.0.0.1",
            "10.0.0.1",
            "192.168.1.1",
            "100.100.100.201",
            "::1",
            "2001:db8::1",
        ] {
            assert!(!forbidden(fine.parse().expect(fine)), "{fine}");
        }
    }

    /// A guarded client refuses a metadata address given as a literal before any connection,
    /// and a name resolving only to link-local addresses after resolution.
    #[tokio::test]
    async fn a_guarded_client_never_reaches_a_metadata_address() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Outbound::guarded().expect("client");
        let send = |url: &'static str| {
            let client = client.clone();
            async move {
                client
                    .send(Call {
                        method: Method::GET,
                        url,
                        headers: &[],
                        body: Vec::new(),
                        timeout: Duration::from_secs(2),
                    })
                    .await
            }
        };
        match send("http://169.254.169.254/latest/meta-data/").await {
            Err(OutboundError::Refused(why)) => assert!(why.contains("169.254.169.254"), "{why}"),
            other => panic!("{other:?}"),
        }
        match send("http://[fd00:ec2::254]/").await {
            Err(OutboundError::Refused(_)) => {}
            other => panic!("{other:?}"),
        }
        let mut resolver = Resolver { guarded: true };
        let name: Name = "localhost".parse().expect("name");
        let local = tower_service::Service::call(&mut resolver, name).await;
        assert!(local.is_ok(), "a loopback name resolves: {local:?}");
        // What a name resolves to is checked after resolution (getaddrinfo reads a numeric
        // name as its address, standing in for a DNS record here).
        let name: Name = "169.254.169.254".parse().expect("name");
        let refused = tower_service::Service::call(&mut resolver, name).await;
        let why = refused
            .expect_err("resolves to a metadata address")
            .to_string();
        assert!(why.contains("link-local"), "{why}");
        let mut open = Resolver { guarded: false };
        let name: Name = "169.254.169.254".parse().expect("name");
        assert!(tower_service::Service::call(&mut open, name).await.is_ok());
    }

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
