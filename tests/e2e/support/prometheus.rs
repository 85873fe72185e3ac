//! A real Prometheus (built from its Go module by `tests/cluster/build-prometheus`) scraping a
//! gauge the test sets, with a real alerting rule on it: [`Prometheus::start`] and [`Gauge`].

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use super::{TestCtx, cluster, free_port};

/// A metric `name` served at `http://127.0.0.1:<port>/metrics`, whose value the test sets.
pub struct Gauge {
    pub port: u16,
    value: Arc<AtomicI64>,
    task: tokio::task::JoinHandle<()>,
}

impl Gauge {
    pub async fn serve(name: &str, value: i64) -> Gauge {
        let shared = Arc::new(AtomicI64::new(value));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the gauge");
        let port = listener.local_addr().expect("address").port();
        let (name, read) = (name.to_string(), shared.clone());
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let v = read.load(Ordering::Relaxed);
                let name = name.clone();
                async move { format!("# TYPE {name} gauge\n{name} {v}\n") }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Gauge {
            port,
            value: shared,
            task,
        }
    }

    pub fn set(&self, value: i64) {
        self.value.store(value, Ordering::Relaxed);
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A Prometheus process of the test: scrapes `targets` every second and evaluates `rules` (a
/// rule file's YAML) every second.
pub struct Prometheus {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl Prometheus {
    pub async fn start(ctx: &TestCtx, targets: &[u16], rules: &str) -> Prometheus {
        let binary = cluster().prometheus.clone();
        assert!(
            binary.exists(),
            "{} is missing: run tests/cluster/build-prometheus",
            binary.display()
        );
        let dir = std::env::temp_dir().join(ctx.name("prometheus"));
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        let targets: Vec<String> = targets
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect();
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [rules.yml]\n\
             scrape_configs:\n\
             - job_name: e2e\n  static_configs: [{{targets: [{}]}}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("config");
        std::fs::write(dir.join("rules.yml"), rules).expect("rules");
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
        let child = Command::new(&binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Prometheus {
            port,
            child: Some(child),
            dir,
        };
        ctx.wait_for("Prometheus ready", Duration::from_secs(60), || async {
            get(port, "/-/ready").contains(" 200 ").then_some(())
        })
        .await;
        p
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `/api/v1/alerts` as Prometheus answers it.
    pub fn alerts(&self) -> String {
        get(self.port, "/api/v1/alerts")
    }

    /// Any path of its HTTP API, as it answers it (status line, headers, body).
    pub fn get(&self, path: &str) -> String {
        get(self.port, path)
    }

    /// Stops the process (the gate then cannot read it).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The last lines of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A plain HTTP/1.0 GET of `path`: the status line and body; empty when nothing listens.
fn get(port: u16, path: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let mut out = String::new();
    let sent = write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
    if sent.is_err() || s.read_to_string(&mut out).is_err() {
        return String::new();
    }
    out
}
