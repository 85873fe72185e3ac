//! Transient API errors are retried inside the call that met them: a 500, a 429 or a dropped
//! connection on one write of a pass costs a fraction of a second instead of failing the pass,
//! which at 10% of faulty requests would fail almost every pass of a busy rollout. Retrying is
//! safe for every write of a pass: a create whose response was lost meets a 409 and adopts its
//! Job, a merge patch applies twice to the same result, a guarded replace meets a 409 and the
//! pass is redone.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::controller::error::Error;

/// Attempts of one write, the first included.
pub const ATTEMPTS: u32 = 4;

/// A 429, a 5xx or no answer at all: worth another try (the same answers start-up waits out).
pub fn transient(e: &Error) -> bool {
    matches!(e, Error::Kube(k) if is_transient(k))
}

/// The delay before attempt `n` (1-based retries): 200 ms doubling, with ±50% jitter from
/// `noise` (any number; the clock's nanoseconds in use), capped at 2 s.
pub fn delay(n: u32, noise: u32) -> Duration {
    let base = 200u64 << n.saturating_sub(1).min(4);
    let jitter = base / 2 + u64::from(noise) % base.max(1);
    Duration::from_millis(jitter.min(2_000))
}

/// Runs `write` until it succeeds, fails for good, or has used [`ATTEMPTS`].
pub async fn retried<'a, F>(write: F) -> Result<(), Error>
where
    F: Fn() -> BoxFuture<'a, Result<(), Error>>,
{
    let mut n = 1;
    loop {
        match write().await {
            Err(e) if n < ATTEMPTS && transient(&e) => {
                let noise = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                tracing::debug!(error = %e, attempt = n, "transient API error; retrying");
                tokio::time::sleep(delay(n, noise)).await;
                n += 1;
            }
            res => return res,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    fn api(code: u16) -> Error {
        Error::Kube(kube::Error::Api(
            kube::core::Status::failure("m", "r")
                .with_code(code)
                .boxed(),
        ))
    }

    #[test]
    fn which_errors_are_transient() {
        for (code, want) in [
            (429, true),
            (500, true),
            (503, true),
            (504, true),
            (409, false),
            (404, false),
            (403, false),
            (422, false),
        ] {
            assert_eq!(transient(&api(code)), want, "{code}");
        }
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        assert!(!transient(&Error::Json(json)));
    }

    #[test]
    fn delays_grow_with_jitter_and_a_cap() {
        for (n, noise, want_ms) in [
            (1, 0, 100),
            (1, 199, 299),
            (2, 0, 200),
            (3, 399, 799),
            (9, 0, 1_600),
            (9, 3_199, 2_000),
        ] {
            assert_eq!(
                delay(n, noise),
                Duration::from_millis(want_ms),
                "retry {n}, noise {noise}"
            );
        }
    }

    #[tokio::test]
    async fn retries_transient_errors_only_and_stops_after_the_last_attempt() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let calls = AtomicU32::new(0);
        let flaky = retried(|| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { if n < 2 { Err(api(503)) } else { Ok(()) } })
        });
        assert!(flaky.await.is_ok());
        assert_eq!(calls.swap(0, Ordering::SeqCst), 3);
        let permanent = retried(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(api(403)) })
        });
        assert!(permanent.await.is_err());
        assert_eq!(calls.swap(0, Ordering::SeqCst), 1);
        let down = retried(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(api(500)) })
        });
        assert!(down.await.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), ATTEMPTS);
    }

    fn kube_api(code: u16) -> kube::Error {
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
            assert_eq!(is_transient(&kube_api(code)), want, "HTTP {code}");
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
