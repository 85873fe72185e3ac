//! The checker can fail (issue 52, deliverable 3): one reboot package on three kwok nodes, run
//! once by the operator as built and once with the bug planted by `SKYHOOK_PLANTED_FAULT=
//! skip-cordon` (a debug build's switch: the planner takes every node for cordoned). The
//! checker reads the history the harness recorded, as in the campaign: the first run has no
//! violation, the second an `interrupt-cordoned` one for every node.

use std::time::Duration;

use serde_json::json;
use skyhook::schema::Status;
use skyhook::settings::Planted;

use super::checker::{self, Rule, Verdict};
use super::history;
use super::recorder::Recorder;
use crate::support::{pkg, reboot_pkg, setup, skyhook};

const NODES: usize = 3;

/// The workload under an operator started with `env`, and the checker's verdict on it.
async fn run(test: &str, env: &[(&str, &str)]) -> Verdict {
    let e = setup(test, NODES, env).await;
    let (k, v) = e.ctx.test_label();
    let recorder = Recorder::start(&e.ctx.client, &e.ctx.ns, &format!("{k}={v}"));
    // The watches list first: nothing the operator does is missed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let name = e.ctx.name("sk");
    e.create(&skyhook(
        &e.ctx,
        &name,
        json!({
            "interruptionBudget": {"count": NODES},
            "packages": {
                "tool": pkg("1.0.0", json!([{"name": "SLEEP_LEN", "value": "1"}])),
                "driver": reboot_pkg("1.0.0"),
            },
        }),
    ))
    .await;
    e.wait_status(&name, Status::Complete, Duration::from_secs(180))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let records = recorder.stop();
    let dir = tempfile::tempdir().expect("a directory for the history");
    let path = dir.path().join("history.jsonl");
    let lines: Vec<String> = records
        .iter()
        .map(|r| serde_json::to_string(r).expect("record"))
        .collect();
    std::fs::write(&path, lines.join("\n")).expect("write the history");
    let history = history::read(&path).expect("read the history");
    checker::check(
        &history,
        &[Rule {
            object: name,
            limit: NODES,
        }],
    )
}

#[tokio::test]
async fn the_checker_catches_a_build_that_interrupts_schedulable_nodes() {
    let clean = run("planted-none", &[]).await;
    assert!(
        clean.violations.is_empty(),
        "the operator as built: {:?}",
        clean.violations
    );
    assert_eq!(clean.interrupts, NODES as u64, "one interrupt per node");

    let broken = run("planted-cordon", &[(Planted::VARIABLE, "skip-cordon")]).await;
    let caught: Vec<&str> = broken
        .violations
        .iter()
        .filter(|v| v.invariant == "interrupt-cordoned" && v.evidence.contains("schedulable"))
        .map(|v| v.evidence.as_str())
        .collect();
    eprintln!("planted skip-cordon, caught: {caught:#?}");
    assert_eq!(
        caught.len(),
        NODES,
        "an interrupt-cordoned violation per node, got {:?}",
        broken.violations
    );
    assert_eq!(broken.interrupts, NODES as u64, "one interrupt per node");
}
