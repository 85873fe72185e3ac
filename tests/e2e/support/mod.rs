//! Test-support layer shared by every e2e test: test files import helpers from here only, never
//! from one another.
//!
//! The local cluster (`tests/cluster/up`) is brought up once per test run, or reused when it is
//! already running, and shared by all tests, which run in parallel. Each test gets a [`TestCtx`]
//! with unique object names, its own namespace and, where it needs them, its own nodes. Waits
//! fail with a clear message, and a failing test prints the relevant objects and the tail of each
//! component's log.
//!
//! The kit, for a new test:
//!
//! - Environment: [`setup`]`(test, nodes, operator_env)` gives an [`Env`]: the context
//!   (`env.ctx`), the test's nodes (`env.nodes`), its operator (`env.op`) and the Skyhook, Job
//!   and Node APIs; [`Env::new`] wraps an operator started by hand ([`Operator::start_named`]).
//!   Without an operator: [`TestCtx::new`] and [`TestCtx::add_test_nodes`].
//! - Objects: [`skyhook`]`(&env.ctx, name, spec)` selects exactly the test's nodes, with
//!   packages from [`pkg`]`(version, `[`sleep`]`("1"))`; create it with [`Env::create`]; a
//!   DeploymentPolicy with [`create_policy`]. Read back: [`Env::condition`],
//!   [`Env::batch_state`].
//! - Waits: [`TestCtx::wait_for`] (probe returns `Option`), [`TestCtx::eventually`] (probe
//!   returns `Result`, the panic carries the last reason), [`TestCtx::holds_for`];
//!   [`wait_complete`] with [`Complete::current`] or [`Complete::any_generation`];
//!   [`wait_metric`]; [`Env::wait_status`], [`Env::wait_event`].
//! - Expectations: [`NodeExpect`] (status, per-package [`PackageExpect`], node conditions,
//!   cordon) and [`SkyhookExpect`] (status, generation, per-node state and status, counters):
//!   `check` returns every difference, `assert` panics with them; [`wait_node`] and
//!   [`wait_skyhook`] wait until one holds.
//! - Jobs and metrics: [`Env::jobs_of`], [`label`], [`jobs_per_attempt`];
//!   [`metrics::metrics`] and [`metrics::samples`].
//! - Identities: [`service_account_token`] (a ServiceAccount without permissions, and a token).
//! - Interrupts: [`interrupts::SlowInterrupts`] keeps interrupt pods running (or fails them).
//! - Refused writes: [`refusal::Refusal`] (a ValidatingAdmissionPolicy of the test).
//! - Prometheus: [`prometheus::Prometheus`] (a real one, scraping a [`prometheus::Gauge`]).
//! - Elsewhere: [`deploy`] (the `deploy/` manifests), [`plugin`] (the kubectl plugin),
//!   [`private`] (a cluster of one's own), [`proxy`] (a faulty API server in between).

#![allow(dead_code)]

pub mod bundle;
pub mod deploy;
pub mod env;
pub mod expect;
pub mod image;
pub mod interrupts;
pub mod metrics;
pub mod nodewrights;
pub mod objects;
pub mod plugin;
pub mod private;
pub mod prometheus;
pub mod promql;
pub mod proxy;
pub mod real;
pub mod refusal;
pub mod rights;
pub mod roles;
pub mod translate;
pub mod wait;

pub use env::{Env, cordoned, create_policy, label, setup};
pub use expect::{NodeExpect, PackageExpect, SkyhookExpect, wait_node, wait_skyhook};
pub use objects::{pkg, reboot_pkg, skyhook, sleep};
pub use wait::{Complete, wait_complete, wait_metric};

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Where the cluster scripts live.
pub fn cluster_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cluster")
}

/// What `tests/cluster/env` exports: the kubeconfig and the directory of the control-plane binaries.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub kubeconfig: PathBuf,
    pub bin_dir: PathBuf,
    pub state_dir: PathBuf,
    /// Prometheus, built from its Go module (`tests/cluster/build-prometheus`).
    pub prometheus: PathBuf,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

