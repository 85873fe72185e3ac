//! Settings of the two HTTP servers (metrics, probes): where they listen, how long and how many
//! clients they serve, and whether /metrics asks who is scraping.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use super::checked::checked_duration;

/// What `--metrics-*` and `--health-probe-bind-address` say, as given.
#[derive(Debug, Clone, Args)]
pub struct ServingSettings {
    /// Address of the Prometheus metrics endpoint (`:PORT` means every interface).
    #[arg(
        long = "metrics-bind-address",
        env = "METRICS_PORT",
        default_value = ":8080"
    )]
    pub metrics_bind_address: String,
    /// Address of /healthz and /readyz (`:PORT` means every interface).
    #[arg(
        long = "health-probe-bind-address",
        env = "PROBE_PORT",
        default_value = ":8081"
    )]
    pub health_probe_bind_address: String,
    /// Longest time a client of the metrics or probe server may take to send its request's
    /// headers; a slower one is disconnected (Go duration).
    #[arg(long, env = "METRICS_HEADER_READ_TIMEOUT", default_value = "5s")]
    pub metrics_header_read_timeout: String,
    /// Longest life of one connection to the metrics or probe server, request and answer
    /// included: each connection serves one request (Go duration).
    #[arg(long, env = "METRICS_REQUEST_TIMEOUT", default_value = "30s")]
    pub metrics_request_timeout: String,
    /// Most connections each server (metrics, probes) holds at once; more are closed at once.
    #[arg(long, env = "METRICS_MAX_CONNECTIONS", default_value = "64")]
    pub metrics_max_connections: String,
    /// `none`, or `tokenreview`: every /metrics request needs a bearer token that a TokenReview
    /// accepts and whose user may `get` the non-resource URL /metrics (a SubjectAccessReview).
    #[arg(long, env = "METRICS_AUTH", default_value = "none")]
    pub metrics_auth: String,
}

/// Who may read /metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAuth {
    /// Anyone who can reach the port (restrict that with a NetworkPolicy).
    None,
    /// A bearer token, checked with TokenReview and SubjectAccessReview.
    TokenReview,
}

/// Bounds on what one client can hold of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub max_connections: usize,
}

/// [`ServingSettings`] checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    pub metrics_addr: String,
    pub probe_addr: String,
    pub limits: ServerLimits,
    pub metrics_auth: MetricsAuth,
}

/// The connection limit's bounds: one so that a server serves at all, and well under a
/// process's usual open-file limit.
const MAX_CONNECTIONS: std::ops::RangeInclusive<usize> = 1..=10_000;

impl ServingSettings {
    /// The checked settings; every problem is added to `errs` (the result then is not used).
    pub(super) fn validate(&self, errs: &mut Vec<String>) -> Serving {
        let metrics_addr = bind_address("METRICS_PORT", &self.metrics_bind_address, errs);
        let probe_addr = bind_address("PROBE_PORT", &self.health_probe_bind_address, errs);
        let (header, request) = (
            &self.metrics_header_read_timeout,
            &self.metrics_request_timeout,
        );
        let header_read_timeout = checked_duration(
            "METRICS_HEADER_READ_TIMEOUT",
            header,
            Duration::from_millis(100),
            errs,
        );
        let request_timeout = checked_duration(
            "METRICS_REQUEST_TIMEOUT",
            request,
            Duration::from_secs(1),
            errs,
        );
        if header_read_timeout > request_timeout {
            errs.push(format!(
                "METRICS_HEADER_READ_TIMEOUT ({header}) must not exceed METRICS_REQUEST_TIMEOUT \
                 ({request}), which bounds the whole request"
            ));
        }
        let max_connections = match self.metrics_max_connections.trim().parse::<usize>() {
            Ok(n) if MAX_CONNECTIONS.contains(&n) => n,
            _ => {
                errs.push(format!(
                    "METRICS_MAX_CONNECTIONS must be a whole number from {} to {}, got {:?}",
                    MAX_CONNECTIONS.start(),
                    MAX_CONNECTIONS.end(),
                    self.metrics_max_connections
                ));
                *MAX_CONNECTIONS.start()
            }
        };
        let metrics_auth = match self.metrics_auth.trim() {
            "none" | "" => MetricsAuth::None,
            "tokenreview" => MetricsAuth::TokenReview,
            other => {
                errs.push(format!(
                    "METRICS_AUTH must be none or tokenreview, got {other:?}"
                ));
                MetricsAuth::None
            }
        };
        Serving {
            metrics_addr,
            probe_addr,
            limits: ServerLimits {
                header_read_timeout,
                request_timeout,
                max_connections,
            },
            metrics_auth,
        }
    }
}

