//! Node metadata (§2.1–§2.4, §3.17): the one place that decides the annotations, labels,
//! cordon, taints and conditions this Skyhook writes on a node.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::facts::{NodeFacts, Switches};
use super::fleet::Fleet;
use super::stage::NodeOutcome;
use super::{NodePatch, NodeView};
use crate::crd::Skyhook;
use crate::schema::{self, NodeState, RuntimeTaints, State, Status};

/// One node's status for one Skyhook.
///
/// A node still owed to a Skyhook ordered before this one is `waiting` here (§3.14), even when
/// this Skyhook is paused: it would not run this Skyhook's work anyway, and the reference counts
/// it so (its strict-order scenario: one paused node of two). A node held by a protected pod or a
/// drain stays `in_progress`: the reason is in the Skyhook's condition, and `blocked` would mean
/// to the rollout that the node cannot take work at all.
pub fn node_status(sw: Switches, f: &NodeFacts, settled: bool, o: &NodeOutcome) -> Status {
    if sw.disabled {
        Status::Disabled
    } else if f.gated && !settled {
        Status::Waiting
    } else if sw.paused {
        Status::Paused
    } else if settled {
        Status::Complete
    } else if f.block.is_some() {
        Status::Blocked
    } else if o.drain_timed_out {
        Status::Erroring
    } else if o.held || o.any_state(State::InProgress) {
        Status::InProgress
    } else if o.any_state(State::Erroring) || o.any_state(State::Unknown) {
        Status::Erroring
    } else {
        Status::Waiting
    }
}

/// Everything the metadata step reads besides the node.
pub struct MetaInput<'a> {
    pub skyhook: &'a Skyhook,
    /// The objects of both APIs (the runtime-required taint stays until every one is done).
    pub fleet: Fleet<'a>,
    pub runtime_taints: &'a RuntimeTaints,
    pub operator_version: &'a str,
}

/// The node write of one pass: state, status, version, label, cordon, applied record and the
/// runtime-required taint.
pub fn node_patch(
    m: &MetaInput,
    f: &NodeFacts,
    o: &NodeOutcome,
    status: Status,
    settled: bool,
) -> NodePatch {
    let name = m.skyhook.name_any();
    let mut patch = progress(&name, f.node, &o.state, status, m.operator_version);
    if o.cordon {
        // Persisted before any Job of an interrupt package; an administrator's own cordon
        // (already unschedulable) is never marked as ours, so it is never lifted.
        patch.unschedulable = Some(true);
        patch.annotations.insert(
            schema::cordon_annotation(&name),
            Some(schema::TRUE_VALUE.to_string()),
        );
    } else if settled && f.holds_cordon {
        // The last Skyhook holding the cordon lifts it; the others only drop their share.
        if !f.node.cordon_kept_by_others(&name) {
            patch.unschedulable = Some(false);
        }
        patch
            .annotations
            .insert(schema::cordon_annotation(&name), None);
    } else if o.relies_on_cordon && !f.holds_cordon && f.node.cordoned_by_another(&name) {
        patch.annotations.insert(
            schema::cordon_annotation(&name),
            Some(schema::TRUE_VALUE.to_string()),
        );
    }
    runtime_required(m, f.node, settled, &mut patch);
    drain_clock(&name, f, o, settled, &mut patch);
    protected_clock(&name, f, o, settled, &mut patch);
    bookkeeping(
        &mut patch,
        schema::applied_annotation(&name),
        &f.applied,
        &o.applied,
    );
    bookkeeping(
        &mut patch,
        schema::folded_annotation(&name),
        &f.folded,
        &o.folded,
    );
    patch
}

/// `drainStart_<sh>` as the machine left it: started, kept, or gone with the drain (or the
/// node's work).
fn drain_clock(name: &str, f: &NodeFacts, o: &NodeOutcome, settled: bool, patch: &mut NodePatch) {
    let key = schema::drain_start_annotation(name);
    let stored = f.node.annotation(&key);
    let want = if settled { Some(None) } else { o.drain_start };
    match want {
        Some(Some(t)) if stored.is_none() => {
            patch.annotations.insert(key, Some(t.to_string()));
        }
        Some(None) if stored.is_some() => {
            patch.annotations.insert(key, None);
        }
        _ => {}
    }
}

/// `nonInterruptWait_<sh>` as the machine left it: started or kept with the pods seen (written
/// again only when they change), or gone with the wait (or the node's work).
fn protected_clock(
    name: &str,
    f: &NodeFacts,
    o: &NodeOutcome,
    settled: bool,
    patch: &mut NodePatch,
) {
    let key = schema::protected_wait_annotation(name);
    let stored = f.node.annotation(&key);
    let want = if settled {
        Some(None)
    } else {
        o.protected_since
    };
    match want {
        Some(Some(since)) => {
            let wait = schema::ProtectedWait {
                since,
                pods: o.protected_pods.clone(),
            };
            if schema::ProtectedWait::parse(stored) != Some(wait.clone()) {
                patch.annotations.insert(key, Some(wait.to_json()));
            }
        }
        Some(None) if stored.is_some() => {
            patch.annotations.insert(key, None);
        }
        _ => {}
    }
}

