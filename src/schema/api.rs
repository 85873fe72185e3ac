//! The two APIs one engine serves: `skyhook.nvidia.com` (`Skyhook`, the v0.13 to v0.17 contract)
//! and `nodewright.nvidia.com` (`NodeWright`, upstream v0.18 and later).
//!
//! Upstream's rename changed the group, the kind and the prefix of every key, and nothing of the
//! shapes under it (delta D2, D23, D24). So the planner speaks one key set, the legacy one
//! spelled in [`super::keys`], and an object of the other API is seen through a lens: keys are
//! read into that canonical set ([`Api::canonical`]) and written out of it ([`Api::local`]). For
//! the legacy API both are the identity, so a cluster of Skyhooks costs nothing for it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::keys;

/// Which API an object belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Api {
    /// `skyhook.nvidia.com/v1alpha1`, kind `Skyhook`.
    #[default]
    Skyhook,
    /// `nodewright.nvidia.com/v1alpha1`, kind `NodeWright`.
    NodeWright,
}

/// The prefix of every key upstream's NodeWright API writes.
pub const NODEWRIGHT_PREFIX: &str = "nodewright.nvidia.com";

/// The finalizer upstream puts on a NodeWright (its `SkyhookFinalizer` after the rename); not the
/// legacy finalizer with its prefix swapped.
pub const NODEWRIGHT_FINALIZER: &str = "nodewright.nvidia.com/nodewright";

/// Keys upstream spells under its new prefix that the planner reads as they are, whatever the
/// API (the legacy API honours them too, delta D38).
const VERBATIM: &[&str] = &[keys::RUNTIME_REQUIRED_CORDON_ANNOTATION];

/// Which APIs the operator reconciles (`SERVE_APIS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub skyhook: bool,
    pub nodewright: bool,
    /// NodeWrights are reconciled once their CRD is served, which start-up does not wait for
    /// (`SERVE_APIS=auto`, the default: an install of the legacy CRDs alone keeps working).
    pub nodewright_when_installed: bool,
}

impl Api {
    pub const ALL: [Api; 2] = [Api::Skyhook, Api::NodeWright];

    /// The API group, which is also the prefix of its keys.
    pub fn group(self) -> &'static str {
        match self {
            Api::Skyhook => keys::PREFIX,
            Api::NodeWright => NODEWRIGHT_PREFIX,
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Api::Skyhook => "skyhook.nvidia.com/v1alpha1",
            Api::NodeWright => "nodewright.nvidia.com/v1alpha1",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Api::Skyhook => "Skyhook",
            Api::NodeWright => "NodeWright",
        }
    }

    /// The resource's plural (its URL path segment and the first part of its CRD's name).
    pub fn plural(self) -> &'static str {
        match self {
            Api::Skyhook => "skyhooks",
            Api::NodeWright => "nodewrights",
        }
    }

    /// The collection URL of its group's DeploymentPolicies (cluster scoped).
    pub fn policy_url_path(self) -> String {
        format!("/apis/{}/deploymentpolicies", self.api_version())
    }

    /// The collection URL of the kind (cluster scoped).
    pub fn url_path(self) -> String {
        format!("/apis/{}/{}", self.api_version(), self.plural())
    }

    /// The first word of its metrics' names and of their object label (`skyhook_name`,
    /// `nodewright_name`), delta D30.
    pub fn metric_word(self) -> &'static str {
        match self {
            Api::Skyhook => "skyhook",
            Api::NodeWright => "nodewright",
        }
    }

    /// The CLI word and `SERVE_APIS` value naming the API.
    pub fn word(self) -> &'static str {
        self.metric_word()
    }

    /// The other of the two APIs.
    pub fn other(self) -> Api {
        match self {
            Api::Skyhook => Api::NodeWright,
            Api::NodeWright => Api::Skyhook,
        }
    }

    /// The API a `SERVE_APIS` word names.
    pub fn from_word(word: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.word() == word)
    }

    /// The API of an `apiVersion` (any version of either group).
    pub fn of_api_version(api_version: &str) -> Option<Api> {
        let group = api_version.split('/').next()?;
        Api::ALL.into_iter().find(|a| a.group() == group)
    }

    /// A canonical key (as [`super::keys`] spells it) as this API writes it.
    pub fn local(self, canonical: &str) -> Cow<'_, str> {
        match self {
            Api::Skyhook => Cow::Borrowed(canonical),
            Api::NodeWright if canonical == keys::FINALIZER => Cow::Borrowed(NODEWRIGHT_FINALIZER),
            Api::NodeWright => match canonical.strip_prefix(keys::PREFIX) {
                Some(rest) if rest.starts_with('/') => {
                    Cow::Owned(format!("{NODEWRIGHT_PREFIX}{rest}"))
                }
                _ => Cow::Borrowed(canonical),
            },
        }
    }

    /// A key as stored, in the canonical set; `None` when it belongs to the other API and this
    /// one must not see it (for a NodeWright, the legacy keys a migration leaves on a node).
    pub fn canonical(self, stored: &str) -> Option<Cow<'_, str>> {
        match self {
            Api::Skyhook => Some(Cow::Borrowed(stored)),
            Api::NodeWright => {
                if stored == NODEWRIGHT_FINALIZER {
                    return Some(Cow::Borrowed(keys::FINALIZER));
                }
                if VERBATIM.contains(&stored) {
                    return Some(Cow::Borrowed(stored));
                }
                if let Some(rest) = stored.strip_prefix(NODEWRIGHT_PREFIX)
                    && rest.starts_with('/')
                {
                    return Some(Cow::Owned(format!("{}{rest}", keys::PREFIX)));
                }
                if keys::is_skyhook_key(stored) || stored == keys::FINALIZER {
                    return None;
                }
                Some(Cow::Borrowed(stored))
            }
        }
    }
}

