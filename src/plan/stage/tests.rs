use super::*;
use std::time::Duration;

use jiff::Timestamp;

use crate::crd::Package;
use crate::jobs::Outcome;
use crate::plan::fixtures::{
    RETRY, StepInput, entry_of, failure, input, job, node_state, package, packages, t,
};
use crate::plan::spec::spec_hash;
use crate::schema::PackageStatus;
use crate::schema::folded_key;
use serde_json::json;

fn view<'a>(
    packages: &'a BTreeMap<String, Package>,
    updates: &'a BTreeMap<String, Vec<String>>,
) -> SpecView<'a> {
    SpecView::new(packages, &[], updates)
}

fn applied_hash(p: &Package) -> String {
    spec_hash(p, &[])
}

/// The machine with its inputs in one call, as the tests read best.
#[allow(clippy::too_many_arguments)]
fn step(
    spec: &SpecView,
    state: NodeState,
    applied: BTreeMap<String, String>,
    host: Host,
    jobs: &[&JobView],
    may_start: bool,
    retry: RetryPolicy,
    failed_jobs_kept: usize,
    now: Timestamp,
) -> NodeOutcome {
    crate::plan::fixtures::step(StepInput {
        spec,
        state,
        applied,
        folded: Default::default(),
        host,
        jobs,
        may_start,
        retry,
        failed_jobs_kept,
        now,
    })
}

/// An `apply` attempt that failed at `at` with a non-zero exit.
fn failed_apply(p: &Package, attempt: u32, at: Timestamp) -> JobView {
    job(p, Stage::Apply)
        .attempt(attempt)
        .outcome(failure(at))
        .build()
}

fn runs(o: &NodeOutcome) -> Vec<(String, Stage, u32)> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            NodeAction::Run {
                package,
                stage,
                attempt,
                ..
            } => Some((package.name.clone(), *stage, *attempt)),
            _ => None,
        })
        .collect()
}

fn state_of(o: &NodeOutcome, p: &Package) -> (Stage, Option<State>, i32) {
    let e = o.state.get(&p.name, &p.version).expect("entry");
    (e.stage, e.state, e.restarts)
}

#[test]
fn fresh_install_starts_roots_only_then_follows_dependencies() {
    let a = package("alpha").build();
    let b = package("bravo")
        .with(json!({"dependsOn": {"alpha": "1.0.0"}}))
        .build();
    let c = package("charlie").version("2.0.0").build();
    let pk = packages([&a, &b, &c]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let o = step(
        &sv,
        NodeState::default(),
        BTreeMap::new(),
        Host::default(),
        &[],
        true,
        RETRY,
        3,
        t(0),
    );
    assert_eq!(
        runs(&o),
        vec![
            ("alpha".into(), Stage::Apply, 0),
            ("charlie".into(), Stage::Apply, 0)
        ]
    );
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::InProgress), 0));

    // alpha's apply Job completed: record it and move to config; bravo still waits.
    let done = job(&a, Stage::Apply)
        .outcome(Outcome::Complete { at: t(5) })
        .build();
    let running = job(&c, Stage::Apply).build();
    let o = step(
        &sv,
        o.state,
        BTreeMap::new(),
        Host::default(),
        &[&done, &running],
        true,
        RETRY,
        3,
        t(6),
    );
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Config, 0)]);
    assert_eq!(
        o.folded,
        Folded::from([("alpha|1.0.0|apply".to_string(), 0)]),
        "the completed Job is folded (and the running one's entry never written)"
    );
    assert!(
        o.actions
            .iter()
            .all(|a| !matches!(a, NodeAction::Delete { .. }))
    );
    assert!(o.active);

    // alpha complete at config: bravo starts, and alpha's spec is recorded as applied.
    let mut st = o.state.clone();
    st.upsert(entry_of(&a, Stage::Config, State::Complete));
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[&running],
        true,
        RETRY,
        3,
        t(7),
    );
    assert_eq!(runs(&o), vec![("bravo".into(), Stage::Apply, 0)]);
    assert_eq!(o.applied.get("alpha|1.0.0"), Some(&applied_hash(&a)));
}

#[test]
fn outside_the_batch_jobs_are_observed_but_nothing_starts() {
    let a = package("alpha").build();
    let pk = packages([&a]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let st = node_state([entry_of(&a, Stage::Apply, State::InProgress)]);
    let done = job(&a, Stage::Apply)
        .outcome(Outcome::Complete { at: t(1) })
        .build();
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[&done],
        false,
        RETRY,
        3,
        t(2),
    );
    assert!(runs(&o).is_empty());
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Complete), 0));
}

#[test]
fn failures_retry_with_capped_backoff_and_never_twin() {
    let a = package("alpha").build();
    let pk = packages([&a]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let st = node_state([entry_of(&a, Stage::Apply, State::InProgress)]);
    let failed = |attempt, at| failed_apply(&a, attempt, at);
    let f0 = failed(0, t(0));
    let o = step(
        &sv,
        st.clone(),
        BTreeMap::new(),
        Host::default(),
        &[&f0],
        true,
        RETRY,
        3,
        t(1),
    );
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Erroring), 1));
    assert!(runs(&o).is_empty(), "retried before the backoff");
    assert_eq!(o.retry_at, Some(t(10)));
    assert!(
        o.notes
            .iter()
            .any(|n| matches!(n, NodeNote::Failed { restarts: 1, .. }))
    );

    let o = step(
        &sv,
        o.state,
        BTreeMap::new(),
        Host::default(),
        &[&f0],
        true,
        RETRY,
        3,
        t(10),
    );
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 1)]);
    assert_eq!(state_of(&o, &a).2, 1, "restarts survive the retry");

    // The retry is running: adopt it, never a second one.
    let r1 = job(&a, Stage::Apply).attempt(1).build();
    let o = step(
        &sv,
        o.state,
        BTreeMap::new(),
        Host::default(),
        &[&f0, &r1],
        true,
        RETRY,
        3,
        t(11),
    );
    assert!(runs(&o).is_empty());
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::InProgress), 1));

    // Backoff doubles: after two failures the wait is 20 s; the cap is 300 s.
    assert_eq!(RETRY.delay(2), Duration::from_secs(20));
    assert_eq!(RETRY.delay(12), Duration::from_secs(300));
}

