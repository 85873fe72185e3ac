//! A second, private control plane (own state directory and ports) beside the shared one, for
//! tests that must see a cluster from its first second or tear one down.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::{cluster_dir, run};

pub struct PrivateCluster {
    _dir: tempfile::TempDir,
    pub state: PathBuf,
    pub ports: [(&'static str, u16); 5],
    /// The registry's and scheduler's ports, when this cluster may have real nodes.
    real: Option<(u16, u16)>,
}

impl PrivateCluster {
    /// Ports from `base` to `base + 4`; pick a base no other test uses.
    pub fn new(base: u16) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("cluster");
        PrivateCluster {
            _dir: dir,
            state,
            ports: [
                ("ETCD_PORT", base),
                ("ETCD_PEER_PORT", base + 1),
                ("API_PORT", base + 2),
                ("KCM_PORT", base + 3),
                ("KWOK_PORT", base + 4),
            ],
            real: None,
        }
    }

    /// With a registry and scheduler of its own (on `base + 5` and `base + 6`), so that real
    /// nodes can join it.
    pub fn with_real(mut self) -> Self {
        let base = self.ports[0].1;
        self.real = Some((base + 5, base + 6));
        self
    }

    /// A cluster script (`up`, `down`, `nodes`) aimed at this cluster.
    pub fn script(&self, name: &str) -> Command {
        let mut cmd = Command::new(cluster_dir().join(name));
        cmd.env("KT_DIR", &self.state);
        // No registry, scheduler or real nodes unless asked for (`with_real`): their ports are
        // the shared cluster's.
        match self.real {
            Some((registry, scheduler)) => {
                cmd.env("REGISTRY_PORT", registry.to_string());
                cmd.env("SCHEDULER_PORT", scheduler.to_string());
            }
            None => {
                cmd.env("KT_REAL", "0");
            }
        }
        for (k, v) in self.ports {
            cmd.env(k, v.to_string());
        }
        cmd
    }

    /// `up --nodes <n>` in the background: the caller can act while the cluster comes up.
    pub fn spawn_up(&self, nodes: usize) -> Child {
        self.script("up")
            .args(["--nodes", &nodes.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start tests/cluster/up")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfig")
    }

    /// A client of this cluster (its admin kubeconfig).
    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(self.kubeconfig()).expect("kubeconfig");
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        Client::try_from(config).expect("client")
    }

    pub fn down(&self) {
        run(&mut self.script("down"));
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        // KEEP_PRIVATE_CLUSTER=1: a failing test leaves its cluster running for inspection, and
        // says where it is (stop it with `tests/cluster/down` and these settings).
        let keep = std::env::var_os("KEEP_PRIVATE_CLUSTER").is_some() && std::thread::panicking();
        if keep && self.state.exists() {
            let ports = self.ports.map(|(k, v)| format!("{k}={v}")).join(" ");
            eprintln!(
                "kept private cluster: KT_DIR={} {ports}",
                self.state.display()
            );
            self._dir.disable_cleanup(true);
            return;
        }
        if self.state.exists() {
            let _ = self.script("down").output();
        }
    }
}

/// A process killed and reaped when dropped.
pub struct Owned(pub Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn alive(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

/// Kills one component of the cluster whose state directory is `state` (a private one, or the
/// shared one for a campaign that runs alone), checks that the API no longer answers (for the
/// API server and etcd), waits out `outage`, and starts it again with the same command line, in a
/// session of its own as `up` does (so `down` still stops it).
pub fn restart_component(
    state: &std::path::Path,
    component: &str,
    outage: Duration,
    kubectl: &dyn Fn() -> Command,
) {
    let pid_file = state.join(format!("pids/{component}.pid"));
    let pid = std::fs::read_to_string(&pid_file).expect("pid file");
    let pid = pid.trim().to_string();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    // A crash, not a graceful stop: the harder case, and the API server drains for a minute.
    run(Command::new("kill").args(["-KILL", &pid]));
    let down_at = Instant::now();
    let deadline = down_at + Duration::from_secs(30);
    // Gone, or a zombie nobody reaps (PID 1 here may not).
    let running =
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
    while running() {
        assert!(Instant::now() < deadline, "{component} did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A quorum read, which needs both the API server and etcd (kwok is neither).
    let answered = component != "kwok"
        && kubectl()
            .args([
                "get",
                "--raw",
                "/api/v1/namespaces/skyhook",
                "--request-timeout=1s",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("kubectl")
            .success();
    assert!(!answered, "the API still answered with {component} down");
    std::thread::sleep(outage.saturating_sub(down_at.elapsed()));
    let log = state.join(format!("logs/{component}.log"));
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"log=$1; shift; setsid "$@" >>"$log" 2>&1 </dev/null & echo $!"#)
        .arg("sh")
        .arg(&log)
        .args(&argv)
        .output()
        .expect("restart");
    std::fs::write(&pid_file, &out.stdout).expect("write the pid file");
}