impl Api {
    /// The API of an object of ours (a Job, a pod, a ConfigMap) by its `name` label: a NodeWright's
    /// carry it under the new prefix.
    pub fn of_owned(labels: Option<&BTreeMap<String, String>>) -> Api {
        let nodewright = Api::NodeWright.local(keys::NAME_LABEL);
        match labels {
            Some(l) if l.contains_key(nodewright.as_ref()) => Api::NodeWright,
            _ => Api::Skyhook,
        }
    }

    /// A map of keys as stored, in the canonical set (the keys it must not see dropped).
    pub fn canonical_map(self, stored: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        stored
            .iter()
            .filter_map(|(k, v)| Some((self.canonical(k)?.into_owned(), v.clone())))
            .collect()
    }

    /// [`Api::canonical_map`] in place; nothing to do for the legacy API.
    pub fn canonicalize(self, map: &mut Option<BTreeMap<String, String>>) {
        if self == Api::Skyhook {
            return;
        }
        if let Some(m) = map.as_mut() {
            *m = self.canonical_map(m);
        }
    }

    /// A map of canonical keys as this API writes it, in place.
    pub fn localize<V>(self, map: &mut BTreeMap<String, V>) {
        if self == Api::Skyhook {
            return;
        }
        *map = std::mem::take(map)
            .into_iter()
            .map(|(k, v)| (self.local(&k).into_owned(), v))
            .collect();
    }
}