#[test]
fn a_spec_change_retries_at_once_and_replaces_stale_running_jobs() {
    let old = package("alpha")
        .with(json!({"env": [{"name": "EXIT_CODE", "value": "1"}]}))
        .build();
    let new = package("alpha").build();
    let pk = packages([&new]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let st = node_state([entry_of(&new, Stage::Apply, State::Erroring)]);
    let failed = job(&old, Stage::Apply)
        .outcome(Outcome::Failed {
            at: t(0),
            reason: "x".into(),
            message: String::new(),
        })
        .build();
    let o = step(
        &sv,
        st.clone(),
        BTreeMap::new(),
        Host::default(),
        &[&failed],
        true,
        RETRY,
        3,
        t(1),
    );
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 1)]);

    let st = node_state([entry_of(&new, Stage::Apply, State::InProgress)]);
    let stale = job(&old, Stage::Apply).build();
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[&stale],
        true,
        RETRY,
        3,
        t(1),
    );
    assert!(o.actions.contains(&NodeAction::Delete {
        job: stale.name.to_string()
    }));
    assert!(runs(&o).is_empty());
}

#[test]
fn stuck_pods_fail_the_job_with_their_reason() {
    let a = package("alpha").build();
    let pk = packages([&a]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let st = node_state([entry_of(&a, Stage::Apply, State::InProgress)]);
    let mut j = job(&a, Stage::Apply).build();
    j.stuck = Some(Box::new((
        "alpha-init".into(),
        "ImagePullBackOff".into(),
        "back-off".into(),
    )));
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[&j],
        true,
        RETRY,
        3,
        t(1),
    );
    assert!(
        o.actions.iter().any(
            |a| matches!(a, NodeAction::FailNow { reason, .. } if reason == "ImagePullBackOff")
        )
    );
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Erroring), 1));
}

#[test]
fn upgrade_downgrade_and_removal() {
    let v1 = package("alpha").build();
    let v2 = package("alpha").version("1.1.0").build();
    let gone = package("old").version("3.0.0").build();
    let none = BTreeMap::new();

    // Upgrade: the new version runs `upgrade`; on success the old entry goes.
    let pk = packages([&v2]);
    let sv = view(&pk, &none);
    let st = node_state([entry_of(&v1, Stage::Config, State::Complete)]);
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[],
        true,
        RETRY,
        3,
        t(0),
    );
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Upgrade, 0)]);
    let done = job(&v2, Stage::Upgrade)
        .outcome(Outcome::Complete { at: t(1) })
        .build();
    let o = step(
        &sv,
        o.state,
        BTreeMap::new(),
        Host::default(),
        &[&done],
        true,
        RETRY,
        3,
        t(2),
    );
    assert!(o.state.get("alpha", "1.0.0").is_none());
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Config, 0)]);

    // Downgrade: the old version uninstalls first while the new one is skipped.
    let pk = packages([&v1]);
    let sv = view(&pk, &none);
    let st = node_state([entry_of(&v2, Stage::Config, State::Complete)]);
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[],
        true,
        RETRY,
        3,
        t(0),
    );
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Uninstall, 0)]);
    assert_eq!(
        state_of(&o, &v1),
        (Stage::Uninstall, Some(State::Skipped), 0)
    );
    let done = job(&v2, Stage::Uninstall)
        .outcome(Outcome::Complete { at: t(1) })
        .build();
    let o = step(
        &sv,
        o.state,
        BTreeMap::new(),
        Host::default(),
        &[&done],
        true,
        RETRY,
        3,
        t(2),
    );
    assert!(o.state.get("alpha", "1.1.0").is_none());
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 0)]);

    // Removal: uninstall with the old image, then the entry disappears.
    let pk = packages([]);
    let sv = view(&pk, &none);
    let st = node_state([entry_of(&gone, Stage::Config, State::Complete)]);
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[],
        true,
        RETRY,
        3,
        t(0),
    );
    let uninstall = o.actions.iter().find_map(|a| match a {
        NodeAction::Run {
            package,
            stage: Stage::Uninstall,
            ..
        } => Some(package.clone()),
        _ => None,
    });
    let uninstall = uninstall.expect("an uninstall");
    assert_eq!(
        (uninstall.version.as_str(), uninstall.image.as_str()),
        ("3.0.0", "ghcr.io/x/old")
    );
    let done = job(&gone, Stage::Uninstall)
        .outcome(Outcome::Complete { at: t(1) })
        .build();
    let o = step(
        &sv,
        o.state,
        BTreeMap::new(),
        Host::default(),
        &[&done],
        true,
        RETRY,
        3,
        t(2),
    );
    assert!(o.state.is_empty());
    assert!(sv.node_complete(&o.state));
}

