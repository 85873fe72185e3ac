//! Node selection (§3.16, §3.14): which nodes a Skyhook targets, which of them it may not touch
//! (ignored, or a taint it does not tolerate) and which wait for a Skyhook ordered before it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use kube::ResourceExt;

use super::NodeView;
use super::fleet::{Fleet, Member};
use crate::crd::{Sequencing, Skyhook};
use crate::node::{LabelMatch, Labels};
use crate::schema::{self, RuntimeTaints};

/// Why a targeted node cannot be worked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Labelled `skyhook.nvidia.com/ignore=true`.
    Ignored,
    /// Carries a taint the package Jobs would not tolerate.
    Taint,
}

/// Whether `skyhook`'s `nodeSelectors` select `node` (an empty selector selects every node).
pub fn selects(skyhook: &Skyhook, labels: &(impl Labels + ?Sized)) -> bool {
    LabelMatch::new(&skyhook.spec.node_selectors).is_some_and(|s| s.matches(labels))
}

/// Targeted nodes, oldest first (§3.4), names breaking ties deterministically.
pub fn targeted<'a>(skyhook: &Skyhook, nodes: &'a [Arc<NodeView>]) -> Vec<&'a Arc<NodeView>> {
    let Some(sel) = LabelMatch::new(&skyhook.spec.node_selectors) else {
        return Vec::new();
    };
    let mut out: Vec<&Arc<NodeView>> = nodes
        .iter()
        .filter(|n| sel.matches(n.selector_labels()))
        .collect();
    out.sort_by(|a, b| {
        let key = |n: &'a NodeView| (n.created.as_ref().map(|t| t.0), n.name.as_str());
        key(a).cmp(&key(b))
    });
    out
}

/// Whether a pod with these tolerations ignores a cordon (the `unschedulable` NoSchedule taint),
/// as the scheduler decides it: a keyless `Exists` toleration tolerates every taint.
pub fn tolerates_cordon(tolerations: &[Toleration]) -> bool {
    let cordon = Taint {
        key: schema::UNSCHEDULABLE_TAINT_KEY.to_string(),
        effect: "NoSchedule".to_string(),
        ..Default::default()
    };
    tolerations.iter().any(|t| tolerates(t, &cordon))
}

/// The scheduler's toleration match.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect_ok = t
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key_ok = match t.key.as_deref() {
        None | Some("") => t.operator.as_deref() == Some("Exists"),
        Some(k) => k == taint.key,
    };
    let value_ok = match t.operator.as_deref() {
        Some("Exists") => true,
        None | Some("") | Some("Equal") => {
            t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        // The scheduler tolerates nothing with an operator it does not know (Gt, Lt, typos).
        Some(_) => false,
    };
    effect_ok && key_ok && value_ok
}

/// The tolerations of this Skyhook's Jobs: the cordon, `additionalTolerations`, and the
/// runtime-required taints when the Skyhook is runtime-required.
pub fn job_tolerations(sk: &Skyhook, runtime_taints: &RuntimeTaints) -> Vec<Toleration> {
    let mut out = vec![Toleration {
        key: Some(schema::UNSCHEDULABLE_TAINT_KEY.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoSchedule".to_string()),
        ..Default::default()
    }];
    out.extend(sk.spec.additional_tolerations.iter().cloned());
    if sk.spec.runtime_required {
        out.extend(runtime_taints.tolerations());
    }
    out
}

/// Why `node` cannot be worked on, if it cannot (§3.16).
pub fn block(node: &NodeView, tolerations: &[Toleration]) -> Option<Block> {
    if node.label(schema::IGNORE_LABEL) == Some(schema::TRUE_VALUE) {
        return Some(Block::Ignored);
    }
    let untolerated = node
        .taints
        .iter()
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)));
    untolerated.then_some(Block::Taint)
}

/// §3.14: every non-disabled Skyhook ordered before this one (priority, then name) that targets
/// the node must be complete there first. One being deleted does not gate: it starts nothing
/// more, and the pass that its deletion's node writes trigger here may see it before its final
/// delete event arrives, which triggers only its own (no longer existing) key.
///
/// Over the objects of both APIs (`fleet`): a NodeWright ordered before a Skyhook gates it too.
pub fn gated(sk: &Skyhook, fleet: &Fleet, node: &NodeView) -> bool {
    let key = |s: &Skyhook| (s.spec.priority, s.name_any());
    let mine = key(sk);
    fleet.members().any(|other| {
        !other.is(sk)
            && key(other.sk) < mine
            && other.sk.metadata.deletion_timestamp.is_none()
            && !flag(other.sk, schema::DISABLE_ANNOTATION)
            && other.selects(node)
            && !other.complete_on(node)
    })
}

