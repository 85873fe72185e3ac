//! Package configMaps (§3.12): which keys changed since the ConfigMap was last written (kept in
//! `status.configUpdates`, so configInterrupts know which keys moved), and the ConfigMaps to
//! write.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use super::facts::NodeFacts;
use super::spec::{config_hash, config_part};
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
    for p in sk.spec.packages.values() {
        let cm_name = schema::package_configmap_name(&sk.name_any(), &p.name, &p.version);
        let Some(current) = configmaps.iter().find(|c| c.name_any() == cm_name) else {
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
        // A node that has not applied the data being replaced is still in the last rollout.
        let old_hash = config_hash(&old);
        let key = schema::package_key(&p.name, &p.version);
        let rolling = nodes.iter().any(|n| {
            n.applied
                .get(&key)
                .is_some_and(|h| config_part(h) != old_hash)
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
