//! The control plane restarting under a rollout (issue 13, acceptance 2): the API server, then
//! etcd, each down for a few seconds while Jobs run. The rollout completes with no duplicate
//! Job and no node left cordoned, and the operator never exits.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema::{self, State};

use crate::support::private::{Owned, PrivateCluster, alive, wait_complete};
use crate::support::{cluster, free_port, jobs_per_attempt, run};

/// Kills one component of the private cluster, waits `outage`, and starts it again with the
/// same command line, in a session of its own as `up` does (so `down` still stops it).
fn restart(pc: &PrivateCluster, component: &str, outage: Duration) {
    let pid_file = pc.state.join(format!("pids/{component}.pid"));
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
    let deadline = Instant::now() + Duration::from_secs(30);
    // Gone, or a zombie nobody reaps (PID 1 here may not).
    let running =
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
    while running() {
        assert!(Instant::now() < deadline, "{component} did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(outage);
    let log = pc.state.join(format!("logs/{component}.log"));
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

/// Known to fail (issue 13, acceptance 2, stop 21): after the API server is killed and
/// restarted, the operator's writes to the Skyhook meet 409 Conflict on every pass for minutes,
/// as if its Skyhook cache no longer followed the object; a 30 s watch timeout did not help.
/// Run it with `cargo test --test e2e restarts -- --ignored`.
#[tokio::test]
#[ignore = "issue 13 #2: a 409 loop on the Skyhook after an API server restart, not fixed yet"]
async fn a_rollout_survives_api_server_and_etcd_restarts() {
    let bin_dir = cluster().bin_dir.clone();
    // Below the ephemeral range, apart from the other private clusters' bases.
    let base = 27000 + (std::process::id() % 200) as u16 * 10;
    let pc = PrivateCluster::new(base);
    run(pc.script("up").args(["--nodes", "3"]));
    let kubeconfig = pc.kubeconfig();
    let kubectl = || {
        let mut c = Command::new(bin_dir.join("kubectl"));
        c.env("KUBECONFIG", &kubeconfig);
        c
    };
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    run(kubectl().arg("apply").arg("-f").arg(&crds));
    run(kubectl().args([
        "wait",
        "--for=condition=Established",
        "crd/skyhooks.skyhook.nvidia.com",
        "--timeout=60s",
    ]));

    let log = pc.state.with_file_name("operator.log");
    let file = std::fs::File::create(&log).expect("log file");
    let mut op = Owned(
        Command::new(env!("CARGO_BIN_EXE_skyhook-operator"))
            .arg("run")
            .env("KUBECONFIG", &kubeconfig)
            .env("NAMESPACE", "skyhook")
            .env("METRICS_PORT", format!("127.0.0.1:{}", free_port()))
            .env("PROBE_PORT", format!("127.0.0.1:{}", free_port()))
            .env("RETRY_BASE", "2s")
            .env("LOG_ENCODER", "console")
            .stdout(file.try_clone().expect("fd"))
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("start skyhook-operator"),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    let client = pc.client().await;
    let skyhooks: Api<Skyhook> = Api::all(client.clone());
    let jobs: Api<Job> = Api::namespaced(client.clone(), "skyhook");
    let pkg = |deps: serde_json::Value| {
        json!({"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
               "env": [{"name": "SLEEP_LEN", "value": "2"}], "dependsOn": deps})
    };
    let mut driver = pkg(json!({}));
    driver["interrupt"] = json!({"type": "reboot"});
    let sk: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": "restarts"},
        "spec": {"nodeSelectors": {"matchLabels": {"type": "kwok"}},
                 "packages": {"alpha": pkg(json!({})), "bravo": pkg(json!({"alpha": "1.0.0"})),
                              "driver": driver}},
    }))
    .expect("Skyhook");
    skyhooks
        .create(&PostParams::default(), &sk)
        .await
        .expect("create Skyhook");

    // Both restarts happen while Jobs run.
    let count = || async {
        jobs.list(&ListParams::default())
            .await
            .map_or(0, |l| l.items.len())
    };
    let state = pc.state.clone();
    let diagnose = move || {
        let tail = |f: &str| {
            let text = std::fs::read_to_string(state.join(f)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        };
        format!(
            "--- apiserver ---\n{}\n--- kcm ---\n{}\n--- kwok ---\n{}",
            tail("logs/kube-apiserver.log"),
            tail("logs/kube-controller-manager.log"),
            tail("logs/kwok.log")
        )
    };
    let wait_jobs = |at_least: usize| {
        let diagnose = diagnose.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            while count().await < at_least {
                assert!(
                    Instant::now() < deadline,
                    "fewer than {at_least} Jobs\n{}\n--- operator ---\n{}",
                    diagnose(),
                    log_text()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    wait_jobs(3).await;
    restart(&pc, "kube-apiserver", Duration::from_secs(3));
    wait_jobs(9).await;
    restart(&pc, "etcd", Duration::from_secs(3));

    wait_complete(
        &skyhooks,
        "restarts",
        &mut op,
        &log,
        Duration::from_secs(240),
    )
    .await;
    let all = jobs.list(&ListParams::default()).await.expect("jobs").items;
    for (key, n) in jobs_per_attempt(&all) {
        assert_eq!(n, 1, "{key:?} has {n} Jobs");
    }
    let nodes: Api<Node> = Api::all(client);
    for node in nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
    {
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let name = node.metadata.name.clone().unwrap_or_default();
        assert!(!cordoned, "{name} left cordoned");
        let raw = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&schema::node_state_annotation("restarts")))
            .cloned()
            .expect("node state");
        let state = schema::NodeState::parse(&raw).expect("parse");
        for p in ["alpha", "bravo", "driver"] {
            let e = state.get(p, "1.0.0").expect("entry");
            assert_eq!(e.state, Some(State::Complete), "{name} {p}: {e:?}");
        }
    }
    assert!(alive(&mut op.0), "the operator exited:\n{}", log_text());
}
