//! The drain decision (§3.9.1 step 5, §3.9.3): which pods on a cordoned node hold the interrupt
//! back, which are evicted, and when the node is ready. The controller only lists the pods the
//! [`Listing`] names.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

use super::pod_gate::PodGate;
use super::select::{targeted, tolerates_cordon};
use crate::crd::{DrainConfig, Skyhook};
use crate::node::NodeView;
use crate::schema::{self, Api};

/// A pod on a cordoned node, as the drain sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    /// Matches `podNonInterruptLabels` and is Running or Pending: blocks the interrupt.
    pub protected: bool,
    /// Must be evicted before the interrupt.
    pub evictable: bool,
    /// Would be evicted, but is already being deleted (evicted earlier): the interrupt waits
    /// until the pod object is gone, as `kubectl drain` does (upstream v0.19, delta D36).
    pub terminating: bool,
    /// Would be evicted, but `drainConfig` forbids it (why): the drain holds while it runs.
    pub unmovable: Option<&'static str>,
    /// Selected by the Skyhook's health gate: whether it is Ready.
    pub health: Option<bool>,
}

/// `drainConfig` as the drain applies it (upstream v0.18, delta D28); the defaults are the
/// v0.13 drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainRules {
    /// Delete pods instead of evicting them (`disableEviction`).
    pub delete: bool,
    pub delete_empty_dir_data: bool,
    /// Drain pods no controller owns.
    pub force: bool,
    pub ignore_daemon_sets: bool,
    pub timeout: Option<std::time::Duration>,
    /// Grace period given to each drained pod, in whole seconds.
    pub grace_seconds: Option<i64>,
}

impl Default for DrainRules {
    fn default() -> Self {
        DrainRules {
            delete: false,
            delete_empty_dir_data: true,
            force: true,
            ignore_daemon_sets: true,
            timeout: None,
            grace_seconds: None,
        }
    }
}

impl DrainRules {
    /// The rules of a Skyhook's `drainConfig`. Durations admission would refuse (only in
    /// objects stored before the rules) read as unset.
    pub fn of(config: Option<&DrainConfig>) -> DrainRules {
        let d = DrainRules::default();
        let Some(c) = config else { return d };
        let duration =
            |v: &Option<String>| v.as_deref().and_then(|t| schema::parse_go_duration(t).ok());
        DrainRules {
            delete: c.disable_eviction.unwrap_or(d.delete),
            delete_empty_dir_data: c.delete_empty_dir_data.unwrap_or(d.delete_empty_dir_data),
            force: c.force.unwrap_or(d.force),
            ignore_daemon_sets: c.ignore_daemon_sets.unwrap_or(d.ignore_daemon_sets),
            timeout: duration(&c.timeout).filter(|t| !t.is_zero()),
            // Rounded up, as upstream does: a sub-second grace is not cut to none.
            grace_seconds: duration(&c.grace_period).map(|g| {
                let secs = g.as_secs() + u64::from(g.subsec_nanos() > 0);
                i64::try_from(secs).unwrap_or(i64::MAX)
            }),
        }
    }
}

/// The nodes of the soaking batches in `status`: the soak watches their health gate pods.
pub fn soaking(status: Option<&crate::crd::SkyhookStatus>) -> Vec<String> {
    status
        .iter()
        .flat_map(|s| s.compartment_statuses.values())
        .filter_map(|c| c.batch_state.as_ref())
        .flat_map(|b| b.soak_nodes.iter().cloned())
        .collect()
}

/// What a pass needs listed for the drain: the pods on the Skyhook's cordoned nodes, read as
/// [`PodInfo`]s. The controller runs the listing; the planner says what to list and how to read
/// it, so the shell makes no decision of its own.
pub struct Listing {
    /// The targeted nodes that are cordoned: only their pods are listed (the operator never
    /// caches every pod in the cluster).
    pub nodes: Vec<String>,
    protected: Option<Selector>,
    rules: DrainRules,
    health: Option<PodGate>,
    /// The operator's namespace: only pods there are ours to keep.
    own_namespace: String,
}