/// The shared cluster, started on first use (blocking: other tests wait for the first).
pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        let up = cluster_dir().join("up");
        let out = Command::new(&up)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", up.display()));
        if !out.status.success() {
            panic!(
                "{} failed ({}):\n{}",
                up.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        read_env()
    })
}

fn read_env() -> Cluster {
    let env = cluster_dir().join("env");
    let out = run(&mut Command::new(&env));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut kubeconfig = None;
    let mut bin_dir = None;
    let mut prometheus = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("export SKYHOOK_TEST_PROMETHEUS=") {
            prometheus = Some(PathBuf::from(v));
        }
        if let Some(v) = line.strip_prefix("export KUBECONFIG=") {
            kubeconfig = Some(PathBuf::from(v));
        } else if let Some(v) = line.strip_prefix("export PATH=") {
            bin_dir = v.split(':').next().map(PathBuf::from);
        }
    }
    let kubeconfig = kubeconfig.expect("tests/cluster/env printed no KUBECONFIG");
    let state_dir = kubeconfig
        .parent()
        .expect("kubeconfig has a parent directory")
        .to_path_buf();
    Cluster {
        kubeconfig,
        bin_dir: bin_dir.expect("tests/cluster/env printed no PATH"),
        state_dir,
        prometheus: prometheus.expect("tests/cluster/env printed no SKYHOOK_TEST_PROMETHEUS"),
    }
}

