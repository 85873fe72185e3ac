//! Notifications (issue 38, acceptance 5) to a test receiver: exactly one message per event
//! across an operator SIGKILL and restart; a receiver answering 500 for a minute delays nothing
//! in the rollout, and the messages arrive after it recovers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use skyhook::schema::{self, Status};

use crate::support::{Env, create_policy, pkg, setup, skyhook, sleep};

/// What the receiver got: (path, notification id, body), in order.
type Received = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A webhook receiver on 127.0.0.1: records every POST, answers 500 while `failing`.
struct Receiver {
    port: u16,
    got: Received,
    failing: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(failing: bool) -> Receiver {
        let got: Received = Arc::default();
        let failing = Arc::new(AtomicBool::new(failing));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the receiver");
        let port = listener.local_addr().expect("address").port();
        let (g, f) = (got.clone(), failing.clone());
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: String| {
                let (g, f) = (g.clone(), f.clone());
                async move {
                    if f.load(Ordering::Relaxed) {
                        return axum::http::StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    let id = headers
                        .get(schema::NOTIFICATION_ID_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                    g.lock()
                        .expect("lock")
                        .push((uri.path().to_string(), id, v));
                    axum::http::StatusCode::OK
                }
            },
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            port,
            got,
            failing,
            task,
        }
    }

    fn got(&self) -> Vec<(String, String, Value)> {
        self.got.lock().expect("lock").clone()
    }

    /// JSON notifications received, by kind.
    fn kinds(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (path, _, v) in self.got() {
            if path == "/json" {
                let kind = v["kind"].as_str().unwrap_or("?").to_string();
                *out.entry(kind).or_default() += 1;
            }
        }
        out
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Secret of targets in the test operator's namespace: the receiver as JSON and as Slack.
async fn targets(env: &Env, port: u16) {
    let yaml = format!(
        "- name: json\n  url: http://127.0.0.1:{port}/json\n- name: chat\n  url: http://127.0.0.1:{port}/slack\n  format: slack\n"
    );
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": schema::NOTIFICATIONS_SECRET},
        "stringData": {schema::NOTIFICATIONS_TARGETS_KEY: yaml},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(env.ctx.client.clone(), &env.ctx.ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the targets Secret");
}

async fn rollout(env: &Env, sleep_s: &str) -> String {
    let spec =
        json!({"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}});
    let policy = create_policy(&env.ctx, spec).await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": policy, "packages": {"tool": pkg("1.0.0", sleep(sleep_s))}}),
    ))
    .await;
    sk
}

/// Waits until both batches and the completion were announced (as JSON).
async fn wait_announced(env: &Env, receiver: &Receiver, step: &str) {
    env.ctx
        .eventually(step, Duration::from_secs(60), || async {
            let kinds = receiver.kinds();
            match (kinds.get("BatchStarted"), kinds.get("RolloutComplete")) {
                (Some(2), Some(1)) => Ok(()),
                _ => Err(format!("{kinds:?}")),
            }
        })
        .await;
}

/// Every (target, id) once, and the JSON and Slack targets got the same notifications.
fn assert_exactly_once(got: &[(String, String, Value)]) {
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (path, id, _) in got {
        assert!(!id.is_empty(), "a notification without its id header");
        *seen.entry((path.clone(), id.clone())).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let ids = |p: &str| -> Vec<&String> {
        seen.keys()
            .filter(|(path, _)| path == p)
            .map(|(_, id)| id)
            .collect()
    };
    assert_eq!(
        ids("/json"),
        ids("/slack"),
        "both targets got the same notifications"
    );
}

#[tokio::test]
async fn each_notification_arrives_once_across_a_sigkill() {
    let mut env = setup("gates-notify", 2, &[("NOTIFICATIONS", "true")]).await;
    let receiver = Receiver::start(false).await;
    targets(&env, receiver.port).await;
    let sk = rollout(&env, "6").await;
    env.ctx
        .eventually("batch 1 announced", Duration::from_secs(60), || async {
            match receiver.kinds().get("BatchStarted") {
                Some(_) => Ok(()),
                None => Err(format!("{:?}", receiver.got())),
            }
        })
        .await;
    // A crash in the middle of the rollout.
    env.op.restart(&env.ctx);
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
    wait_announced(&env, &receiver, "the rollout announced complete").await;
    // Nothing more comes later, and nothing came twice.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = receiver.got();
    assert_exactly_once(&got);
    let complete = got
        .iter()
        .find(|(p, _, v)| p == "/json" && v["kind"] == "RolloutComplete")
        .expect("RolloutComplete");
    assert_eq!(complete.2["skyhook"], json!(sk));
    let slack = got
        .iter()
        .find(|(p, _, _)| p == "/slack")
        .expect("a Slack message");
    assert!(
        slack.2["text"].as_str().is_some_and(|t| t.contains(&sk)),
        "{:?}",
        slack.2
    );
}

#[tokio::test]
async fn a_failing_receiver_delays_nothing_and_gets_its_messages_after() {
    let env = setup("gates-notify-500", 2, &[("NOTIFICATIONS", "true")]).await;
    let receiver = Receiver::start(true).await;
    targets(&env, receiver.port).await;
    let started = Instant::now();
    let sk = rollout(&env, "1").await;
    // The rollout completes while every delivery fails.
    env.wait_status(&sk, Status::Complete, Duration::from_secs(55))
        .await;
    let took = started.elapsed();
    assert!(receiver.got().is_empty());
    // The receiver answers 500 for a minute, then recovers: everything arrives, once.
    let minute = Duration::from_secs(60).saturating_sub(started.elapsed());
    tokio::time::sleep(minute).await;
    receiver.failing.store(false, Ordering::Relaxed);
    wait_announced(&env, &receiver, "the messages after the receiver recovered").await;
    assert_exactly_once(&receiver.got());
    eprintln!("rollout with a failing receiver took {took:?}");
}