/// Delta D3 (upstream v0.14): the first Skyhook ordered before `sk` with `sequencing: all` that
/// is not yet complete on every node it targets (ignored nodes left out). Every node of `sk`
/// waits for it, even the nodes it does not target; disabled ones and ones being deleted hold
/// nothing back, paused ones do (as for per-node gating).
pub fn waiting_on<'a>(
    sk: &Skyhook,
    fleet: &Fleet<'a>,
    nodes: &[Arc<NodeView>],
) -> Option<&'a Skyhook> {
    let key = |s: &Skyhook| (s.spec.priority, s.name_any());
    let mine = key(sk);
    let mut before: Vec<Member<'a>> = fleet
        .members()
        .filter(|o| {
            !o.is(sk)
                && key(o.sk) < mine
                && o.sk.spec.sequencing == Some(Sequencing::All)
                && o.sk.metadata.deletion_timestamp.is_none()
                && !flag(o.sk, schema::DISABLE_ANNOTATION)
        })
        .collect();
    before.sort_by_key(|o| key(o.sk));
    before
        .into_iter()
        .find(|o| {
            nodes
                .iter()
                .any(|n| o.selects(n) && !o.ignores(n) && !o.complete_on(n))
        })
        .map(|o| o.sk)
}

/// An annotation `key` of the Skyhook set to `true` (pause, disable).
pub fn flag(sk: &Skyhook, key: &str) -> bool {
    sk.annotations().get(key).map(String::as_str) == Some(schema::TRUE_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    use crate::plan::fixtures::{node, runtime_taint, skyhook};

    fn toleration(v: Value) -> Toleration {
        serde_json::from_value(v).expect("toleration")
    }

    fn taint(v: Value) -> Taint {
        serde_json::from_value(v).expect("taint")
    }

    #[test]
    fn tolerates_matches_like_the_scheduler() {
        let t = |key: &str, value: Option<&str>, effect: &str| json!({"key": key, "value": value, "effect": effect});
        // (case, toleration, taint, tolerated)
        let cases = [
            (
                "Exists on the same key tolerates any value",
                json!({"key": "k", "operator": "Exists"}),
                t("k", Some("v"), "NoSchedule"),
                true,
            ),
            (
                "Exists on another key does not",
                json!({"key": "other", "operator": "Exists"}),
                t("k", Some("v"), "NoSchedule"),
                false,
            ),
            (
                "keyless Exists tolerates every taint",
                json!({"operator": "Exists"}),
                t("k", Some("v"), "NoExecute"),
                true,
            ),
            (
                "empty-string key with Exists tolerates every taint",
                json!({"key": "", "operator": "Exists"}),
                t("any", None, "PreferNoSchedule"),
                true,
            ),
            (
                "keyless Equal tolerates nothing (the API only allows Exists without a key)",
                json!({"value": "v"}),
                t("k", Some("v"), "NoSchedule"),
                false,
            ),
            (
                "Equal with the same value",
                json!({"key": "k", "operator": "Equal", "value": "v"}),
                t("k", Some("v"), "NoSchedule"),
                true,
            ),
            (
                "Equal with another value",
                json!({"key": "k", "operator": "Equal", "value": "w"}),
                t("k", Some("v"), "NoSchedule"),
                false,
            ),
            (
                "no operator means Equal: same value",
                json!({"key": "k", "value": "v"}),
                t("k", Some("v"), "NoSchedule"),
                true,
            ),
            (
                "no operator means Equal: another value",
                json!({"key": "k", "value": "w"}),
                t("k", Some("v"), "NoSchedule"),
                false,
            ),
            (
                "Equal without value matches a taint without value",
                json!({"key": "k", "operator": "Equal"}),
                t("k", None, "NoSchedule"),
                true,
            ),
            (
                "Equal without value does not match a taint with a value",
                json!({"key": "k", "operator": "Equal"}),
                t("k", Some("v"), "NoSchedule"),
                false,
            ),
            (
                "Exists ignores the toleration's value",
                json!({"key": "k", "operator": "Exists", "value": "x"}),
                t("k", Some("v"), "NoSchedule"),
                true,
            ),
            (
                "empty effect matches every effect",
                json!({"key": "k", "operator": "Exists", "effect": ""}),
                t("k", None, "NoExecute"),
                true,
            ),
            (
                "matching effect",
                json!({"key": "k", "operator": "Exists", "effect": "NoExecute"}),
                t("k", None, "NoExecute"),
                true,
            ),
            (
                "different effect",
                json!({"key": "k", "operator": "Exists", "effect": "NoSchedule"}),
                t("k", None, "NoExecute"),
                false,
            ),
            (
                "keyless Exists limited to one effect",
                json!({"operator": "Exists", "effect": "NoSchedule"}),
                t("k", None, "PreferNoSchedule"),
                false,
            ),
        ];
        for (name, tol, ta, want) in cases {
            assert_eq!(
                tolerates(&toleration(tol), &taint(ta)),
                want,
                "case: {name}"
            );
        }
    }

    #[test]
    fn tolerates_refuses_unknown_operators() {
        let tol = toleration(json!({"key": "k", "operator": "Gt", "value": "1"}));
        let ta = taint(json!({"key": "k", "value": "1", "effect": "NoSchedule"}));
        assert!(!tolerates(&tol, &ta), "case: Gt read as Equal");
    }

    #[test]
    fn tolerates_cordon_needs_the_unschedulable_no_schedule_taint() {
        let cases = [
            (
                "keyed Exists NoSchedule",
                json!([{"key": schema::UNSCHEDULABLE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]),
                true,
            ),
            (
                "keyed Exists, any effect",
                json!([{"key": schema::UNSCHEDULABLE_TAINT_KEY, "operator": "Exists"}]),
                true,
            ),
            ("keyless Exists", json!([{"operator": "Exists"}]), true),
            (
                "NoExecute only",
                json!([{"key": schema::UNSCHEDULABLE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}]),
                false,
            ),
            (
                "another key",
                json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]),
                false,
            ),
            ("no tolerations", json!([]), false),
        ];
        for (name, tols, want) in cases {
            let tols: Vec<Toleration> = serde_json::from_value(tols).expect("tolerations");
            assert_eq!(tolerates_cordon(&tols), want, "case: {name}");
        }
    }

    #[test]
    fn block_by_ignore_label_and_untolerated_taints() {
        let rt = runtime_taint();
        let gpu_tol =
            json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
        let taint_of = |key: &str, value: Option<&str>, effect: &str| json!({"key": key, "value": value, "effect": effect});
        let gpu = |effect: &str| taint_of("nvidia.com/gpu", None, effect);
        let runtime = taint_of("skyhook.nvidia.com", Some("runtime-required"), "NoSchedule");
        // (case, node labels, node taints, additionalTolerations, runtimeRequired, block)
        let cases = [
            ("nothing", json!({}), json!([]), json!([]), false, None),
            (
                "ignore=true",
                json!({schema::IGNORE_LABEL: "true"}),
                json!([]),
                json!([]),
                false,
                Some(Block::Ignored),
            ),
            (
                "ignore wins over an untolerated taint",
                json!({schema::IGNORE_LABEL: "true"}),
                json!([gpu("NoSchedule")]),
                json!([]),
                false,
                Some(Block::Ignored),
            ),
            (
                "ignore=false",
                json!({schema::IGNORE_LABEL: "false"}),
                json!([]),
                json!([]),
                false,
                None,
            ),
            (
                "ignore with another spelling of true",
                json!({schema::IGNORE_LABEL: "True"}),
                json!([]),
                json!([]),
                false,
                None,
            ),
            (
                "untolerated NoSchedule",
                json!({}),
                json!([gpu("NoSchedule")]),
                json!([]),
                false,
                Some(Block::Taint),
            ),
            (
                "untolerated NoExecute",
                json!({}),
                json!([gpu("NoExecute")]),
                json!([]),
                false,
                Some(Block::Taint),
            ),
            (
                "untolerated PreferNoSchedule (the reference checks every effect)",
                json!({}),
                json!([gpu("PreferNoSchedule")]),
                json!([]),
                false,
                Some(Block::Taint),
            ),
            (
                "NoSchedule tolerated by additionalTolerations",
                json!({}),
                json!([gpu("NoSchedule")]),
                gpu_tol.clone(),
                false,
                None,
            ),
            (
                "toleration for another effect does not help",
                json!({}),
                json!([gpu("NoExecute")]),
                gpu_tol.clone(),
                false,
                Some(Block::Taint),
            ),
            (
                "NoExecute tolerated by a keyed Exists without effect",
                json!({}),
                json!([gpu("NoExecute")]),
                json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]),
                false,
                None,
            ),
            (
                "PreferNoSchedule tolerated",
                json!({}),
                json!([gpu("PreferNoSchedule")]),
                json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "PreferNoSchedule"}]),
                false,
                None,
            ),
            (
                "one of two taints untolerated",
                json!({}),
                json!([
                    gpu("NoSchedule"),
                    taint_of("dedicated", Some("x"), "NoSchedule")
                ]),
                gpu_tol.clone(),
                false,
                Some(Block::Taint),
            ),
            (
                "the cordon taint is always tolerated",
                json!({}),
                json!([taint_of(
                    schema::UNSCHEDULABLE_TAINT_KEY,
                    None,
                    "NoSchedule"
                )]),
                json!([]),
                false,
                None,
            ),
            (
                "the cordon key with NoExecute is not",
                json!({}),
                json!([taint_of(schema::UNSCHEDULABLE_TAINT_KEY, None, "NoExecute")]),
                json!([]),
                false,
                Some(Block::Taint),
            ),
            (
                "runtime-required taint tolerated when runtimeRequired",
                json!({}),
                json!([runtime.clone()]),
                json!([]),
                true,
                None,
            ),
            (
                "runtime-required taint blocks without runtimeRequired",
                json!({}),
                json!([runtime.clone()]),
                json!([]),
                false,
                Some(Block::Taint),
            ),
            (
                "runtime-required key with another value blocks (Equal toleration)",
                json!({}),
                json!([taint_of("skyhook.nvidia.com", Some("other"), "NoSchedule")]),
                json!([]),
                true,
                Some(Block::Taint),
            ),
        ];
        for (name, labels, taints, tolerations, runtime_required, want) in cases {
            let sk = skyhook("sh")
                .spec(json!({"additionalTolerations": tolerations, "runtimeRequired": runtime_required}))
                .build();
            let n = node("n").labels(labels).taints(taints).build();
            let tols = job_tolerations(&sk, &rt);
            assert_eq!(block(&n, &tols), want, "case: {name}");
        }
    }

    #[test]
    fn job_tolerations_are_cordon_then_additional_then_runtime() {
        let rt = runtime_taint();
        let extra = json!([{"key": "a", "operator": "Exists"}]);
        // (case, runtimeRequired, keys in order)
        let cases = [
            ("plain", false, vec![schema::UNSCHEDULABLE_TAINT_KEY, "a"]),
            (
                "runtime required",
                true,
                vec![
                    schema::UNSCHEDULABLE_TAINT_KEY,
                    "a",
                    "skyhook.nvidia.com",
                    "nodewright.nvidia.com",
                ],
            ),
        ];
        for (name, rr, want) in cases {
            let sk = skyhook("sh")
                .spec(json!({"additionalTolerations": extra, "runtimeRequired": rr}))
                .build();
            let tols = job_tolerations(&sk, &rt);
            let keys: Vec<&str> = tols.iter().filter_map(|t| t.key.as_deref()).collect();
            assert_eq!(keys, want, "case: {name}");
            assert_eq!(tols[0].operator.as_deref(), Some("Exists"), "case: {name}");
            assert_eq!(
                tols[0].effect.as_deref(),
                Some("NoSchedule"),
                "case: {name}"
            );
            if rr {
                let runtime: Vec<Toleration> = rt.tolerations().collect();
                assert!(tols.ends_with(&runtime), "case: {name}");
            }
        }
    }

    #[test]
    fn gated_by_skyhooks_ordered_before() {
        // Our Skyhook is `me` at the default priority 200 on a node labelled role=gpu.
        // (case, others as (name, priority, annotations, nodeSelectors), node annotations, gated)
        let none = json!({});
        let status = |sk: &str, s: &str| json!({schema::status_annotation(sk): s});
        let cases = [
            ("alone", vec![], none.clone(), false),
            (
                "lower priority value, nothing on the node yet",
                vec![("a", 100, none.clone(), none.clone())],
                none.clone(),
                true,
            ),
            (
                "lower priority value, in progress on the node",
                vec![("a", 100, none.clone(), none.clone())],
                status("a", "in_progress"),
                true,
            ),
            (
                "lower priority value, complete on the node",
                vec![("a", 100, none.clone(), none.clone())],
                status("a", "complete"),
                false,
            ),
            (
                "higher priority value never gates",
                vec![("a", 300, none.clone(), none.clone())],
                none.clone(),
                false,
            ),
            (
                "priority beats name",
                vec![("z", 100, none.clone(), none.clone())],
                none.clone(),
                true,
            ),
            (
                "same priority, smaller name goes first",
                vec![("a", 200, none.clone(), none.clone())],
                none.clone(),
                true,
            ),
            (
                "same priority, larger name goes after",
                vec![("z", 200, none.clone(), none.clone())],
                none.clone(),
                false,
            ),
            (
                "a disabled Skyhook does not gate",
                vec![(
                    "a",
                    100,
                    json!({schema::DISABLE_ANNOTATION: "true"}),
                    none.clone(),
                )],
                none.clone(),
                false,
            ),
            (
                "disable set to something else still gates",
                vec![(
                    "a",
                    100,
                    json!({schema::DISABLE_ANNOTATION: "false"}),
                    none.clone(),
                )],
                none.clone(),
                true,
            ),
            (
                "a paused Skyhook still gates",
                vec![(
                    "a",
                    100,
                    json!({schema::PAUSE_ANNOTATION: "true"}),
                    none.clone(),
                )],
                none.clone(),
                true,
            ),
            (
                "a Skyhook that does not select the node does not gate",
                vec![(
                    "a",
                    100,
                    none.clone(),
                    json!({"matchLabels": {"role": "cpu"}}),
                )],
                none.clone(),
                false,
            ),
            (
                "a Skyhook that selects the node by label gates",
                vec![(
                    "a",
                    100,
                    none.clone(),
                    json!({"matchLabels": {"role": "gpu"}}),
                )],
                none.clone(),
                true,
            ),
            (
                "one of two earlier Skyhooks incomplete",
                vec![
                    ("a", 100, none.clone(), none.clone()),
                    ("b", 100, none.clone(), none.clone()),
                ],
                status("a", "complete"),
                true,
            ),
            (
                "both earlier Skyhooks complete",
                vec![
                    ("a", 100, none.clone(), none.clone()),
                    ("b", 100, none.clone(), none.clone()),
                ],
                json!({schema::status_annotation("a"): "complete", schema::status_annotation("b"): "complete"}),
                false,
            ),
            (
                "our own object (an older copy) never gates",
                vec![("me", 100, none.clone(), none.clone())],
                none.clone(),
                false,
            ),
        ];
        let me = skyhook("me").build();
        for (name, others, annotations, want) in cases {
            let mut all: Vec<Arc<Skyhook>> = others
                .into_iter()
                .map(|(n, prio, ann, sel)| {
                    skyhook(n)
                        .spec(json!({"priority": prio, "nodeSelectors": sel}))
                        .annotations(ann)
                        .arc()
                })
                .collect();
            all.push(Arc::new(me.clone()));
            let n = node("n")
                .labels(json!({"role": "gpu"}))
                .annotations(annotations)
                .build();
            assert_eq!(gated(&me, &Fleet::alone(&all), &n), want, "case: {name}");
        }
    }

    #[test]
    fn a_skyhook_being_deleted_does_not_gate() {
        let me = skyhook("me").build();
        let mut first = skyhook("a").set("priority", json!(100)).build();
        let n = node("n").build();
        let all = |first: &Skyhook| vec![Arc::new(first.clone()), Arc::new(me.clone())];
        assert!(
            gated(&me, &Fleet::alone(&all(&first)), &n),
            "gates while it lives"
        );
        first.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert!(
            !gated(&me, &Fleet::alone(&all(&first)), &n),
            "gates while being deleted"
        );
    }

    /// Delta D3: a `sequencing: all` predecessor holds every node back until it is complete on
    /// every node it targets, even nodes it does not target.
    #[test]
    fn a_sequencing_all_predecessor_holds_back_until_complete_everywhere() {
        let status = schema::status_annotation("a");
        let n = |name: &str, role: &str, a_status: Option<&str>| {
            let mut annotations = json!({});
            if let Some(s) = a_status {
                annotations[status.clone()] = json!(s);
            }
            node(name)
                .labels(json!({"role": role}))
                .annotations(annotations)
                .arc()
        };
        let me = skyhook("me")
            .spec(json!({"nodeSelectors": {"matchLabels": {"role": "b"}}}))
            .build();
        let first = |sequencing: &str, disabled: bool| {
            let mut a = skyhook("a")
                .spec(json!({"sequencing": sequencing, "nodeSelectors": {"matchLabels": {"role": "a"}}}))
                .set("priority", json!(100))
                .build();
            if disabled {
                a.metadata.annotations =
                    Some([(schema::DISABLE_ANNOTATION.to_string(), "true".to_string())].into());
            }
            a
        };
        // (case, predecessor's sequencing, disabled, its nodes' status, held back)
        let cases = [
            (
                "all, one node left",
                "all",
                false,
                [Some("complete"), Some("in_progress")],
                true,
            ),
            (
                "all, one node never started",
                "all",
                false,
                [Some("complete"), None],
                true,
            ),
            (
                "all, complete everywhere",
                "all",
                false,
                [Some("complete"), Some("complete")],
                false,
            ),
            (
                "node: per node only",
                "node",
                false,
                [Some("complete"), None],
                false,
            ),
            ("all but disabled", "all", true, [None, None], false),
        ];
        for (case, sequencing, disabled, statuses, want) in cases {
            let a = first(sequencing, disabled);
            let nodes = vec![
                n("a1", "a", statuses[0]),
                n("a2", "a", statuses[1]),
                n("b1", "b", None),
            ];
            let all = vec![Arc::new(a), Arc::new(me.clone())];
            assert_eq!(
                waiting_on(&me, &Fleet::alone(&all), &nodes).map(|s| s.name_any()),
                want.then(|| "a".to_string()),
                "case: {case}"
            );
        }
    }

    #[test]
    fn targeted_nodes_oldest_first_then_by_name() {
        let at = |name: &str, secs: i64, role: &str| {
            node(name).created(secs).labels(json!({"role": role})).arc()
        };
        let nodes = vec![
            at("n-b", 10, "gpu"),
            at("n-a", 10, "gpu"),
            at("n-c", 5, "gpu"),
            at("n-d", 1, "cpu"),
        ];
        // (case, nodeSelectors, targeted names in order)
        let cases = [
            (
                "empty selector selects every node, oldest first, then by name",
                json!({}),
                vec!["n-d", "n-c", "n-a", "n-b"],
            ),
            (
                "matchLabels filters",
                json!({"matchLabels": {"role": "gpu"}}),
                vec!["n-c", "n-a", "n-b"],
            ),
            (
                "matchExpressions NotIn",
                json!({"matchExpressions": [{"key": "role", "operator": "NotIn", "values": ["gpu"]}]}),
                vec!["n-d"],
            ),
            (
                "nothing matches",
                json!({"matchLabels": {"role": "tpu"}}),
                vec![],
            ),
            (
                "an unreadable selector targets nothing",
                json!({"matchExpressions": [{"key": "role", "operator": "Near"}]}),
                vec![],
            ),
        ];
        for (name, sel, want) in cases {
            let sk = skyhook("sh").set("nodeSelectors", sel).build();
            let got: Vec<String> = targeted(&sk, &nodes)
                .into_iter()
                .map(|n| n.name.clone())
                .collect();
            assert_eq!(got, want, "case: {name}");
            let each: Vec<String> = nodes
                .iter()
                .filter(|n| selects(&sk, n.selector_labels()))
                .map(|n| n.name.clone())
                .collect();
            let mut sorted = want.clone();
            sorted.sort();
            let mut each_sorted = each.clone();
            each_sorted.sort();
            assert_eq!(each_sorted, sorted, "case: {name} (selects)");
        }
    }

    #[test]
    fn a_nodewright_selector_matches_the_labels_as_stored() {
        let stored = node("n1")
            .labels(json!({
                "nodewright.nvidia.com/pool": "a",
                "skyhook.nvidia.com/gpu": "true",
                "nodewright.nvidia.com/status_nw": "complete",
            }))
            .arc();
        let seen = [stored.in_api(crate::schema::Api::NodeWright)];
        assert_eq!(
            seen[0].labels.get("skyhook.nvidia.com/status_nw"),
            Some("complete"),
            "the planner reads its own keys canonical"
        );
        for sel in [
            json!({"matchLabels": {"nodewright.nvidia.com/pool": "a"}}),
            json!({"matchLabels": {"skyhook.nvidia.com/gpu": "true"}}),
        ] {
            let sk = skyhook("nw").set("nodeSelectors", sel.clone()).build();
            assert_eq!(targeted(&sk, &seen).len(), 1, "{sel}");
        }
    }
}