#[test]
fn drift_reruns_config_or_apply_and_unrecorded_state_is_adopted() {
    let a = package("alpha")
        .with(json!({"configMap": {"k": "new"}}))
        .build();
    let old = package("alpha")
        .with(json!({"configMap": {"k": "old"}}))
        .build();
    let pk = packages([&a]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let st = node_state([entry_of(&a, Stage::Config, State::Complete)]);

    // No record (e.g. Go-operator state): adopted as current, nothing re-runs.
    let o = step(
        &sv,
        st.clone(),
        BTreeMap::new(),
        Host::default(),
        &[],
        true,
        RETRY,
        3,
        t(0),
    );
    assert!(runs(&o).is_empty());
    assert_eq!(o.applied.get("alpha|1.0.0"), Some(&applied_hash(&a)));

    // Config-only drift re-runs config.
    let applied: BTreeMap<String, String> =
        [("alpha|1.0.0".to_string(), applied_hash(&old))].into();
    assert!(sv.has_drift(&st, &applied));
    let o = step(
        &sv,
        st.clone(),
        applied,
        Host::default(),
        &[],
        true,
        RETRY,
        3,
        t(0),
    );
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Config, 0)]);

    // Install drift (env) re-runs apply.
    let other = package("alpha")
        .with(json!({"configMap": {"k": "new"}, "env": [{"name": "X", "value": "1"}]}))
        .build();
    let applied: BTreeMap<String, String> =
        [("alpha|1.0.0".to_string(), applied_hash(&other))].into();
    let o = step(&sv, st, applied, Host::default(), &[], true, RETRY, 3, t(0));
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 0)]);
}

#[test]
fn legacy_unversioned_entries_are_migrated() {
    let a = package("alpha").build();
    let pk = packages([&a]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let st = NodeState::parse(r#"{"alpha":{"name":"alpha","version":"1.0.0","image":"","stage":"config","state":"complete"},"gone":{"name":"gone","version":"1","image":"","stage":"config","state":"complete"}}"#)
        .expect("legacy state");
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[],
        false,
        RETRY,
        3,
        t(0),
    );
    assert_eq!(o.state.keys().collect::<Vec<_>>(), vec!["alpha|1.0.0"]);
    assert_eq!(
        o.state.get("alpha", "1.0.0").map(|e| e.image.as_str()),
        Some("ghcr.io/x/alpha")
    );
}

/// One package on one node: (case, has interrupt, prior entry, newest Job of the entry's stage,
/// expected entry after the step, expected Job started).
type Transition = (
    &'static str,
    bool,
    Option<(Stage, State)>,
    Option<Outcome>,
    Option<(Stage, State, i32)>,
    Option<(Stage, u32)>,
);

#[test]
fn stage_machine_transitions() {
    let ok = || Some(Outcome::Complete { at: t(0) });
    let failed = |at: i64| Some(failure(t(at)));
    use Stage::*;
    use State::*;
    let cases: &[Transition] = &[
        (
            "fresh package applies",
            false,
            None,
            None,
            Some((Apply, InProgress, 0)),
            Some((Apply, 0)),
        ),
        (
            "apply done starts config",
            false,
            Some((Apply, InProgress)),
            ok(),
            Some((Config, InProgress, 0)),
            Some((Config, 0)),
        ),
        (
            "config done completes",
            false,
            Some((Config, InProgress)),
            ok(),
            Some((Config, Complete, 0)),
            None,
        ),
        (
            "upgrade done starts config",
            false,
            Some((Upgrade, InProgress)),
            ok(),
            Some((Config, InProgress, 0)),
            Some((Config, 0)),
        ),
        (
            "config done leads to the interrupt",
            true,
            Some((Config, InProgress)),
            ok(),
            Some((Interrupt, InProgress, 0)),
            Some((Interrupt, 0)),
        ),
        (
            "interrupt done starts post-interrupt",
            true,
            Some((Interrupt, InProgress)),
            ok(),
            Some((PostInterrupt, InProgress, 0)),
            Some((PostInterrupt, 0)),
        ),
        (
            "post-interrupt done completes",
            true,
            Some((PostInterrupt, InProgress)),
            ok(),
            Some((PostInterrupt, Complete, 0)),
            None,
        ),
        (
            "failure is erroring and waits",
            false,
            Some((Apply, InProgress)),
            failed(0),
            Some((Apply, Erroring, 1)),
            None,
        ),
        (
            "failure retried after the backoff",
            false,
            Some((Apply, InProgress)),
            failed(-60),
            Some((Apply, InProgress, 1)),
            Some((Apply, 1)),
        ),
        (
            "running Job is adopted",
            false,
            Some((Config, InProgress)),
            Some(Outcome::Running),
            Some((Config, InProgress, 0)),
            None,
        ),
        (
            "interrupt failure is erroring",
            true,
            Some((Interrupt, InProgress)),
            failed(0),
            Some((Interrupt, Erroring, 1)),
            None,
        ),
        (
            "complete package stays",
            false,
            Some((Config, Complete)),
            None,
            Some((Config, Complete, 0)),
            None,
        ),
    ];
    let plain = package("pkg").build();
    let reboot = package("pkg").reboot().build();
    let none = BTreeMap::new();
    for (case, interrupt, prior, latest, after, run) in cases {
        let p = if *interrupt { &reboot } else { &plain };
        let pk = packages([p]);
        let sv = view(&pk, &none);
        let mut state = NodeState::default();
        if let Some((stage, st)) = prior {
            state.upsert(entry_of(p, *stage, *st));
        }
        let jobs: Vec<JobView> = match (prior, latest) {
            (Some((stage, _)), Some(o)) => vec![job(p, *stage).outcome(o.clone()).build()],
            _ => Vec::new(),
        };
        let refs: Vec<&JobView> = jobs.iter().collect();
        // Interrupt packages step on a node already cordoned and drained.
        let host = Host {
            cordoned: true,
            pods: Some(&[]),
            ..Host::default()
        };
        let o = step(
            &sv,
            state,
            BTreeMap::new(),
            host,
            &refs,
            true,
            RETRY,
            3,
            t(0),
        );
        let got = o
            .state
            .get(&p.name, &p.version)
            .map(|e| (e.stage, e.state.expect("state"), e.restarts));
        assert_eq!(got, *after, "{case}: state");
        let started: Vec<(Stage, u32)> = runs(&o).into_iter().map(|(_, s, a)| (s, a)).collect();
        assert_eq!(
            started,
            run.iter().copied().collect::<Vec<_>>(),
            "{case}: runs"
        );
    }
}

/// `restarts` is persisted: it goes on counting after old failed Jobs are pruned, and the backoff
/// follows it up to its cap.
#[test]
fn restarts_outlive_pruned_jobs_and_drive_the_backoff() {
    let a = package("alpha").build();
    let pk = packages([&a]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let failed = |attempt, at| failed_apply(&a, attempt, at);
    let go = |state: NodeState, jobs: &[&JobView], now| {
        step(
            &sv,
            state,
            BTreeMap::new(),
            Host::default(),
            jobs,
            true,
            RETRY,
            1,
            now,
        )
    };
    // Four failures so far; only the newest failed Job is kept (FAILED_JOBS_KEPT=1).
    let st = node_state([PackageStatus {
        restarts: 4,
        ..entry_of(&a, Stage::Apply, State::Erroring)
    }]);
    let f4 = failed(4, t(0));
    // delay(4) = 10 s · 2³ = 80 s, not the delay of one failed Job (10 s).
    let o = go(st.clone(), &[&f4], t(79));
    assert!(
        runs(&o).is_empty(),
        "retried before the backoff of 4 failures"
    );
    assert_eq!(o.retry_at, Some(t(80)));
    let o = go(st, &[&f4], t(80));
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 5)]);
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::InProgress), 4));

    // Attempt 5 fails: the count becomes 5 although one failed Job is left after pruning.
    let f5 = failed(5, t(90));
    let o = go(o.state, &[&f4, &f5], t(91));
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Erroring), 5));
    assert!(
        o.notes
            .iter()
            .any(|n| matches!(n, NodeNote::Failed { restarts: 5, .. }))
    );
    assert!(
        o.actions
            .iter()
            .any(|x| matches!(x, NodeAction::Delete { job } if **job == *f4.name)),
        "the older failed Job is pruned"
    );
    // Folded once: the next pass leaves the count alone.
    let o = go(o.state, &[&f5], t(92));
    assert_eq!(state_of(&o, &a).2, 5);
    // The cap: 300 s however many failures.
    let st = node_state([PackageStatus {
        restarts: 40,
        ..entry_of(&a, Stage::Apply, State::Erroring)
    }]);
    let f40 = failed(40, t(0));
    assert_eq!(go(st, &[&f40], t(1)).retry_at, Some(t(300)));
}

