//! The real nodes' checks can fail: a clean host record passes, and each host invariant has a
//! planted violation, an edited record, that it must name.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::checker::Verdict;
use super::history::{Kind, Record};
use super::host::{Host, check};

const T0: i64 = 1_800_000_000;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(T0 + s).expect("time")
}

fn rec(s: i64, kind: Kind, deleted: bool, obj: Value) -> Record {
    Record {
        t: at(s),
        kind,
        deleted,
        obj,
    }
}

fn node(s: i64, cordoned: bool) -> Record {
    rec(
        s,
        Kind::Node,
        false,
        json!({"metadata": {"name": "rn", "uid": "rn"}, "spec": {"unschedulable": cordoned}}),
    )
}

fn pod(s: i64, uid: &str, stage: &str, phase: &str) -> Record {
    rec(
        s,
        Kind::Pod,
        false,
        json!({"metadata": {"name": format!("{uid}-{stage}"), "uid": uid,
            "labels": {"skyhook.nvidia.com/name": "sk", "skyhook.nvidia.com/node": "rn",
                "skyhook.nvidia.com/stage": stage},
            "annotations": {"skyhook.nvidia.com/package":
                "{\"name\":\"drv\",\"version\":\"1.0.0\"}",
                "skyhook.nvidia.com/spec-hash": "h"}},
            "status": {"phase": phase}}),
    )
}

fn object() -> Record {
    rec(
        0,
        Kind::Object,
        false,
        json!({"metadata": {"name": "sk", "uid": "sk"},
            "spec": {"packages": {"drv": {"version": "1.0.0", "interrupt": {"type": "reboot"}}}}}),
    )
}

/// A node's apply, a reboot for the interrupt while cordoned, post-interrupt in the new boot.
fn history() -> Vec<Record> {
    vec![
        object(),
        node(1, false),
        pod(10, "a", "apply", "Pending"),
        pod(11, "a", "apply", "Running"),
        pod(20, "a", "apply", "Succeeded"),
        node(30, true),
        pod(31, "i", "interrupt", "Pending"),
        pod(32, "i", "interrupt", "Running"),
        // The reboot kills the first interrupt pod; the Job's next one finds it done.
        pod(40, "i", "interrupt", "Failed"),
        pod(41, "i2", "interrupt", "Running"),
        pod(60, "i2", "interrupt", "Succeeded"),
        pod(61, "p", "post-interrupt", "Pending"),
        pod(62, "p", "post-interrupt", "Running"),
        pod(70, "p", "post-interrupt", "Succeeded"),
        node(71, false),
    ]
}

fn line(s: i64, step: &str, boot: &str, edge: &str) -> String {
    format!(
        "rn drv 1.0.0 {step} {boot} {}.250000000 {edge} sk 1\n",
        T0 + s
    )
}

fn steps() -> String {
    [
        line(12, "apply", "b1", "start"),
        line(13, "apply", "b1", "end"),
        line(14, "apply_check", "b1", "start"),
        line(15, "apply_check", "b1", "end"),
        line(63, "post_interrupt", "b2", "start"),
        line(64, "post_interrupt", "b2", "end"),
    ]
    .concat()
}

fn boots() -> String {
    let t = |s| at(s).to_string();
    format!(
        "{} boot 1 (init 5, boot id b1)\n{} boot 1 ended\n{} boot 2 (init 9, boot id b2)\n",
        t(0),
        t(34),
        t(36)
    )
}

fn reboots() -> String {
    format!("{} reboot\n", at(33))
}

/// The service manager's calls of a service interrupt in the interrupt pod's run.
fn systemctl() -> String {
    format!("{} daemon-reload\n{} restart containerd\n", at(45), at(46))
}

fn verdict(history: &[Record], steps: &str, reboots: &str) -> Verdict {
    verdict_with(history, steps, reboots, &systemctl())
}

fn verdict_with(history: &[Record], steps: &str, reboots: &str, systemctl: &str) -> Verdict {
    let mut v = Verdict::default();
    let host = Host::parse("rn", steps, reboots, &boots(), systemctl);
    check(&mut v, history, &[host]);
    v
}

#[test]
fn a_clean_host_record_passes_every_host_invariant() {
    let v = verdict(&history(), &steps(), &reboots());
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    for inv in [
        "host-in-a-pod",
        "host-once",
        "host-reboot",
        "host-post-interrupt",
        "host-service",
    ] {
        assert!(
            v.checks.get(inv).copied().unwrap_or(0) > 0,
            "{inv} not checked"
        );
    }
    assert_eq!(
        (v.host_steps, v.host_reboots, v.host_service_calls),
        (3, 1, 2)
    );
}

#[test]
fn a_service_restart_on_a_schedulable_node_or_outside_an_interrupt_is_named() {
    // After the node was uncordoned and every interrupt pod had ended.
    let late = systemctl() + &format!("{} restart containerd\n", at(100));
    let v = verdict_with(&history(), &steps(), &reboots(), &late);
    assert_eq!(v.named(), ["host-service"], "{:#?}", v.violations);
    assert!(
        v.violations[0]
            .evidence
            .contains("while schedulable, with no interrupt pod"),
        "{:#?}",
        v.violations
    );
    // In the interrupt pod's run, but the cordon gone.
    let mut h = history();
    h.insert(9, node(44, false));
    h.insert(10, node(47, true));
    let v = verdict(&h, &steps(), &reboots());
    assert_eq!(v.named(), ["host-service"], "{:#?}", v.violations);
    assert_eq!(v.violations.len(), 2, "{:#?}", v.violations);
}

