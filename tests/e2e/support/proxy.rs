//! A fault-injecting HTTP proxy in front of the test cluster's API server: the operator talks
//! plain HTTP to 127.0.0.1, the proxy forwards through an authenticated kube `Client`, and a
//! seeded share of requests fails: a 500, a 429, or a dropped connection after the request
//! reached the API server (its response is lost, the hardest case for a writer). Its [`Gate`]
//! can also hold one chosen node patch or Skyhook status write until the test releases it, which opens the window
//! between a pass reading a node and its write landing for as long as a test needs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use futures::stream;
use http::StatusCode;

pub struct FaultProxy {
    pub kubeconfig: PathBuf,
    pub faults: Arc<AtomicU64>,
    pub requests: Arc<AtomicU64>,
    pub gate: Arc<Gate>,
    refusals: Refusals,
    task: tokio::task::JoinHandle<()>,
}

/// Chosen refusals: the next `times` requests of a method whose path contains a text are
/// answered with a status, without reaching the API server.
type Refusals = Arc<std::sync::Mutex<Vec<Refusal>>>;

struct Refusal {
    method: http::Method,
    path_has: String,
    code: StatusCode,
    times: u32,
}

impl FaultProxy {
    /// Answers the next `times` `method` requests whose path contains `path_has` with `code`.
    pub fn refuse_next(&self, method: http::Method, path_has: &str, code: u16, times: u32) {
        let code = StatusCode::from_u16(code).expect("an HTTP status");
        self.refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Refusal {
                method,
                path_has: path_has.to_string(),
                code,
                times,
            });
    }

    /// How many chosen refusals are still to be answered.
    pub fn refusals_left(&self) -> u32 {
        self.refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|r| r.times)
            .sum()
    }
}

/// The status of a chosen refusal this request meets, if any (counted down).
fn refused(refusals: &Refusals, method: &http::Method, path: &str) -> Option<StatusCode> {
    let mut all = refusals
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = all
        .iter_mut()
        .find(|r| r.times > 0 && r.method == method && path.contains(&r.path_has))?;
    r.times -= 1;
    Some(r.code)
}

/// Holds the next write of a kind ([`Held`]) whose body contains a given text, until the test
/// releases it: the caller's write is then in flight, computed from what it read before, while
/// the test changes the object.
#[derive(Default)]
pub struct Gate {
    /// What to hold, the text to look for, and where to send the held body.
    armed: std::sync::Mutex<Option<Armed>>,
    release: tokio::sync::Notify,
}

type Armed = (Held, String, tokio::sync::mpsc::UnboundedSender<String>);

/// The writes a [`Gate`] can hold.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A node metadata patch (`PATCH /api/v1/nodes/<name>`).
    NodePatch,
    /// A Skyhook status write (`PATCH` or `PUT .../skyhooks/<name>/status`).
    SkyhookStatus,
}

impl Held {
    fn matches(self, method: &http::Method, path: &str) -> bool {
        match self {
            Held::NodePatch => {
                method == http::Method::PATCH
                    && path.starts_with("/api/v1/nodes/")
                    && !path.ends_with("/status")
            }
            Held::SkyhookStatus => {
                (method == http::Method::PATCH || method == http::Method::PUT)
                    && path.starts_with("/apis/skyhook.nvidia.com/")
                    && path.contains("/skyhooks/")
                    && path.ends_with("/status")
            }
        }
    }
}