/// A failure is counted once: a pass that sees an already counted failed Job again (its retry
/// was stored but never created) restores `erroring` without counting or reporting it again.
#[test]
fn a_counted_failure_is_not_counted_again() {
    let a = package("alpha").build();
    let pk = packages([&a]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let mut f = failed_apply(&a, 2, t(0));
    // (case, the Job is counted, stored state, restarts after, Counted marks, Failed notes)
    let cases = [
        ("first sight", false, State::InProgress, 3, 1, 1),
        ("seen, not yet marked", false, State::Erroring, 2, 1, 0),
        (
            "marked, retry never created",
            true,
            State::InProgress,
            2,
            0,
            0,
        ),
        ("marked, erroring", true, State::Erroring, 2, 0, 0),
    ];
    for (case, counted, stored, restarts, marks, notes) in cases {
        f.counted = counted;
        let st = node_state([PackageStatus {
            restarts: 2,
            ..entry_of(&a, Stage::Apply, stored)
        }]);
        let o = step(
            &sv,
            st,
            BTreeMap::new(),
            Host::default(),
            &[&f],
            false,
            RETRY,
            3,
            t(1),
        );
        assert_eq!(
            state_of(&o, &a),
            (Stage::Apply, Some(State::Erroring), restarts),
            "case: {case}"
        );
        let got_marks = o
            .actions
            .iter()
            .filter(|x| matches!(x, NodeAction::Counted { .. }))
            .count();
        assert_eq!(got_marks, marks, "case: {case}");
        let got_notes = o
            .notes
            .iter()
            .filter(|n| matches!(n, NodeNote::Failed { .. }))
            .count();
        assert_eq!(got_notes, notes, "case: {case}");
    }
}

#[test]
fn a_finished_upgrade_is_not_undone_by_the_old_versions_stale_entry() {
    // The new version's key sorts before the old one's ("1.0.0" < "1.0.0-rc"), so its upgrade is
    // folded first and drops the old entry; the old entry's running Job (its pod already gone)
    // must not put the entry back, or the next pass would start the upgrade over.
    let old = package("alpha").version("1.0.0-rc").build();
    let new = package("alpha").build();
    let none = BTreeMap::new();
    let pk = packages([&new]);
    let sv = view(&pk, &none);
    let st = node_state([
        entry_of(&old, Stage::Apply, State::Erroring),
        entry_of(&new, Stage::Upgrade, State::InProgress),
    ]);
    let upgraded = job(&new, Stage::Upgrade)
        .outcome(Outcome::Complete { at: t(1) })
        .build();
    let stale = job(&old, Stage::Apply).build();
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[&upgraded, &stale],
        true,
        RETRY,
        3,
        t(2),
    );
    assert!(o.state.get("alpha", "1.0.0-rc").is_none(), "{:?}", o.state);
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Config, 0)]);
    // And a new version already past its upgrade is never sent back to it.
    let st = node_state([
        entry_of(&old, Stage::Apply, State::Erroring),
        entry_of(&new, Stage::Config, State::InProgress),
    ]);
    let o = step(
        &sv,
        st,
        BTreeMap::new(),
        Host::default(),
        &[],
        true,
        RETRY,
        3,
        t(3),
    );
    assert_eq!(state_of(&o, &new).0, Stage::Config, "{:?}", o.state);
}

