//! The hand-over from the Go operator, through the node machine: its pods hold their package,
//! their outcome lands in the node state as `PodReconcile` would write it, stale ones go.

use std::collections::BTreeMap;

use super::stale;
use crate::crd::Package;
use crate::jobs::{GoOutcome, GoPod};
use crate::plan::fixtures::{
    StepInput, entry_of, go_pod, input, node_state, package, packages, step, t,
};
use crate::plan::spec::SpecView;
use crate::plan::stage::{Host, NodeAction, NodeNote, NodeOutcome};
use crate::schema::{NodeState, PackageStatus, Stage, State};

/// Crash-looping since `at`, after `restarts` kubelet restarts.
fn crashed(at: i64, restarts: i32) -> GoOutcome {
    GoOutcome::Failed {
        at: t(at),
        restarts,
        container: "alpha-apply".into(),
        reason: "CrashLoopBackOff".into(),
        message: "back-off restarting failed container".into(),
    }
}

fn runs(o: &NodeOutcome) -> Vec<(String, Stage)> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            NodeAction::Run { package, stage, .. } => Some((package.name.clone(), *stage)),
            _ => None,
        })
        .collect()
}

fn deleted(o: &NodeOutcome) -> Vec<String> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            NodeAction::DeleteGoPod { pod } => Some(pod.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn stale_as_the_reference_validates_running_pods() {
    let alpha = package("alpha").build();
    let old = package("alpha").version("0.9.0").build();
    let pk = packages([&alpha]);
    let none = BTreeMap::new();
    let sv = SpecView::new(&pk, &[], &none);
    let at = |p: &Package, stage, state| node_state([entry_of(p, stage, state)]);
    let pod = |p: &Package, stage| go_pod(p, stage).build();
    let with = |mut g: GoPod, f: fn(&mut GoPod)| {
        f(&mut g);
        g
    };
    use Stage::*;
    use State::*;
    // (case, pod, node state, stale)
    let cases = [
        (
            "its stage runs",
            pod(&alpha, Apply),
            at(&alpha, Apply, InProgress),
            false,
        ),
        (
            "its stage is erroring",
            pod(&alpha, Apply),
            at(&alpha, Apply, Erroring),
            false,
        ),
        (
            "an old version's uninstall",
            pod(&old, Uninstall),
            at(&old, Uninstall, InProgress),
            false,
        ),
        (
            "hand-made: no image to compare",
            with(pod(&alpha, Apply), |g| g.image = String::new()),
            at(&alpha, Apply, InProgress),
            false,
        ),
        (
            "the image's tag is not compared",
            with(pod(&alpha, Apply), |g| g.image.push_str(":1.0.0")),
            at(&alpha, Apply, InProgress),
            false,
        ),
        (
            "invalidated by the Go operator",
            with(pod(&alpha, Apply), |g| g.invalid = true),
            at(&alpha, Apply, InProgress),
            true,
        ),
        (
            "a version not in the spec",
            pod(&old, Apply),
            at(&old, Apply, InProgress),
            true,
        ),
        (
            "a package not in the spec",
            pod(&package("gone").build(), Apply),
            NodeState::default(),
            true,
        ),
        (
            "another image",
            with(pod(&alpha, Apply), |g| g.image = "ghcr.io/x/other".into()),
            at(&alpha, Apply, InProgress),
            true,
        ),
        (
            "another containerSHA",
            with(pod(&alpha, Apply), |g| {
                g.container_sha = Some("sha256:00".into())
            }),
            at(&alpha, Apply, InProgress),
            true,
        ),
        (
            "no node state entry (created, then the Go operator stopped)",
            pod(&alpha, Apply),
            NodeState::default(),
            true,
        ),
        (
            "the node state is at another stage",
            pod(&alpha, Apply),
            at(&alpha, Config, InProgress),
            true,
        ),
        (
            "its stage is already recorded complete",
            pod(&alpha, Apply),
            at(&alpha, Apply, Complete),
            true,
        ),
    ];
    for (case, pod, state, want) in cases {
        let got = stale(&sv, &state, &pod);
        assert_eq!(got.is_some(), want, "case: {case} ({got:?})");
    }
}

/// What one pass does with one Go pod of alpha on a node where bravo (independent) is due.
struct Case {
    name: &'static str,
    /// alpha's entry before the pass (stage, state, restarts).
    prior: (Stage, State, i32),
    pod: GoPod,
    may_start: bool,
    now: i64,
    /// alpha's entry after the pass.
    after: (Stage, State, i32),
    deleted: bool,
    active: bool,
    retry_at: Option<i64>,
    note: Option<&'static str>,
}

#[test]
fn go_pods_are_awaited_recorded_and_cleared() {
    let alpha = package("alpha").build();
    let old = package("alpha").version("0.9.0").build();
    let bravo = package("bravo").build();
    let pk = packages([&alpha, &bravo]);
    let none = BTreeMap::new();
    let sv = SpecView::new(&pk, &[], &none);
    use Stage::*;
    use State::*;
    let pod = |stage, outcome| go_pod(&alpha, stage).outcome(outcome).build();
    let cases = [
        Case {
            name: "running: awaited, nothing recorded",
            prior: (Apply, InProgress, 0),
            pod: pod(Apply, GoOutcome::Running),
            may_start: true,
            now: 0,
            after: (Apply, InProgress, 0),
            deleted: false,
            active: true,
            retry_at: None,
            note: None,
        },
        Case {
            name: "succeeded: complete with the kubelet's restarts, then deleted",
            prior: (Apply, InProgress, 0),
            pod: pod(Apply, GoOutcome::Succeeded { restarts: 2 }),
            may_start: true,
            now: 0,
            after: (Apply, Complete, 2),
            deleted: true,
            active: true,
            retry_at: None,
            note: Some("completed"),
        },
        Case {
            name: "succeeded outside the batch: still recorded and deleted",
            prior: (Config, Erroring, 1),
            pod: pod(Config, GoOutcome::Succeeded { restarts: 1 }),
            may_start: false,
            now: 0,
            after: (Config, Complete, 1),
            deleted: true,
            active: true,
            retry_at: None,
            note: Some("completed"),
        },
        Case {
            name: "failed: erroring, counted once, kept until the backoff passes",
            prior: (Apply, InProgress, 0),
            pod: pod(Apply, crashed(0, 1)),
            may_start: true,
            now: 3,
            after: (Apply, Erroring, 1),
            deleted: false,
            active: false,
            retry_at: Some(10),
            note: Some("failed"),
        },
        Case {
            name: "failed again after earlier failures: one more",
            prior: (Apply, InProgress, 2),
            pod: pod(Apply, crashed(0, 1)),
            may_start: true,
            now: 3,
            after: (Apply, Erroring, 3),
            deleted: false,
            active: false,
            retry_at: Some(40),
            note: Some("failed"),
        },
        Case {
            name: "already erroring: the kubelet's larger count, no new note",
            prior: (Apply, Erroring, 1),
            pod: pod(Apply, crashed(0, 3)),
            may_start: true,
            now: 3,
            after: (Apply, Erroring, 3),
            deleted: false,
            active: false,
            retry_at: Some(40),
            note: None,
        },
        Case {
            name: "failed, backoff passed: deleted to make way for a Job",
            prior: (Apply, Erroring, 1),
            pod: pod(Apply, crashed(0, 1)),
            may_start: true,
            now: 10,
            after: (Apply, Erroring, 1),
            deleted: true,
            active: false,
            retry_at: None,
            note: None,
        },
        Case {
            name: "failed, backoff passed, but the node may not start: kept",
            prior: (Apply, Erroring, 1),
            pod: pod(Apply, crashed(0, 1)),
            may_start: false,
            now: 10,
            after: (Apply, Erroring, 1),
            deleted: false,
            active: false,
            retry_at: None,
            note: None,
        },
        Case {
            name: "being deleted: awaited",
            prior: (Apply, InProgress, 0),
            pod: GoPod {
                deleting: true,
                ..pod(Apply, GoOutcome::Succeeded { restarts: 0 })
            },
            may_start: true,
            now: 0,
            after: (Apply, InProgress, 0),
            deleted: false,
            active: true,
            retry_at: None,
            note: None,
        },
        Case {
            name: "stale (the node state moved on): deleted, its outcome ignored",
            prior: (Config, InProgress, 0),
            pod: pod(Apply, GoOutcome::Succeeded { restarts: 0 }),
            may_start: true,
            now: 0,
            after: (Config, InProgress, 0),
            deleted: true,
            active: true,
            retry_at: None,
            note: None,
        },
        Case {
            name: "stale but the node may not start: kept",
            prior: (Config, InProgress, 0),
            pod: pod(Apply, GoOutcome::Running),
            may_start: false,
            now: 0,
            after: (Config, InProgress, 0),
            deleted: false,
            active: true,
            retry_at: None,
            note: None,
        },
    ];
    for c in cases {
        let (stage, st, restarts) = c.prior;
        let state = node_state([PackageStatus {
            restarts,
            ..entry_of(&alpha, stage, st)
        }]);
        let pods = [c.pod.clone()];
        let o = step(StepInput {
            state,
            host: Host {
                go_pods: &pods,
                ..Host::default()
            },
            may_start: c.may_start,
            now: t(c.now),
            ..input(&sv)
        });
        let name = c.name;
        let e = o.state.get("alpha", "1.0.0").expect("alpha");
        let st = e.state.expect("state");
        assert_eq!((e.stage, st, e.restarts), c.after, "{name}: alpha");
        let want: Vec<String> = if c.deleted {
            vec![c.pod.name.clone()]
        } else {
            Vec::new()
        };
        assert_eq!(deleted(&o), want, "{name}: deleted");
        assert_eq!(o.active, c.active, "{name}: active");
        assert_eq!(o.retry_at, c.retry_at.map(t), "{name}: retry at");
        let note = o.notes.iter().find_map(|n| match n {
            NodeNote::Completed { .. } => Some("completed"),
            NodeNote::Failed { .. } => Some("failed"),
            NodeNote::Started { .. } => None,
        });
        assert_eq!(note, c.note, "{name}: note");
        // alpha never runs beside its Go pod; bravo, independent, starts when it may.
        let want: Vec<(String, Stage)> = if c.may_start {
            vec![("bravo".into(), Apply)]
        } else {
            Vec::new()
        };
        assert_eq!(runs(&o), want, "{name}: runs");
    }

    // An old version's pod, with the node state still at that version: the upgrade of alpha
    // waits for the pod to go, which it is made to.
    let pods = [go_pod(&old, Apply).build()];
    let o = step(StepInput {
        state: node_state([entry_of(&old, Apply, InProgress)]),
        host: Host {
            go_pods: &pods,
            ..Host::default()
        },
        ..input(&sv)
    });
    assert_eq!(deleted(&o), vec![pods[0].name.clone()], "old version");
    assert_eq!(runs(&o), vec![("bravo".into(), Apply)], "old version");
}

#[test]
fn after_a_go_failure_our_attempt_keeps_the_count() {
    let alpha = package("alpha").build();
    let pk = packages([&alpha]);
    let none = BTreeMap::new();
    let sv = SpecView::new(&pk, &[], &none);
    let state = node_state([PackageStatus {
        restarts: 2,
        ..entry_of(&alpha, Stage::Apply, State::Erroring)
    }]);
    let o = step(StepInput {
        state,
        ..input(&sv)
    });
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply)]);
    let e = o.state.get("alpha", "1.0.0").expect("alpha");
    assert_eq!(
        (e.stage, e.state, e.restarts),
        (Stage::Apply, Some(State::InProgress), 2)
    );
}