/// One of our JSON map annotations, written when it changed and removed once empty.
fn bookkeeping<V: PartialEq + serde::Serialize>(
    patch: &mut NodePatch,
    key: String,
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
) {
    if after != before {
        let value = (!after.is_empty()).then(|| serde_json::to_string(after).unwrap_or_default());
        patch.annotations.insert(key, value);
    }
}

/// Annotation and label writes that bring `node` to `state` and `status`.
pub fn progress(
    skyhook: &str,
    node: &NodeView,
    state: &NodeState,
    status: Status,
    operator_version: &str,
) -> NodePatch {
    let mut p = NodePatch::of(node);
    let annotations = &node.annotations;
    let mut want = |key: String, value: Option<String>| {
        if annotations.get(&key) != value.as_deref() {
            p.annotations.insert(key, value);
        }
    };
    // An emptied state is written as `{}`, as the reference does after the last uninstall; a node
    // that never had one gets none.
    let had = annotations.contains_key(&schema::node_state_annotation(skyhook));
    let encoded = (had || !state.is_empty()).then(|| state.to_annotation());
    // Keep an equivalent annotation written by someone else (e.g. the Go operator) byte for byte.
    let same = annotations
        .get(&schema::node_state_annotation(skyhook))
        .and_then(|a| NodeState::parse(a).ok())
        .is_some_and(|s| &s == state);
    if !same {
        want(schema::node_state_annotation(skyhook), encoded);
    }
    want(
        schema::status_annotation(skyhook),
        Some(status.as_str().to_string()),
    );
    want(
        schema::node_version_annotation(skyhook),
        Some(operator_version.to_string()),
    );
    let label = schema::status_label(skyhook);
    if node.label(&label) != Some(status.as_str()) {
        p.labels.insert(label, Some(status.as_str().to_string()));
    }
    p
}

/// §3.17: with `runtimeRequired`, new nodes get the runtime-required taint (`autoTaintNewNodes`)
/// and lose it once every runtime-required Skyhook that targets them is complete there.
fn runtime_required(m: &MetaInput, node: &NodeView, settled: bool, patch: &mut NodePatch) {
    let sk = m.skyhook;
    if !sk.spec.runtime_required {
        return;
    }
    let taints: Vec<Taint> = node.taints.clone();
    let tainted = taints.iter().any(|t| m.runtime_taints.matches(t));
    let touched = node.annotations.keys().any(schema::is_skyhook_key);
    if !tainted && sk.spec.auto_taint_new_nodes && !touched {
        auto_taint(m, node, patch);
        return;
    }
    if tainted && settled {
        lift_runtime_taint(m, node, patch);
    }
    // Uncordoned by someone who left the mark behind (upstream removes it too): the mark would
    // otherwise keep every later interrupt's cordon on the node for good.
    let marked = node
        .annotations
        .contains_key(schema::RUNTIME_REQUIRED_CORDON_ANNOTATION);
    if marked && !node.unschedulable && patch.unschedulable != Some(true) {
        patch
            .annotations
            .insert(schema::RUNTIME_REQUIRED_CORDON_ANNOTATION.to_string(), None);
    }
}

/// Gives a new node the runtime-required taint, marked as ours.
fn auto_taint(m: &MetaInput, node: &NodeView, patch: &mut NodePatch) {
    let taint = m.runtime_taints.applied();
    let mut next = node.taints.clone();
    next.push(taint.to_taint());
    patch.taints = Some(next);
    patch.annotations.insert(
        schema::auto_taint_annotation(&taint.key),
        Some(schema::TRUE_VALUE.to_string()),
    );
    patch.auto_taint = true;
}

/// A node whose auto-taint was refused is left out of every Skyhook; a runtime-required Skyhook
/// with `autoTaintNewNodes` selecting it retries the taint alone each pass (delta D47).
pub fn auto_taint_retry(m: &MetaInput, node: &NodeView) -> Option<NodePatch> {
    let sk = &m.skyhook.spec;
    let tainted = node.taints.iter().any(|t| m.runtime_taints.matches(t));
    if !sk.runtime_required || !sk.auto_taint_new_nodes || tainted {
        return None;
    }
    let mut patch = NodePatch::of(node);
    auto_taint(m, node, &mut patch);
    Some(patch)
}

/// Removes the runtime-required taints (each one recognised) once no other runtime-required
/// Skyhook or NodeWright that selects the node is still short of complete there.
pub fn lift_runtime_taint(m: &MetaInput, node: &NodeView, patch: &mut NodePatch) {
    let taints = m.runtime_taints;
    if !node.taints.iter().any(|t| taints.matches(t)) {
        return;
    }
    let others_done = m.fleet.members().all(|o| {
        o.is(m.skyhook) || !o.sk.spec.runtime_required || !o.selects(node) || o.complete_on(node)
    });
    if others_done {
        let kept = node.taints.iter().filter(|t| !taints.matches(t)).cloned();
        patch.taints = Some(kept.collect());
        cordon_after(m, node, patch);
    }
}