impl Listing {
    /// `soaking`: the nodes of soaking batches (the stored status), whose health gate pods the
    /// soak watches. `own_namespace`: the operator's, where its own pods run.
    pub fn of(
        sk: &Skyhook,
        nodes: &[Arc<NodeView>],
        soaking: &[String],
        own_namespace: &str,
    ) -> Listing {
        let health = PodGate::of(sk);
        // A node waiting for its health gate, or soaking, is listed too, cordoned or not; so is
        // one waiting for protected pods and, when the Skyhook cordons only once they are gone,
        // one at work (its next pass may need to know).
        let name = sk.name_any();
        let gate_clock = schema::health_gate_annotation(&name);
        let protected_clock = schema::protected_wait_annotation(&name);
        let late = protected_cordon(sk) == schema::ProtectedCordon::PodsGone;
        let status = schema::status_annotation(&name);
        let at_work = |n: &NodeView| {
            matches!(
                schema::Status::from_annotation(n.annotation(&status)),
                schema::Status::InProgress | schema::Status::Erroring
            )
        };
        Listing {
            nodes: targeted(sk, nodes)
                .into_iter()
                .filter(|n| {
                    n.unschedulable
                        || n.annotations.contains_key(&protected_clock)
                        || (late && at_work(n))
                        || (health.is_some()
                            && (n.annotations.contains_key(&gate_clock)
                                || soaking.contains(&n.name)))
                })
                .map(|n| n.name.clone())
                .collect(),
            protected: protection(&sk.spec.pod_non_interrupt_labels),
            rules: DrainRules::of(sk.spec.drain_config.as_ref()),
            health,
            own_namespace: own_namespace.to_owned(),
        }
    }

    /// The pods listed on one node, as the drain reads them.
    pub fn read<'p>(&self, pods: impl IntoIterator<Item = &'p Pod>) -> Vec<PodInfo> {
        let keep = Keep {
            protected: self.protected.as_ref(),
            rules: &self.rules,
            own_namespace: &self.own_namespace,
        };
        classify(pods, &keep, self.health.as_ref())
    }
}

/// The Skyhook's cordon choice for nodes that wait for protected pods (validation refuses a
/// value it does not know, so one never reaches here).
pub fn protected_cordon(sk: &Skyhook) -> schema::ProtectedCordon {
    let raw = sk
        .annotations()
        .get(schema::NON_INTERRUPT_CORDON_ANNOTATION);
    schema::ProtectedCordon::of(raw.map(String::as_str)).unwrap_or_default()
}

/// The `podNonInterruptLabels` selector; `None` when empty (an empty selector protects nothing).
fn protection(selector: &LabelSelector) -> Option<Selector> {
    let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    if empty {
        None
    } else {
        Selector::try_from(selector.clone()).ok()
    }
}

/// What decides whether a pod is drained.
struct Keep<'a> {
    protected: Option<&'a Selector>,
    rules: &'a DrainRules,
    own_namespace: &'a str,
}

/// Classifies the pods of one node; finished pods are left out (they hold nothing back).
fn classify<'p>(
    pods: impl IntoIterator<Item = &'p Pod>,
    keep: &Keep,
    health: Option<&PodGate>,
) -> Vec<PodInfo> {
    pods.into_iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            matches!(phase.unwrap_or("Pending"), "Running" | "Pending")
        })
        .map(|p| PodInfo {
            health: health.and_then(|g| g.read(p)),
            ..classify_one(p, keep)
        })
        .collect()
}

/// Never evicted, as `kubectl drain` decides: DaemonSet (unless `ignoreDaemonSets` is false)
/// and mirror pods, our own Jobs' pods, pods that tolerate the cordon and kube-system. Any other
/// pod already terminating is not evicted again but still holds the node until it is gone; one
/// `drainConfig` forbids draining (unmanaged without `force`, emptyDir without
/// `deleteEmptyDirData`) holds it while it runs.
fn classify_one(p: &Pod, keep: &Keep) -> PodInfo {
    let (protected, rules) = (keep.protected, keep.rules);
    let owned_by_ds =
        rules.ignore_daemon_sets && p.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = p.annotations().contains_key("kubernetes.io/config.mirror");
    let namespace = p.namespace().unwrap_or_default();
    let ours = namespace == keep.own_namespace && is_our_pod(p.labels());
    let tolerates = p
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| tolerates_cordon(ts));
    let kept = owned_by_ds || mirror || ours || tolerates || namespace == "kube-system";
    let terminating = !kept && p.metadata.deletion_timestamp.is_some();
    let unmanaged = !p
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true));
    let empty_dir = p
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.empty_dir.is_some()));
    let unmovable = if kept || terminating {
        None
    } else if unmanaged && !rules.force {
        Some("no controller owns it and drainConfig.force is false")
    } else if empty_dir && !rules.delete_empty_dir_data {
        Some("it uses emptyDir and drainConfig.deleteEmptyDirData is false")
    } else {
        None
    };
    PodInfo {
        protected: protected.is_some_and(|s| s.matches(p.labels())),
        evictable: !kept && !terminating && unmovable.is_none(),
        terminating,
        unmovable,
        namespace,
        name: p.name_any(),
        health: None,
    }
}