/// Run a command to completion, panicking with its stderr when it fails.
pub fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    if !out.status.success() {
        panic!(
            "{shown} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

impl Cluster {
    /// A client for the cluster; make one per test, since it is bound to the test's runtime.
    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("read kubeconfig");
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig is valid");
        Client::try_from(config).expect("client")
    }

    /// `kubectl` of the control plane's version, pointed at this cluster.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("kubectl"));
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }

    /// The last `lines` lines of every component's log.
    pub fn component_logs(&self, lines: usize) -> String {
        let mut out = String::new();
        let Ok(dir) = std::fs::read_dir(self.state_dir.join("logs")) else {
            return out;
        };
        let mut files: Vec<_> = dir.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(lines).collect();
            out.push_str(&format!("==> {} <==\n", f.display()));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

tokio::task_local! {
    /// The API a test runs on, when not the legacy one (`under`).
    static UNDER: skyhook::schema::Api;
}

/// The API the running test's objects belong to: Skyhooks, unless run through [`under`].
pub fn kind() -> skyhook::schema::Api {
    UNDER.try_with(|k| *k).unwrap_or_default()
}

/// Runs a test written for Skyhooks on objects of `kind`: its [`setup`] then installs that API's
/// CRDs, serves only it, and translates (see `translate`).
pub async fn under<F: std::future::Future>(kind: skyhook::schema::Api, test: F) -> F::Output {
    UNDER.scope(kind, test).await
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short suffix unique to this process and call, so reruns against a reused cluster never
/// collide with leftovers.
fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mixed = (nanos as u64) ^ ((std::process::id() as u64) << 20) ^ ((n as u64) << 48);
    format!("{:06x}", mixed % 0xff_ffff)
}

/// Per-test context: unique names, a namespace, nodes, and a failure report.
pub struct TestCtx {
    pub cluster: &'static Cluster,
    pub client: Client,
    /// What the test's kubectl and plugin runs use: the cluster's, or a translating proxy's
    /// when the test runs on NodeWrights ([`kind`]).
    pub kubeconfig: PathBuf,
    /// The proxy behind `client` and `kubeconfig` on a NodeWright run.
    translator: Option<translate::Translator>,
    /// Unique, DNS-safe prefix for every object this test creates.
    pub prefix: String,
    /// The test's own namespace.
    pub ns: String,
    nodes: Vec<String>,
    /// Extra commands whose output the failure report includes (e.g. `get jobs -o yaml`).
    report: Vec<Vec<String>>,
}

impl TestCtx {
    /// `test` becomes part of every name: keep it short, lowercase, dash-separated.
    pub async fn new(test: &str) -> TestCtx {
        let cluster = cluster();
        let client = cluster.client().await;
        let prefix = format!("{test}-{}", unique_suffix());
        let ns = prefix.clone();
        let nss: Api<Namespace> = Api::all(client.clone());
        let mut obj = Namespace::default();
        obj.metadata.name = Some(ns.clone());
        obj.metadata.labels = Some([("skyhook-e2e".to_string(), "true".to_string())].into());
        nss.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create namespace {ns}: {e}"));
        let ctx = TestCtx {
            cluster,
            client,
            kubeconfig: cluster.kubeconfig.clone(),
            translator: None,
            prefix,
            ns,
            nodes: Vec::new(),
            report: Vec::new(),
        };
        // The ServiceAccount admission plugin rejects pods until the default account exists.
        let sas: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &ctx.ns);
        ctx.wait_for(
            "the default ServiceAccount",
            Duration::from_secs(60),
            || {
                let sas = sas.clone();
                async move { sas.get_opt("default").await.ok().flatten() }
            },
        )
        .await;
        ctx
    }

    /// A unique object name: `<prefix>-<suffix>`.
    pub fn name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.prefix)
    }

    /// Fresh nodes for this test alone, removed when the test ends.
    pub fn add_nodes(&mut self, n: usize) -> Vec<String> {
        let out = run(Command::new(cluster_dir().join("nodes"))
            .args(["add", &n.to_string()])
            .env("KUBECONFIG", &self.cluster.kubeconfig));
        let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(
            names.len(),
            n,
            "tests/cluster/nodes add {n} printed {names:?}"
        );
        self.nodes.extend(names.iter().cloned());
        names
    }

    /// Include `kubectl <args>` output in the failure report.
    pub fn report_on_failure(&mut self, args: &[&str]) {
        self.report
            .push(args.iter().map(|s| s.to_string()).collect());
    }

    /// Run kubectl against the cluster; returns the raw output (does not panic on failure).
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.own_kubectl().args(args).output().expect("run kubectl")
    }

    /// kubectl with the test's kubeconfig (through the translating proxy on a NodeWright run).
    fn own_kubectl(&self) -> Command {
        let mut cmd = self.cluster.kubectl();
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }

    /// From here on the test speaks the legacy API to NodeWrights: its client, kubectl and
    /// plugin go through a translating proxy (`translate`); the operator, started with the
    /// cluster's own kubeconfig, sees NodeWrights.
    pub async fn translate_to_nodewrights(&mut self) {
        let proxy = translate::start(&self.cluster.kubeconfig, &std::env::temp_dir());
        let kc = Kubeconfig::read_from(&proxy.kubeconfig).expect("read the proxy kubeconfig");
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("the proxy kubeconfig is valid");
        self.client = Client::try_from(config).expect("a client of the proxy");
        self.kubeconfig = proxy.kubeconfig.clone();
        self.translator = Some(proxy);
    }

    /// [`TestCtx::kubectl`] with `input` piped into its stdin (`apply -f -`).
    pub fn kubectl_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        use std::io::Write;
        use std::process::Stdio;
        let mut child = self
            .own_kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write kubectl stdin");
        child.wait_with_output().expect("kubectl output")
    }

    /// Poll `probe` every 200 ms until it returns `Some`, or panic after `timeout` naming `what`.
    pub async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let found = wait::poll(timeout, || {
            let next = probe();
            async move { next.await.ok_or_else(String::new) }
        })
        .await;
        found.unwrap_or_else(|_| {
            panic!(
                "timed out after {:.0?} waiting for {what} (test {})",
                timeout.mul_f64(wait::timeout_scale()),
                self.prefix
            )
        })
    }

    /// As [`TestCtx::wait_for`], for a probe that says why it does not hold yet: the panic names
    /// `step` and carries the last reason.
    pub async fn eventually<T, F, Fut>(&self, step: &str, timeout: Duration, probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        wait::poll(timeout, probe).await.unwrap_or_else(|why| {
            panic!(
                "step `{step}` did not hold within {:?} (test {}): {why}",
                timeout.mul_f64(wait::timeout_scale()),
                self.prefix
            )
        })
    }

    /// Assert that `probe` holds at every sample for `duration` (sampled every 500 ms).
    pub async fn holds_for<F, Fut>(&self, what: &str, duration: Duration, mut probe: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let start = Instant::now();
        while start.elapsed() < duration {
            if let Err(why) = probe().await {
                panic!(
                    "{what} stopped holding after {:.1?}: {why} (test {})",
                    start.elapsed(),
                    self.prefix
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn failure_report(&self) -> String {
        let mut out = format!("\n===== failure report for test {} =====\n", self.prefix);
        let mut cmds: Vec<Vec<String>> = vec![
            vec!["get", "all,events", "-n", &self.ns, "-o", "wide"]
                .into_iter()
                .map(String::from)
                .collect(),
            vec!["get", "nodes", "-o", "wide"]
                .into_iter()
                .map(String::from)
                .collect(),
        ];
        cmds.extend(self.report.iter().cloned());
        for args in cmds {
            let o = self.cluster.kubectl().args(&args).output();
            out.push_str(&format!("--- kubectl {} ---\n", args.join(" ")));
            if let Ok(o) = o {
                out.push_str(&String::from_utf8_lossy(&o.stdout));
                out.push_str(&String::from_utf8_lossy(&o.stderr));
            }
        }
        out.push_str("--- component logs (tail) ---\n");
        out.push_str(&self.cluster.component_logs(15));
        out.push_str(&self.real_node_logs(30));
        out
    }
}

impl Drop for TestCtx {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.failure_report());
            // Keep the namespace and nodes for inspection when the cluster is reused.
            return;
        }
        let _ = self
            .cluster
            .kubectl()
            .args(["delete", "namespace", &self.ns, "--wait=false"])
            .output();
        rights::unbind(self);
        if !self.nodes.is_empty() {
            let _ = Command::new(cluster_dir().join("nodes"))
                .arg("remove")
                .args(&self.nodes)
                .env("KUBECONFIG", &self.cluster.kubeconfig)
                .output();
        }
    }
}