#[test]
fn running_jobs_the_state_no_longer_asks_for_are_deleted() {
    let p = package("alpha").build();
    let none = BTreeMap::new();
    let pk = packages([&p]);
    let sv = view(&pk, &none);
    let with = |stage: Stage, state: State| node_state([entry_of(&p, stage, state)]);
    // (case, stored state, running Job's stage, its node version, node version read,
    //  may start, Job deleted, stages started)
    type Case<'a> = (
        &'a str,
        NodeState,
        Stage,
        Option<u64>,
        u64,
        bool,
        bool,
        Vec<Stage>,
    );
    let cases: Vec<Case> = vec![
        (
            "a reset under a running apply: deleted, apply waits for it to go",
            NodeState::default(),
            Stage::Apply,
            Some(5),
            7,
            true,
            true,
            vec![],
        ),
        (
            "a node copy older than the Job's own write: adopted, not a reset",
            NodeState::default(),
            Stage::Apply,
            Some(9),
            7,
            true,
            false,
            vec![],
        ),
        (
            "the state moved to config (a rerun): the apply Job goes, config starts",
            with(Stage::Config, State::InProgress),
            Stage::Apply,
            Some(5),
            7,
            true,
            true,
            vec![Stage::Config],
        ),
        (
            "the stage the state asks for: kept",
            with(Stage::Apply, State::InProgress),
            Stage::Apply,
            Some(5),
            7,
            true,
            false,
            vec![],
        ),
        (
            "an uninstall runs to the end (the spec's version installs beside it)",
            NodeState::default(),
            Stage::Uninstall,
            Some(5),
            7,
            true,
            false,
            vec![Stage::Apply],
        ),
        (
            "a Job without the node version (an older operator's): kept",
            NodeState::default(),
            Stage::Apply,
            None,
            7,
            true,
            false,
            vec![],
        ),
        (
            "paused or outside the batch: kept",
            NodeState::default(),
            Stage::Apply,
            Some(5),
            7,
            false,
            false,
            vec![],
        ),
    ];
    for (case, state, stage, job_version, seen, may_start, deleted, started) in cases {
        let running = job(&p, stage).node_version(job_version).build();
        let host = Host {
            node_version: Some(seen),
            ..Host::default()
        };
        let o = step(
            &sv,
            state,
            BTreeMap::new(),
            host,
            &[&running],
            may_start,
            RETRY,
            3,
            t(0),
        );
        let deletes = o
            .actions
            .iter()
            .any(|a| matches!(a, NodeAction::Delete { job } if **job == *running.name));
        assert_eq!(deletes, deleted, "{case}: deleted");
        let stages: Vec<Stage> = runs(&o).into_iter().map(|(_, s, _)| s).collect();
        assert_eq!(stages, started, "{case}: started");
    }
}

#[test]
fn finished_jobs_the_state_no_longer_asks_for_are_set_aside() {
    // A Job that finished before its outcome was folded (the operator was down, or the reset
    // landed between the Job's end and the next pass) belongs to the run that was reset: it is
    // recorded without touching the state, and the stage runs again as a new attempt.
    let p = package("alpha").reboot().build();
    let none = BTreeMap::new();
    let pk = packages([&p]);
    let sv = view(&pk, &none);
    let with = |stage: Stage, state: State| node_state([entry_of(&p, stage, state)]);
    let failed = failure(t(0));
    let complete = Outcome::Complete { at: t(0) };
    // (case, stored state, finished Job's stage and outcome, its node version, recorded,
    //  stages started)
    type Case<'a> = (
        &'a str,
        NodeState,
        Stage,
        Outcome,
        Option<u64>,
        bool,
        Vec<(Stage, u32)>,
    );
    let cases: Vec<Case> = vec![
        (
            "reset after the interrupt ended: the interrupt runs again once its turn comes",
            with(Stage::Config, State::Complete),
            Stage::Interrupt,
            complete.clone(),
            Some(5),
            true,
            vec![(Stage::Interrupt, 1)],
        ),
        (
            "reset after apply ended: apply runs again",
            NodeState::default(),
            Stage::Apply,
            complete.clone(),
            Some(5),
            true,
            vec![(Stage::Apply, 1)],
        ),
        (
            "reset after a failure: a new run, at once and with no failure counted",
            NodeState::default(),
            Stage::Apply,
            failed.clone(),
            Some(5),
            true,
            vec![(Stage::Apply, 1)],
        ),
        (
            "the stage the state asks for: folded (and recorded) as usual",
            with(Stage::Apply, State::InProgress),
            Stage::Apply,
            complete.clone(),
            Some(5),
            true,
            vec![(Stage::Config, 0)],
        ),
        (
            "a node copy older than the Job's own write: left for a newer copy",
            NodeState::default(),
            Stage::Apply,
            complete.clone(),
            Some(9),
            false,
            vec![],
        ),
    ];
    for (case, state, stage, outcome, job_version, want_recorded, started) in cases {
        let done = job(&p, stage)
            .outcome(outcome)
            .node_version(job_version)
            .build();
        let host = Host {
            cordoned: true,
            pods: Some(&[]),
            node_version: Some(7),
            ..Host::default()
        };
        let o = step(
            &sv,
            state,
            BTreeMap::new(),
            host,
            &[&done],
            true,
            RETRY,
            3,
            t(1),
        );
        let recorded = o.folded.get(&folded_key(&p.name, &p.version, stage)) == Some(&0);
        assert_eq!(recorded, want_recorded, "{case}: recorded");
        let got: Vec<(Stage, u32)> = runs(&o).into_iter().map(|(_, s, a)| (s, a)).collect();
        assert_eq!(got, started, "{case}: started");
        if !started.is_empty() {
            assert_eq!(state_of(&o, &p).2, 0, "{case}: restarts");
        }
    }
}