#[test]
fn a_script_run_with_no_pod_of_ours_is_named() {
    let s = steps() + &line(100, "config", "b2", "start");
    let v = verdict(&history(), &s, &reboots());
    assert_eq!(v.named(), ["host-in-a-pod"], "{:#?}", v.violations);
}

#[test]
fn a_script_run_twice_after_it_ended_is_named_unless_something_failed() {
    // Again in a second apply pod, the first having ended and nothing failed.
    let mut h = history();
    h.extend([
        pod(80, "a2", "apply", "Running"),
        pod(90, "a2", "apply", "Succeeded"),
    ]);
    let twice = steps() + &line(81, "apply", "b2", "start");
    // In the same boot as the first run: no reboot explains it either.
    let same_boot = twice.replace("apply b2 ", "apply b1 ");
    let v = verdict(&h, &same_boot, &reboots());
    assert_eq!(v.named(), ["host-once"], "{:#?}", v.violations);
    // A failed pod between the two runs explains the retry.
    h.insert(5, pod(21, "x", "apply", "Failed"));
    let v = verdict(&h, &same_boot, &reboots());
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    // A run for a later generation (a spec edit) is a new run, not a retry.
    let h = history_with_second_apply();
    let edited = steps() + &line(81, "apply", "b1", "start").replace(" sk 1", " sk 2");
    let v = verdict(&h, &edited, &reboots());
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    // So does a first run that never ended (killed mid-script).
    let cut = same_boot.replace(&line(13, "apply", "b1", "end"), "");
    let v = verdict(&history_with_second_apply(), &cut, &reboots());
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
}

fn history_with_second_apply() -> Vec<Record> {
    let mut h = history();
    h.extend([
        pod(80, "a2", "apply", "Running"),
        pod(90, "a2", "apply", "Succeeded"),
    ]);
    h
}

#[test]
fn a_reboot_on_a_schedulable_node_is_named() {
    let mut h = history();
    h.retain(|r| !(r.kind == Kind::Node && r.t == at(30)));
    // (The service manager's calls, now on a schedulable node too, are host-service's.)
    let v = verdict_with(&h, &steps(), &reboots(), "");
    assert_eq!(v.named(), ["host-reboot"], "{:#?}", v.violations);
    // An out-of-band reboot of a schedulable node is the campaign's, not the operator's.
    let oob = reboots() + &format!("{} reboot out-of-band\n", at(100));
    let v = verdict(&history(), &steps(), &oob);
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
}

#[test]
fn a_reboot_outside_an_interrupt_pod_is_named() {
    let late = reboots() + &format!("{} reboot\n", at(200));
    let v = verdict(&history(), &steps(), &late);
    assert_eq!(v.named(), ["host-reboot"], "{:#?}", v.violations);
}

#[test]
fn post_interrupt_in_the_boot_its_reboot_ended_is_named() {
    let s = steps().replace("post_interrupt b2", "post_interrupt b1");
    let v = verdict(&history(), &s, &reboots());
    assert_eq!(v.named(), ["host-post-interrupt"], "{:#?}", v.violations);
    // With no reboot asked for at all (an out-of-band one does not count).
    let v = verdict(
        &history(),
        &steps(),
        &format!("{} reboot out-of-band\n", at(33)),
    );
    assert_eq!(v.named(), ["host-post-interrupt"], "{:#?}", v.violations);
}

#[test]
fn a_line_cut_by_a_reboot_is_skipped() {
    let s = steps() + "rn drv 1.0.0 app";
    let host = Host::parse("rn", &s, "", &boots(), &(systemctl() + "2026-12-07T1"));
    assert_eq!(host.steps.len(), 6);
    assert_eq!(host.boots.len(), 2);
    assert_eq!(host.services.len(), 2);
}

#[test]
fn the_test_package_script_writes_what_the_checker_reads() {
    let root = std::env::temp_dir().join(format!("chaos-script-{}", std::process::id()));
    std::fs::create_dir_all(root.join("etc")).expect("etc");
    std::fs::create_dir_all(root.join("var/log")).expect("var/log");
    std::fs::write(root.join("etc/hostname"), "rn\n").expect("hostname");
    let out = std::process::Command::new("bash")
        .args(["-c", &super::host::script("config")])
        .env("CHAOS_ROOT", &root)
        .env("SKYHOOK_DIR", "/var/lib/skyhook/sk/drv-1.2.0-0f1e-2d3c-7")
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(root.join(super::host::STEPS_FILE)).expect("record");
    let _ = std::fs::remove_dir_all(&root);
    let host = Host::parse("rn", &text, "", "", "");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    assert_eq!(host.steps.len(), 2, "{text}");
    for (s, end) in host.steps.iter().zip([false, true]) {
        assert_eq!(
            (
                &*s.object,
                &*s.package,
                &*s.version,
                &*s.step,
                &*s.boot,
                s.end
            ),
            ("sk", "drv", "1.2.0", "config", boot.trim(), end)
        );
    }
    assert!(host.steps[1].t > host.steps[0].t);
}

#[test]
fn two_runs_of_a_script_at_once_are_named() {
    // Run 1 starts, run 2 starts, both end: no run failed, so nothing explains the second.
    let at_once = line(13, "apply", "b1", "start")
        + &line(14, "apply", "b1", "end")
        + &line(15, "apply", "b1", "end");
    let s = steps().replace(&line(13, "apply", "b1", "end"), &at_once);
    let v = verdict(&history(), &s, &reboots());
    assert_eq!(v.named(), ["host-once"], "{:#?}", v.violations);
    // The first one's pod deleted meanwhile (its script outlives the deletion's grace): allowed.
    let mut h = history();
    h.insert(4, pod(13, "gone", "apply", "Failed"));
    let v = verdict(&h, &s, &reboots());
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
}
