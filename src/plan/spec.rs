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
/// Whether the node completed package `p` at its version at least once, by the package's own
/// interrupt rule: its state says so now, or its `applied_` record kept the mark
/// ([`schema::installed_key`]) through a config re-run since.
pub fn installed(state: &NodeState, applied: &BTreeMap<String, String>, p: &Package) -> bool {
    applied.contains_key(&schema::installed_key(&p.name, &p.version))
        || state.get(&p.name, &p.version).is_some_and(|e| {
            e.state == Some(State::Complete) && e.stage == Stage::terminal(p.interrupt.is_some())
        })
}

pub fn config_part(hash: &str) -> &str {
    hash.split('.').nth(1).unwrap_or_default()
}

/// The spec as the node machine needs it: normalised packages and their current hashes.
pub struct SpecView<'a> {
    pub packages: &'a BTreeMap<String, Package>,
    pub spec_hashes: BTreeMap<String, String>,
    pub config_updates: &'a BTreeMap<String, Vec<String>>,
    /// `spec.serial`: one stage of one package at a time on each node.
    pub serial: bool,
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
            serial: false,
        }
    }

    /// With `spec.serial` as given.
    pub fn serial(self, serial: bool) -> Self {
        SpecView { serial, ..self }
    }

    /// The recorded config updates as one node owes them, when they differ (`None`: as
    /// recorded). A config change recorded while a node still installs a package at its version
    /// (it never completed it, by its state and its record) is no config-only change there: the
    /// node owes the package's own interrupt, not only the matching configInterrupts. Found by
    /// the fault campaign (issue 52): a driver's config edited mid-rollout let nodes that had
    /// only run apply finish at config, never rebooted.
    pub fn updates_for(
        &self,
        state: &NodeState,
        applied: &BTreeMap<String, String>,
    ) -> Option<BTreeMap<String, Vec<String>>> {
        let installing = |name: &String| {
            self.packages
                .get(name)
                .is_some_and(|p| !installed(state, applied, p))
        };
        let owed = |(name, keys): (&String, &Vec<String>)| !keys.is_empty() && installing(name);
        if !self.config_updates.iter().any(owed) {
            return None;
        }
        let mut updates = self.config_updates.clone();
        updates.retain(|name, _| !installing(name));
        Some(updates)
    }

    /// This view with `config_updates` replaced (one node's, from [`SpecView::updates_for`]).
    pub fn with_updates<'b>(
        &self,
        config_updates: &'b BTreeMap<String, Vec<String>>,
    ) -> SpecView<'b>
    where
        'a: 'b,
    {
        SpecView {
            packages: self.packages,
            spec_hashes: self.spec_hashes.clone(),
            config_updates,
            serial: self.serial,
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

    /// §3.2 nodeComplete: every spec package complete at its version (or, when its uninstall is
    /// requested, gone: upstream v0.16), nothing left to uninstall.
    pub fn node_complete(&self, state: &NodeState) -> bool {
        let all_complete = self.packages.values().all(|p| {
            if p.uninstall_requested() {
                state.get(&p.name, &p.version).is_none()
            } else {
                self.package_complete(state, p)
            }
        });
        let no_uninstall = state
            .iter()
            .all(|(_, e)| !matches!(e.stage, Stage::Uninstall | Stage::UninstallInterrupt));
        let no_strays = state.iter().all(|(_, e)| {
            self.packages
                .get(e.name.as_str())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::{entry_of, node_state, package, packages, service};
    use crate::schema::{InterruptType, PackageStatus};
    use serde_json::Value;
    use sha2::{Digest, Sha256};

    fn tolerations(v: Value) -> Vec<Toleration> {
        serde_json::from_value(v).expect("tolerations")
    }

    /// The hash as the operator wrote it before agentImageOverride, gracefulShutdown and the
    /// tolerations were covered, spelled out with SHA-256 directly.
    fn old_formula(p: &Package) -> String {
        let short = |s: String| -> String {
            Sha256::digest(s.as_bytes())
                .iter()
                .take(6)
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let install = short(
            json!({"image": p.image, "containerSHA": p.container_sha, "env": p.env, "resources": p.resources})
                .to_string(),
        );
        format!("{install}.{}", short(json!(p.config_map).to_string()))
    }

    /// `p`'s entry at `version`, which need not be the spec's.
    fn entry_at(p: &Package, version: &str, stage: Stage, state: State) -> PackageStatus {
        PackageStatus {
            version: version.into(),
            ..entry_of(p, stage, state)
        }
    }

    #[test]
    fn spec_hash_moves_with_what_the_jobs_run() {
        let resources = json!({"cpuRequest": "100m", "cpuLimit": "1", "memoryRequest": "64Mi", "memoryLimit": "128Mi"});
        let gpu = json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
        // (case, before, tolerations before, after, tolerations after, install part moves,
        //  config part moves)
        let cases = [
            (
                "image",
                json!({}),
                json!([]),
                json!({"image": "ghcr.io/y/p"}),
                json!([]),
                true,
                false,
            ),
            (
                "containerSHA",
                json!({}),
                json!([]),
                json!({"containerSHA": "sha256:0000000000000000000000000000000000000000000000000000000000000000"}),
                json!([]),
                true,
                false,
            ),
            (
                "env added",
                json!({}),
                json!([]),
                json!({"env": [{"name": "A", "value": "1"}]}),
                json!([]),
                true,
                false,
            ),
            (
                "env value",
                json!({"env": [{"name": "A", "value": "1"}]}),
                json!([]),
                json!({"env": [{"name": "A", "value": "2"}]}),
                json!([]),
                true,
                false,
            ),
            (
                "resources",
                json!({}),
                json!([]),
                json!({"resources": resources}),
                json!([]),
                true,
                false,
            ),
            (
                "agentImageOverride",
                json!({}),
                json!([]),
                json!({"agentImageOverride": "ghcr.io/x/agent:2"}),
                json!([]),
                true,
                false,
            ),
            (
                "gracefulShutdown",
                json!({}),
                json!([]),
                json!({"gracefulShutdown": "30s"}),
                json!([]),
                true,
                false,
            ),
            (
                "gracefulShutdown value",
                json!({"gracefulShutdown": "30s"}),
                json!([]),
                json!({"gracefulShutdown": "1m"}),
                json!([]),
                true,
                false,
            ),
            (
                "additionalTolerations added",
                json!({}),
                json!([]),
                json!({}),
                gpu.clone(),
                true,
                false,
            ),
            (
                "additionalTolerations changed",
                json!({}),
                gpu.clone(),
                json!({}),
                json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]),
                true,
                false,
            ),
            (
                "configMap added",
                json!({}),
                json!([]),
                json!({"configMap": {"a.conf": "1"}}),
                json!([]),
                false,
                true,
            ),
            (
                "configMap value",
                json!({"configMap": {"a.conf": "1"}}),
                json!([]),
                json!({"configMap": {"a.conf": "2"}}),
                json!([]),
                false,
                true,
            ),
            (
                "version",
                json!({}),
                json!([]),
                json!({"version": "2.0.0"}),
                json!([]),
                false,
                false,
            ),
            (
                "dependsOn",
                json!({}),
                json!([]),
                json!({"dependsOn": {"q": "1.0.0"}}),
                json!([]),
                false,
                false,
            ),
            (
                "interrupt",
                json!({}),
                json!([]),
                json!({"interrupt": {"type": "reboot"}}),
                json!([]),
                false,
                false,
            ),
            (
                "configInterrupts",
                json!({}),
                json!([]),
                json!({"configInterrupts": {"*.conf": {"type": "service", "services": ["x"]}}}),
                json!([]),
                false,
                false,
            ),
            (
                "an empty agentImageOverride reads as unset",
                json!({}),
                json!([]),
                json!({"agentImageOverride": ""}),
                json!([]),
                false,
                false,
            ),
            (
                "an empty gracefulShutdown reads as unset",
                json!({}),
                json!([]),
                json!({"gracefulShutdown": ""}),
                json!([]),
                false,
                false,
            ),
        ];
        for (name, before, tol_before, after, tol_after, install, config) in cases {
            let a = spec_hash(&package("p").with(before).build(), &tolerations(tol_before));
            let b = spec_hash(&package("p").with(after).build(), &tolerations(tol_after));
            assert_eq!(
                install_part(&a) != install_part(&b),
                install,
                "case: {name}: install part"
            );
            assert_eq!(
                config_part(&a) != config_part(&b),
                config,
                "case: {name}: config part"
            );
            assert_eq!(a.len(), 2 * PART_LEN + 1, "case: {name}");
        }
    }

    #[test]
    fn spec_hash_unchanged_for_packages_without_the_new_fields() {
        let cases = [
            ("bare package", json!({})),
            (
                "with containerSHA",
                json!({"containerSHA": "sha256:1111111111111111111111111111111111111111111111111111111111111111"}),
            ),
            (
                "with env",
                json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "<&>"}]}),
            ),
            (
                "with resources",
                json!({"resources": {"cpuRequest": "100m", "cpuLimit": "1", "memoryRequest": "64Mi", "memoryLimit": "128Mi"}}),
            ),
            (
                "with configMap",
                json!({"configMap": {"b.conf": "2", "a.conf": "x\ny"}}),
            ),
            (
                "with everything else old",
                json!({
                    "containerSHA": "sha256:2222222222222222222222222222222222222222222222222222222222222222",
                    "env": [{"name": "A", "value": "1"}],
                    "configMap": {"a": "1"},
                    "interrupt": {"type": "reboot"},
                    "dependsOn": {"q": "1.0.0"},
                    "configInterrupts": {"a": {"type": "noop"}},
                }),
            ),
            (
                "empty new fields",
                json!({"agentImageOverride": "", "gracefulShutdown": ""}),
            ),
        ];
        for (name, extra) in cases {
            let p = package("p").with(extra).build();
            assert_eq!(spec_hash(&p, &[]), old_formula(&p), "case: {name}");
        }
    }

    #[test]
    fn hash_parts() {
        let cases = [
            ("both parts", "abc.def", "abc", "def"),
            ("no dot", "abc", "abc", ""),
            ("empty", "", "", ""),
            ("empty install part", ".def", "", "def"),
        ];
        for (name, h, install, config) in cases {
            assert_eq!(
                (install_part(h), config_part(h)),
                (install, config),
                "case: {name}"
            );
        }
        let data = BTreeMap::from([("a".to_string(), "1".to_string())]);
        let p = package("p").with(json!({"configMap": {"a": "1"}})).build();
        assert_eq!(config_part(&spec_hash(&p, &[])), config_hash(&data));
    }

    #[test]
    fn interrupts_follow_config_updates() {
        let reboot = Interrupt::new(InterruptType::Reboot);
        let noop = Interrupt::new(InterruptType::Noop);
        let ci = json!({
            "*.conf": {"type": "service", "services": ["a"]},
            "a.conf": {"type": "service", "services": ["a"]},
            "x": {"type": "noop"},
        });
        let with_both = json!({"interrupt": {"type": "reboot"}, "configInterrupts": ci});
        // (case, package fields, recorded config updates, interrupts)
        let cases: Vec<(&str, Value, Vec<(&str, Vec<&str>)>, Vec<Interrupt>)> = vec![
            (
                "no update recorded: the package interrupt",
                with_both.clone(),
                vec![],
                vec![reboot.clone()],
            ),
            (
                "no update and no interrupt",
                json!({"configInterrupts": ci}),
                vec![],
                vec![],
            ),
            (
                "an empty update list: the package interrupt",
                with_both.clone(),
                vec![("p", vec![])],
                vec![reboot.clone()],
            ),
            (
                "a matching key: its configInterrupt only, once",
                with_both.clone(),
                vec![("p", vec!["a.conf"])],
                vec![service(&["a"])],
            ),
            (
                "no key matches: no interrupt at all",
                with_both.clone(),
                vec![("p", vec!["readme"])],
                vec![],
            ),
            (
                "two interrupts, in pattern order",
                with_both.clone(),
                vec![("p", vec!["x", "b.conf"])],
                vec![service(&["a"]), noop.clone()],
            ),
            (
                "a glob does not cross /",
                with_both.clone(),
                vec![("p", vec!["dir/b.conf"])],
                vec![],
            ),
            (
                "updates of another package do not count",
                with_both.clone(),
                vec![("q", vec!["a.conf"])],
                vec![reboot.clone()],
            ),
        ];
        for (name, fields, updates, want) in cases {
            let p = package("p").with(fields).build();
            let packages = packages([&p]);
            let updates: BTreeMap<String, Vec<String>> = updates
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
                .collect();
            let view = SpecView::new(&packages, &[], &updates);
            assert_eq!(view.interrupts(&p), want, "case: {name}");
            assert_eq!(view.has_interrupt(&p), !want.is_empty(), "case: {name}");
        }
    }

    #[test]
    fn package_complete_at_the_terminal_stage() {
        let plain = package("p").build();
        let rb = package("r")
            .with(json!({"interrupt": {"type": "reboot"}, "configInterrupts": {"x": {"type": "noop"}}}))
            .build();
        // (case, package, entry as (version, stage, state), config updates of r, complete)
        let cases: Vec<(
            &str,
            &Package,
            Option<(&str, Stage, State)>,
            Vec<&str>,
            bool,
        )> = vec![
            (
                "complete at config",
                &plain,
                Some(("1.0.0", Stage::Config, State::Complete)),
                vec![],
                true,
            ),
            (
                "in progress at config",
                &plain,
                Some(("1.0.0", Stage::Config, State::InProgress)),
                vec![],
                false,
            ),
            (
                "complete at apply",
                &plain,
                Some(("1.0.0", Stage::Apply, State::Complete)),
                vec![],
                false,
            ),
            ("no entry", &plain, None, vec![], false),
            (
                "complete at another version",
                &plain,
                Some(("0.9.0", Stage::Config, State::Complete)),
                vec![],
                false,
            ),
            (
                "with interrupt, complete at config is not done",
                &rb,
                Some(("1.0.0", Stage::Config, State::Complete)),
                vec![],
                false,
            ),
            (
                "with interrupt, complete at post-interrupt",
                &rb,
                Some(("1.0.0", Stage::PostInterrupt, State::Complete)),
                vec![],
                true,
            ),
            (
                "skipped at interrupt is not complete",
                &rb,
                Some(("1.0.0", Stage::Interrupt, State::Skipped)),
                vec![],
                false,
            ),
            (
                "a config update matching no configInterrupt ends at config",
                &rb,
                Some(("1.0.0", Stage::Config, State::Complete)),
                vec!["other"],
                true,
            ),
            (
                "a config update matching a configInterrupt ends at post-interrupt",
                &rb,
                Some(("1.0.0", Stage::Config, State::Complete)),
                vec!["x"],
                false,
            ),
        ];
        let packages = packages([&plain, &rb]);
        for (name, p, e, keys, want) in cases {
            let updates = BTreeMap::from([(
                "r".to_string(),
                keys.into_iter().map(String::from).collect(),
            )]);
            let view = SpecView::new(&packages, &[], &updates);
            let mut state = NodeState::default();
            if let Some((v, stage, st)) = e {
                state.upsert(entry_at(p, v, stage, st));
            }
            assert_eq!(view.package_complete(&state, p), want, "case: {name}");
        }
    }

    #[test]
    fn node_complete_drift_and_settled() {
        let a = package("a").build();
        let b = package("b").with(json!({"configMap": {"k": "v"}})).build();
        let done = |p: &Package| entry_at(p, "1.0.0", Stage::Config, State::Complete);
        let hash = |p: &Package| spec_hash(p, &[]);
        let key = |p: &Package, v: &str| schema::package_key(&p.name, v);
        // (case, spec packages, state entries, applied, node complete, drift, settled)
        let cases: Vec<(
            &str,
            Vec<&Package>,
            Vec<PackageStatus>,
            Vec<(String, String)>,
            bool,
            bool,
            bool,
        )> = vec![
            (
                "every package complete",
                vec![&a, &b],
                vec![done(&a), done(&b)],
                vec![],
                true,
                false,
                true,
            ),
            (
                "one package missing",
                vec![&a, &b],
                vec![done(&a)],
                vec![],
                false,
                false,
                false,
            ),
            (
                "one package in progress",
                vec![&a, &b],
                vec![
                    done(&a),
                    entry_at(&b, "1.0.0", Stage::Apply, State::InProgress),
                ],
                vec![],
                false,
                false,
                false,
            ),
            (
                "a stray old version",
                vec![&a],
                vec![
                    done(&a),
                    entry_at(&a, "0.9.0", Stage::Config, State::Complete),
                ],
                vec![],
                false,
                false,
                false,
            ),
            (
                "an uninstall left",
                vec![&a],
                vec![
                    done(&a),
                    entry_at(&b, "1.0.0", Stage::Uninstall, State::InProgress),
                ],
                vec![],
                false,
                false,
                false,
            ),
            (
                "empty spec, empty node",
                vec![],
                vec![],
                vec![],
                true,
                false,
                true,
            ),
            (
                "empty spec, a package left",
                vec![],
                vec![done(&a)],
                vec![],
                false,
                false,
                false,
            ),
            (
                "recorded hashes match",
                vec![&a, &b],
                vec![done(&a), done(&b)],
                vec![(key(&a, "1.0.0"), hash(&a)), (key(&b, "1.0.0"), hash(&b))],
                true,
                false,
                true,
            ),
            (
                "a recorded hash differs: drift",
                vec![&a, &b],
                vec![done(&a), done(&b)],
                vec![(key(&b, "1.0.0"), "000000000000.000000000000".to_string())],
                true,
                true,
                false,
            ),
            (
                "an incomplete package with an old record is not drift",
                vec![&a, &b],
                vec![
                    done(&a),
                    entry_at(&b, "1.0.0", Stage::Config, State::InProgress),
                ],
                vec![(key(&b, "1.0.0"), "000000000000.000000000000".to_string())],
                false,
                false,
                false,
            ),
            (
                "a record of another version is not drift",
                vec![&a],
                vec![done(&a)],
                vec![(key(&a, "0.9.0"), "000000000000.000000000000".to_string())],
                true,
                false,
                true,
            ),
        ];
        let none = BTreeMap::new();
        for (name, spec, entries, applied, complete, drift, settled) in cases {
            let packages = packages(spec);
            let view = SpecView::new(&packages, &[], &none);
            let state = node_state(entries);
            let applied: BTreeMap<String, String> = applied.into_iter().collect();
            assert_eq!(
                view.node_complete(&state),
                complete,
                "case: {name}: complete"
            );
            assert_eq!(
                view.has_drift(&state, &applied),
                drift,
                "case: {name}: drift"
            );
            assert_eq!(
                view.settled(&state, &applied),
                settled,
                "case: {name}: settled"
            );
        }
    }

    #[test]
    fn spec_view_hashes_every_package_with_the_tolerations() {
        let p = package("p").build();
        let packages = packages([&p]);
        let none = BTreeMap::new();
        let tols = tolerations(json!([{"operator": "Exists"}]));
        let cases = [("no tolerations", Vec::new()), ("with tolerations", tols)];
        for (name, tols) in cases {
            let view = SpecView::new(&packages, &tols, &none);
            assert_eq!(view.hash_of("p"), spec_hash(&p, &tols), "case: {name}");
            assert_eq!(view.hash_of("absent"), "", "case: {name}");
        }
    }
}