#[test]
fn folded_attempts_are_never_folded_again() {
    // The node's `folded` record says which attempts its state holds: a later run of the same
    // stage must not take an old attempt's outcome for its own.
    let p = package("alpha").build();
    let none = BTreeMap::new();
    let pk = packages([&p]);
    let sv = view(&pk, &none);
    let in_progress = |stage: Stage| node_state([entry_of(&p, stage, State::InProgress)]);
    let complete = Outcome::Complete { at: t(0) };
    let apply = |attempt: u32, outcome: Outcome| {
        job(&p, Stage::Apply)
            .attempt(attempt)
            .outcome(outcome)
            .build()
    };
    let key = folded_key(&p.name, &p.version, Stage::Apply);
    // (case, stored state, Jobs, folded before, (stage, state) after, started, folded after)
    type Case<'a> = (
        &'a str,
        NodeState,
        Vec<JobView>,
        Option<u32>,
        (Stage, Option<State>),
        Vec<(Stage, u32)>,
        Option<u32>,
    );
    let cases: Vec<Case> = vec![
        (
            "not folded yet: folded now, the package moves on",
            in_progress(Stage::Apply),
            vec![apply(0, complete.clone())],
            None,
            (Stage::Config, Some(State::InProgress)),
            vec![(Stage::Config, 0)],
            Some(0),
        ),
        (
            "a rerun of apply: the folded Job is the old run's, a new attempt starts",
            in_progress(Stage::Apply),
            vec![apply(0, complete.clone())],
            Some(0),
            (Stage::Apply, Some(State::InProgress)),
            vec![(Stage::Apply, 1)],
            Some(0),
        ),
        (
            "the new run's attempt completed: folded, the old one stays folded",
            in_progress(Stage::Apply),
            vec![apply(0, complete.clone()), apply(1, complete.clone())],
            Some(0),
            (Stage::Config, Some(State::InProgress)),
            vec![(Stage::Config, 0)],
            Some(1),
        ),
        (
            "the new run's attempt still running: adopted, nothing folded",
            in_progress(Stage::Apply),
            vec![apply(0, complete.clone()), apply(1, Outcome::Running)],
            Some(0),
            (Stage::Apply, Some(State::InProgress)),
            vec![],
            Some(0),
        ),
        (
            "every Job of the stage gone (TTL): the entry goes too",
            in_progress(Stage::Config),
            vec![job(&p, Stage::Config).build()],
            Some(4),
            (Stage::Config, Some(State::InProgress)),
            vec![],
            None,
        ),
        (
            "an entry whose Jobs are gone still numbers a new attempt after it",
            in_progress(Stage::Apply),
            vec![],
            Some(4),
            (Stage::Apply, Some(State::InProgress)),
            vec![(Stage::Apply, 5)],
            None,
        ),
    ];
    for (case, state, jobs, before, (stage, st), started, after) in cases {
        let refs: Vec<&JobView> = jobs.iter().collect();
        let o = crate::plan::fixtures::step(StepInput {
            state,
            folded: before.map(|a| (key.clone(), a)).into_iter().collect(),
            jobs: &refs,
            now: t(1),
            ..input(&sv)
        });
        let got = state_of(&o, &p);
        assert_eq!((got.0, got.1), (stage, st), "{case}: state");
        let runs: Vec<(Stage, u32)> = runs(&o).into_iter().map(|(_, s, a)| (s, a)).collect();
        assert_eq!(runs, started, "{case}: started");
        assert_eq!(o.folded.get(&key).copied(), after, "{case}: folded");
    }
}

/// An interrupt starts, or retries, only on a node that is cordoned and drained, whatever led
/// to it: a re-run of the interrupt stage alone, or an uncordon while its retry waited.
#[test]
fn the_interrupt_starts_only_on_a_cordoned_drained_node() {
    use crate::plan::drain::PodInfo;
    let p = package("pkg").reboot().build();
    let pk = packages([&p]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let config_done = || node_state([entry_of(&p, Stage::Config, State::Complete)]);
    let retry_due = || node_state([entry_of(&p, Stage::Interrupt, State::Erroring)]);
    let failed = job(&p, Stage::Interrupt).outcome(failure(t(-3600))).build();
    let workload = [PodInfo {
        namespace: "apps".into(),
        name: "web".into(),
        protected: false,
        evictable: true,
        terminating: false,
        unmovable: None,
        health: None,
    }];
    let host = |cordoned: bool, pods: Option<&'static [PodInfo]>| Host {
        cordoned,
        pods,
        ..Host::default()
    };
    let listed: &'static [PodInfo] = Box::leak(Box::new(workload));
    // (case, state, jobs, host, want cordon, want evictions, want the interrupt started)
    let cases: Vec<(&str, NodeState, Vec<&JobView>, Host, bool, usize, bool)> = vec![
        (
            "re-run on an uncordoned node: cordon first",
            config_done(),
            vec![],
            host(false, None),
            true,
            0,
            false,
        ),
        (
            "cordoned, pods not listed yet: wait for the listing",
            config_done(),
            vec![],
            host(true, None),
            false,
            0,
            false,
        ),
        (
            "cordoned with a workload: evict it first",
            config_done(),
            vec![],
            host(true, Some(listed)),
            false,
            1,
            false,
        ),
        (
            "cordoned and drained: the interrupt starts",
            config_done(),
            vec![],
            host(true, Some(&[])),
            false,
            0,
            true,
        ),
        (
            "a due retry on a node uncordoned meanwhile: cordoned again first",
            retry_due(),
            vec![&failed],
            host(false, None),
            true,
            0,
            false,
        ),
        (
            "a due retry on a drained node: retried",
            retry_due(),
            vec![&failed],
            host(true, Some(&[])),
            false,
            0,
            true,
        ),
    ];
    for (case, state, jobs, host, cordon, evictions, started) in cases {
        let o = step(
            &sv,
            state,
            BTreeMap::new(),
            host,
            &jobs,
            true,
            RETRY,
            3,
            t(0),
        );
        assert_eq!(o.cordon, cordon, "{case}: cordon");
        assert_eq!(o.evict.len(), evictions, "{case}: evictions");
        let interrupts = runs(&o)
            .into_iter()
            .filter(|(_, s, _)| *s == Stage::Interrupt)
            .count();
        assert_eq!(interrupts > 0, started, "{case}: interrupt started");
    }
}

