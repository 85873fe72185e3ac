//! Package configMaps (§3.12): which keys changed since the ConfigMap was last written (kept in
//! `status.configUpdates`, so configInterrupts know which keys moved), and the ConfigMaps to
//! write.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use super::facts::NodeFacts;
use super::spec::{SpecView, config_hash, config_part};
use crate::crd::{Skyhook, SkyhookStatus};
use crate::jobs;
use crate::schema;
use crate::settings::Config;

/// `status.configUpdates` for this pass. A new change while the last one is still rolling out
/// adds its keys; otherwise it replaces them.
pub fn config_updates(
    sk: &Skyhook,
    configmaps: &[Arc<ConfigMap>],
    prior: &SkyhookStatus,
    nodes: &[NodeFacts],
) -> BTreeMap<String, Vec<String>> {
    let mut updates = prior.config_updates.clone();
    updates.retain(|pkg, _| sk.spec.packages.contains_key(pkg));
    // Completion as the last rollout defined it: its configInterrupts still owed count.
    let last = SpecView::new(&sk.spec.packages, &[], &prior.config_updates);
    for p in sk.spec.packages.values() {
        let cm_name = schema::package_configmap_name(&sk.name_any(), &p.name, &p.version);
        let Some(current) = configmaps.iter().find(|c| c.name_any() == cm_name) else {
            // A version whose ConfigMap was never written has had no config change: keys kept
            // from another version would replace its own interrupt by configInterrupts (the
            // reference drops them on every version change for that reason).
            updates.remove(&p.name);
            continue;
        };
        let old = current.data.clone().unwrap_or_default();
        let changed: Vec<String> = p
            .config_map
            .iter()
            .filter(|(k, v)| old.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect();
        if changed.is_empty() {
            continue;
        }
        // A node that has not applied the data being replaced, or still owes the interrupt of
        // the last change, is still in the last rollout.
        let old_hash = config_hash(&old);
        let key = schema::package_key(&p.name, &p.version);
        let rolling = nodes.iter().any(|n| {
            let stale = n
                .applied
                .get(&key)
                .is_some_and(|h| config_part(h) != old_hash);
            let owing =
                n.prior.get(&p.name, &p.version).is_some() && !last.package_complete(&n.prior, p);
            stale || owing
        });
        let entry = updates.entry(p.name.clone()).or_default();
        if !rolling {
            entry.clear();
        }
        for k in changed {
            if !entry.contains(&k) {
                entry.push(k);
            }
        }
        entry.sort();
    }
    updates
}

/// Package ConfigMaps whose data differs from the spec.
pub fn package_configmaps(
    sk: &Skyhook,
    current: &[Arc<ConfigMap>],
    cfg: &Config,
) -> Vec<ConfigMap> {
    sk.spec
        .packages
        .values()
        .filter(|p| !p.config_map.is_empty())
        .map(|p| jobs::package_configmap(sk, p, cfg))
        .filter(|cm| {
            let stored = current.iter().find(|c| c.name_any() == cm.name_any());
            stored.and_then(|c| c.data.as_ref()) != cm.data.as_ref()
        })
        .collect()
}

/// Package ConfigMaps the spec no longer asks for (a version bumped or a package removed, or
/// its `configMap` emptied), that no unfinished Job of that version may still mount: the
/// reference deletes them in the pass that writes the new ones; kept, they would pile up until
/// the Skyhook is deleted.
pub fn stale_package_configmaps(
    sk: &Skyhook,
    current: &[Arc<ConfigMap>],
    jobs: &[Arc<crate::jobs::JobView>],
) -> Vec<String> {
    let wanted = |name: &str, version: &str| {
        sk.spec
            .packages
            .get(name)
            .is_some_and(|p| p.version == version && !p.config_map.is_empty())
    };
    current
        .iter()
        .filter_map(|cm| {
            let a = cm.metadata.annotations.as_ref()?;
            let name = a.get(schema::PACKAGE_NAME_ANNOTATION)?;
            let version = a.get(schema::PACKAGE_VERSION_ANNOTATION)?;
            let mounted = jobs
                .iter()
                .any(|j| j.package == *name && j.version == *version && !j.finished());
            (!wanted(name, version) && !mounted && cm.metadata.deletion_timestamp.is_none())
                .then(|| cm.name_any())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    use crate::plan::NodeView;
    use crate::plan::fixtures::{config, entry, facts, node, node_state, package, skyhook};
    use crate::schema::{NodeState, Stage, State};

    /// Skyhook `sh` with packages `name -> (version, configMap)`.
    fn with_packages(packages: &[(&str, &str, Value)]) -> Skyhook {
        packages
            .iter()
            .fold(skyhook("sh").uid("u1"), |sk, (n, v, cm)| {
                let p = package(n).version(v).image("img");
                sk.package(p.with(json!({"configMap": cm})))
            })
            .build()
    }

    fn configmap(name: &str, data: Option<Value>) -> Arc<ConfigMap> {
        let mut v = json!({"metadata": {"name": name, "namespace": "skyhook"}});
        if let Some(d) = data {
            v["data"] = d;
        }
        Arc::new(serde_json::from_value(v).expect("configmap"))
    }

    fn data(v: &Value) -> BTreeMap<String, String> {
        serde_json::from_value(v.clone()).expect("data")
    }

    fn updates(v: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        v.iter()
            .map(|(k, keys)| (k.to_string(), keys.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    /// What a pass knows of node `n`: what it applied, and its stored state.
    fn progress(
        node: &NodeView,
        applied: BTreeMap<String, String>,
        prior: NodeState,
    ) -> NodeFacts<'_> {
        NodeFacts {
            applied,
            prior,
            ..facts(node)
        }
    }

    #[test]
    fn config_updates_table() {
        let d0 = json!({"a.conf": "0"});
        let d1 = json!({"a.conf": "1"});
        let d2 = json!({"a.conf": "2", "b.conf": "1"});
        let applied = |version: &str, cm: &Value| {
            BTreeMap::from([(
                format!("p|{version}"),
                format!("000000000000.{}", config_hash(&data(cm))),
            )])
        };
        let none: BTreeMap<String, String> = BTreeMap::new();
        let cm_name = schema::package_configmap_name("sh", "p", "1.0.0");
        // (case, spec configMap of p@1.0.0, ConfigMap data in the cluster (None: absent),
        //  prior configUpdates, applied records of the nodes, configUpdates)
        let cases: Vec<(
            &str,
            Value,
            Option<Value>,
            Vec<(&str, &[&str])>,
            Vec<BTreeMap<String, String>>,
            Vec<(&str, &[&str])>,
        )> = vec![
            (
                "a new key is recorded",
                json!({"a.conf": "1", "b.conf": "1"}),
                Some(d1.clone()),
                vec![],
                vec![],
                vec![("p", &["b.conf"])],
            ),
            (
                "a changed value is recorded",
                d0.clone(),
                Some(d1.clone()),
                vec![],
                vec![],
                vec![("p", &["a.conf"])],
            ),
            (
                "a removed key is not recorded (as in the reference)",
                json!({"a.conf": "1"}),
                Some(json!({"a.conf": "1", "b.conf": "1"})),
                vec![],
                vec![],
                vec![],
            ),
            (
                "unchanged data keeps the prior record",
                d1.clone(),
                Some(d1.clone()),
                vec![("p", &["x"])],
                vec![],
                vec![("p", &["x"])],
            ),
            (
                "no ConfigMap of this version: the prior record is dropped",
                d1.clone(),
                None,
                vec![("p", &["x"])],
                vec![],
                vec![],
            ),
            (
                "replaced when every node applied the data being replaced",
                d2.clone(),
                Some(d1.clone()),
                vec![("p", &["x"])],
                vec![applied("1.0.0", &d1), applied("1.0.0", &d1)],
                vec![("p", &["a.conf", "b.conf"])],
            ),
            (
                "accumulated while a node still has the older config",
                d2.clone(),
                Some(d1.clone()),
                vec![("p", &["x"])],
                vec![applied("1.0.0", &d1), applied("1.0.0", &d0)],
                vec![("p", &["a.conf", "b.conf", "x"])],
            ),
            (
                "accumulated keys are not repeated",
                d2.clone(),
                Some(d1.clone()),
                vec![("p", &["b.conf"])],
                vec![applied("1.0.0", &d0)],
                vec![("p", &["a.conf", "b.conf"])],
            ),
            (
                "a node without a record does not hold the last rollout",
                d2.clone(),
                Some(d1.clone()),
                vec![("p", &["x"])],
                vec![none.clone()],
                vec![("p", &["a.conf", "b.conf"])],
            ),
            (
                "a record of another version does not hold the last rollout",
                d2.clone(),
                Some(d1.clone()),
                vec![("p", &["x"])],
                vec![applied("0.9.0", &d0)],
                vec![("p", &["a.conf", "b.conf"])],
            ),
            (
                "packages no longer in the spec are dropped",
                d1.clone(),
                Some(d1.clone()),
                vec![("gone", &["k"]), ("p", &["x"])],
                vec![],
                vec![("p", &["x"])],
            ),
        ];
        let node = node("n").build();
        for (name, spec_cm, cluster, prior, nodes, want) in cases {
            let sk = with_packages(&[("p", "1.0.0", spec_cm)]);
            let cms: Vec<Arc<ConfigMap>> = cluster
                .into_iter()
                .map(|d| configmap(&cm_name, Some(d)))
                .collect();
            let prior = SkyhookStatus {
                config_updates: updates(&prior),
                ..SkyhookStatus::default()
            };
            let facts: Vec<NodeFacts> = nodes
                .into_iter()
                .map(|a| progress(&node, a, NodeState::default()))
                .collect();
            assert_eq!(
                config_updates(&sk, &cms, &prior, &facts),
                updates(&want),
                "case: {name}"
            );
        }
    }

    #[test]
    fn config_updates_are_dropped_when_the_version_changes() {
        // p went 1.0.0 -> 2.0.0; the last config rollout of 1.0.0 recorded a.conf. The reference
        // removes the record whenever the version changes ("or else the package interrupt may
        // be skipped"); here it stays, so SpecView::interrupts(p@2.0.0) returns the matched
        // configInterrupts (none) instead of p's reboot.
        let sk = with_packages(&[("p", "2.0.0", json!({"a.conf": "1"}))]);
        let old_cm = configmap(
            &schema::package_configmap_name("sh", "p", "1.0.0"),
            Some(json!({"a.conf": "1"})),
        );
        let prior = SkyhookStatus {
            config_updates: updates(&[("p", &["a.conf"])]),
            ..SkyhookStatus::default()
        };
        let node = node("n").build();
        let state = node_state([entry("p", Stage::Config, State::Complete)]);
        let applied = BTreeMap::from([(
            "p|1.0.0".to_string(),
            format!(
                "000000000000.{}",
                config_hash(&data(&json!({"a.conf": "1"})))
            ),
        )]);
        let facts = vec![progress(&node, applied, state)];
        let got = config_updates(&sk, &[old_cm], &prior, &facts);
        assert_eq!(
            got.get("p"),
            None,
            "case: upgrade to 2.0.0 keeps 1.0.0's keys"
        );
    }

    #[test]
    fn config_updates_accumulate_while_a_node_waits_for_its_interrupt() {
        // Change 1 (a.conf) is applied on the node: its applied config part is the current
        // ConfigMap's, but its interrupt for a.conf is still pending. Change 2 (b.conf) then
        // replaces the keys, so interrupts(p) no longer matches a.conf and the node never runs
        // the service restart change 1 needed.
        let d1 = json!({"a.conf": "1", "b.conf": "0"});
        let d2 = json!({"a.conf": "1", "b.conf": "1"});
        let sk = with_packages(&[("p", "1.0.0", d2)]);
        let cm = configmap(
            &schema::package_configmap_name("sh", "p", "1.0.0"),
            Some(d1.clone()),
        );
        let prior = SkyhookStatus {
            config_updates: updates(&[("p", &["a.conf"])]),
            ..SkyhookStatus::default()
        };
        let node = node("n").build();
        let state = node_state([entry("p", Stage::Interrupt, State::InProgress)]);
        let applied = BTreeMap::from([(
            "p|1.0.0".to_string(),
            format!("000000000000.{}", config_hash(&data(&d1))),
        )]);
        let facts = vec![progress(&node, applied, state)];
        assert_eq!(
            config_updates(&sk, &[cm], &prior, &facts),
            updates(&[("p", &["a.conf", "b.conf"])]),
            "case: node mid-interrupt of the last rollout"
        );
    }

    #[test]
    fn package_configmaps_only_the_differing_ones() {
        let cfg = config();
        let name = |p: &str| schema::package_configmap_name("sh", p, "1.0.0");
        let same = json!({"a": "1"});
        // (case, packages as (name, configMap), ConfigMaps in the cluster, names written)
        let cases: Vec<(
            &str,
            Vec<(&str, Value)>,
            Vec<(&str, Option<Value>)>,
            Vec<&str>,
        )> = vec![
            (
                "no configMap: nothing",
                vec![("p", json!({}))],
                vec![],
                vec![],
            ),
            (
                "missing ConfigMap is created",
                vec![("p", same.clone())],
                vec![],
                vec!["p"],
            ),
            (
                "same data: nothing",
                vec![("p", same.clone())],
                vec![("p", Some(same.clone()))],
                vec![],
            ),
            (
                "other data: written",
                vec![("p", json!({"a": "2"}))],
                vec![("p", Some(same.clone()))],
                vec!["p"],
            ),
            (
                "an extra key in the cluster: written",
                vec![("p", same.clone())],
                vec![("p", Some(json!({"a": "1", "b": "2"})))],
                vec!["p"],
            ),
            (
                "a ConfigMap without data: written",
                vec![("p", same.clone())],
                vec![("p", None)],
                vec!["p"],
            ),
            (
                "two packages, only the differing one",
                vec![("p", same.clone()), ("q", json!({"b": "2"}))],
                vec![("p", Some(same.clone())), ("q", Some(json!({"b": "1"})))],
                vec!["q"],
            ),
        ];
        for (case, packages, cluster, want) in cases {
            let packages: Vec<(&str, &str, Value)> = packages
                .into_iter()
                .map(|(n, cm)| (n, "1.0.0", cm))
                .collect();
            let sk = with_packages(&packages);
            let cms: Vec<Arc<ConfigMap>> = cluster
                .into_iter()
                .map(|(p, d)| configmap(&name(p), d))
                .collect();
            let got = package_configmaps(&sk, &cms, &cfg);
            let names: Vec<String> = got.iter().map(|c| c.name_any()).collect();
            let want_names: Vec<String> = want.iter().map(|p| name(p)).collect();
            assert_eq!(names, want_names, "case: {case}");
            for cm in &got {
                let p = &sk.spec.packages[cm
                    .annotations()
                    .get(schema::PACKAGE_NAME_ANNOTATION)
                    .expect("package annotation")];
                assert_eq!(cm.data.as_ref(), Some(&p.config_map), "case: {case}");
                assert_eq!(
                    cm.namespace().as_deref(),
                    Some(cfg.namespace.as_str()),
                    "case: {case}"
                );
            }
        }
    }

    #[test]
    fn configmaps_of_versions_no_longer_wanted_are_deleted_unless_mounted() {
        use crate::jobs::{JobView, Outcome};
        use crate::plan::fixtures::job;
        let cfg = config();
        let sk = with_packages(&[("p", "2.0.0", json!({"a": "1"})), ("q", "1.0.0", json!({}))]);
        let old = with_packages(&[
            ("p", "1.0.0", json!({"a": "0"})),
            ("q", "1.0.0", json!({"b": "1"})),
            ("gone", "1.0.0", json!({"c": "1"})),
        ]);
        let cms: Vec<Arc<ConfigMap>> = old
            .spec
            .packages
            .values()
            .chain(sk.spec.packages.values().filter(|p| p.name == "p"))
            .map(|p| Arc::new(jobs::package_configmap(&sk, p, &cfg)))
            .collect();
        let names = |jobs: &[Arc<JobView>]| {
            let mut v = stale_package_configmaps(&sk, &cms, jobs);
            v.sort();
            v
        };
        // p 1.0.0 (bumped), q 1.0.0 (its configMap emptied) and gone 1.0.0 (removed) go; p
        // 2.0.0 stays.
        assert_eq!(names(&[]), ["sh-gone-1.0.0", "sh-p-1.0.0", "sh-q-1.0.0"]);
        // A running Job of p 1.0.0 may mount it: kept until it ends.
        let p1 = old.spec.packages["p"].clone();
        let running = Arc::new(job(&p1, Stage::Config).build());
        assert_eq!(names(&[running]), ["sh-gone-1.0.0", "sh-q-1.0.0"]);
        let done = Arc::new(
            job(&p1, Stage::Config)
                .outcome(Outcome::Complete {
                    at: jiff::Timestamp::UNIX_EPOCH,
                })
                .build(),
        );
        assert_eq!(names(&[done]).len(), 3);
    }
}
