//! A real node joins beside the kwok nodes and leaves nothing behind.

use std::path::Path;
use std::process::Command;

use crate::support::{TestCtx, cluster_dir, run};

fn pid_alive(pid: &str) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The bridge's interface index, if it exists. Bridge names are reused by the next real node (of
/// a test running alongside), which gets a new index.
fn bridge_index(bridge: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{bridge}/ifindex"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn node_cgroups(name: &str) -> Vec<String> {
    let mut found = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let dir = hierarchy.path().join(format!("skyhook-node-{name}"));
        if dir.exists() {
            found.push(dir.display().to_string());
        }
    }
    found
}

/// What a node leaves while it runs, to check it is all gone afterwards.
struct Traces {
    node: String,
    dir: std::path::PathBuf,
    init: String,
    supervisor: String,
    bridge: String,
    ifindex: Option<String>,
}

impl Traces {
    /// Reads the node's recorded processes and bridge from its state directory `dir`.
    fn of(node: &str, dir: std::path::PathBuf) -> Traces {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        let bridge = format!("skyhook-rn{}", read("index"));
        let traces = Traces {
            node: node.to_string(),
            init: read("init.pid"),
            supervisor: read("supervisor.pid"),
            ifindex: bridge_index(&bridge),
            bridge,
            dir,
        };
        assert!(
            pid_alive(&traces.init) && pid_alive(&traces.supervisor),
            "node processes not running"
        );
        assert!(traces.ifindex.is_some(), "no bridge {}", traces.bridge);
        assert!(!node_cgroups(node).is_empty(), "no cgroups for the node");
        traces
    }

    /// No process, bridge, cgroup, mount or state directory of the node is left.
    fn assert_gone(&self) {
        let Traces {
            node,
            dir,
            init,
            supervisor,
            bridge,
            ifindex,
        } = self;
        assert!(!pid_alive(init), "the node's init {init} survived");
        assert!(
            !pid_alive(supervisor),
            "the node's supervisor {supervisor} survived"
        );
        assert_ne!(
            &bridge_index(bridge),
            ifindex,
            "bridge {bridge} left behind"
        );
        assert_eq!(
            node_cgroups(node),
            Vec::<String>::new(),
            "cgroups left behind"
        );
        let dir_text = dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        assert!(
            !mounts.lines().any(|l| l.contains(&dir_text)),
            "mounts left under {dir_text}"
        );
        assert!(!dir.exists(), "{dir_text} left behind");
    }
}

#[tokio::test]
async fn a_real_node_runs_beside_kwok_nodes_and_leaves_no_trace() {
    let mut ctx = TestCtx::new("rn-life").await;
    let kwok = ctx.add_test_nodes(1);
    let node = ctx.add_real_node();

    let wide =
        run(ctx
            .cluster
            .kubectl()
            .args(["get", "node", &node, "-o", "wide", "--no-headers"]));
    let wide = String::from_utf8_lossy(&wide.stdout).to_string();
    assert!(wide.contains(" Ready "), "not Ready: {wide}");
    assert!(
        wide.contains("containerd://"),
        "no containerd runtime: {wide}"
    );
    let fake = run(ctx
        .cluster
        .kubectl()
        .args(["get", "node", &kwok[0], "--no-headers"]));
    assert!(
        String::from_utf8_lossy(&fake.stdout).contains(" Ready "),
        "the kwok node beside it is not Ready"
    );

    let dir = ctx.cluster.state_dir.join("real").join(&node);
    let traces = Traces::of(&node, dir.clone());
    // Everything runs inside the node's own mount namespace.
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    assert_ne!(
        ns(&traces.init),
        ns("self"),
        "the node shares the machine's mount namespace"
    );

    run(Command::new(cluster_dir().join("nodes"))
        .args(["remove", &node])
        .env("KUBECONFIG", &ctx.cluster.kubeconfig));
    ctx.forget_node(&node);
    traces.assert_gone();
    let dir_text = dir.display().to_string();
    // No process anywhere still sees the node's root.
    for proc in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let root = std::fs::read_link(proc.path().join("root")).unwrap_or_default();
        assert!(
            !root.display().to_string().contains(&dir_text),
            "process {} still has its root in the node",
            proc.file_name().to_string_lossy()
        );
    }
    let gone = ctx.kubectl(&["get", "node", &node]);
    assert!(!gone.status.success(), "the Node object is still there");
}

/// `down` of a cluster with a real node: the node goes with it (its processes, mounts, cgroups
/// and bridge), on a private cluster of its own.
#[tokio::test]
async fn down_removes_the_real_nodes_too() {
    // The binaries must be built; the shared cluster's first test builds them.
    crate::support::cluster();
    // Apart from free_port's 29000..30000 and the other private clusters' ranges.
    let base = 26000 + (std::process::id() % 100) as u16 * 10;
    let pc = crate::support::private::PrivateCluster::new(base).with_real();
    run(pc.script("up").args(["--nodes", "0"]));
    let node = format!("down-rn-{}", std::process::id());
    run(pc.script("nodes").args(["add-real", &node]));
    let traces = Traces::of(&node, pc.state.join("real").join(&node));
    pc.down();
    traces.assert_gone();
    assert!(!pc.state.exists(), "the state directory is left");
}