impl Gate {
    /// Holds the next node patch whose body contains `needle`; the receiver gets its body.
    pub fn arm(&self, needle: &str) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        self.arm_for(Held::NodePatch, needle)
    }

    /// Holds the next write of `what` whose body contains `needle`.
    pub fn arm_for(
        &self,
        what: Held,
        needle: &str,
    ) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self.lock() = Some((what, needle.to_string(), tx));
        rx
    }

    /// Lets the held patch through.
    pub fn release(&self) {
        self.release.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Armed>> {
        self.armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for the release if this request is the one armed for.
    async fn pass(&self, method: &http::Method, path: &str, body: &[u8]) {
        let text = String::from_utf8_lossy(body);
        let tx = {
            let mut armed = self.lock();
            match armed.as_ref() {
                Some((what, needle, _))
                    if what.matches(method, path) && text.contains(needle.as_str()) =>
                {
                    armed.take().map(|(_, _, tx)| tx)
                }
                _ => None,
            }
        };
        let text = text.into_owned();
        if let Some(tx) = tx {
            let _ = tx.send(text);
            self.release.notified().await;
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Shared {
    client: kube::Client,
    seed: u64,
    percent: u64,
    faults: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    gate: Arc<Gate>,
    refusals: Refusals,
}

/// splitmix64: a fixed, seeded sequence of fault decisions.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Starts the proxy and writes a kubeconfig pointing at it into `dir`.
pub async fn start(client: kube::Client, seed: u64, percent: u64, dir: &Path) -> FaultProxy {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let port = listener.local_addr().expect("addr").port();
    let shared = Shared {
        client,
        seed,
        percent,
        faults: Arc::new(AtomicU64::new(0)),
        requests: Arc::new(AtomicU64::new(0)),
        gate: Arc::new(Gate::default()),
        refusals: Refusals::default(),
    };
    let (faults, requests, gate, refusals) = (
        shared.faults.clone(),
        shared.requests.clone(),
        shared.gate.clone(),
        shared.refusals.clone(),
    );
    let app = axum::Router::new().fallback(forward).with_state(shared);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let kubeconfig = dir.join(format!("proxy-{port}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: p\n  context:\n    cluster: p\n    user: u\ncurrent-context: p\n"
    );
    std::fs::write(&kubeconfig, text).expect("write the proxy kubeconfig");
    FaultProxy {
        kubeconfig,
        faults,
        requests,
        gate,
        refusals,
        task,
    }
}

fn status(code: StatusCode, reason: &str) -> Response {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("injected fault: {reason}"), "reason": reason, "code": code.as_u16()});
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .header("retry-after", "1")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

async fn forward(State(s): State<Shared>, req: Request) -> Response {
    let n = s.requests.fetch_add(1, Ordering::SeqCst);
    if let Some(code) = refused(&s.refusals, req.method(), req.uri().path()) {
        let reason = code
            .canonical_reason()
            .unwrap_or("Refused")
            .replace(' ', "");
        return status(code, &reason);
    }
    let roll = mix(s.seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let fault = (roll % 100 < s.percent).then_some((roll >> 32) % 3);
    if fault.is_some() {
        s.faults.fetch_add(1, Ordering::SeqCst);
    }
    match fault {
        Some(0) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
        Some(1) => return status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
        _ => {}
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return status(StatusCode::BAD_REQUEST, "BadRequest");
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    s.gate.pass(&parts.method, parts.uri.path(), &bytes).await;
    let mut out = http::Request::builder().method(parts.method).uri(path);
    for (k, v) in &parts.headers {
        if !matches!(k.as_str(), "host" | "authorization" | "content-length") {
            out = out.header(k, v);
        }
    }
    let Ok(out) = out.body(kube::client::Body::from(bytes.to_vec())) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest");
    };
    let resp = match s.client.send(out).await {
        Ok(r) => r,
        Err(e) => return status(StatusCode::BAD_GATEWAY, &format!("Upstream: {e}")),
    };
    if fault.is_some() {
        // The API server did the work; the caller never hears of it.
        let dropped = stream::once(async {
            Err::<axum::body::Bytes, std::io::Error>(std::io::Error::other(
                "injected: connection dropped",
            ))
        });
        return Response::new(Body::from_stream(dropped));
    }
    let (mut head, body) = resp.into_parts();
    head.headers.remove("transfer-encoding");
    head.headers.remove("connection");
    Response::from_parts(head, Body::new(body))
}