/// Delete with foreground propagation (the garbage collector removes dependents first).
pub fn foreground() -> DeleteParams {
    DeleteParams::foreground()
}

static CRDS: OnceLock<()> = OnceLock::new();

/// Install the project's CRDs once per test run and wait until they are served.
pub fn install_crds() {
    CRDS.get_or_init(|| {
        let c = cluster();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
        // Client-side apply, as `kubectl apply -k deploy/` (README, e2e `deploy`) does: a
        // server-side apply over a client-side applied CRD makes kubectl 1.36's next client-side
        // apply fail ("expected a struct, but received a nil").
        {
            // deploy/ applies the same CRDs: one applier at a time (see `APPLY_LOCK`).
            let _guard = deploy::APPLY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            run(c.kubectl().arg("apply").arg("-f").arg(&dir));
        }
        wait_crds(|| c.kubectl(), &SKYHOOK_CRDS);
    });
}

/// The project's two CRDs, as `kubectl wait` names them.
pub const SKYHOOK_CRDS: [&str; 2] = [
    "crd/skyhooks.skyhook.nvidia.com",
    "crd/deploymentpolicies.skyhook.nvidia.com",
];

/// The NodeWright API's CRDs (`deploy/crds/nodewright/`).
pub const NODEWRIGHT_CRDS: [&str; 2] = [
    "crd/nodewrights.nodewright.nvidia.com",
    "crd/deploymentpolicies.nodewright.nvidia.com",
];

static NODEWRIGHT_CRDS_INSTALLED: OnceLock<()> = OnceLock::new();

/// Install the NodeWright API's CRDs (`deploy/crds/nodewright/`, installed on purpose only) once
/// per test run, and wait until they are served.
pub fn install_nodewright_crds() {
    install_crds();
    NODEWRIGHT_CRDS_INSTALLED.get_or_init(|| {
        let c = cluster();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds/nodewright");
        {
            let _guard = deploy::APPLY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            run(c.kubectl().arg("apply").arg("-k").arg(&dir));
        }
        wait_crds(|| c.kubectl(), &NODEWRIGHT_CRDS);
    });
}

