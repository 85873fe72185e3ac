//! The spec as the planner reads it, and the one spec hash that decides re-runs.
//!
//! A package's hash is `<install>.<config>`: the install part covers everything that changes
//! what its stage Jobs run or how they are scheduled (image, containerSHA, env, resources,
//! agentImageOverride, gracefulShutdown and the Skyhook's additionalTolerations), the config part
//! its configMap data. A node whose recorded hash differs re-runs the package from `apply` (install
//! part changed) or `config` (only the config part changed); a running Job whose hash differs is
//! replaced. Operator settings (AGENT_IMAGE, the pull secret, host paths) are left out on purpose:
//! upgrading or reconfiguring the operator must not re-run, and possibly reboot, every node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use serde_json::{Map, Value, json};

use crate::crd::Package;
use crate::schema::{self, Interrupt, NodeState, Stage, State};

/// Hex digits kept of each part of the hash.
const PART_LEN: usize = 12;

/// The single spec hash of `p` (module docs). Fields at their default are left out of the
/// hashed document, so adding a field here never changes the hash of packages that do not use
/// it (nodes recorded by an earlier version of the operator stay current).
pub fn spec_hash(p: &Package, tolerations: &[Toleration]) -> String {
    let mut install = Map::new();
    install.insert("image".into(), json!(p.image));
    install.insert("containerSHA".into(), json!(p.container_sha));
    install.insert("env".into(), json!(p.env));
    install.insert("resources".into(), json!(p.resources));
    if let Some(agent) = p.agent_image_override.as_deref().filter(|a| !a.is_empty()) {
        install.insert("agentImageOverride".into(), json!(agent));
    }
    if let Some(grace) = p.graceful_shutdown.as_deref().filter(|g| !g.is_empty()) {
        install.insert("gracefulShutdown".into(), json!(grace));
    }
    if !tolerations.is_empty() {
        install.insert("additionalTolerations".into(), json!(tolerations));
    }
    let install = schema::sha256_hex(Value::Object(install).to_string(), PART_LEN);
    format!("{install}.{}", config_hash(&p.config_map))
}

/// The config part of [`spec_hash`].
pub fn config_hash(data: &BTreeMap<String, String>) -> String {
    schema::sha256_hex(json!(data).to_string(), PART_LEN)
}

/// The install part of a hash (before the dot).
pub fn install_part(hash: &str) -> &str {
    hash.split('.').next().unwrap_or_default()
}

/// The config part of a hash (after the dot).
pub fn config_part(hash: &str) -> &str {
    hash.split('.').nth(1).unwrap_or_default()
}

/// The spec as the node machine needs it: normalised packages and their current hashes.
pub struct SpecView<'a> {
    pub packages: &'a BTreeMap<String, Package>,
    pub spec_hashes: BTreeMap<String, String>,
    pub config_updates: &'a BTreeMap<String, Vec<String>>,
}

impl<'a> SpecView<'a> {
    pub fn new(
        packages: &'a BTreeMap<String, Package>,
        tolerations: &[Toleration],
        config_updates: &'a BTreeMap<String, Vec<String>>,
    ) -> Self {
        SpecView {
            packages,
            spec_hashes: packages
                .iter()
                .map(|(k, p)| (k.clone(), spec_hash(p, tolerations)))
                .collect(),
            config_updates,
        }
    }

    /// The current hash of spec package `name` (empty for packages not in the spec).
    pub fn hash_of(&self, name: &str) -> &str {
        self.spec_hashes.get(name).map_or("", String::as_str)
    }

    /// Interrupts that apply to `p` right now: while a config rollout is recorded for a package
    /// only its matching configInterrupts count (§3.2).
    pub fn interrupts(&self, p: &Package) -> Vec<Interrupt> {
        let Some(keys) = self.config_updates.get(&p.name).filter(|k| !k.is_empty()) else {
            return p.interrupt.iter().cloned().collect();
        };
        let mut out: Vec<Interrupt> = Vec::new();
        for (pattern, i) in &p.config_interrupts {
            let hit = keys
                .iter()
                .any(|k| schema::glob_match(pattern, k).unwrap_or(false));
            if hit && !out.contains(i) {
                out.push(i.clone());
            }
        }
        out
    }

    pub fn has_interrupt(&self, p: &Package) -> bool {
        !self.interrupts(p).is_empty()
    }

    pub fn package_complete(&self, state: &NodeState, p: &Package) -> bool {
        state.get(&p.name, &p.version).is_some_and(|e| {
            e.state == Some(State::Complete) && e.stage == Stage::terminal(self.has_interrupt(p))
        })
    }

    /// §3.2 nodeComplete: every spec package complete at its version, nothing left to uninstall.
    pub fn node_complete(&self, state: &NodeState) -> bool {
        let all_complete = self
            .packages
            .values()
            .all(|p| self.package_complete(state, p));
        let no_uninstall = state.iter().all(|(_, e)| e.stage != Stage::Uninstall);
        let no_strays = state.iter().all(|(_, e)| {
            self.packages
                .get(&e.name)
                .is_some_and(|p| p.version == e.version)
        });
        all_complete && no_uninstall && no_strays
    }

    /// Packages complete on the node whose spec changed since: the node is not complete.
    pub fn has_drift(&self, state: &NodeState, applied: &BTreeMap<String, String>) -> bool {
        self.packages.values().any(|p| {
            let key = schema::package_key(&p.name, &p.version);
            self.package_complete(state, p)
                && applied
                    .get(&key)
                    .is_some_and(|done| done != self.hash_of(&p.name))
        })
    }

    /// Complete at every package, with nothing drifted.
    pub fn settled(&self, state: &NodeState, applied: &BTreeMap<String, String>) -> bool {
        self.node_complete(state) && !self.has_drift(state, applied)
    }
}