#[test]
fn a_go_pod_holds_interrupts_and_a_go_interrupt_holds_everything() {
    let reboot = package("driver").reboot().build();
    let plain = package("tuned").build();
    let pk = packages([&reboot, &plain]);
    let none = BTreeMap::new();
    let sv = SpecView::new(&pk, &[], &none);
    let pass = |state: NodeState, pods: &[GoPod]| {
        step(StepInput {
            state,
            // Cordoned and drained already.
            host: Host {
                cordoned: true,
                pods: Some(&[]),
                go_pods: pods,
                ..Host::default()
            },
            ..input(&sv)
        })
    };
    // driver is due for its interrupt while tuned's Go pod still applies: the interrupt waits.
    let state = node_state([
        entry_of(&reboot, Stage::Config, State::Complete),
        entry_of(&plain, Stage::Apply, State::InProgress),
    ]);
    let pods = [go_pod(&plain, Stage::Apply).build()];
    let o = pass(state, &pods);
    assert_eq!(runs(&o), Vec::new(), "the interrupt waits for the Go pod");
    assert!(o.blocked.is_some());
    // The Go operator's interrupt pod runs: tuned, due to apply, waits for it.
    let state = node_state([entry_of(&reboot, Stage::Interrupt, State::InProgress)]);
    let pods = [go_pod(&reboot, Stage::Interrupt).build()];
    let o = pass(state.clone(), &pods);
    assert_eq!(runs(&o), Vec::new(), "nothing starts beside a Go interrupt");
    // Once it succeeded: the interrupt is complete and the pod goes; until it is gone, neither
    // post-interrupt nor tuned starts.
    let pods = [go_pod(&reboot, Stage::Interrupt)
        .outcome(GoOutcome::Succeeded { restarts: 0 })
        .build()];
    let o = pass(state, &pods);
    let e = o.state.get("driver", "1.0.0").expect("driver");
    assert_eq!(
        (e.stage, e.state),
        (Stage::Interrupt, Some(State::Complete))
    );
    assert_eq!(deleted(&o), vec![pods[0].name.clone()]);
    assert_eq!(runs(&o), Vec::new(), "the Go interrupt pod is still there");
}