/// Waits up to 60 s until the CRDs are Established. `kubectl wait` fails at once, rather than
/// waiting, on a CRD whose status has no conditions yet (the larger the CRD, the longer the API
/// server takes to set them), so it is asked again until it answers.
pub fn wait_crds(kubectl: impl Fn() -> Command, crds: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = kubectl()
            .args(["wait", "--for=condition=Established", "--timeout=60s"])
            .args(crds)
            .output()
            .expect("run kubectl wait");
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            err.contains("accessor error") && Instant::now() < deadline,
            "the CRDs {crds:?} did not become Established: {err}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A ServiceAccount in the test's namespace, with no permissions, and a token for it.
pub fn service_account_token(ctx: &TestCtx, name: &str) -> String {
    run(ctx
        .cluster
        .kubectl()
        .args(["create", "serviceaccount", name, "-n", &ctx.ns]));
    let out = run(ctx
        .cluster
        .kubectl()
        .args(["create", "token", name, "-n", &ctx.ns]));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A port no one listens on, for a server a test starts. Taken from a range of its own below the
/// kernel's ephemeral ports (32768 and up): a port the kernel hands out for `127.0.0.1:0` is
/// free only until the next outgoing connection takes it as its local port, which, with four
/// tests at a time, made an operator fail to bind its probe port now and then. The private
/// clusters' ports stay out of it (24000.., 26000.., 27000.., 31000..).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 29_000;
    const COUNT: u16 = 1_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    for _ in 0..COUNT {
        let port = FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % COUNT;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT)
}

/// A `skyhook-operator run` process owned by one test: it reconciles only Skyhooks labelled
/// `skyhook-e2e=<test prefix>` and runs their Jobs in the test's namespace.
///
/// It runs with the rights it ships with ([`rights`]): a ServiceAccount token, unless the test
/// passes a `KUBECONFIG` of its own or opts out with [`Operator::start_as_admin`], saying why.
/// A test whose operator logged an API answer of 403 fails when the operator is dropped.
pub struct Operator {
    child: Option<std::process::Child>,
    pub log: PathBuf,
    pub metrics_port: u16,
    pub probe_port: u16,
    env: Vec<(String, String)>,
    /// Why this operator runs as the cluster's admin (`None`: the shipped rights).
    admin: Option<&'static str>,
}

impl Operator {
    pub fn start(ctx: &TestCtx, env: &[(&str, &str)]) -> Operator {
        Operator::start_named(ctx, "", env)
    }

    /// A further operator of the same test, logging to its own file (`-<name>` appended).
    pub fn start_named(ctx: &TestCtx, name: &str, env: &[(&str, &str)]) -> Operator {
        Operator::start_with(ctx, name, env, None)
    }

    /// An operator with the admin's kubeconfig (or the `KUBECONFIG` in `env`) whose 403s are not
    /// held against the test: only for a test that says `why` (docs/testing.md lists them).
    pub fn start_unchecked(
        ctx: &TestCtx,
        name: &str,
        env: &[(&str, &str)],
        why: &'static str,
    ) -> Operator {
        Operator::start_with(ctx, name, env, Some(why))
    }

    fn start_with(
        ctx: &TestCtx,
        name: &str,
        env: &[(&str, &str)],
        admin: Option<&'static str>,
    ) -> Operator {
        let suffix = if name.is_empty() {
            String::new()
        } else {
            format!("-{name}")
        };
        let log = std::env::temp_dir().join(format!("skyhook-operator-{}{suffix}.log", ctx.prefix));
        let mut op = Operator {
            child: None,
            log,
            metrics_port: free_port(),
            probe_port: free_port(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            admin,
        };
        if admin.is_none() && !op.env.iter().any(|(k, _)| k == "KUBECONFIG") {
            let metrics_auth = op
                .env
                .iter()
                .any(|(k, v)| k == "METRICS_AUTH" && v == "tokenreview");
            let own = rights::operator_kubeconfig(ctx, metrics_auth);
            op.env
                .insert(0, ("KUBECONFIG".to_string(), own.display().to_string()));
        }
        op.spawn(ctx);
        op
    }

    fn spawn(&mut self, ctx: &TestCtx) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("operator log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_skyhook-operator"));
        cmd.arg("run")
            .env("KUBECONFIG", &ctx.cluster.kubeconfig)
            .env("NAMESPACE", &ctx.ns)
            .env("SKYHOOK_SELECTOR", format!("skyhook-e2e={}", ctx.prefix))
            .env("METRICS_PORT", format!("127.0.0.1:{}", self.metrics_port))
            .env("PROBE_PORT", format!("127.0.0.1:{}", self.probe_port))
            .env("RETRY_BASE", "2s")
            .env("RETRY_MAX", "10s")
            .env("LOG_ENCODER", "console")
            .env("LOG_LEVEL", "info,skyhook=debug")
            .stdout(file.try_clone().expect("log fd"))
            .stderr(file);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("start skyhook-operator"));
    }

    /// The process has not exited.
    pub fn running(&self) -> bool {
        self.child.as_ref().is_some_and(|c| {
            std::fs::read_to_string(format!("/proc/{}/stat", c.id()))
                .is_ok_and(|stat| !stat.contains(") Z "))
        })
    }

    /// The caller has judged this operator's 403s itself (a fault campaign, whose API server
    /// restarts answer 403 until its RBAC caches are filled again): `why` says so.
    pub fn forgive_403s(&mut self, why: &'static str) {
        self.admin = Some(why);
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self, ctx: &TestCtx) {
        self.kill();
        self.spawn(ctx);
    }

    /// Restarts it with `env` set as well (a setting turned on).
    pub fn restart_with(&mut self, ctx: &TestCtx, env: &[(&str, &str)]) {
        for (k, v) in env {
            self.env.retain(|(have, _)| have != k);
            self.env.push((k.to_string(), v.to_string()));
        }
        self.restart(ctx);
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- operator log {} (tail) ---\n{}",
                self.log.display(),
                self.log_tail(60)
            );
        }
        self.kill();
        if std::thread::panicking() || self.admin.is_some() {
            return;
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let refused = rights::forbidden_in(&log);
        assert!(
            refused.is_empty(),
            "the operator ({}) met 403s with the rights it ships with:\n{}",
            self.log.display(),
            refused[..refused.len().min(10)].join("\n")
        );
    }
}

