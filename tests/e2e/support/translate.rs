//! Runs a test written for Skyhooks against NodeWrights (issue 39, acceptance 1): an HTTP proxy
//! in front of the API server through which the test (its client, kubectl and the plugin)
//! speaks the legacy API, while the cluster holds NodeWrights and the operator reconciles them.
//!
//! Requests go out in the new API: the path `/apis/skyhook.nvidia.com/.../skyhooks` becomes
//! `/apis/nodewright.nvidia.com/.../nodewrights`, and every `skyhook.nvidia.com` in a path, query
//! (label selectors) or body (node keys, taints, kinds) becomes `nodewright.nvidia.com`. Answers
//! come back the other way. Keys the cluster holds under the legacy prefix are renamed to
//! `legacy.skyhook.invalid` on the way back, so that a NodeWright run can never pass on a legacy
//! key the operator should not have written.

use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use futures::StreamExt;
use http::StatusCode;

/// The running proxy; stops when dropped. It runs on a thread and runtime of its own: a test
/// calls kubectl synchronously, which would otherwise wait for a proxy its own blocked runtime
/// serves.
pub struct Translator {
    pub kubeconfig: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Translator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Written into the shared temporary directory: left there, one per test run piles up.
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// What the test wrote, in the new API.
pub fn outward(text: &str) -> String {
    text.replace(
        "skyhook.nvidia.com/skyhook",
        "nodewright.nvidia.com/nodewright",
    )
    .replace("skyhook.nvidia.com", "nodewright.nvidia.com")
    .replace("\"kind\":\"Skyhook\"", "\"kind\":\"NodeWright\"")
    .replace("\"kind\": \"Skyhook\"", "\"kind\": \"NodeWright\"")
    .replace("/skyhooks", "/nodewrights")
}

/// What the cluster answered, in the legacy API (legacy keys hidden).
pub fn inward(text: &str) -> String {
    text.replace("skyhook.nvidia.com", "legacy.skyhook.invalid")
        .replace(
            "nodewright.nvidia.com/nodewright",
            "skyhook.nvidia.com/skyhook",
        )
        .replace("nodewright.nvidia.com", "skyhook.nvidia.com")
        .replace("NodeWright", "Skyhook")
        .replace("nodewrights", "skyhooks")
        .replace("\"nodewright\"", "\"skyhook\"")
}

/// Starts the proxy in front of the cluster of `cluster_kubeconfig` and writes a kubeconfig
/// pointing at it into `dir`.
pub fn start(cluster_kubeconfig: &Path, dir: &Path) -> Translator {
    let (ready, port) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let source = cluster_kubeconfig.to_path_buf();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the translating proxy's runtime");
        runtime.block_on(async move {
            let kc = kube::config::Kubeconfig::read_from(&source).expect("read kubeconfig");
            let options = kube::config::KubeConfigOptions::default();
            let config = kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .expect("kubeconfig is valid");
            let client = kube::Client::try_from(config).expect("client");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind the translating proxy");
            let _ = ready.send(listener.local_addr().expect("addr").port());
            let app = axum::Router::new().fallback(forward).with_state(client);
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            let _ = serve.await;
        });
    });
    let port = port.recv().expect("the translating proxy's port");
    let kubeconfig = dir.join(format!("nodewright-{port}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: p\n  context:\n    cluster: p\n    user: u\ncurrent-context: p\n"
    );
    std::fs::write(&kubeconfig, text).expect("write the translating proxy's kubeconfig");
    Translator {
        kubeconfig,
        stop: Some(stop),
    }
}

fn failed(code: StatusCode, message: String) -> Response {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": message, "reason": "InternalError", "code": code.as_u16()});
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

async fn forward(State(client): State<kube::Client>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return failed(StatusCode::BAD_REQUEST, "unreadable request body".into());
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = http::Request::builder()
        .method(parts.method.clone())
        .uri(outward(path));
    for (k, v) in &parts.headers {
        match k.as_str() {
            "host" | "authorization" | "content-length" | "accept-encoding" => {}
            // Protobuf cannot be rewritten as text: ask for JSON.
            "accept" if v.to_str().is_ok_and(|a| a.contains("protobuf")) => {
                out = out.header(k, "application/json");
            }
            _ => out = out.header(k, v),
        }
    }
    let body = outward(&String::from_utf8_lossy(&bytes));
    let Ok(out) = out.body(kube::client::Body::from(body.into_bytes())) else {
        return failed(StatusCode::BAD_REQUEST, "unbuildable request".into());
    };
    let resp = match client.send(out).await {
        Ok(r) => r,
        Err(e) => return failed(StatusCode::BAD_GATEWAY, format!("upstream: {e}")),
    };
    let (mut head, body) = resp.into_parts();
    for h in ["transfer-encoding", "connection", "content-length"] {
        head.headers.remove(h);
    }
    // Line by line: a watch sends one event per line, and a word is never split between two
    // pieces; what follows the last newline is translated at the end.
    let frames = http_body_util::BodyStream::new(body);
    let translated = futures::stream::unfold(
        (Box::pin(frames), Vec::<u8>::new(), false),
        |(mut frames, mut pending, done)| async move {
            if done {
                return None;
            }
            loop {
                match frames.next().await {
                    Some(Ok(frame)) => {
                        pending.extend_from_slice(&frame.into_data().unwrap_or_default());
                        if let Some(end) = pending.iter().rposition(|b| *b == b'\n') {
                            let complete: Vec<u8> = pending.drain(..=end).collect();
                            let text = inward(&String::from_utf8_lossy(&complete));
                            let item = Ok(axum::body::Bytes::from(text));
                            return Some((item, (frames, pending, false)));
                        }
                    }
                    Some(Err(e)) => {
                        let item = Err(std::io::Error::other(e));
                        return Some((item, (frames, pending, true)));
                    }
                    None => {
                        let text = inward(&String::from_utf8_lossy(&pending));
                        let item = Ok(axum::body::Bytes::from(text));
                        return Some((item, (frames, Vec::new(), true)));
                    }
                }
            }
        },
    );
    Response::from_parts(head, Body::from_stream(translated))
}