/// While another Skyhook's interrupt runs on the node, none of our stages starts there; what
/// already runs is adopted.
#[test]
fn nothing_starts_under_another_skyhooks_interrupt() {
    let a = package("alpha").build();
    let b = package("bravo").build();
    let pk = packages([&a, &b]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let running = job(&b, Stage::Apply).outcome(Outcome::Running).build();
    let state = node_state([entry_of(&b, Stage::Apply, State::InProgress)]);
    for (other_interrupting, want) in [(false, vec!["alpha"]), (true, vec![])] {
        let host = Host {
            other_busy: other_interrupting,
            other_interrupting,
            ..Host::default()
        };
        let o = step(
            &sv,
            state.clone(),
            BTreeMap::new(),
            host,
            &[&running],
            true,
            RETRY,
            3,
            t(0),
        );
        let started: Vec<String> = runs(&o).into_iter().map(|(p, _, _)| p).collect();
        assert_eq!(
            started, want,
            "another interrupt running: {other_interrupting}"
        );
        assert_eq!(
            state_of(&o, &b),
            (Stage::Apply, Some(State::InProgress), 0),
            "the running stage is adopted"
        );
        assert_eq!(o.blocked.is_some(), other_interrupting);
    }
}

/// Delta D43: with `serial`, one stage Job of the Skyhook at a time on the node.
#[test]
fn serial_runs_one_stage_at_a_time() {
    let a = package("alpha").build();
    let c = package("charlie").version("2.0.0").build();
    let pk = packages([&a, &c]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none).serial(true);
    let run = |state: NodeState, jobs: &[&JobView], at: i64| {
        step(
            &sv,
            state,
            BTreeMap::new(),
            Host::default(),
            jobs,
            true,
            RETRY,
            3,
            t(at),
        )
    };
    let o = run(NodeState::default(), &[], 0);
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 0)]);
    let running = job(&a, Stage::Apply).build();
    let o = run(o.state, &[&running], 1);
    assert_eq!(runs(&o), vec![], "a Job of the Skyhook runs on the node");
    let done = job(&a, Stage::Apply)
        .outcome(Outcome::Complete { at: t(2) })
        .build();
    let o = run(o.state, &[&done], 3);
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Config, 0)]);
}

#[test]
fn a_stage_gives_up_after_job_backoff_limit_until_rerun() {
    let a = package("alpha").build();
    let pk = packages([&a]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let limited = RetryPolicy {
        limit: Some(1),
        ..RETRY
    };
    let go = |state: NodeState, jobs: &[&JobView], now, retry| {
        step(
            &sv,
            state,
            BTreeMap::new(),
            Host::default(),
            jobs,
            true,
            retry,
            3,
            now,
        )
    };
    // One failure is within JOB_BACKOFF_LIMIT=1: retried after the backoff.
    let f0 = failed_apply(&a, 0, t(0));
    let st = node_state([entry_of(&a, Stage::Apply, State::InProgress)]);
    let o = go(st, &[&f0], t(1), limited);
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Erroring), 1));
    let o = go(o.state, &[&f0], t(10), limited);
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 1)]);
    // The second failure exceeds it: erroring, no further attempt however long one waits.
    let f1 = failed_apply(&a, 1, t(20));
    let o = go(o.state, &[&f0, &f1], t(21), limited);
    assert_eq!(state_of(&o, &a), (Stage::Apply, Some(State::Erroring), 2));
    let parked = go(o.state.clone(), &[&f0, &f1], t(100_000), limited);
    assert!(runs(&parked).is_empty(), "retried past JOB_BACKOFF_LIMIT");
    assert_eq!(parked.retry_at, None);
    let why = parked.blocked.clone().unwrap_or_default();
    assert!(
        why.contains("JOB_BACKOFF_LIMIT=1") && why.contains("package rerun alpha"),
        "{why}"
    );
    // Without a limit (v0.13) the same state is retried.
    let o = go(o.state, &[&f0, &f1], t(100_000), RETRY);
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 2)]);
    // A rerun (the entry reset, the failed Jobs recorded) starts again.
    let rerun = node_state([entry_of(&a, Stage::Apply, State::InProgress)]);
    let recorded = |j: &JobView| JobView {
        recorded: true,
        ..j.clone()
    };
    let (r0, r1) = (recorded(&f0), recorded(&f1));
    let o = go(rerun, &[&r0, &r1], t(100_001), limited);
    assert_eq!(runs(&o), vec![("alpha".into(), Stage::Apply, 2)]);
}