/// A key of either API (`skyhook.nvidia.com/…` or `nodewright.nvidia.com/…`): node conditions
/// under either are the operator's, kept whole.
pub fn is_operator_key(key: &str) -> bool {
    keys::is_skyhook_key(key)
        || key
            .strip_prefix(NODEWRIGHT_PREFIX)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The node annotations an object writes under its own name (upstream's name-scoped keys, D24,
/// and this project's records): what a NodeWright takes over from the Skyhook of its name, and
/// what the clean-up removes after.
pub fn name_scoped_annotations(name: &str) -> [String; 9] {
    [
        keys::node_state_annotation(name),
        keys::status_annotation(name),
        keys::node_version_annotation(name),
        keys::cordon_annotation(name),
        keys::drain_start_annotation(name),
        keys::applied_annotation(name),
        keys::folded_annotation(name),
        keys::health_gate_annotation(name),
        keys::protected_wait_annotation(name),
    ]
}

/// The outbox of an object of `api`: a NodeWright's is not its same-named Skyhook's.
pub fn notifications_configmap_name_in(api: Api, name: &str) -> String {
    match api {
        Api::Skyhook => keys::notifications_configmap_name(name),
        Api::NodeWright => super::safe_name(253, &["nodewright-notifications", name]),
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

impl Served {
    /// Whether objects of `api` are reconciled.
    pub fn serves(self, api: Api) -> bool {
        match api {
            Api::Skyhook => self.skyhook,
            Api::NodeWright => self.nodewright,
        }
    }

    /// Whether start-up waits for the CRD of `api` (and fails without it).
    pub fn required(self, api: Api) -> bool {
        self.serves(api) && !(api == Api::NodeWright && self.nodewright_when_installed)
    }

    /// The served APIs, legacy first.
    pub fn apis(self) -> impl Iterator<Item = Api> {
        Api::ALL.into_iter().filter(move |a| self.serves(*a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legacy_api_sees_and_writes_every_key_as_it_is() {
        for key in [
            keys::node_state_annotation("sh"),
            keys::FINALIZER.to_string(),
            "nodewright.nvidia.com/nodeState_sh".to_string(),
            "kubernetes.io/hostname".to_string(),
        ] {
            assert_eq!(Api::Skyhook.local(&key), key);
            assert_eq!(Api::Skyhook.canonical(&key).as_deref(), Some(key.as_str()));
        }
    }

    #[test]
    fn a_nodewright_writes_the_same_shapes_under_its_prefix() {
        let nw = Api::NodeWright;
        assert_eq!(
            nw.local(&keys::node_state_annotation("sh")),
            "nodewright.nvidia.com/nodeState_sh"
        );
        assert_eq!(
            nw.local(&super::super::conditions::node_not_ready_condition("sh")),
            "nodewright.nvidia.com/sh/NotReady"
        );
        assert_eq!(nw.local(keys::NAME_LABEL), "nodewright.nvidia.com/name");
        assert_eq!(nw.local(keys::FINALIZER), NODEWRIGHT_FINALIZER);
        assert_eq!(nw.local("kubernetes.io/hostname"), "kubernetes.io/hostname");
        // Not a key under the prefix: a taint key, a longer group.
        assert_eq!(nw.local("skyhook.nvidia.com"), "skyhook.nvidia.com");
        assert_eq!(nw.local("skyhook.nvidia.comx/a"), "skyhook.nvidia.comx/a");
    }

    #[test]
    fn a_nodewright_reads_its_keys_back_and_never_the_legacy_ones() {
        let nw = Api::NodeWright;
        for key in [
            keys::node_state_annotation("sh"),
            keys::status_label("sh"),
            keys::IGNORE_LABEL.to_string(),
            keys::FINALIZER.to_string(),
            keys::RUNTIME_REQUIRED_CORDON_ANNOTATION.to_string(),
            "kubernetes.io/hostname".to_string(),
        ] {
            let stored = nw.local(&key).into_owned();
            assert_eq!(
                nw.canonical(&stored).as_deref(),
                Some(key.as_str()),
                "{stored}"
            );
        }
        assert_eq!(nw.canonical("skyhook.nvidia.com/nodeState_sh"), None);
        assert_eq!(nw.canonical(keys::FINALIZER), None);
    }

    #[test]
    fn maps_go_through_the_lens_and_an_owner_is_told_by_its_name_label() {
        let stored: BTreeMap<String, String> = [
            ("nodewright.nvidia.com/name", "sh"),
            ("skyhook.nvidia.com/name", "old"),
            ("app.kubernetes.io/managed-by", "skyhook-operator"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(Api::of_owned(Some(&stored)), Api::NodeWright);
        assert_eq!(Api::of_owned(None), Api::Skyhook);
        let mut seen = Some(stored.clone());
        Api::NodeWright.canonicalize(&mut seen);
        let mut seen = seen.unwrap_or_default();
        assert_eq!(seen.get(keys::NAME_LABEL).map(String::as_str), Some("sh"));
        assert_eq!(seen.len(), 2);
        Api::NodeWright.localize(&mut seen);
        assert!(seen.contains_key("nodewright.nvidia.com/name"));
        let mut legacy = Some(stored.clone());
        Api::Skyhook.canonicalize(&mut legacy);
        assert_eq!(legacy, Some(stored));
    }

    #[test]
    fn apis_by_word_and_api_version() {
        assert_eq!(Api::from_word("nodewright"), Some(Api::NodeWright));
        assert_eq!(Api::from_word("skyhook"), Some(Api::Skyhook));
        assert_eq!(Api::from_word("Skyhook"), None);
        assert_eq!(
            Api::of_api_version("nodewright.nvidia.com/v1alpha1"),
            Some(Api::NodeWright)
        );
        assert_eq!(Api::of_api_version("apps/v1"), None);
        assert_eq!(
            Api::NodeWright.url_path(),
            "/apis/nodewright.nvidia.com/v1alpha1/nodewrights"
        );
    }
}