/// Upstream v0.19's `runtimeRequiredCordonAfter` (delta D38): when the taint leaves a node and
/// a runtime-required Skyhook selecting it asks for it, the node is cordoned in the same write
/// and marked `nodewright.nvidia.com/runtimeRequiredCordon`. The mark keeps the cordon through
/// every later interrupt and reset ([`NodeView::cordon_kept_by_others`]) until an administrator
/// lifts both.
fn cordon_after(m: &MetaInput, node: &NodeView, patch: &mut NodePatch) {
    let wanted = m.fleet.members().any(|o| {
        o.sk.spec.runtime_required && o.sk.spec.runtime_required_cordon_after && o.selects(node)
    }) || m.skyhook.spec.runtime_required_cordon_after;
    if wanted {
        patch.unschedulable = Some(true);
        patch.annotations.insert(
            schema::RUNTIME_REQUIRED_CORDON_ANNOTATION.to_string(),
            Some(schema::TRUE_VALUE.to_string()),
        );
    }
}

/// The two node conditions of §2.4, when they need writing.
pub fn node_conditions(
    skyhook: &str,
    node: &NodeView,
    state: &NodeState,
    complete: bool,
    now: Timestamp,
) -> Option<Vec<NodeCondition>> {
    let erroring = state
        .iter()
        .any(|(_, e)| matches!(e.state, Some(State::Erroring) | Some(State::Unknown)));
    // (type, whether it is True, its reason when True and when False, message)
    let want = [
        (
            schema::node_not_ready_condition(skyhook),
            !complete,
            [
                schema::NOT_READY_REASON_INCOMPLETE,
                schema::NOT_READY_REASON_COMPLETE,
            ],
            schema::node_not_ready_message(skyhook),
        ),
        (
            schema::node_erroring_condition(skyhook),
            erroring,
            [
                schema::ERRORING_REASON_ERRORING,
                schema::ERRORING_REASON_NOT_ERRORING,
            ],
            schema::node_erroring_message(skyhook),
        ),
    ]
    .map(|(t, on, [if_true, if_false], m)| {
        let (status, reason) = if on {
            ("True", if_true)
        } else {
            ("False", if_false)
        };
        (t, status, reason, m)
    });
    let existing = &node.conditions;
    let current = |t: &str| existing.iter().find(|c| c.type_.as_str() == t);
    let up_to_date = want.iter().all(|(t, s, r, _)| {
        current(t).is_some_and(|c| c.status.as_str() == *s && c.reason.as_deref() == Some(*r))
    });
    if up_to_date {
        return None;
    }
    Some(
        want.into_iter()
            .map(|(t, s, r, m)| {
                let since = current(&t)
                    .filter(|c| c.status.as_str() == s)
                    .and_then(|c| c.last_transition_time.clone())
                    .unwrap_or(Time(now));
                NodeCondition {
                    type_: t,
                    status: s.to_string(),
                    reason: Some(r.to_string()),
                    message: Some(m),
                    last_heartbeat_time: Some(Time(now)),
                    last_transition_time: Some(since),
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The metadata step's inputs for `sk` alone.
    fn meta_of<'a>(sk: &'a Skyhook, rt: &'a RuntimeTaints) -> MetaInput<'a> {
        MetaInput {
            skyhook: sk,
            fleet: Fleet::alone(&[]),
            runtime_taints: rt,
            operator_version: OP,
        }
    }
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use crate::plan::fixtures::{entry, facts, node, node_state, runtime_taint, skyhook, t};
    use crate::plan::select::Block;
    use crate::schema::Stage;

    const OP: &str = "v1";

    #[test]
    fn node_status_precedence() {
        use State::*;
        let sw = |paused: bool, disabled: bool| Switches {
            paused,
            disabled,
            valid: true,
        };
        let run = sw(false, false);
        // (case, switches, block, gated, held, settled, package states, status)
        let cases: Vec<(
            &str,
            Switches,
            Option<Block>,
            bool,
            bool,
            bool,
            Vec<State>,
            Status,
        )> = vec![
            (
                "disabled beats everything",
                sw(true, true),
                None,
                false,
                false,
                true,
                vec![Complete],
                Status::Disabled,
            ),
            (
                "disabled beats in_progress",
                sw(false, true),
                None,
                false,
                false,
                false,
                vec![InProgress],
                Status::Disabled,
            ),
            (
                "paused beats complete",
                sw(true, false),
                None,
                false,
                false,
                true,
                vec![Complete],
                Status::Paused,
            ),
            (
                "paused beats blocked",
                sw(true, false),
                Some(Block::Taint),
                false,
                false,
                false,
                vec![],
                Status::Paused,
            ),
            (
                "complete",
                run,
                None,
                false,
                false,
                true,
                vec![Complete],
                Status::Complete,
            ),
            (
                "complete beats blocked",
                run,
                Some(Block::Ignored),
                true,
                false,
                true,
                vec![Complete],
                Status::Complete,
            ),
            (
                "ignored",
                run,
                Some(Block::Ignored),
                false,
                false,
                false,
                vec![],
                Status::Blocked,
            ),
            (
                "untolerated taint",
                run,
                Some(Block::Taint),
                false,
                false,
                false,
                vec![],
                Status::Blocked,
            ),
            (
                "gated waits",
                run,
                None,
                true,
                false,
                false,
                vec![],
                Status::Waiting,
            ),
            (
                "gated and paused: waiting, not paused",
                sw(true, false),
                None,
                true,
                false,
                false,
                vec![],
                Status::Waiting,
            ),
            (
                "gated but settled: complete",
                run,
                None,
                true,
                false,
                true,
                vec![Complete],
                Status::Complete,
            ),
            (
                "gated and disabled: disabled",
                sw(false, true),
                None,
                true,
                false,
                false,
                vec![],
                Status::Disabled,
            ),
            (
                "held by a protected pod or drain stays in_progress",
                run,
                None,
                false,
                true,
                false,
                vec![InProgress],
                Status::InProgress,
            ),
            (
                "gated beats in_progress",
                run,
                None,
                true,
                false,
                false,
                vec![InProgress],
                Status::Waiting,
            ),
            (
                "a taint block beats in_progress",
                run,
                Some(Block::Taint),
                false,
                false,
                false,
                vec![InProgress],
                Status::Blocked,
            ),
            (
                "in_progress",
                run,
                None,
                false,
                false,
                false,
                vec![InProgress],
                Status::InProgress,
            ),
            (
                "in_progress beats erroring",
                run,
                None,
                false,
                false,
                false,
                vec![Erroring, InProgress],
                Status::InProgress,
            ),
            (
                "erroring",
                run,
                None,
                false,
                false,
                false,
                vec![Complete, Erroring],
                Status::Erroring,
            ),
            (
                "unknown reads as erroring",
                run,
                None,
                false,
                false,
                false,
                vec![Unknown],
                Status::Erroring,
            ),
            (
                "complete packages but not settled: waiting",
                run,
                None,
                false,
                false,
                false,
                vec![Complete],
                Status::Waiting,
            ),
            (
                "skipped only: waiting",
                run,
                None,
                false,
                false,
                false,
                vec![Skipped],
                Status::Waiting,
            ),
            (
                "nothing yet: waiting",
                run,
                None,
                false,
                false,
                false,
                vec![],
                Status::Waiting,
            ),
        ];
        let n = node("n").build();
        for (name, switches, block, gated, held, settled, states, want) in cases {
            let mut f = facts(&n);
            f.block = block;
            f.gated = gated;
            let names = ["a", "b", "c"];
            let entries = states
                .iter()
                .zip(names)
                .map(|(s, n)| entry(n, Stage::Apply, *s));
            let o = NodeOutcome {
                state: node_state(entries),
                held,
                ..NodeOutcome::default()
            };
            assert_eq!(node_status(switches, &f, settled, &o), want, "case: {name}");
        }
    }

    #[test]
    fn progress_writes_only_what_differs() {
        let done = node_state([entry("p", Stage::Config, State::Complete)]);
        let other = node_state([entry("p", Stage::Apply, State::InProgress)]);
        let empty = NodeState::default();
        let enc = done.to_annotation();
        let st = schema::node_state_annotation("sh");
        let sa = schema::status_annotation("sh");
        let va = schema::node_version_annotation("sh");
        let label = schema::status_label("sh");
        // The same state as another writer may spell it: other field order, spaces.
        let reordered = r#"{ "p|1.0.0": {"state": "complete", "stage": "config", "image": "img", "version": "1.0.0", "name": "p"} }"#;
        let current = |state: Option<&str>| {
            let mut a = json!({sa.clone(): "complete", va.clone(): OP});
            if let Some(s) = state {
                a[st.clone()] = json!(s);
            }
            a
        };
        let complete_label = json!({label.clone(): "complete"});
        let some = |v: &str| Some(v.to_string());
        // (case, node annotations, node labels, state, status, annotation writes, label writes)
        let cases: Vec<(
            &str,
            Value,
            Value,
            &NodeState,
            Status,
            Vec<(&String, Option<String>)>,
            Vec<(&String, Option<String>)>,
        )> = vec![
            (
                "fresh node gets state, status, version and label",
                json!({}),
                json!({}),
                &done,
                Status::Complete,
                vec![(&st, some(&enc)), (&sa, some("complete")), (&va, some(OP))],
                vec![(&label, some("complete"))],
            ),
            (
                "the node already says so: nothing",
                current(Some(&enc)),
                complete_label.clone(),
                &done,
                Status::Complete,
                vec![],
                vec![],
            ),
            (
                "an equivalent state annotation is kept byte for byte",
                current(Some(reordered)),
                complete_label.clone(),
                &done,
                Status::Complete,
                vec![],
                vec![],
            ),
            (
                "another state is rewritten",
                current(Some(&other.to_annotation())),
                complete_label.clone(),
                &done,
                Status::Complete,
                vec![(&st, some(&enc))],
                vec![],
            ),
            (
                "an unreadable state annotation is replaced",
                current(Some("{not json")),
                complete_label.clone(),
                &done,
                Status::Complete,
                vec![(&st, some(&enc))],
                vec![],
            ),
            (
                "an emptied state is written as {} (the reference's uninstall-upgrade scenario)",
                current(Some(&enc)),
                complete_label.clone(),
                &empty,
                Status::Complete,
                vec![(&st, some("{}"))],
                vec![],
            ),
            (
                "an empty state already written as {}: nothing",
                current(Some("{}")),
                complete_label.clone(),
                &empty,
                Status::Complete,
                vec![],
                vec![],
            ),
            (
                "an empty state with no annotation writes nothing",
                current(None),
                complete_label.clone(),
                &empty,
                Status::Complete,
                vec![],
                vec![],
            ),
            (
                "a new status moves annotation and label",
                current(Some(&enc)),
                complete_label.clone(),
                &done,
                Status::InProgress,
                vec![(&sa, some("in_progress"))],
                vec![(&label, some("in_progress"))],
            ),
            (
                "only the label is missing",
                current(Some(&enc)),
                json!({}),
                &done,
                Status::Complete,
                vec![],
                vec![(&label, some("complete"))],
            ),
            (
                "another operator version",
                json!({st.clone(): enc.clone(), sa.clone(): "complete", va.clone(): "v0"}),
                complete_label.clone(),
                &done,
                Status::Complete,
                vec![(&va, some(OP))],
                vec![],
            ),
        ];
        for (name, annotations, labels, state, status, want_a, want_l) in cases {
            let n = node("n").annotations(annotations).labels(labels).build();
            let p = progress("sh", &n, state, status, OP);
            let want_a: BTreeMap<String, Option<String>> =
                want_a.into_iter().map(|(k, v)| (k.clone(), v)).collect();
            let want_l: BTreeMap<String, Option<String>> =
                want_l.into_iter().map(|(k, v)| (k.clone(), v)).collect();
            assert_eq!(p.node, "n", "case: {name}");
            assert_eq!(p.annotations, want_a, "case: {name}");
            assert_eq!(p.labels, want_l, "case: {name}");
            assert_eq!((p.unschedulable, &p.taints), (None, &None), "case: {name}");
        }
    }

    #[test]
    fn node_patch_cordons_and_lifts_only_our_cordon() {
        let sk = skyhook("sh").build();
        let rt = runtime_taint();
        let m = meta_of(&sk, &rt);
        let key = schema::cordon_annotation("sh");
        // (case, cordon wanted, settled, holds our cordon, node unschedulable,
        //  unschedulable write, cordon annotation write)
        let cases: Vec<(
            &str,
            bool,
            bool,
            bool,
            bool,
            Option<bool>,
            Option<Option<&str>>,
        )> = vec![
            (
                "cordon requested",
                true,
                false,
                false,
                false,
                Some(true),
                Some(Some("true")),
            ),
            (
                "settled with our cordon: uncordon",
                false,
                true,
                true,
                true,
                Some(false),
                Some(None),
            ),
            (
                "settled under an administrator's cordon: left alone",
                false,
                true,
                false,
                true,
                None,
                None,
            ),
            (
                "not settled with our cordon: kept",
                false,
                false,
                true,
                true,
                None,
                None,
            ),
            ("nothing to do", false, false, false, false, None, None),
        ];
        for (name, cordon, settled, holds, unschedulable, want_u, want_a) in cases {
            let mut annotations = json!({});
            if holds {
                annotations[key.clone()] = json!("true");
            }
            let n = node("n")
                .annotations(annotations)
                .cordoned(unschedulable)
                .build();
            let mut f = facts(&n);
            f.holds_cordon = holds;
            let o = NodeOutcome {
                cordon,
                ..NodeOutcome::default()
            };
            let p = node_patch(&m, &f, &o, Status::Waiting, settled);
            assert_eq!(p.unschedulable, want_u, "case: {name}");
            assert_eq!(
                p.annotations.get(&key).map(|v| v.as_deref()),
                want_a,
                "case: {name}"
            );
        }
    }

    /// A cordon two Skyhooks rely on is shared: the one that relies on another's cordon takes a
    /// share, and the first to finish drops only its own key; the last lifts it.
    #[test]
    fn a_shared_cordon_is_lifted_by_the_last_skyhook_only() {
        let sk = skyhook("sh").build();
        let rt = runtime_taint();
        let m = meta_of(&sk, &rt);
        let ours = schema::cordon_annotation("sh");
        let theirs = schema::cordon_annotation("other");
        // (case, our key, their key, relies on the cordon, settled, unschedulable write,
        //  our key's write)
        type Case<'a> = (
            &'a str,
            bool,
            bool,
            bool,
            bool,
            Option<bool>,
            Option<Option<&'a str>>,
        );
        let cases: Vec<Case> = vec![
            (
                "settled, ours alone: lifted",
                true,
                false,
                false,
                true,
                Some(false),
                Some(None),
            ),
            (
                "settled, theirs too: our share dropped, kept cordoned",
                true,
                true,
                false,
                true,
                None,
                Some(None),
            ),
            (
                "relying on their cordon: a share taken",
                false,
                true,
                true,
                false,
                None,
                Some(Some("true")),
            ),
            (
                "relying on an administrator's cordon: never marked ours",
                false,
                false,
                true,
                false,
                None,
                None,
            ),
            (
                "relying, ours already: nothing to write",
                true,
                true,
                true,
                false,
                None,
                None,
            ),
        ];
        for (case, our_key, their_key, relies, settled, want_u, want_a) in cases {
            let mut annotations = json!({});
            if our_key {
                annotations[ours.clone()] = json!("true");
            }
            if their_key {
                annotations[theirs.clone()] = json!("true");
            }
            let n = node("n").annotations(annotations).cordoned(true).build();
            let mut f = facts(&n);
            f.holds_cordon = our_key;
            let o = NodeOutcome {
                relies_on_cordon: relies,
                ..NodeOutcome::default()
            };
            let p = node_patch(&m, &f, &o, Status::Waiting, settled);
            assert_eq!(p.unschedulable, want_u, "case: {case}");
            assert_eq!(
                p.annotations.get(&ours).map(|v| v.as_deref()),
                want_a,
                "case: {case}"
            );
            assert!(!p.annotations.contains_key(&theirs), "case: {case}");
        }
    }

    /// Delta D38: upstream's `runtimeRequiredCordon` keeps the node cordoned whoever finishes.
    #[test]
    fn upstreams_runtime_required_cordon_is_never_lifted() {
        let sk = skyhook("sh").build();
        let rt = runtime_taint();
        let m = meta_of(&sk, &rt);
        let ours = schema::cordon_annotation("sh");
        let n = node("n")
            .annotations(json!({
                ours.clone(): "true",
                schema::RUNTIME_REQUIRED_CORDON_ANNOTATION: "true",
            }))
            .cordoned(true)
            .build();
        let mut f = facts(&n);
        f.holds_cordon = true;
        let p = node_patch(&m, &f, &NodeOutcome::default(), Status::Complete, true);
        assert_eq!(p.unschedulable, None, "lifted under runtimeRequiredCordon");
        assert_eq!(p.annotations.get(&ours), Some(&None), "our share stays");
    }

    /// Delta D38: `runtimeRequiredCordonAfter` cordons and marks the node in the write that
    /// lifts the taint; a mark whose cordon someone lifted is removed.
    #[test]
    fn runtime_required_cordon_after_cordons_when_the_taint_leaves() {
        let rt = runtime_taint();
        let runtime = json!({"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"});
        let touched = json!({schema::status_annotation("sh"): "complete"});
        let mark = schema::RUNTIME_REQUIRED_CORDON_ANNOTATION;
        for (case, after, taints, want) in [
            (
                "asked: cordoned and marked",
                true,
                json!([runtime]),
                Some(true),
            ),
            ("not asked: left schedulable", false, json!([runtime]), None),
            ("no taint to lift: nothing", true, json!([]), None),
        ] {
            let sk = skyhook("sh")
                .spec(json!({"runtimeRequired": true, "runtimeRequiredCordonAfter": after}))
                .build();
            let all = [Arc::new(sk.clone())];
            let m = MetaInput {
                skyhook: &sk,
                fleet: Fleet::alone(&all),
                runtime_taints: &rt,
                operator_version: OP,
            };
            let n = node("n")
                .taints(taints.clone())
                .annotations(touched.clone())
                .build();
            let p = node_patch(
                &m,
                &facts(&n),
                &NodeOutcome::default(),
                Status::Complete,
                true,
            );
            assert_eq!(p.unschedulable, want, "{case}");
            assert_eq!(
                p.annotations.get(mark).cloned().flatten().is_some(),
                want.is_some(),
                "{case}"
            );
        }
        // Another runtime-required Skyhook selecting the node asks for it: the last one to
        // finish cordons.
        let sk = skyhook("sh").spec(json!({"runtimeRequired": true})).build();
        let asker = skyhook("other")
            .spec(json!({"runtimeRequired": true, "runtimeRequiredCordonAfter": true}))
            .build();
        let all = [Arc::new(sk.clone()), Arc::new(asker)];
        let m = MetaInput {
            skyhook: &sk,
            fleet: Fleet::alone(&all),
            runtime_taints: &rt,
            operator_version: OP,
        };
        let done = json!({
            schema::status_annotation("sh"): "complete",
            schema::status_annotation("other"): "complete",
        });
        let n = node("n").taints(json!([runtime])).annotations(done).build();
        let p = node_patch(
            &m,
            &facts(&n),
            &NodeOutcome::default(),
            Status::Complete,
            true,
        );
        assert_eq!(p.unschedulable, Some(true));
        // Uncordoned with the mark left behind: the mark goes, the node stays schedulable.
        let sk = skyhook("sh").spec(json!({"runtimeRequired": true})).build();
        let m = meta_of(&sk, &rt);
        let n = node("n")
            .annotations(json!({mark: "true", schema::status_annotation("sh"): "complete"}))
            .build();
        let p = node_patch(
            &m,
            &facts(&n),
            &NodeOutcome::default(),
            Status::Complete,
            true,
        );
        assert_eq!(p.annotations.get(mark), Some(&None));
        assert_eq!(p.unschedulable, None);
        // Still cordoned: the mark stays.
        let n = node("n")
            .annotations(json!({mark: "true"}))
            .cordoned(true)
            .build();
        let p = node_patch(
            &m,
            &facts(&n),
            &NodeOutcome::default(),
            Status::Complete,
            true,
        );
        assert!(!p.annotations.contains_key(mark));
    }

    #[test]
    fn node_patch_runtime_required_taint() {
        let rt = runtime_taint();
        let spelled = |t: &Taint| {
            format!(
                "{}={}:{}",
                t.key,
                t.value.as_deref().unwrap_or_default(),
                t.effect
            )
        };
        let rt_s = "skyhook.nvidia.com=runtime-required:NoSchedule";
        let gpu = json!({"key": "nvidia.com/gpu", "effect": "NoSchedule"});
        let runtime = json!({"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"});
        let touched = json!({schema::status_annotation("sh"): "in_progress"});
        let other_rr = |name: &str, selector: Value| {
            skyhook(name)
                .spec(json!({"runtimeRequired": true, "nodeSelectors": selector}))
                .build()
        };
        let other_plain = |name: &str| skyhook(name).build();
        let other_done = json!({
            schema::status_annotation("sh"): "complete",
            schema::status_annotation("other"): "complete",
        });
        // (case, runtimeRequired, autoTaintNewNodes, node taints, node annotations, settled,
        //  other Skyhooks, taints written (None: untouched), autoTaint annotation written)
        let cases: Vec<(
            &str,
            bool,
            bool,
            Value,
            Value,
            bool,
            Vec<Skyhook>,
            Option<Vec<&str>>,
            bool,
        )> = vec![
            (
                "fresh node is tainted",
                true,
                true,
                json!([]),
                json!({}),
                false,
                vec![],
                Some(vec![rt_s]),
                true,
            ),
            (
                "fresh node keeps its other taints",
                true,
                true,
                json!([gpu]),
                json!({}),
                false,
                vec![],
                Some(vec!["nvidia.com/gpu=:NoSchedule", rt_s]),
                true,
            ),
            (
                "without autoTaintNewNodes nothing is added",
                true,
                false,
                json!([]),
                json!({}),
                false,
                vec![],
                None,
                false,
            ),
            (
                "not runtimeRequired: nothing",
                false,
                true,
                json!([]),
                json!({}),
                false,
                vec![],
                None,
                false,
            ),
            (
                "a node a Skyhook already touched is not new",
                true,
                true,
                json!([]),
                touched.clone(),
                false,
                vec![],
                None,
                false,
            ),
            (
                "an already tainted fresh node is not tainted twice",
                true,
                true,
                json!([runtime]),
                json!({}),
                false,
                vec![],
                None,
                false,
            ),
            (
                "complete and alone: removed, other taints kept",
                true,
                false,
                json!([gpu, runtime]),
                touched.clone(),
                true,
                vec![],
                Some(vec!["nvidia.com/gpu=:NoSchedule"]),
                false,
            ),
            (
                "not complete: kept",
                true,
                false,
                json!([runtime]),
                touched.clone(),
                false,
                vec![],
                None,
                false,
            ),
            (
                "not runtimeRequired: never removed",
                false,
                false,
                json!([runtime]),
                touched.clone(),
                true,
                vec![],
                None,
                false,
            ),
            (
                "another runtime-required Skyhook incomplete: kept",
                true,
                false,
                json!([runtime]),
                touched.clone(),
                true,
                vec![other_rr("other", json!({}))],
                None,
                false,
            ),
            (
                "another runtime-required Skyhook complete: removed",
                true,
                false,
                json!([runtime]),
                other_done.clone(),
                true,
                vec![other_rr("other", json!({}))],
                Some(vec![]),
                false,
            ),
            (
                "a Skyhook that is not runtime-required does not hold it",
                true,
                false,
                json!([runtime]),
                touched.clone(),
                true,
                vec![other_plain("other")],
                Some(vec![]),
                false,
            ),
            (
                "a runtime-required Skyhook that does not target the node does not hold it",
                true,
                false,
                json!([runtime]),
                touched.clone(),
                true,
                vec![other_rr("other", json!({"matchLabels": {"role": "cpu"}}))],
                Some(vec![]),
                false,
            ),
            (
                "the taint is known by key and effect, whatever its value",
                true,
                false,
                json!([{"key": "skyhook.nvidia.com", "value": "x", "effect": "NoSchedule"}]),
                touched.clone(),
                true,
                vec![],
                Some(vec![]),
                false,
            ),
            (
                "same key with another effect is not ours",
                true,
                false,
                json!([{"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoExecute"}]),
                touched.clone(),
                true,
                vec![],
                None,
                false,
            ),
        ];
        for (name, rr, auto, taints, annotations, settled, others, want, want_auto) in cases {
            let sk = skyhook("sh")
                .spec(json!({"runtimeRequired": rr, "autoTaintNewNodes": auto}))
                .build();
            let mut all: Vec<Arc<Skyhook>> = others.into_iter().map(Arc::new).collect();
            all.push(Arc::new(sk.clone()));
            let m = MetaInput {
                skyhook: &sk,
                fleet: Fleet::alone(&all),
                runtime_taints: &rt,
                operator_version: OP,
            };
            let n = node("n")
                .annotations(annotations)
                .labels(json!({"role": "gpu"}))
                .taints(taints)
                .build();
            let f = facts(&n);
            let p = node_patch(&m, &f, &NodeOutcome::default(), Status::Waiting, settled);
            let got: Option<Vec<String>> =
                p.taints.as_ref().map(|ts| ts.iter().map(spelled).collect());
            let want: Option<Vec<String>> = want.map(|v| v.into_iter().map(String::from).collect());
            assert_eq!(got, want, "case: {name}");
            let auto_key = schema::auto_taint_annotation(&rt.applied().key);
            assert_eq!(
                p.annotations.get(&auto_key) == Some(&Some("true".to_string())),
                want_auto,
                "case: {name}"
            );
        }
    }

    #[test]
    fn node_patch_applied_record() {
        let sk = skyhook("sh").build();
        let rt = runtime_taint();
        let m = meta_of(&sk, &rt);
        let key = schema::applied_annotation("sh");
        let rec = |h: &str| BTreeMap::from([("p|1.0.0".to_string(), h.to_string())]);
        // (case, recorded before, after the pass, write)
        let cases: Vec<(
            &str,
            BTreeMap<String, String>,
            BTreeMap<String, String>,
            Option<Option<String>>,
        )> = vec![
            ("unchanged: not written", rec("a.b"), rec("a.b"), None),
            (
                "nothing before nor after",
                BTreeMap::new(),
                BTreeMap::new(),
                None,
            ),
            (
                "new record written as JSON",
                BTreeMap::new(),
                rec("a.b"),
                Some(Some(r#"{"p|1.0.0":"a.b"}"#.to_string())),
            ),
            (
                "changed record",
                rec("a.b"),
                rec("a.c"),
                Some(Some(r#"{"p|1.0.0":"a.c"}"#.to_string())),
            ),
            (
                "emptied record removed",
                rec("a.b"),
                BTreeMap::new(),
                Some(None),
            ),
        ];
        let n = node("n").build();
        for (name, before, after, want) in cases {
            let mut f = facts(&n);
            f.applied = before;
            let o = NodeOutcome {
                applied: after,
                folded: Default::default(),
                ..NodeOutcome::default()
            };
            let p = node_patch(&m, &f, &o, Status::Waiting, false);
            assert_eq!(p.annotations.get(&key).cloned(), want, "case: {name}");
        }
    }

    #[test]
    fn node_conditions_written_only_when_they_change() {
        let now = t(100);
        let nr = schema::node_not_ready_condition("sh");
        let er = schema::node_erroring_condition("sh");
        let cond = |type_: &str, status: &str, reason: &str| {
            json!({"type": type_, "status": status, "reason": reason,
                   "lastTransitionTime": Time(t(0)), "lastHeartbeatTime": Time(t(0))})
        };
        let incomplete = cond(&nr, "True", schema::NOT_READY_REASON_INCOMPLETE);
        let not_erroring = cond(&er, "False", schema::ERRORING_REASON_NOT_ERRORING);
        let ok = node_state([entry("p", Stage::Apply, State::InProgress)]);
        let failing = node_state([entry("p", Stage::Apply, State::Erroring)]);
        let unknown = node_state([entry("p", Stage::Apply, State::Unknown)]);
        type Want = Option<[(&'static str, &'static str, i64); 2]>;
        // (case, existing conditions, state, complete, Some([(status, reason, transition) of
        //  NotReady, then Erroring]) or None when nothing is written)
        let cases: Vec<(&str, Value, &NodeState, bool, Want)> = vec![
            (
                "no condition yet",
                json!([]),
                &ok,
                false,
                Some([("True", "Incomplete", 100), ("False", "Not Erroring", 100)]),
            ),
            (
                "up to date: nothing",
                json!([incomplete.clone(), not_erroring.clone()]),
                &ok,
                false,
                None,
            ),
            (
                "complete flips NotReady only",
                json!([incomplete.clone(), not_erroring.clone()]),
                &ok,
                true,
                Some([("False", "Complete", 100), ("False", "Not Erroring", 0)]),
            ),
            (
                "erroring flips Erroring only",
                json!([incomplete.clone(), not_erroring.clone()]),
                &failing,
                false,
                Some([
                    ("True", "Incomplete", 0),
                    ("True", "Package(s) Erroring or Unknown", 100),
                ]),
            ),
            (
                "unknown counts as erroring",
                json!([incomplete.clone(), not_erroring.clone()]),
                &unknown,
                false,
                Some([
                    ("True", "Incomplete", 0),
                    ("True", "Package(s) Erroring or Unknown", 100),
                ]),
            ),
            (
                "a stale reason is rewritten, its time kept",
                json!([cond(&nr, "True", "Old"), not_erroring.clone()]),
                &ok,
                false,
                Some([("True", "Incomplete", 0), ("False", "Not Erroring", 0)]),
            ),
            (
                "one condition missing",
                json!([incomplete.clone()]),
                &ok,
                false,
                Some([("True", "Incomplete", 0), ("False", "Not Erroring", 100)]),
            ),
            (
                "other Skyhooks' conditions do not count",
                json!([cond(
                    &schema::node_not_ready_condition("other"),
                    "True",
                    "Incomplete"
                )]),
                &ok,
                false,
                Some([("True", "Incomplete", 100), ("False", "Not Erroring", 100)]),
            ),
        ];
        for (name, existing, state, complete, want) in cases {
            let n = node("n").conditions(existing).build();
            let got = node_conditions("sh", &n, state, complete, now);
            let Some(want) = want else {
                assert!(got.is_none(), "case: {name}: {got:?}");
                continue;
            };
            let got = got.unwrap_or_else(|| panic!("case: {name}: nothing written"));
            assert_eq!(got.len(), 2, "case: {name}");
            for (c, (ty, (status, reason, since))) in
                got.iter().zip([&nr, &er].into_iter().zip(want))
            {
                assert_eq!(&c.type_, ty, "case: {name}");
                assert_eq!(c.status, status, "case: {name} {ty}");
                assert_eq!(c.reason.as_deref(), Some(reason), "case: {name} {ty}");
                assert_eq!(
                    c.last_transition_time,
                    Some(Time(t(since))),
                    "case: {name} {ty}"
                );
                assert_eq!(c.last_heartbeat_time, Some(Time(now)), "case: {name} {ty}");
            }
            assert_eq!(
                got[0].message,
                Some(schema::node_not_ready_message("sh")),
                "case: {name}"
            );
            assert_eq!(
                got[1].message,
                Some(schema::node_erroring_message("sh")),
                "case: {name}"
            );
        }
    }
}
