//! Upstream v0.16's `uninstall` block (delta D12) through the node machine.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::crd::Package;
use crate::jobs::Outcome;
use crate::plan::drain::PodInfo;
use crate::plan::fixtures::{RETRY, StepInput, entry_of, job, node_state, package, packages, t};

fn uninstall(apply: bool) -> serde_json::Value {
    json!({"uninstall": {"enabled": true, "apply": apply}, "env": [{"name": "K", "value": "v"}]})
}

/// One pass of the machine on a cordoned, drained node (`cordoned: false`: not yet cordoned).
fn pass(spec: &SpecView, state: NodeState, jobs: &[&JobView], cordoned: bool) -> NodeOutcome {
    let host = Host {
        cordoned,
        pods: cordoned.then_some(&[] as &[PodInfo]),
        ..Host::default()
    };
    crate::plan::fixtures::step(StepInput {
        spec,
        state,
        applied: BTreeMap::new(),
        folded: Default::default(),
        host,
        jobs,
        may_start: true,
        retry: RETRY,
        failed_jobs_kept: 3,
        now: t(100),
    })
}

fn runs(o: &NodeOutcome) -> Vec<(Package, Stage)> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            NodeAction::Run { package, stage, .. } => Some(((**package).clone(), *stage)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_requested_uninstall_drains_runs_the_whole_package_then_its_interrupt_then_forgets_it() {
    let p = package("drv").reboot().with(uninstall(true)).build();
    let pk = packages([&p]);
    let none = BTreeMap::new();
    let sv = SpecView::new(&pk, &[], &none);
    let installed = node_state([entry_of(&p, Stage::PostInterrupt, State::Complete)]);

    // Not cordoned yet: the uninstall waits for the cordon (its interrupt follows it).
    let o = pass(&sv, installed.clone(), &[], false);
    assert!(o.cordon);
    assert!(runs(&o).is_empty());
    let e = o.state.get("drv", "1.0.0").expect("entry");
    assert_eq!(
        (e.stage, e.state),
        (Stage::Uninstall, Some(State::InProgress))
    );
    assert!(!sv.node_complete(&o.state));

    // Drained: the uninstall runs with the whole package (env kept), not the v0.13 stub.
    let o = pass(&sv, o.state, &[], true);
    let r = runs(&o);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1, Stage::Uninstall);
    assert_eq!(r[0].0.env.len(), 1, "the uninstall lost the package's env");

    // It succeeded: the uninstall interrupt runs next, alone.
    let done = job(&p, Stage::Uninstall)
        .outcome(Outcome::Complete { at: t(90) })
        .build();
    let o = pass(&sv, o.state, &[&done], true);
    let e = o.state.get("drv", "1.0.0").expect("entry");
    assert_eq!(e.stage, Stage::UninstallInterrupt);
    assert_eq!(
        runs(&o).iter().map(|r| r.1).collect::<Vec<_>>(),
        [Stage::UninstallInterrupt]
    );

    // The interrupt succeeded: the entry is gone, nothing installs it again, the node is
    // complete.
    let rebooted = job(&p, Stage::UninstallInterrupt)
        .outcome(Outcome::Complete { at: t(95) })
        .build();
    let o = pass(&sv, o.state, &[&done, &rebooted], true);
    assert!(o.state.get("drv", "1.0.0").is_none());
    assert!(runs(&o).is_empty());
    assert!(sv.node_complete(&o.state));
    let o = pass(&sv, o.state, &[], true);
    assert!(
        runs(&o).is_empty(),
        "re-installed a package whose uninstall was asked for"
    );
}

#[test]
fn without_an_interrupt_the_entry_goes_with_the_uninstall() {
    let p = package("tool").with(uninstall(true)).build();
    let pk = packages([&p]);
    let none = BTreeMap::new();
    let sv = SpecView::new(&pk, &[], &none);
    let installed = node_state([entry_of(&p, Stage::Config, State::Complete)]);
    let o = pass(&sv, installed, &[], false);
    assert!(!o.cordon, "cordoned for a package without an interrupt");
    assert_eq!(
        runs(&o).iter().map(|r| r.1).collect::<Vec<_>>(),
        [Stage::Uninstall]
    );
    let done = job(&p, Stage::Uninstall)
        .outcome(Outcome::Complete { at: t(90) })
        .build();
    let o = pass(&sv, o.state, &[&done], false);
    assert!(o.state.is_empty());
    assert!(sv.node_complete(&o.state));
    // A node that never had it is complete at once and runs nothing.
    let o = pass(&sv, NodeState::default(), &[], false);
    assert!(runs(&o).is_empty());
    assert!(sv.node_complete(&o.state));
}

#[test]
fn a_running_stage_finishes_first_and_apply_false_cancels() {
    let asked = package("tool").with(uninstall(true)).build();
    let pk = packages([&asked]);
    let none = BTreeMap::new();
    let sv = SpecView::new(&pk, &[], &none);
    // Apply still runs: it finishes before the uninstall starts.
    let running = job(&asked, Stage::Apply).build();
    let applying = node_state([entry_of(&asked, Stage::Apply, State::InProgress)]);
    let o = pass(&sv, applying, &[&running], false);
    assert_eq!(
        o.state.get("tool", "1.0.0").map(|e| e.stage),
        Some(Stage::Apply)
    );

    // apply: false before the uninstall ran (it failed): installed again from apply.
    let cancelled = package("tool").with(uninstall(false)).build();
    let pk = packages([&cancelled]);
    let sv = SpecView::new(&pk, &[], &none);
    let failed = node_state([entry_of(&cancelled, Stage::Uninstall, State::Erroring)]);
    let o = pass(&sv, failed, &[], false);
    assert_eq!(
        runs(&o).iter().map(|r| r.1).collect::<Vec<_>>(),
        [Stage::Apply]
    );
    // Without the block (v0.13), the same entry is an uninstall in place: it runs.
    let plain = package("tool").build();
    let pk = packages([&plain]);
    let sv = SpecView::new(&pk, &[], &none);
    let failed = node_state([entry_of(&plain, Stage::Uninstall, State::Erroring)]);
    let o = pass(&sv, failed, &[], false);
    assert_eq!(
        runs(&o).iter().map(|r| r.1).collect::<Vec<_>>(),
        [Stage::Uninstall]
    );
}
