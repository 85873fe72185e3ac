//! A second, private control plane (own state directory and ports) beside the shared one, for
//! tests that must see a cluster from its first second or tear one down.

use std::path::PathBuf;
use std::process::{Child, Command};

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
