//! The operator's HTTP servers against hostile and unauthorised clients (issue 35, item 8): a
//! client that stalls inside its request line is disconnected within the header read timeout,
//! on the metrics and the probe port; connections over the limit are closed at once; and with
//! `METRICS_AUTH=tokenreview`, /metrics answers 401 without a valid token, 403 to a
//! ServiceAccount without the metrics-reader role, and 200 to one bound to the ClusterRole
//! `deploy/metrics-auth/` ships, while the probes ask for nothing.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::deploy::repo;
use crate::support::{Operator, TestCtx, install_crds, run, service_account_token};

/// `GET path` (with a bearer token when given): the status code, 0 when there is no answer.
fn status(port: u16, path: &str, token: Option<&str>) -> u16 {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\n{}Connection: close\r\n\r\n",
        auth.unwrap_or_default()
    );
    let mut out = String::new();
    if s.write_all(req.as_bytes()).is_err() || s.read_to_string(&mut out).is_err() {
        return 0;
    }
    out.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// How long the server keeps a connection open once it has sent `sent`; panics after 15 s.
fn closed_after(port: u16, sent: &[u8]) -> Duration {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("read timeout");
    s.write_all(sent).expect("send");
    let start = Instant::now();
    // EOF, or a reset: closed either way. Only our own read timeout means still open.
    if let Err(e) = s.read_to_end(&mut Vec::new()) {
        assert!(
            !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "the connection is still open after {:?}",
            start.elapsed()
        );
    }
    start.elapsed()
}

async fn wait_serving(ctx: &TestCtx, op: &Operator) {
    let port = op.probe_port;
    ctx.wait_for("the probe server", Duration::from_secs(60), || async move {
        (status(port, "/healthz", None) == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn stalled_and_excess_connections_are_closed() {
    install_crds();
    let ctx = TestCtx::new("metrics-slow").await;
    let op = Operator::start(
        &ctx,
        &[
            ("METRICS_HEADER_READ_TIMEOUT", "2s"),
            ("METRICS_REQUEST_TIMEOUT", "10s"),
            ("METRICS_MAX_CONNECTIONS", "2"),
        ],
    );
    wait_serving(&ctx, &op).await;
    for (server, port) in [("metrics", op.metrics_port), ("probes", op.probe_port)] {
        // Slowloris: part of a request line, then nothing.
        let took = closed_after(port, b"GET /metr");
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
            "{server}: a stalled request was closed after {took:?}, not at the 2 s header timeout"
        );
    }

    // Two stalled clients hold both slots: a third connection is closed at once, and the
    // server serves again once the stalled ones are dropped.
    let port = op.metrics_port;
    let stalled: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.write_all(b"GET /").expect("send");
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let took = closed_after(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        took < Duration::from_secs(1),
        "an excess connection stayed {took:?}"
    );
    ctx.wait_for("a free slot", Duration::from_secs(10), || async move {
        (status(port, "/metrics", None) == 200).then_some(())
    })
    .await;
    drop(stalled);
    assert!(op.running(), "the operator exited:\n{}", op.log_tail(30));
}

/// Cluster-scoped objects of one test, deleted however it ends.
struct ClusterObjects<'a>(&'a TestCtx, Vec<String>);

impl Drop for ClusterObjects<'_> {
    fn drop(&mut self) {
        for obj in &self.1 {
            let _ = self.0.kubectl(&["delete", obj, "--ignore-not-found"]);
        }
    }
}

/// deploy/metrics-auth/'s `skyhook-metrics-reader` under `name`: the shipped rules, without
/// touching what other tests see.
fn reader_role(name: &str) -> String {
    let path = repo().join("deploy/metrics-auth/rbac-metrics-auth.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/metrics-auth/rbac-metrics-auth.yaml");
    let doc = text
        .split("\n---\n")
        .find(|d| d.contains("name: skyhook-metrics-reader"))
        .expect("the skyhook-metrics-reader ClusterRole");
    doc.replace("name: skyhook-metrics-reader", &format!("name: {name}"))
}

#[tokio::test]
async fn with_tokenreview_metrics_need_a_token_allowed_to_get_them() {
    install_crds();
    let ctx = TestCtx::new("metrics-auth").await;
    let role = ctx.name("reader");
    let _cleanup = ClusterObjects(
        &ctx,
        vec![
            format!("clusterrolebinding/{role}"),
            format!("clusterrole/{role}"),
        ],
    );
    let applied = ctx.kubectl_stdin(&["apply", "-f", "-"], reader_role(&role).as_bytes());
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let nobody = service_account_token(&ctx, "nobody");
    let reader = service_account_token(&ctx, "reader");
    let reader_sa = format!("{}:reader", ctx.ns);
    run(ctx.cluster.kubectl().args([
        "create",
        "clusterrolebinding",
        &role,
        &format!("--clusterrole={role}"),
        &format!("--serviceaccount={reader_sa}"),
    ]));
    // Ask only once RBAC answers yes: a "no" would be cached by the operator for a minute.
    let user = format!("--as=system:serviceaccount:{reader_sa}");
    ctx.wait_for("the reader's binding", Duration::from_secs(30), || {
        let out = ctx.kubectl(&["auth", "can-i", "get", "/metrics", &user]);
        async move { out.status.success().then_some(()) }
    })
    .await;

    let op = Operator::start(&ctx, &[("METRICS_AUTH", "tokenreview")]);
    wait_serving(&ctx, &op).await;
    let port = op.metrics_port;
    for (who, token, want) in [
        ("no token", None, 401),
        ("a token the API server rejects", Some("not-a-token"), 401),
        (
            "a ServiceAccount without the role",
            Some(nobody.as_str()),
            403,
        ),
        (
            "a ServiceAccount bound to the reader role",
            Some(reader.as_str()),
            200,
        ),
    ] {
        assert_eq!(status(port, "/metrics", token), want, "{who}");
    }
    assert_eq!(
        status(op.probe_port, "/healthz", None),
        200,
        "probes need no token"
    );
}
