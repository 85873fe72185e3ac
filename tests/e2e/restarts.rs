//! The control plane restarting under a rollout (issue 13, acceptance 2): the API server, then
//! etcd, each down for a few seconds while Jobs run. The rollout completes with no duplicate
//! Job and no node left cordoned, and the operator never exits.
//!
//! After an API server restart every watch fails for a while (connection refused, then 410
//! Expired: the new server's watch cache starts at the current revision) and must list afresh.
//! kube's controller used to pause all its watches together on each of those errors, for up to a
//! minute at a time: the caches stayed stale for minutes while passes wrote from them (409 on
//! every node patch). Each watch now pauses on its own (`controller::watch::paced`), so the
//! rollout goes on within seconds of the server's return; the deadlines below hold it to that.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema::{self, State};

use crate::support::private::{Owned, PrivateCluster, alive, restart_component};
use crate::support::{Complete, cluster, free_port, jobs_per_attempt, run, wait_complete};

fn restart(pc: &PrivateCluster, component: &str, outage: Duration, kubectl: &dyn Fn() -> Command) {
    restart_component(&pc.state, component, outage, kubectl);
}

#[tokio::test]
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
    // `kubectl wait` fails at once, rather than waiting, on a CRD with no conditions yet.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !kubectl()
        .args([
            "wait",
            "--for=condition=Established",
            "crd/skyhooks.skyhook.nvidia.com",
            "--timeout=60s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("kubectl")
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "the Skyhook CRD is not Established"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

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
            .env("LOG_LEVEL", "info,skyhook=debug")
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
    // On failure: the components' logs and what the cluster holds.
    let state = pc.state.clone();
    let _report = OnPanic(move || {
        let tail = |f: &str| {
            let text = std::fs::read_to_string(state.join(f)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(25)..].join("\n")
        };
        let get = |args: &[&str]| {
            let out = kubectl()
                .arg("--request-timeout=10s")
                .args(args)
                .output()
                .expect("kubectl");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        format!(
            "--- apiserver ---\n{}\n--- etcd ---\n{}\n--- kcm ---\n{}\n--- kwok ---\n{}\n\
             --- jobs and pods ---\n{}\n--- nodes ---\n{}",
            tail("logs/kube-apiserver.log"),
            tail("logs/etcd.log"),
            tail("logs/kube-controller-manager.log"),
            tail("logs/kwok.log"),
            get(&["-n", "skyhook", "get", "jobs,pods", "-o", "wide"]),
            get(&["get", "nodes", "-o", "wide", "--show-labels"]),
        )
    });
    let wait_jobs = |at_least: usize| async move {
        // A few seconds of outage and start-up, then Jobs again: not the minutes that stale
        // caches took.
        let deadline = Instant::now() + Duration::from_secs(90);
        while count().await < at_least {
            assert!(
                Instant::now() < deadline,
                "fewer than {at_least} Jobs\n--- operator ---\n{}",
                log_text()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    wait_jobs(3).await;
    restart(&pc, "kube-apiserver", Duration::from_secs(3), &kubectl);
    wait_jobs(9).await;
    restart(&pc, "etcd", Duration::from_secs(3), &kubectl);
    // kwok 0.8 does not retry a pod's stage whose write failed while the API was down (a pod
    // then stays Running for good, seen twice); a kubelet would. Restarted, it plays every pod's
    // stage again from what the API holds. The operator is not touched.
    restart(&pc, "kwok", Duration::ZERO, &kubectl);
    wait_jobs(15).await;

    let within = Complete::any_generation(Duration::from_secs(150)).while_running(&mut op, &log);
    wait_complete(&skyhooks, "the Skyhook complete", "restarts", within).await;
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

/// Prints its report if the test panics while it lives.
struct OnPanic<F: Fn() -> String>(F);

impl<F: Fn() -> String> Drop for OnPanic<F> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", (self.0)());
        }
    }
}
