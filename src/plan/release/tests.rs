use super::*;

use std::sync::Arc;

use serde_json::json;

use crate::jobs::Outcome;
use crate::plan::fixtures::{job, node, package, runtime_taint, skyhook};
use crate::schema::Stage;

fn meta<'a>(sk: &'a crate::crd::Skyhook, rt: &'a schema::RuntimeTaints) -> MetaInput<'a> {
    MetaInput {
        skyhook: sk,
        fleet: crate::plan::fleet::Fleet::alone(&[]),
        runtime_taints: rt,
        operator_version: "test",
    }
}

#[test]
fn nodes_that_left_are_released_once_our_jobs_are_done() {
    let sk = skyhook("sh").spec(json!({"runtimeRequired": true})).build();
    let rt = runtime_taint();
    let m = meta(&sk, &rt);
    let ours = schema::cordon_annotation("sh");
    let theirs = schema::cordon_annotation("other");
    let touched = schema::status_annotation("sh");
    let taint =
        json!([{"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}]);
    let p = package("pkg").build();
    let running = job(&p, Stage::Apply).on("busy").build();
    let done = job(&p, Stage::Apply)
        .on("left")
        .outcome(Outcome::Complete {
            at: crate::plan::fixtures::t(0),
        })
        .build();
    // (case, node, jobs on it, targeted, unschedulable write, our key removed, taints written,
    //  holds the budget)
    type Case = (
        &'static str,
        Arc<NodeView>,
        Vec<JobView>,
        bool,
        Option<bool>,
        bool,
        Option<usize>,
        bool,
    );
    let cases: Vec<Case> = vec![
        (
            "left with our cordon, its Job done: released",
            node("left").annotation(&ours, "true").cordoned(true).arc(),
            vec![done.clone()],
            false,
            Some(false),
            true,
            None,
            false,
        ),
        (
            "left, another Skyhook's cordon too: our share only",
            node("left")
                .annotations(json!({ours.clone(): "true", theirs.clone(): "true"}))
                .cordoned(true)
                .arc(),
            vec![],
            false,
            None,
            true,
            None,
            false,
        ),
        (
            "left while our Job runs: waited for, the budget held",
            node("busy").annotation(&ours, "true").cordoned(true).arc(),
            vec![running.clone()],
            false,
            None,
            false,
            None,
            true,
        ),
        (
            "left tainted runtime-required: the taint goes",
            node("left")
                .annotation(&touched, "in_progress")
                .taints(taint.clone())
                .arc(),
            vec![],
            false,
            None,
            false,
            Some(0),
            false,
        ),
        (
            "still targeted: the pass itself looks after it",
            node("here").annotation(&ours, "true").cordoned(true).arc(),
            vec![],
            true,
            None,
            false,
            None,
            false,
        ),
        (
            "never ours: untouched",
            node("else").taints(taint.clone()).cordoned(true).arc(),
            vec![],
            false,
            None,
            false,
            None,
            false,
        ),
    ];
    for (case, n, jobs, is_targeted, want_u, key_removed, want_taints, holds) in cases {
        let targeted: BTreeSet<&str> = if is_targeted {
            [n.name.as_str()].into()
        } else {
            BTreeSet::new()
        };
        let refs: Vec<&JobView> = jobs.iter().collect();
        let by_node: BTreeMap<&str, Vec<&JobView>> = if refs.is_empty() {
            BTreeMap::new()
        } else {
            [(n.name.as_str(), refs)].into()
        };
        let r = release(&m, std::slice::from_ref(&n), &targeted, &by_node);
        assert_eq!(r.holds_budget, holds, "{case}");
        assert!(r.job_ops.is_empty(), "{case}");
        let patch = r.patches.first();
        assert_eq!(patch.and_then(|p| p.unschedulable), want_u, "{case}");
        assert_eq!(
            patch.is_some_and(|p| p.annotations.get(&ours) == Some(&None)),
            key_removed,
            "{case}"
        );
        assert_eq!(
            patch.and_then(|p| p.taints.as_ref().map(Vec::len)),
            want_taints,
            "{case}"
        );
        assert_eq!(
            r.notes.len(),
            2 * r.patches.len(),
            "{case}: one Event each way"
        );
        assert!(
            patch.is_none_or(|p| !p.annotations.contains_key(&theirs)),
            "{case}"
        );
    }
}

#[test]
fn jobs_on_a_node_that_is_gone_are_deleted() {
    let sk = skyhook("sh").build();
    let rt = runtime_taint();
    let m = meta(&sk, &rt);
    let p = package("pkg").build();
    let a = job(&p, Stage::Apply).on("gone").build();
    let b = job(&p, Stage::Config).on("gone").deleting(true).build();
    let by_node: BTreeMap<&str, Vec<&JobView>> = [("gone", vec![&a, &b])].into();
    let r = release(&m, &[], &BTreeSet::new(), &by_node);
    assert_eq!(
        r.job_ops,
        vec![(
            "gone".to_string(),
            JobOp::Delete {
                job: a.name.to_string()
            }
        )]
    );
    assert_eq!(r.notes.len(), 1);
    assert!(
        r.notes[0].message.contains("no longer exists"),
        "{:?}",
        r.notes
    );
    assert!(!r.holds_budget, "a Job that can never run holds no slot");
}