/// `drainConfig.timeout` (delta D28): the clock starts with the first eviction pass, and once
/// it runs out nothing more is evicted and the node is held; a drained node clears the clock.
#[test]
fn a_drain_past_its_timeout_evicts_nothing_more() {
    use crate::plan::drain::PodInfo;
    let p = package("pkg").reboot().build();
    let pk = packages([&p]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let config_done = || node_state([entry_of(&p, Stage::Config, State::Complete)]);
    let listed: &'static [PodInfo] = Box::leak(Box::new([PodInfo {
        namespace: "apps".into(),
        name: "web".into(),
        protected: false,
        evictable: true,
        terminating: false,
        unmovable: None,
        health: None,
    }]));
    let go = |pods: &'static [PodInfo], started: Option<Timestamp>| {
        let host = Host {
            cordoned: true,
            pods: Some(pods),
            drain_started: started,
            drain_timeout: Some(Duration::from_secs(60)),
            ..Host::default()
        };
        step(
            &sv,
            config_done(),
            BTreeMap::new(),
            host,
            &[],
            true,
            RETRY,
            3,
            t(100),
        )
    };
    let first = go(listed, None);
    assert_eq!(first.evict.len(), 1);
    assert_eq!(first.drain_start, Some(Some(t(100))), "the clock starts");
    assert!(!first.drain_timed_out);
    let within = go(listed, Some(t(50)));
    assert_eq!(within.evict.len(), 1);
    assert_eq!(within.drain_start, Some(Some(t(50))), "the clock is kept");
    let past = go(listed, Some(t(40)));
    assert!(past.drain_timed_out && past.held);
    assert!(past.evict.is_empty(), "evicted past the timeout");
    assert!(runs(&past).is_empty());
    assert!(
        past.blocked
            .as_deref()
            .unwrap_or_default()
            .contains("drainConfig.timeout"),
        "{:?}",
        past.blocked
    );
    // The pods went anyway (an administrator moved them): the interrupt starts, the clock goes.
    let drained = go(&[], Some(t(40)));
    assert!(!drained.drain_timed_out);
    assert_eq!(drained.drain_start, Some(None));
    assert_eq!(runs(&drained), vec![("pkg".into(), Stage::Interrupt, 0)]);
}

/// Agent v7 exits 0 from a reboot interrupt while the host may still be going down: the
/// interrupt completes only in a new boot; meanwhile no post-interrupt, no other stage, and the
/// node stays in progress (so cordoned); past REBOOT_CONFIRM_TIMEOUT the interrupt fails and runs
/// again.
#[test]
fn a_reboot_interrupt_completes_only_once_the_boot_id_changes() {
    let p = package("drv")
        .reboot()
        .with(json!({"configMap": {"k": "v"}}))
        .build();
    let other = package("tool").build();
    let pk = packages([&p, &other]);
    let none = BTreeMap::new();
    let sv = view(&pk, &none);
    let mut done = job(&p, Stage::Interrupt)
        .outcome(Outcome::Complete { at: t(0) })
        .build();
    done.boot_id = Some(crate::interned::Shared::new("boot-1"));
    let state = || {
        node_state([
            entry_of(&p, Stage::Interrupt, State::InProgress),
            entry_of(&other, Stage::Apply, State::Complete),
        ])
    };
    let host = |boot: &'static str| Host {
        cordoned: true,
        pods: Some(&[]),
        boot_id: Some(boot),
        reboot_confirm: std::time::Duration::from_secs(600),
        ..Host::default()
    };
    let at = |boot, now| {
        step(
            &sv,
            state(),
            BTreeMap::new(),
            host(boot),
            &[&done],
            true,
            RETRY,
            3,
            now,
        )
    };

    let waiting = at("boot-1", t(30));
    assert!(runs(&waiting).is_empty(), "{:?}", waiting.actions);
    assert!(waiting.awaiting_reboot);
    assert_eq!(
        state_of(&waiting, &p),
        (Stage::Interrupt, Some(State::InProgress), 0)
    );
    assert!(
        waiting
            .blocked
            .as_deref()
            .is_some_and(|b| b.contains("boot id boot-1")),
        "{:?}",
        waiting.blocked
    );
    assert_eq!(waiting.retry_at, Some(t(600)));

    // In the new boot, post-interrupt and the other package's next stage start.
    let back = at("boot-2", t(30));
    assert_eq!(
        runs(&back),
        vec![
            ("drv".into(), Stage::PostInterrupt, 0),
            ("tool".into(), Stage::Config, 0)
        ]
    );

    let gave_up = at("boot-1", t(601));
    assert!(
        runs(&gave_up).iter().all(|(name, ..)| name != "drv"),
        "{:?}",
        gave_up.actions
    );
    assert_eq!(
        state_of(&gave_up, &p),
        (Stage::Interrupt, Some(State::Erroring), 1)
    );
    assert!(gave_up.notes.iter().any(
        |n| matches!(n, NodeNote::Failed { reason, .. } if reason == super::observe::REBOOT_NOT_SEEN)
    ));
    // The next pass reads the attempt as folded and runs the interrupt again.
    let mut folded = gave_up.folded.clone();
    let mut state = gave_up.state;
    state.upsert(entry_of(&other, Stage::Config, State::Complete));
    let again = crate::plan::fixtures::step(StepInput {
        spec: &sv,
        state,
        applied: BTreeMap::new(),
        folded: std::mem::take(&mut folded),
        host: host("boot-1"),
        jobs: &[&done],
        may_start: true,
        retry: RETRY,
        failed_jobs_kept: 3,
        now: t(602),
    });
    assert_eq!(runs(&again), vec![("drv".into(), Stage::Interrupt, 1)]);
}