impl TestCtx {
    /// `n` fresh nodes labelled `skyhook-e2e=<prefix>`, so a Skyhook can select exactly them.
    pub fn add_test_nodes(&mut self, n: usize) -> Vec<String> {
        let names = self.add_nodes(n);
        let label = format!("skyhook-e2e={}", self.prefix);
        let mut args = vec!["label", "node"];
        args.extend(names.iter().map(String::as_str));
        args.push(&label);
        run(self.cluster.kubectl().args(&args));
        names
    }

    /// The label that ties Skyhooks and nodes to this test.
    pub fn test_label(&self) -> (String, String) {
        ("skyhook-e2e".to_string(), self.prefix.clone())
    }
}

/// How many Jobs exist per (package, stage, node, attempt), from their labels and annotations:
/// every value is 1 unless a Job was duplicated.
pub fn jobs_per_attempt(
    jobs: &[k8s_openapi::api::batch::v1::Job],
) -> std::collections::BTreeMap<(String, String, String, String), usize> {
    use kube::ResourceExt;
    use skyhook::schema;
    let mut seen = std::collections::BTreeMap::new();
    for j in jobs {
        let label = |key: &str| j.labels().get(key).cloned().unwrap_or_default();
        let attempt = j
            .annotations()
            .get(schema::ATTEMPT_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let key = (
            label(schema::PACKAGE_LABEL),
            label(schema::STAGE_LABEL),
            label(schema::NODE_LABEL),
            attempt,
        );
        *seen.entry(key).or_default() += 1;
    }
    seen
}

/// A TCP listener on 127.0.0.1 that accepts and never answers (a receiver or source that hangs);
/// its port, and the task holding the connections (abort it to close them).
pub async fn black_hole() -> (u16, tokio::task::JoinHandle<()>) {
    let hole = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind the black hole");
    let port = hole.local_addr().expect("address").port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = hole.accept().await {
            open.push(conn);
        }
    });
    (port, held)
}
