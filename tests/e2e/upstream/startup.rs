//! D45: a runtime-required taint key that cannot name its `autoTaint_<key>` annotation (a
//! prefixed key, or one over 53 characters) stops the operator at start-up with the options
//! error, instead of wedging every auto-taint write later.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::cluster;

#[test]
fn a_prefixed_runtime_required_taint_key_stops_the_operator() {
    let c = cluster();
    for (taint, why) in [
        ("example.com/rr=x:NoSchedule", "has a prefix"),
        (&*format!("{}=x:NoSchedule", "k".repeat(54)), "over 53"),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skyhook-operator"))
            .arg("run")
            .env("KUBECONFIG", &c.kubeconfig)
            .env("RUNTIME_REQUIRED_TAINT", taint)
            .env("METRICS_PORT", "127.0.0.1:0")
            .env("PROBE_PORT", "127.0.0.1:0")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start skyhook-operator");
        let start = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("the operator kept running with RUNTIME_REQUIRED_TAINT={taint}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = child.wait_with_output().expect("output");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("invalid skyhook operator options")
                && text.contains("RUNTIME_REQUIRED_TAINT")
                && text.contains(why),
            "{text}"
        );
    }
}