/// A stage, interrupt or health check pod of either API, by its labels: a name and a package or
/// a stage under one prefix. A workload that merely carries a `name` label of ours (anyone can
/// set one) is drained like any other pod, as upstream drains it.
fn is_our_pod(labels: &BTreeMap<String, String>) -> bool {
    let has = |api: Api, key: &str| labels.contains_key(api.local(key).as_ref());
    Api::ALL.into_iter().any(|api| {
        has(api, schema::NAME_LABEL)
            && (has(api, schema::PACKAGE_LABEL) || has(api, schema::STAGE_LABEL))
    })
}

/// What the drain needs before an interrupt (§3.9.1 step 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Cordoned and empty of evictable and protected pods.
    Ready,
    /// Cordon first (persisted before anything runs).
    Cordon,
    /// The pods of the node are not known yet (listed on the next pass).
    Listing,
    /// Protected pods still run: wait, never evict them.
    Protected(Vec<String>),
    /// Pods `drainConfig` forbids draining still run (`ns/name: why`): wait, evict nothing
    /// (as `kubectl drain` refuses the whole node).
    Unmovable(Vec<String>),
    /// Evict these (namespace, name) and wait.
    Evict(Vec<(String, String)>),
    /// Evicted pods are still terminating (`ns/name`): wait until they are gone.
    Terminating(Vec<String>),
}

/// The pods matching `podNonInterruptLabels` (`ns/name`), sorted.
pub fn protected_pods(pods: &[PodInfo]) -> Vec<String> {
    let mut out: Vec<String> = pods
        .iter()
        .filter(|p| p.protected)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    out.sort();
    out
}