/// `host:port` to listen on. Go's `:8080` (the reference's spelling) means every interface. A
/// host that is not an IP address is a name resolved when binding.
fn bind_address(name: &str, value: &str, errs: &mut Vec<String>) -> String {
    let addr = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_string(),
    };
    let named_host = |(host, port): (&str, &str)| {
        !host.is_empty()
            && !host.contains(|c: char| c == ':' || c == '/' || c.is_whitespace())
            && port.parse::<u16>().is_ok()
    };
    if addr.parse::<SocketAddr>().is_err() && !addr.rsplit_once(':').is_some_and(named_host) {
        errs.push(format!(
            "{name} must be an address to listen on, host:port or :port (for example :8080 or \
             127.0.0.1:8080), got {value:?}"
        ));
    }
    addr
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serving: ServingSettings,
    }

    fn serving(args: &[&str]) -> Result<Serving, String> {
        let cli = Cli::parse_from(std::iter::once("x").chain(args.iter().copied()));
        let mut errs = Vec::new();
        let s = cli.serving.validate(&mut errs);
        if errs.is_empty() {
            Ok(s)
        } else {
            Err(errs.join("; "))
        }
    }

    #[test]
    fn the_defaults_are_the_reference_addresses_with_bounds() {
        let s = serving(&[]).expect("defaults are valid");
        assert_eq!(s.metrics_addr, "0.0.0.0:8080");
        assert_eq!(s.probe_addr, "0.0.0.0:8081");
        assert_eq!(
            s.limits,
            ServerLimits {
                header_read_timeout: Duration::from_secs(5),
                request_timeout: Duration::from_secs(30),
                max_connections: 64,
            }
        );
        assert_eq!(s.metrics_auth, MetricsAuth::None);
    }

    #[test]
    fn addresses_take_every_spelling_of_host_and_port() {
        for (given, want) in [
            (":9090", "0.0.0.0:9090"),
            ("127.0.0.1:9090", "127.0.0.1:9090"),
            ("[::1]:9090", "[::1]:9090"),
            ("[::]:9090", "[::]:9090"),
            ("localhost:9090", "localhost:9090"),
        ] {
            let s = serving(&[&format!("--metrics-bind-address={given}")]).expect(given);
            assert_eq!(s.metrics_addr, want, "{given}");
        }
        for bad in [
            "8080",
            ":http",
            "127.0.0.1",
            "host:99999",
            ":",
            "a b:80",
            "",
        ] {
            let err = serving(&[&format!("--health-probe-bind-address={bad}")]).expect_err(bad);
            assert!(
                err.contains("PROBE_PORT") && err.contains("host:port"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn limits_and_auth_are_checked_and_named() {
        let s = serving(&[
            "--metrics-header-read-timeout=2s",
            "--metrics-request-timeout=10s",
            "--metrics-max-connections=8",
            "--metrics-auth=tokenreview",
        ])
        .expect("valid");
        assert_eq!(s.limits.header_read_timeout, Duration::from_secs(2));
        assert_eq!(s.limits.request_timeout, Duration::from_secs(10));
        assert_eq!(s.limits.max_connections, 8);
        assert_eq!(s.metrics_auth, MetricsAuth::TokenReview);
        for (arg, named) in [
            (
                "--metrics-header-read-timeout=soon",
                "METRICS_HEADER_READ_TIMEOUT",
            ),
            (
                "--metrics-header-read-timeout=1ms",
                "METRICS_HEADER_READ_TIMEOUT",
            ),
            ("--metrics-request-timeout=100ms", "METRICS_REQUEST_TIMEOUT"),
            ("--metrics-header-read-timeout=1m", "must not exceed"),
            ("--metrics-max-connections=0", "METRICS_MAX_CONNECTIONS"),
            ("--metrics-max-connections=lots", "METRICS_MAX_CONNECTIONS"),
            ("--metrics-auth=basic", "METRICS_AUTH"),
        ] {
            let err = serving(&[arg]).expect_err(arg);
            assert!(err.contains(named), "{arg}: {err}");
        }
    }
}
