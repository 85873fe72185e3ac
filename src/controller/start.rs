//! Start-up of `skyhook-operator run`: logging, the API client, signals.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams};
use tracing::warn;
use tracing_subscriber::EnvFilter;

use super::Error;
use crate::crd::Skyhook;
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
    Ok(super::api_client::build(config)?)
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

/// An answer worth another try: the API server is starting (`429 storage is (re)initializing`),
/// overloaded (429, 5xx) or not reachable yet (connection refused or reset, timeouts).
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Capped exponential delays with jitter (each delay is 50–100% of its step), so that replicas
/// restarted together do not knock on the API server in step.
pub struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Self {
        Backoff { step: first, max }
    }

    pub fn next_delay(&mut self) -> Duration {
        let step = self.step.min(self.max);
        self.step = step.saturating_mul(2).min(self.max);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let fraction = 0.5 + f64::from(nanos % 1000) / 2000.0;
        step.mul_f64(fraction)
    }
}

/// Waits until the API server serves Skyhooks (and accepts the selector, if any). Transient
/// errors are waited out for as long as they last; a CRD that is not served is waited for up to
/// `crd_wait` (it may be being installed right now); anything else ends start-up with what to fix.
pub async fn wait_for_skyhook_api(
    client: &Client,
    selector: Option<&str>,
    crd_wait: Duration,
) -> Result<(), Error> {
    let api: Api<Skyhook> = Api::all(client.clone());
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
                    return Err(Error::CrdMissing(crd_wait));
                }
                warn!("the Skyhook CRD is not served yet; waiting for it to be installed");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "y")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn transient_answers_are_retried_permanent_ones_are_not() {
        for (code, want) in [
            (429, true),
            (500, true),
            (503, true),
            (504, true),
            (400, false),
            (401, false),
            (403, false),
            (404, false),
            (409, false),
            (422, false),
        ] {
            assert_eq!(is_transient(&api(code)), want, "HTTP {code}");
        }
        let refused = kube::Error::Service("connection refused".into());
        assert!(is_transient(&refused));
        assert!(!is_transient(&kube::Error::LinesCodecMaxLineLengthExceeded));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(15));
        let steps = [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0];
        for step in steps {
            let d = b.next_delay().as_secs_f64();
            assert!(
                d >= step * 0.5 - 1e-9 && d <= step + 1e-9,
                "delay {d} outside 50–100% of {step}"
            );
        }
    }
}