/// Decides the drain of a node: cordon, then wait for protected pods, then evict the rest.
/// `late`: the `pods-gone` cordon choice, where the protected pods are waited for before the
/// cordon (and checked again after it, as one may have started in between).
pub fn readiness(cordoned: bool, pods: Option<&[PodInfo]>, late: bool) -> Readiness {
    if !cordoned && !late {
        return Readiness::Cordon;
    }
    let Some(pods) = pods else {
        return Readiness::Listing;
    };
    let protected = protected_pods(pods);
    if !protected.is_empty() {
        return Readiness::Protected(protected);
    }
    if !cordoned {
        return Readiness::Cordon;
    }
    let unmovable: Vec<String> = pods
        .iter()
        .filter_map(|p| Some(format!("{}/{}: {}", p.namespace, p.name, p.unmovable?)))
        .collect();
    if !unmovable.is_empty() {
        return Readiness::Unmovable(unmovable);
    }
    let evict: Vec<(String, String)> = pods
        .iter()
        .filter(|p| p.evictable)
        .map(|p| (p.namespace.clone(), p.name.clone()))
        .collect();
    if !evict.is_empty() {
        return Readiness::Evict(evict);
    }
    let terminating: Vec<String> = pods
        .iter()
        .filter(|p| p.terminating)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    if terminating.is_empty() {
        Readiness::Ready
    } else {
        Readiness::Terminating(terminating)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A pod `ns/name` from its metadata, tolerations and phase (`None`: no status at all).
    fn pod(meta: Value, tolerations: Value, phase: Option<&str>) -> Pod {
        let mut v = json!({
            "metadata": {"name": "p", "namespace": "apps"},
            "spec": {"containers": [], "tolerations": tolerations},
        });
        if let (Some(m), Some(extra)) = (v["metadata"].as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        if let Some(phase) = phase {
            v["status"] = json!({"phase": phase});
        }
        serde_json::from_value(v).expect("pod")
    }

    fn selector(v: Value) -> LabelSelector {
        serde_json::from_value(v).expect("selector")
    }

    #[test]
    fn classify_like_kubectl_drain() {
        let owner = |kind: &str| json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u"}]});
        let critical = json!({"labels": {"critical": "yes"}});
        let cordon = json!([{"key": schema::UNSCHEDULABLE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]);
        let protect = protection(&selector(json!({"matchLabels": {"critical": "yes"}})));
        // (case, metadata, tolerations, phase, protected by podNonInterruptLabels,
        //  Some((protected, evictable)) or None when left out)
        let cases = [
            (
                "running pod is evicted",
                json!({}),
                json!([]),
                Some("Running"),
                true,
                Some((false, true)),
            ),
            (
                "pending pod is evicted",
                json!({}),
                json!([]),
                Some("Pending"),
                true,
                Some((false, true)),
            ),
            (
                "pod without a phase counts as pending",
                json!({}),
                json!([]),
                None,
                true,
                Some((false, true)),
            ),
            (
                "succeeded pod left out",
                json!({}),
                json!([]),
                Some("Succeeded"),
                true,
                None,
            ),
            (
                "failed pod left out",
                json!({}),
                json!([]),
                Some("Failed"),
                true,
                None,
            ),
            (
                "DaemonSet pod kept",
                owner("DaemonSet"),
                json!([]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "ReplicaSet pod evicted",
                owner("ReplicaSet"),
                json!([]),
                Some("Running"),
                true,
                Some((false, true)),
            ),
            (
                "mirror pod kept",
                json!({"annotations": {"kubernetes.io/config.mirror": "abc"}}),
                json!([]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "our own stage pod kept",
                json!({"namespace": "skyhook", "labels": {schema::NAME_LABEL: "sh", schema::PACKAGE_LABEL: "p-1"}}),
                json!([]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "a NodeWright's stage pod kept",
                json!({"namespace": "skyhook", "labels": {"nodewright.nvidia.com/name": "nw", "nodewright.nvidia.com/package": "p-1"}}),
                json!([]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "our own health check pod kept",
                json!({"namespace": "skyhook", "labels": {schema::NAME_LABEL: "sh", schema::STAGE_LABEL: "health-check"}}),
                json!([]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "a workload with our name label is evicted",
                json!({"labels": {schema::NAME_LABEL: "sh"}}),
                json!([]),
                Some("Running"),
                true,
                Some((false, true)),
            ),
            (
                "a workload with our name label in our namespace is evicted",
                json!({"namespace": "skyhook", "labels": {schema::NAME_LABEL: "sh"}}),
                json!([]),
                Some("Running"),
                true,
                Some((false, true)),
            ),
            (
                "a look-alike stage pod elsewhere is evicted",
                json!({"labels": {schema::NAME_LABEL: "sh", schema::PACKAGE_LABEL: "p-1"}}),
                json!([]),
                Some("Running"),
                true,
                Some((false, true)),
            ),
            (
                "pod tolerating the cordon kept",
                json!({}),
                cordon.clone(),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "pod tolerating everything kept",
                json!({}),
                json!([{"operator": "Exists"}]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "pod tolerating another taint evicted",
                json!({}),
                json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]),
                Some("Running"),
                true,
                Some((false, true)),
            ),
            (
                "kube-system kept",
                json!({"namespace": "kube-system"}),
                json!([]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "terminating pod: not evicted again (it holds the node: readiness)",
                json!({"deletionTimestamp": "2024-01-01T00:00:00Z"}),
                json!([]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "terminating DaemonSet pod kept",
                json!({"deletionTimestamp": "2024-01-01T00:00:00Z", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "o", "uid": "u"}]}),
                json!([]),
                Some("Running"),
                true,
                Some((false, false)),
            ),
            (
                "protected running pod",
                critical.clone(),
                json!([]),
                Some("Running"),
                true,
                Some((true, true)),
            ),
            (
                "protected pending pod",
                critical.clone(),
                json!([]),
                Some("Pending"),
                true,
                Some((true, true)),
            ),
            (
                "protected DaemonSet pod is still protected",
                json!({"labels": {"critical": "yes"}, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "o", "uid": "u"}]}),
                json!([]),
                Some("Running"),
                true,
                Some((true, false)),
            ),
            (
                "another label value is not protected",
                json!({"labels": {"critical": "no"}}),
                json!([]),
                Some("Running"),
                true,
                Some((false, true)),
            ),
            (
                "protected but succeeded: left out",
                critical.clone(),
                json!([]),
                Some("Succeeded"),
                true,
                None,
            ),
            (
                "no selector protects nothing",
                critical.clone(),
                json!([]),
                Some("Running"),
                false,
                Some((false, true)),
            ),
        ];
        for (name, meta, tolerations, phase, with_selector, want) in cases {
            let p = pod(meta, tolerations, phase);
            let sel = if with_selector {
                protect.as_ref()
            } else {
                None
            };
            let rules = DrainRules::default();
            let keep = Keep {
                protected: sel,
                rules: &rules,
                own_namespace: "skyhook",
            };
            let got = classify([&p], &keep, None);
            match want {
                None => assert!(got.is_empty(), "case: {name}: {got:?}"),
                Some((protected, evictable)) => {
                    assert_eq!(got.len(), 1, "case: {name}");
                    let info = &got[0];
                    assert_eq!(
                        (info.protected, info.evictable),
                        (protected, evictable),
                        "case: {name}"
                    );
                    assert_eq!(
                        info.terminating,
                        name.starts_with("terminating pod"),
                        "case: {name}"
                    );
                    assert_eq!(info.name, "p", "case: {name}");
                    let ns = p.namespace().unwrap_or_default();
                    assert_eq!(info.namespace, ns, "case: {name}");
                }
            }
        }
    }

    fn info(name: &str, protected: bool, evictable: bool) -> PodInfo {
        PodInfo {
            namespace: "ns".into(),
            name: name.into(),
            protected,
            evictable,
            terminating: false,
            unmovable: None,
            health: None,
        }
    }

    #[test]
    fn readiness_cordon_then_list_then_protected_then_evict() {
        let gone_soon = |name: &str| PodInfo {
            terminating: true,
            ..info(name, false, false)
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let pair = |n: &str| ("ns".to_string(), n.to_string());
        // (case, cordoned, pods, readiness)
        let cases = [
            (
                "not cordoned: cordon first",
                false,
                Some(vec![info("a", true, true)]),
                Readiness::Cordon,
            ),
            (
                "not cordoned, pods unknown: cordon first",
                false,
                None,
                Readiness::Cordon,
            ),
            (
                "cordoned, pods not listed yet",
                true,
                None,
                Readiness::Listing,
            ),
            ("cordoned and empty", true, Some(vec![]), Readiness::Ready),
            (
                "only pods that stay (DaemonSet, kube-system...)",
                true,
                Some(vec![info("ds", false, false), info("sys", false, false)]),
                Readiness::Ready,
            ),
            (
                "protected pods hold before any eviction",
                true,
                Some(vec![
                    info("web", false, true),
                    info("db", true, true),
                    info("ds", true, false),
                ]),
                Readiness::Protected(s(&["ns/db", "ns/ds"])),
            ),
            (
                "evictable pods evicted",
                true,
                Some(vec![
                    info("a", false, true),
                    info("ds", false, false),
                    info("b", false, true),
                ]),
                Readiness::Evict(vec![pair("a"), pair("b")]),
            ),
            (
                "evictions first, then the terminating ones are awaited",
                true,
                Some(vec![gone_soon("old"), info("a", false, true)]),
                Readiness::Evict(vec![pair("a")]),
            ),
            (
                "evicted pods still terminating hold the interrupt",
                true,
                Some(vec![gone_soon("a"), info("ds", false, false)]),
                Readiness::Terminating(s(&["ns/a"])),
            ),
        ];
        for (name, cordoned, pods, want) in cases {
            assert_eq!(
                readiness(cordoned, pods.as_deref(), false),
                want,
                "case: {name}"
            );
        }
    }

    #[test]
    fn cordon_once_the_protected_pods_are_gone() {
        let protected = vec![info("train", true, false), info("web", false, true)];
        let cases = [
            ("not listed yet", false, None, Readiness::Listing),
            (
                "a protected pod runs: wait uncordoned",
                false,
                Some(protected.clone()),
                Readiness::Protected(vec!["ns/train".into()]),
            ),
            (
                "gone: cordon",
                false,
                Some(vec![info("web", false, true)]),
                Readiness::Cordon,
            ),
            (
                "cordoned, and one started in between: wait again",
                true,
                Some(protected),
                Readiness::Protected(vec!["ns/train".into()]),
            ),
            (
                "cordoned and clear: evict",
                true,
                Some(vec![info("web", false, true)]),
                Readiness::Evict(vec![("ns".into(), "web".into())]),
            ),
        ];
        for (name, cordoned, pods, want) in cases {
            assert_eq!(
                readiness(cordoned, pods.as_deref(), true),
                want,
                "case: {name}"
            );
        }
    }

    #[test]
    fn protection_of_an_empty_selector_is_none() {
        // (case, selector, labels of a pod, Some(matches) or None when nothing is protected)
        let cases = [
            (
                "empty selector",
                json!({}),
                json!({"critical": "yes"}),
                None,
            ),
            (
                "empty matchLabels",
                json!({"matchLabels": {}}),
                json!({"critical": "yes"}),
                None,
            ),
            (
                "empty matchExpressions",
                json!({"matchExpressions": []}),
                json!({"critical": "yes"}),
                None,
            ),
            (
                "matchLabels, matching pod",
                json!({"matchLabels": {"critical": "yes"}}),
                json!({"critical": "yes"}),
                Some(true),
            ),
            (
                "matchLabels, other value",
                json!({"matchLabels": {"critical": "yes"}}),
                json!({"critical": "no"}),
                Some(false),
            ),
            (
                "matchExpressions Exists",
                json!({"matchExpressions": [{"key": "critical", "operator": "Exists"}]}),
                json!({"critical": "anything"}),
                Some(true),
            ),
            (
                "matchExpressions Exists, unlabelled pod",
                json!({"matchExpressions": [{"key": "critical", "operator": "Exists"}]}),
                json!({}),
                Some(false),
            ),
        ];
        for (name, sel, labels, want) in cases {
            let got = protection(&selector(sel));
            let labels: std::collections::BTreeMap<String, String> =
                serde_json::from_value(labels).expect("labels");
            assert_eq!(got.map(|s| s.matches(&labels)), want, "case: {name}");
        }
    }

    #[test]
    fn drain_config_changes_what_is_drained() {
        let controlled = |kind: &str| json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u", "controller": true}]});
        let mut with_empty_dir = pod(controlled("ReplicaSet"), json!([]), Some("Running"));
        if let Some(spec) = with_empty_dir.spec.as_mut() {
            spec.volumes = Some(vec![
                serde_json::from_value(json!({"name": "scratch", "emptyDir": {}})).unwrap(),
            ]);
        }
        let bare = pod(json!({}), json!([]), Some("Running"));
        let ds = pod(controlled("DaemonSet"), json!([]), Some("Running"));
        let config = |v: Value| DrainRules::of(Some(&serde_json::from_value(v).unwrap()));
        fn keep(rules: &DrainRules) -> Keep<'_> {
            Keep {
                protected: None,
                rules,
                own_namespace: "skyhook",
            }
        }
        let read = |p: &Pod, rules: &DrainRules| {
            let i = classify([p], &keep(rules), None).remove(0);
            (i.evictable, i.unmovable.is_some())
        };
        let v13 = DrainRules::default();
        assert_eq!(DrainRules::of(None), v13);
        assert_eq!(
            config(json!({})),
            v13,
            "every field absent is the v0.13 drain"
        );
        // (case, pod, rules, (evictable, unmovable))
        let cases = [
            (
                "v0.13: an unmanaged pod is evicted",
                &bare,
                v13,
                (true, false),
            ),
            (
                "force: false holds an unmanaged pod",
                &bare,
                config(json!({"force": false})),
                (false, true),
            ),
            (
                "v0.13: emptyDir data is drained",
                &with_empty_dir,
                v13,
                (true, false),
            ),
            (
                "deleteEmptyDirData: false holds it",
                &with_empty_dir,
                config(json!({"deleteEmptyDirData": false})),
                (false, true),
            ),
            ("v0.13: a DaemonSet pod stays", &ds, v13, (false, false)),
            (
                "ignoreDaemonSets: false evicts it",
                &ds,
                config(json!({"ignoreDaemonSets": false})),
                (true, false),
            ),
        ];
        for (case, p, rules, want) in cases {
            assert_eq!(read(p, &rules), want, "{case}");
        }
        let r = config(json!({"disableEviction": true, "timeout": "2m", "gracePeriod": "1.5s"}));
        assert!(r.delete);
        assert_eq!(r.timeout, Some(std::time::Duration::from_secs(120)));
        assert_eq!(r.grace_seconds, Some(2), "rounded up");
        assert_eq!(
            config(json!({"timeout": "0s"})).timeout,
            None,
            "0: no limit"
        );
        // Unmovable pods hold the drain before anything is evicted, naming why.
        let no_force = config(json!({"force": false}));
        let pods = classify([&bare, &with_empty_dir], &keep(&no_force), None);
        match readiness(true, Some(&pods), false) {
            Readiness::Unmovable(why) => {
                assert_eq!(why.len(), 1);
                assert!(why[0].contains("drainConfig.force"), "{why:?}");
            }
            other => panic!("{other:?}"),
        }
    }
}
