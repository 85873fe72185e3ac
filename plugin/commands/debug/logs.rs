//! Container logs: which containers of a pod have logs worth asking for, fetching them a few at
//! a time, and bounding each one to the newest `--max-log-bytes`.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;
use kube::api::{Api, LogParams};

use super::scrub::scrub;

/// Log requests in flight at once: enough to hide latency without flooding the API server.
const CONCURRENCY: usize = 6;

/// Tries per log when the failure may pass (a timeout, a 5xx, throttling, a dropped
/// connection): a busy cluster answers a log request with a 500 from the kubelet now and then,
/// and a support bundle is collected on exactly such clusters.
const ATTEMPTS: u32 = 3;

/// Wait before the second try; doubled before the third.
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// One fetched log: its text (or the last error) and how many requests it took.
pub struct Fetched {
    pub target: Target,
    pub result: Result<Vec<u8>, kube::Error>,
    pub attempts: u32,
}

/// Whether another request may succeed where this one failed.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::Service(_) | kube::Error::HyperError(_) => true,
        _ => false,
    }
}

/// One log to fetch and where it goes in the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub previous: bool,
    pub path: String,
}

impl Target {
    pub fn describe(&self) -> String {
        let previous = if self.previous { " (previous)" } else { "" };
        format!(
            "logs of pod {}/{} container {}{previous}",
            self.namespace, self.pod, self.container
        )
    }
}

/// Every container of the pod that has run (init containers first), and the previous instance
/// of each that restarted. Containers that never started have no logs, and asking would only
/// produce an error that says nothing new.
pub fn targets(pod: &Pod, dir: &str) -> Vec<Target> {
    let statuses = crate::app::jobs::container_statuses(pod);
    let pod_name = pod.name_any();
    let namespace = pod.namespace().unwrap_or_default();
    let mut out = Vec::new();
    for s in statuses {
        let target = |previous: bool| Target {
            namespace: namespace.clone(),
            pod: pod_name.clone(),
            container: s.name.clone(),
            previous,
            path: format!(
                "{dir}/{pod_name}/{}{}.log",
                s.name,
                if previous { ".previous" } else { "" }
            ),
        };
        if has_run(s) {
            out.push(target(false));
        }
        if s.restart_count > 0 {
            out.push(target(true));
        }
    }
    out
}

fn has_run(s: &ContainerStatus) -> bool {
    s.state
        .as_ref()
        .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
        || s.restart_count > 0
}

/// The newest `max` bytes, starting at a line boundary when one is near, with a marker saying
/// how much was dropped (the marker is the only text beyond the limit).
pub fn keep_newest(text: &[u8], max: u64) -> Vec<u8> {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    if text.len() <= max {
        return text.to_vec();
    }
    let mut start = text.len() - max;
    if let Some(nl) = text[start..].iter().position(|b| *b == b'\n')
        && start + nl + 1 < text.len()
    {
        start += nl + 1;
    }
    let mut out =
        format!("[skyhook debug collect: {start} older bytes dropped (--max-log-bytes {max})]\n")
            .into_bytes();
    out.extend_from_slice(&text[start..]);
    out
}

/// Fetches every target (a few at once), each up to [`ATTEMPTS`] times while its failure may
/// pass; results in the order given. With `redact`, each log is scrubbed before it is cut to
/// `max_bytes`, so the cut cannot leave half a PEM block or token that no longer looks like one.
pub async fn fetch(
    client: kube::Client,
    targets: Vec<Target>,
    since: Option<Duration>,
    max_bytes: u64,
    timeout: Duration,
    redact: bool,
    on_done: impl Fn(),
) -> Vec<Fetched> {
    let on_done = &on_done;
    futures::stream::iter(targets)
        .map(|t| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &t.namespace);
            async move {
                let params = LogParams {
                    container: Some(t.container.clone()),
                    previous: t.previous,
                    since_seconds: since.map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
                    ..LogParams::default()
                };
                let mut attempts = 0;
                let result = loop {
                    attempts += 1;
                    let result = fetch_one(&api, &t.pod, &params, timeout).await;
                    match result {
                        Err(e) if attempts < ATTEMPTS && transient(&e) => {
                            tokio::time::sleep(RETRY_DELAY * (1 << (attempts - 1))).await;
                        }
                        other => break other,
                    }
                };
                let result = result.map(|text| {
                    let text = if redact {
                        scrub(text.as_bytes())
                    } else {
                        text.into_bytes()
                    };
                    keep_newest(&text, max_bytes)
                });
                on_done();
                Fetched {
                    target: t,
                    result,
                    attempts,
                }
            }
        })
        .buffered(CONCURRENCY)
        .collect()
        .await
}

async fn fetch_one(
    api: &Api<Pod>,
    pod: &str,
    params: &LogParams,
    timeout: Duration,
) -> Result<String, kube::Error> {
    // A log stream can keep trickling past the client's read timeout.
    match tokio::time::timeout(timeout, api.logs(pod, params)).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out",
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_failures_that_may_pass_are_retried() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert!(transient(&api(500)) && transient(&api(503)) && transient(&api(429)));
        assert!(!transient(&api(400)) && !transient(&api(403)) && !transient(&api(404)));
        let timeout = kube::Error::Service(Box::new(std::io::Error::other("timed out")));
        assert!(transient(&timeout));
    }

    #[test]
    fn truncation_keeps_the_newest_whole_lines() {
        assert_eq!(keep_newest(b"short\n", 100), b"short\n");
        let text = b"line one\nline two\nline three\n";
        let kept = String::from_utf8(keep_newest(text, 15)).unwrap();
        assert_eq!(
            kept,
            "[skyhook debug collect: 18 older bytes dropped (--max-log-bytes 15)]\nline three\n"
        );
        // No newline in the kept window: cut mid-line rather than keep nothing.
        let kept = keep_newest(b"abcdefghij", 4);
        assert!(
            kept.ends_with(b"\nghij"),
            "{}",
            String::from_utf8_lossy(&kept)
        );
    }

    #[test]
    fn init_containers_and_restarted_ones() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {
                "initContainerStatuses": [
                    {"name": "init", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0}}},
                ],
                "containerStatuses": [
                    {"name": "main", "image": "i", "imageID": "", "ready": false, "restartCount": 2,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                    {"name": "never", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "PodInitializing"}}},
                ],
            },
        }))
        .unwrap();
        let got: Vec<String> = targets(&pod, "logs").into_iter().map(|t| t.path).collect();
        assert_eq!(
            got,
            [
                "logs/p/init.log",
                "logs/p/main.log",
                "logs/p/main.previous.log"
            ]
        );
    }
}
