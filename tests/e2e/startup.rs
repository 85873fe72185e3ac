//! Start-up against a control plane that is still coming up: the operator waits out connection
//! errors, `429 storage is (re)initializing` and a CRD that is not installed yet, then works.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema;

use crate::support::private::{Owned, PrivateCluster, alive};
use crate::support::{Complete, cluster, free_port, run, wait_complete};

fn http_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200")
}

#[tokio::test]
async fn operator_started_before_the_api_server_and_crds_waits_then_works() {
    // The binaries must be built; the shared cluster's first test builds them.
    let bin_dir = cluster().bin_dir.clone();
    // Below the ephemeral port range, clear of the shared cluster's and the benchmark's ports.
    let base = 24000 + (std::process::id() % 200) as u16 * 10;
    let pc = PrivateCluster::new(base);
    let up = pc.spawn_up(1);

    // The kubeconfig is complete once etcd is started, before the API server: start the
    // operator on it at once.
    let kubeconfig = pc.kubeconfig();
    let etcd_started = pc.state.join("pids/etcd.pid");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !etcd_started.exists() {
        assert!(
            Instant::now() < deadline,
            "tests/cluster/up wrote no kubeconfig"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = pc.state.with_file_name("operator.log");
    let probe_port = free_port();
    let file = std::fs::File::create(&log).expect("log file");
    let mut op = Owned(
        Command::new(env!("CARGO_BIN_EXE_skyhook-operator"))
            .arg("run")
            .env("KUBECONFIG", &kubeconfig)
            .env("NAMESPACE", "skyhook")
            .env("METRICS_PORT", format!("127.0.0.1:{}", free_port()))
            .env("PROBE_PORT", format!("127.0.0.1:{probe_port}"))
            .env("LOG_ENCODER", "console")
            .env("LOG_LEVEL", "info")
            .stdout(file.try_clone().expect("fd"))
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("start skyhook-operator"),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    let out = up.wait_with_output().expect("tests/cluster/up");
    assert!(
        out.status.success(),
        "up failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Cluster up, no CRD: the operator waits, alive and live, not ready.
    std::thread::sleep(Duration::from_secs(3));
    assert!(alive(&mut op.0), "the operator exited:\n{}", log_text());
    assert!(http_ok(probe_port, "/healthz"), "no liveness while waiting");
    assert!(!http_ok(probe_port, "/readyz"), "ready without its CRDs");
    for waited in [
        "the API server is not ready yet",
        "the Skyhook CRD is not served yet",
    ] {
        assert!(
            log_text().contains(waited),
            "{waited:?} is not logged:\n{}",
            log_text()
        );
    }

    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    let kubectl = || {
        let mut c = Command::new(bin_dir.join("kubectl"));
        c.env("KUBECONFIG", &kubeconfig);
        c
    };
    run(kubectl().arg("apply").arg("-f").arg(&crds));
    crate::support::wait_crds(kubectl, &crate::support::SKYHOOK_CRDS);

    let client = pc.client().await;
    let skyhooks: Api<Skyhook> = Api::all(client);
    let sk: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": "late"},
        "spec": {"nodeSelectors": {"matchLabels": {"type": "kwok"}},
                 "packages": {"tool": {"version": "1.0.0",
                     "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
                     "env": [{"name": "SLEEP_LEN", "value": "1"}]}}},
    }))
    .expect("Skyhook");
    skyhooks
        .create(&PostParams::default(), &sk)
        .await
        .expect("create Skyhook");
    let within = Complete::any_generation(Duration::from_secs(120)).while_running(&mut op, &log);
    wait_complete(&skyhooks, "the Skyhook complete", "late", within).await;
    assert!(
        http_ok(probe_port, "/readyz"),
        "not ready after the CRDs:\n{}",
        log_text()
    );

    // SERVE_APIS=auto (the default): the NodeWright CRD, installed while the operator runs, is
    // picked up at its next look (every 30 s), with no restart.
    assert!(
        log_text().contains("the NodeWright CRD is not served"),
        "the missing NodeWright CRD is not logged:\n{}",
        log_text()
    );
    run(kubectl()
        .arg("apply")
        .arg("-k")
        .arg(crds.join("nodewright")));
    crate::support::wait_crds(kubectl, &crate::support::NODEWRIGHT_CRDS);
    let nodewrights: Api<DynamicObject> = Api::all_with(
        pc.client().await,
        &skyhook::crd::object_resource(schema::Api::NodeWright),
    );
    let mut nw = serde_json::to_value(&sk).expect("JSON");
    nw["apiVersion"] = json!(schema::Api::NodeWright.api_version());
    nw["kind"] = json!(schema::Api::NodeWright.kind());
    nw["metadata"] = json!({"name": "later"});
    let nw: DynamicObject = serde_json::from_value(nw).expect("NodeWright");
    nodewrights
        .create(&PostParams::default(), &nw)
        .await
        .expect("create NodeWright");
    let status = |o: &DynamicObject| o.data["status"]["status"].as_str().map(str::to_string);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = nodewrights.get("later").await.ok();
        if got.as_ref().and_then(status).as_deref() == Some("complete") {
            break;
        }
        assert!(alive(&mut op.0), "the operator exited:\n{}", log_text());
        assert!(
            Instant::now() < deadline,
            "the NodeWright is not complete within 120 s ({:?}):\n{}",
            got.as_ref().and_then(status),
            log_text()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    drop(op);
    pc.down();
}
