//! Interrupt grouping (§3.9.4, §3.9.5): one merged interrupt per node, owned by one package of
//! the dependency frontier, run alone on the node.

use crate::plan::spec::SpecView;
use crate::schema::{self, Interrupt, NodeState};

use super::stage::frontier::frontier;

/// The node's merged interrupt and the package that owns it. The merge spans every incomplete
/// package at the frontier, including those already `skipped` at the interrupt stage.
pub fn merged(spec: &SpecView, state: &NodeState) -> Option<(Interrupt, String)> {
    let candidates: Vec<(String, Vec<Interrupt>)> = frontier(spec, state)
        .into_iter()
        .map(|p| (p.name.clone(), spec.interrupts(p)))
        .collect();
    schema::merge_interrupts(candidates.iter().map(|(n, i)| (n.as_str(), i.iter())))
        .map(|(i, owner)| (i, owner.to_string()))
}

/// What the interrupt stage of one package does on a node this pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// This package owns the merged interrupt and nothing else runs: start it.
    Run(Interrupt),
    /// This package owns it, but other Jobs run on the node (ours or another Skyhook's).
    WaitAlone,
    /// Another package owns the merged interrupt (or there is none): mark this one skipped.
    Skip,
}

/// Decides the interrupt stage of `package` given the node's merged interrupt.
pub fn turn(merged: Option<&(Interrupt, String)>, package: &str, others_running: bool) -> Turn {
    match merged {
        Some((interrupt, owner)) if owner == package => {
            if others_running {
                Turn::WaitAlone
            } else {
                Turn::Run(interrupt.clone())
            }
        }
        _ => Turn::Skip,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::*;
    use crate::crd::Package;
    use crate::plan::fixtures::{entry, input, node_state, package, packages, service};
    use crate::schema::{InterruptType, PackageStatus, Stage, State};

    #[test]
    fn turn_table() {
        let reboot = Interrupt::new(InterruptType::Reboot);
        let owned_by_a = Some((reboot.clone(), "a".to_string()));
        // (case, merged, package, others running, turn)
        let cases = [
            (
                "owner, nothing else running: run",
                owned_by_a.clone(),
                "a",
                false,
                Turn::Run(reboot.clone()),
            ),
            (
                "owner, other Jobs running: wait alone",
                owned_by_a.clone(),
                "a",
                true,
                Turn::WaitAlone,
            ),
            (
                "not the owner: skip",
                owned_by_a.clone(),
                "b",
                false,
                Turn::Skip,
            ),
            (
                "not the owner, others running: skip",
                owned_by_a.clone(),
                "b",
                true,
                Turn::Skip,
            ),
            ("no merged interrupt: skip", None, "a", false, Turn::Skip),
            (
                "no merged interrupt, others running: skip",
                None,
                "a",
                true,
                Turn::Skip,
            ),
        ];
        for (name, merged, package, others, want) in cases {
            assert_eq!(turn(merged.as_ref(), package, others), want, "case: {name}");
        }
    }

    #[test]
    fn merged_over_the_frontier() {
        let reboot = Interrupt::new(InterruptType::Reboot);
        let svc = |s: &str| json!({"interrupt": {"type": "service", "services": [s]}});
        let rb = json!({"interrupt": {"type": "reboot"}});
        let dep = |mut v: Value, on: &str| {
            v["dependsOn"] = json!({on: "1.0.0"});
            v
        };
        // (case, packages, entries as (package, stage, state), config updates, merged)
        let cases: Vec<(
            &str,
            Vec<(&str, Value)>,
            Vec<(&str, Stage, State)>,
            Vec<(&str, &str)>,
            Option<(Interrupt, &str)>,
        )> = vec![
            (
                "two services merge under the first name",
                vec![("b", svc("y")), ("a", svc("x"))],
                vec![],
                vec![],
                Some((service(&["x", "y"]), "a")),
            ),
            (
                "a reboot wins over a service",
                vec![("a", svc("x")), ("b", rb.clone())],
                vec![],
                vec![],
                Some((reboot.clone(), "b")),
            ),
            (
                "restartAllServices beats service",
                vec![
                    ("a", svc("x")),
                    ("b", json!({"interrupt": {"type": "restartAllServices"}})),
                ],
                vec![],
                vec![],
                Some((Interrupt::new(InterruptType::RestartAllServices), "b")),
            ),
            (
                "a complete package is left out",
                vec![("a", rb.clone()), ("b", svc("y"))],
                vec![("a", Stage::PostInterrupt, State::Complete)],
                vec![],
                Some((service(&["y"]), "b")),
            ),
            (
                "a dependent package waits outside the frontier",
                vec![("a", svc("x")), ("b", dep(rb.clone(), "a"))],
                vec![],
                vec![],
                Some((service(&["x"]), "a")),
            ),
            (
                "once its dependency is complete it joins",
                vec![("a", svc("x")), ("b", dep(rb.clone(), "a"))],
                vec![("a", Stage::PostInterrupt, State::Complete)],
                vec![],
                Some((reboot.clone(), "b")),
            ),
            (
                "a package skipped at the interrupt still counts",
                vec![("a", rb.clone()), ("b", svc("y"))],
                vec![
                    ("a", Stage::Interrupt, State::Skipped),
                    ("b", Stage::Config, State::Complete),
                ],
                vec![],
                Some((reboot.clone(), "a")),
            ),
            (
                "no interrupt anywhere",
                vec![("a", json!({})), ("b", json!({}))],
                vec![],
                vec![],
                None,
            ),
            (
                "a config update brings the configInterrupt instead of the package interrupt",
                vec![
                    (
                        "a",
                        json!({"interrupt": {"type": "reboot"}, "configInterrupts": {"*.conf": {"type": "service", "services": ["z"]}}}),
                    ),
                    ("b", json!({"interrupt": {"type": "noop"}})),
                ],
                vec![],
                vec![("a", "x.conf")],
                Some((service(&["z"]), "a")),
            ),
            (
                "a config update matching nothing drops the package from the merge",
                vec![("a", rb.clone()), ("b", svc("y"))],
                vec![],
                vec![("a", "x.conf")],
                Some((service(&["y"]), "b")),
            ),
        ];
        for (name, specs, entries, updates, want) in cases {
            let specs: Vec<Package> = specs
                .into_iter()
                .map(|(n, v)| package(n).image("img").with(v).build())
                .collect();
            let packages = packages(&specs);
            let mut keys: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (p, k) in updates {
                keys.entry(p.to_string()).or_default().push(k.to_string());
            }
            let spec = SpecView::new(&packages, &[], &keys);
            let state = node_state(
                entries
                    .into_iter()
                    .map(|(p, stage, st)| entry(p, stage, st)),
            );
            let want = want.map(|(i, o)| (i, o.to_string()));
            assert_eq!(merged(&spec, &state), want, "case: {name}");
        }
    }

    #[test]
    fn a_package_whose_interrupt_went_away_is_not_stuck() {
        use crate::plan::fixtures::{StepInput, step};
        use crate::plan::spec::spec_hash;
        use crate::plan::stage::RetryPolicy;
        // p's interrupt was removed from the spec (or a configUpdates record matches none of its
        // configInterrupts) while a node was retrying p's interrupt stage.
        let retry = RetryPolicy {
            base: std::time::Duration::from_secs(1),
            max: std::time::Duration::from_secs(2),
            limit: None,
        };
        let cases = [
            (
                "interrupt removed from the spec",
                json!({}),
                State::Erroring,
            ),
            (
                "interrupt removed, stage marked in progress",
                json!({}),
                State::InProgress,
            ),
        ];
        for (name, extra, st) in cases {
            let p = package("p").image("img").with(extra).build();
            let packages = packages([&p]);
            let none = BTreeMap::new();
            let spec = SpecView::new(&packages, &[], &none);
            let mut state = node_state([PackageStatus {
                restarts: 1,
                ..entry("p", Stage::Interrupt, st)
            }]);
            let applied = BTreeMap::from([("p|1.0.0".to_string(), spec_hash(&p, &[]))]);
            let mut progressed = false;
            for _ in 0..3 {
                let o = step(StepInput {
                    state: state.clone(),
                    applied: applied.clone(),
                    retry,
                    failed_jobs_kept: 1,
                    ..input(&spec)
                });
                progressed |= !o.actions.is_empty() || spec.settled(&o.state, &o.applied);
                state = o.state;
            }
            assert!(
                progressed,
                "case: {name}: stuck at {}",
                state.to_annotation()
            );
        }
    }
}
