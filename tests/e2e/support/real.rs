//! Real nodes (tests/cluster/real-node): a kubelet and containerd in namespaces of their own, the
//! images the cluster's registry serves (the reference's agent and shellscript package), and what
//! a package left in a node's root.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use super::{TestCtx, cluster_dir, run};

/// The image references `tests/cluster/images push` wrote for this cluster.
pub struct Images {
    pub agent: String,
    /// The agent image with agent v7's documented reboot contract emulated
    /// (tests/cluster/images.d/agent-v7-emulation), not agent v7 itself.
    pub agent_v7_emulation: String,
    /// The pause image the real nodes' sandboxes use: a workload that pulls nothing new.
    pub pause: String,
    /// The shellscript package's repository (a Skyhook names it without the tag).
    pub shellscript_repo: String,
    pub shellscript_version: String,
    /// kubectl as the entrypoint (the chart's cleanup hook).
    pub kubectl: String,
    /// The test cluster's scheduler: it places only pods that name it.
    pub scheduler: String,
    /// The registry's name in image references (no port) and its `host:port`, which the real
    /// nodes also pull from.
    pub registry_host: String,
    pub registry_address: String,
}

pub fn images(ctx: &TestCtx) -> Images {
    let path = ctx.cluster.state_dir.join("images.env");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (tests/cluster/up with KT_REAL=1 writes it)",
            path.display()
        )
    });
    let vars: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| {
        vars.get(k)
            .unwrap_or_else(|| panic!("{} has no {k}", path.display()))
            .to_string()
    };
    let shellscript = get("SHELLSCRIPT_IMAGE");
    let (repo, version) = shellscript
        .rsplit_once(':')
        .expect("SHELLSCRIPT_IMAGE has a tag");
    Images {
        agent: get("AGENT_IMAGE"),
        agent_v7_emulation: get("AGENT_V7_EMULATION_IMAGE"),
        pause: get("PAUSE_IMAGE"),
        shellscript_repo: repo.to_string(),
        shellscript_version: version.to_string(),
        kubectl: get("KUBECTL_IMAGE"),
        scheduler: get("SCHEDULER_NAME"),
        registry_host: get("REGISTRY_HOST"),
        registry_address: get("REGISTRY_ADDRESS"),
    }
}

/// A package image built from `dir` (config.json and skyhook_dir/, the reference's format) and
/// pushed to the cluster's registry as `repo:tag`; returns the repository as a Skyhook names it.
pub fn package_image(ctx: &TestCtx, repo: &str, tag: &str, dir: &std::path::Path) -> String {
    let out = run(Command::new(cluster_dir().join("images"))
        .args(["package", &format!("{repo}:{tag}")])
        .arg(dir)
        .env("KUBECONFIG", &ctx.cluster.kubeconfig));
    let full = String::from_utf8_lossy(&out.stdout).trim().to_string();
    full.rsplit_once(':')
        .map(|(r, _)| r.to_string())
        .expect("images package prints REPO:TAG")
}

impl TestCtx {
    /// A real node of this test's own, labelled like its kwok nodes, removed when the test ends.
    pub fn add_real_node(&mut self) -> String {
        self.add_real_node_as("rn")
    }

    /// [`TestCtx::add_real_node`] named `<prefix>-<suffix>`, for a test with several.
    pub fn add_real_node_as(&mut self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.prefix);
        run(Command::new(cluster_dir().join("nodes"))
            .args(["add-real", &name])
            .env("KUBECONFIG", &self.cluster.kubeconfig));
        self.nodes.push(name.clone());
        let label = format!("skyhook-e2e={}", self.prefix);
        run(self
            .cluster
            .kubectl()
            .args(["label", "node", &name, &label]));
        name
    }

    /// `node` was removed by the test itself: nothing left to remove at the end.
    pub fn forget_node(&mut self, node: &str) {
        self.nodes.retain(|n| n != node);
    }

    /// The directory holding everything written to `node`'s root since it was added (the upper
    /// layer of its overlay root).
    pub fn node_root(&self, node: &str) -> PathBuf {
        self.cluster.state_dir.join("real").join(node).join("upper")
    }

    /// A file of `node`'s root, if something on the node wrote it.
    pub fn read_on_node(&self, node: &str, path: &str) -> Option<String> {
        std::fs::read_to_string(self.node_root(node).join(path.trim_start_matches('/'))).ok()
    }

    /// The entries of a directory of `node`'s root (sorted; empty if it does not exist).
    pub fn list_on_node(&self, node: &str, path: &str) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(self.node_root(node).join(path.trim_start_matches('/')))
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
        names.sort();
        names
    }

    /// The tails of the real nodes' kubelet and containerd logs, for a failure report.
    pub(super) fn real_node_logs(&self, lines: usize) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            for log in ["kubelet", "containerd"] {
                let path = self
                    .node_root(node)
                    .join(format!("var/log/skyhook-node/{log}.log"));
                out.push_str(&tail(&path, lines));
            }
            out.push_str(&self.container_logs(node, lines / 3));
        }
        out
    }

    /// The tail of the latest log of every container the kubelet ran on `node` (an operator pod
    /// that exits at once says why only there).
    fn container_logs(&self, node: &str, lines: usize) -> String {
        let mut out = String::new();
        let pods = self.node_root(node).join("var/log/pods");
        for pod in self.list_on_node(node, "var/log/pods") {
            for container in self.list_on_node(node, &format!("var/log/pods/{pod}")) {
                let dir = pods.join(&pod).join(&container);
                let latest = std::fs::read_dir(&dir)
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        Some((name.strip_suffix(".log")?.parse::<u32>().ok()?, e.path()))
                    })
                    .max();
                if let Some((_, path)) = latest {
                    out.push_str(&tail(&path, lines));
                }
            }
        }
        out
    }
}

/// The last `lines` lines of a log file under a `==> path <==` header; empty when unreadable.
fn tail(path: &std::path::Path, lines: usize) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return String::new();
    };
    let all: Vec<&str> = text.lines().collect();
    format!(
        "==> {} <==\n{}\n",
        path.display(),
        all[all.len().saturating_sub(lines)..].join("\n")
    )
}
