//! Waits: the one polling loop every wait goes through, a Skyhook's completion and a metric.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::Api;
use skyhook::crd::Skyhook;
use skyhook::schema::Status;

use super::env::Env;
use super::metrics::{as_seen, raw_metrics, samples};
use super::private::{Owned, alive};

/// How much longer than its stated timeout every wait may take: `E2E_TIMEOUT_SCALE`, default 2.
/// Timeouts are tuned on a developer's machine; CI's run of 2026-11-29 took twice as long for the
/// same tests, and ten of them failed there that pass here.
/// A wait that succeeds returns as soon as it holds, so only a failing test pays for the margin.
pub fn timeout_scale() -> f64 {
    std::env::var("E2E_TIMEOUT_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|f| f.is_finite() && *f >= 1.0)
        .unwrap_or(2.0)
}

/// Calls `probe` every 200 ms until it returns `Ok`; after `timeout` (times [`timeout_scale`]),
/// the last reason it gave. The probe runs at least once, and last at or after the deadline.
pub async fn poll<T, F, Fut>(timeout: Duration, mut probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let timeout = timeout.mul_f64(timeout_scale());
    let start = Instant::now();
    loop {
        let why = match probe().await {
            Ok(v) => return Ok(v),
            Err(why) => why,
        };
        if start.elapsed() >= timeout {
            return Err(why);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What [`wait_complete`] accepts as complete, and how long it waits.
pub struct Complete<'a> {
    timeout: Duration,
    current_generation: bool,
    operator: Option<(&'a mut Owned, &'a Path)>,
}

impl<'a> Complete<'a> {
    /// Complete at the Skyhook's current generation (`status.observedGeneration ==
    /// metadata.generation`): a status left over from before an edit does not count.
    pub fn current(timeout: Duration) -> Self {
        Complete {
            timeout,
            current_generation: true,
            operator: None,
        }
    }

    /// Complete at whichever generation the status was written for. For tests that assert the
    /// generation themselves afterwards, or never edit the Skyhook.
    pub fn any_generation(timeout: Duration) -> Self {
        Complete {
            current_generation: false,
            ..Complete::current(timeout)
        }
    }

    /// Also fail at once, with its log, when this operator process exits: a test that runs its
    /// own process would otherwise wait out the whole timeout for nothing.
    pub fn while_running(self, op: &'a mut Owned, log: &'a Path) -> Self {
        Complete {
            operator: Some((op, log)),
            ..self
        }
    }
}

/// Waits until the Skyhook `name` is complete as `how` says and returns it; the panic names
/// `step` and the last status seen.
pub async fn wait_complete(
    skyhooks: &Api<Skyhook>,
    step: &str,
    name: &str,
    mut how: Complete<'_>,
) -> Skyhook {
    let read_log = |log: &Path| std::fs::read_to_string(log).unwrap_or_default();
    let (timeout, current) = (how.timeout, how.current_generation);
    let done = poll(timeout, || {
        if let Some((op, log)) = how.operator.as_mut() {
            assert!(
                alive(&mut op.0),
                "{step}: the operator exited:\n{}",
                read_log(log)
            );
        }
        async move {
            let sk = skyhooks
                .get(name)
                .await
                .map_err(|e| format!("get Skyhook {name}: {e}"))?;
            completion(&sk, current).map(|()| sk)
        }
    })
    .await;
    done.unwrap_or_else(|why| {
        let log = how
            .operator
            .as_ref()
            .map(|(_, log)| format!("\n--- operator log ---\n{}", read_log(log)))
            .unwrap_or_default();
        let waited = timeout.mul_f64(timeout_scale());
        panic!("{step}: Skyhook {name} not complete within {waited:?}: {why}{log}")
    })
}

fn completion(sk: &Skyhook, current_generation: bool) -> Result<(), String> {
    let generation = sk.metadata.generation.unwrap_or(0);
    let st = sk.status.clone().unwrap_or_default();
    let at_generation = !current_generation || st.observed_generation == generation;
    if st.status == Some(Status::Complete) && at_generation {
        Ok(())
    } else {
        Err(format!(
            "status {:?} observedGeneration {} at generation {generation}",
            st.status, st.observed_generation
        ))
    }
}

/// As the reference's `metrics_test.py <name> <value> -t k=v…`: within 30 s some sample of
/// `name` on the test operator's `/metrics` carries every tag given and exactly the text `value`.
pub async fn wait_metric(env: &Env, step: &str, name: &str, tags: &[(&str, &str)], value: &str) {
    let port = env.op.metrics_port;
    let kind = super::kind();
    env.ctx
        .eventually(step, Duration::from_secs(30), || async {
            // A blocking read: off the test's runtime, which also drives its watches.
            let text = tokio::task::spawn_blocking(move || as_seen(raw_metrics(port), kind))
                .await
                .map_err(|e| e.to_string())?;
            let found: Vec<_> = samples(&text)
                .into_iter()
                .filter(|(n, l, _)| {
                    n == name
                        && tags
                            .iter()
                            .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
                })
                .map(|(_, l, v)| (l, v))
                .collect();
            if found.iter().any(|(_, v)| v == value) {
                Ok(())
            } else {
                Err(format!(
                    "{name} {tags:?} = {value} not found; samples: {found:?}"
                ))
            }
        })
        .await;
}
