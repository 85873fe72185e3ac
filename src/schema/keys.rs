//! Label, annotation, finalizer and taint keys shared with the reference operator and plugin.
//!
//! Fixed keys are constants; keys that embed a Skyhook name (or a taint key) are functions so
//! the format lives in exactly one place.

/// Prefix of every Skyhook-owned key (Go `METADATA_PREFIX`).
pub const PREFIX: &str = "skyhook.nvidia.com";

/// The value written for boolean-ish annotations and labels (`pause`, `disable`, `ignore`,
/// `cordon_<sh>`, `autoTaint_<key>`). Readers compare against it exactly: any other value is
/// "not set".
pub const TRUE_VALUE: &str = "true";

// ----- Node annotations and labels (per Skyhook) -----

const NODE_STATE_PREFIX: &str = "skyhook.nvidia.com/nodeState_";
const STATUS_PREFIX: &str = "skyhook.nvidia.com/status_";
const CORDON_PREFIX: &str = "skyhook.nvidia.com/cordon_";
const NODE_VERSION_PREFIX: &str = "skyhook.nvidia.com/version_";
const AUTO_TAINT_PREFIX: &str = "skyhook.nvidia.com/autoTaint_";

/// Node annotation holding the authoritative per-package progress (JSON, see `NodeState`).
pub fn node_state_annotation(skyhook: &str) -> String {
    format!("{NODE_STATE_PREFIX}{skyhook}")
}

/// The Skyhook a `nodeState_<sh>` annotation key belongs to; `None` for any other key. The
/// plugin finds every Skyhook that touched a node by scanning its annotations this way.
pub fn skyhook_of_node_state_annotation(key: &str) -> Option<&str> {
    key.strip_prefix(NODE_STATE_PREFIX)
        .filter(|sh| !sh.is_empty())
}

/// Node annotation with the node's `Status` for one Skyhook.
pub fn status_annotation(skyhook: &str) -> String {
    format!("{STATUS_PREFIX}{skyhook}")
}

/// Node label mirroring `status_annotation` (same key, same value).
pub fn status_label(skyhook: &str) -> String {
    status_annotation(skyhook)
}

/// Node annotation meaning "this Skyhook holds the cordon"; uncordon only happens when present.
pub fn cordon_annotation(skyhook: &str) -> String {
    format!("{CORDON_PREFIX}{skyhook}")
}

/// Upstream v0.19's mark of a node it keeps cordoned after its runtime-required taint went
/// (`runtimeRequiredCordonAfter`, delta D38): the cordon is upstream's, and this operator never
/// lifts it.
pub const RUNTIME_REQUIRED_CORDON_ANNOTATION: &str = "nodewright.nvidia.com/runtimeRequiredCordon";

/// Node annotation with the operator version that last migrated this node for the Skyhook.
pub fn node_version_annotation(skyhook: &str) -> String {
    format!("{NODE_VERSION_PREFIX}{skyhook}")
}

/// Annotation `applied_<skyhook>`: per package, the hash of the spec a node last completed
/// (`{"<pkg>|<ver>":"<install>.<config>"}`). New in this implementation: it lets an image, env,
/// resources or configMap change re-run on each node inside the budget. The reference operator
/// ignores it.
pub fn applied_annotation(skyhook: &str) -> String {
    format!("{PREFIX}/applied_{skyhook}")
}

/// Annotation `drainStart_<skyhook>`: when this Skyhook's drain of the node began (RFC 3339),
/// the clock of `drainConfig.timeout`; removed once the drain is over. Upstream's main carried
/// the same key before its rename (delta D28).
pub fn drain_start_annotation(skyhook: &str) -> String {
    format!("{PREFIX}/drainStart_{skyhook}")
}

/// Annotation `nonInterruptWait_<skyhook>`: since when the node's interrupt has waited for pods
/// matching `podNonInterruptLabels`, and which ([`super::ProtectedWait`], JSON); removed once
/// they are gone. This project's extension (issue 51, upstream #543); the reference ignores it.
pub fn protected_wait_annotation(skyhook: &str) -> String {
    format!("{PROTECTED_WAIT_PREFIX}{skyhook}")
}

const PROTECTED_WAIT_PREFIX: &str = "skyhook.nvidia.com/nonInterruptWait_";

/// The Skyhook a [`protected_wait_annotation`] key belongs to.
pub fn skyhook_of_protected_wait_annotation(key: &str) -> Option<&str> {
    key.strip_prefix(PROTECTED_WAIT_PREFIX)
        .filter(|sh| !sh.is_empty())
}

/// Annotation `healthGate_<skyhook>`: when the node finished its last stage and began to wait
/// for its health gate (RFC 3339), the clock of `healthGate.timeout`; removed once the node
/// passes, or has work again. This project's extension (issue 38); the reference ignores it.
pub fn health_gate_annotation(skyhook: &str) -> String {
    format!("{PREFIX}/healthGate_{skyhook}")
}

/// The Secret in the operator's namespace with the notification targets (key
/// [`NOTIFICATIONS_TARGETS_KEY`]).
pub const NOTIFICATIONS_SECRET: &str = "skyhook-notifications";
/// The key of [`NOTIFICATIONS_SECRET`] that lists the targets (YAML or JSON).
pub const NOTIFICATIONS_TARGETS_KEY: &str = "targets.yaml";
/// The key of an outbox ConfigMap that holds its entries (JSON).
pub const NOTIFICATIONS_OUTBOX_KEY: &str = "outbox.json";
/// The header every notification carries, its id (receivers may de-duplicate on it).
pub const NOTIFICATION_ID_HEADER: &str = "x-skyhook-notification-id";
/// The Secret the alert gate's credentials are expected in by default (the install lets the
/// operator read it, and [`NOTIFICATIONS_SECRET`], by name).
pub const ALERT_CREDENTIALS_SECRET: &str = "skyhook-alert-credentials";
/// Label of a Skyhook's notification outbox ConfigMap: the Skyhook's name. Not the name label,
/// so the ConfigMap watch (which wakes passes) leaves it out.
pub const NOTIFICATIONS_LABEL: &str = "skyhook.nvidia.com/notifications";

/// The name of a Skyhook's notification outbox ConfigMap (in the operator's namespace).
pub fn notifications_configmap_name(skyhook: &str) -> String {
    super::safe_name(253, &["skyhook-notifications", skyhook])
}

/// The stage label value of a health check Job (not a package stage: no node state records it).
pub const HEALTH_CHECK_STAGE: &str = "health-check";
/// Annotation of a health check Job: the start of the gate it checks (the node's
/// `healthGate_<sh>` value when it was created).
pub const HEALTH_CHECK_SINCE_ANNOTATION: &str = "skyhook.nvidia.com/health-check-since";

/// A health gate clock or a status annotation of some Skyhook: what `node status` reads
/// besides the node states to show a node its health gate holds.
pub fn is_gate_or_status_annotation(key: &str) -> bool {
    key.starts_with(STATUS_PREFIX)
        || key
            .strip_prefix(PREFIX)
            .is_some_and(|k| k.starts_with("/healthGate_"))
}

/// Annotation `folded_<skyhook>`: per package version and stage, the newest Job attempt whose
/// outcome the node state holds (`{"<pkg>|<ver>|<stage>":<attempt>}`, see [`super::folded`]). New
/// in this implementation; the reference operator ignores it.
pub fn folded_annotation(skyhook: &str) -> String {
    format!("{PREFIX}/folded_{skyhook}")
}

/// Node annotation recording that the operator auto-tainted a new node. Keyed by the **taint
/// key**, not the Skyhook name.
pub fn auto_taint_annotation(taint_key: &str) -> String {
    format!("{AUTO_TAINT_PREFIX}{taint_key}")
}

/// Whether an annotation (or label) key is Skyhook-owned; a node carrying any such annotation is
/// not "new" for auto-tainting.
pub fn is_skyhook_key(key: &str) -> bool {
    key.strip_prefix(PREFIX)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// On a NodeWright (under its prefix, as upstream writes it): when it took over the Skyhook of
/// its name (RFC 3339); the legacy node keys of that name go `LEGACY_CLEANUP_DELAY` later.
pub const LEGACY_MIGRATED_AT_ANNOTATION: &str = "skyhook.nvidia.com/legacy-migrated-at";

/// Node annotation `takenOver_<name>` (written under the NodeWright's prefix): when the NodeWright
/// of that name copied the legacy node keys of its Skyhook to this node. The copy happens once
/// per (name, node): a key the NodeWright removes later (a reset, a finished drain) is never
/// copied back. New in this implementation; upstream copies on every adoption.
pub fn taken_over_annotation(name: &str) -> String {
    format!("{PREFIX}/takenOver_{name}")
}

/// On a legacy Skyhook: when the NodeWright of its name took it over (RFC 3339). From then on the
/// Skyhook is never reconciled again, whether or not the NodeWright still exists, until it is
/// deleted or released ([`RELEASE_FROM_NODEWRIGHT_ANNOTATION`]). Upstream never reconciles a
/// migrated Skyhook again either (delta D23).
pub const TAKEN_OVER_ANNOTATION: &str = "skyhook.nvidia.com/taken-over-by-nodewright";

/// On a legacy Skyhook taken over by its NodeWright: `"true"` hands it back to the legacy engine
/// once no NodeWright of its name exists (`kubectl skyhook release`). The operator then removes
/// both annotations and reconciles the Skyhook's spec again.
pub const RELEASE_FROM_NODEWRIGHT_ANNOTATION: &str = "skyhook.nvidia.com/release-from-nodewright";

/// On a NodeWright or a new-group DeploymentPolicy (under its prefix, as upstream's mirror
/// stamps it): the name of the legacy object it mirrors. Only an object carrying it is ever
/// updated by the mirror (`MIGRATE_TO_NODEWRIGHT`).
pub const MIRRORED_FROM_ANNOTATION: &str = "skyhook.nvidia.com/mirrored-from";

/// Node label: `"true"` makes the operator skip the node (status `blocked`).
pub const IGNORE_LABEL: &str = "skyhook.nvidia.com/ignore";

// ----- Skyhook object metadata -----

/// Skyhook annotation: `"true"` pauses the rollout.
pub const PAUSE_ANNOTATION: &str = "skyhook.nvidia.com/pause";
/// Skyhook annotation: `"true"` disables the Skyhook.
pub const DISABLE_ANNOTATION: &str = "skyhook.nvidia.com/disable";
/// Skyhook annotation with the operator version that last migrated it; the plugin refuses
/// lifecycle commands when it is below `MIN_OPERATOR_VERSION_FOR_ANNOTATIONS`.
pub const VERSION_ANNOTATION: &str = "skyhook.nvidia.com/version";
/// The reference operator release whose stored format (node state, status, annotations) this
/// operator reads and writes.
pub const REFERENCE_COMPATIBLE_VERSION: &str = "v0.13.0";

/// The value of [`VERSION_ANNOTATION`] this operator writes: the reference release it is
/// compatible with, so that the reference's plugin gate and migrations treat our objects as that
/// release's, with this operator's own version as semver build metadata (ignored by comparisons).
pub fn skyhook_version_value(operator_version: &str) -> String {
    let sanitized: String = operator_version
        .trim_start_matches('v')
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' => c,
            _ => '-',
        })
        .collect();
    let build = sanitized
        .split('.')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(".");
    if build.is_empty() {
        return REFERENCE_COMPATIBLE_VERSION.to_string();
    }
    format!("{REFERENCE_COMPATIBLE_VERSION}+skyhook-rs.{build}")
}
/// The leader-election Lease (in the operator namespace), the reference's `LeaderElectionID`:
/// shared with the reference operator, so the two never lead at once.
pub const LEADER_LEASE_NAME: &str = "3c22c1ae.nvidia.com";
/// Finalizer on Skyhook objects.
pub const FINALIZER: &str = "skyhook.nvidia.com/skyhook";
/// kubectl's pod annotation naming the container `kubectl logs` and `exec` use by default.
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";
/// Ours: finalizer on a DeploymentPolicy some Skyhook names (deletion waits until none does).
pub const POLICY_FINALIZER: &str = "skyhook.nvidia.com/policy-in-use";
/// Ours: Event reason on a DeploymentPolicy whose deletion waits for its Skyhooks.
pub const POLICY_IN_USE_REASON: &str = "PolicyInUse";
/// Oldest operator version that understands the pause/disable annotations.
pub const MIN_OPERATOR_VERSION_FOR_ANNOTATIONS: &str = "v0.8.0";

// ----- Pod / Job metadata -----

/// Label (and annotation) with the Skyhook name. The reference operator treats every pod with
/// this label, in any namespace, as one of its package pods.
pub const NAME_LABEL: &str = "skyhook.nvidia.com/name";
/// Annotation twin of `NAME_LABEL` (on ConfigMaps).
pub const NAME_ANNOTATION: &str = NAME_LABEL;
/// Label `<pkg>-<ver>`; build the value with `package_label`.
pub const PACKAGE_LABEL: &str = "skyhook.nvidia.com/package";
/// Annotation with the `PackageAnnotation` JSON.
pub const PACKAGE_ANNOTATION: &str = PACKAGE_LABEL;
/// Label present only on interrupt pods/Jobs.
pub const INTERRUPT_LABEL: &str = "skyhook.nvidia.com/interrupt";
/// Value of `INTERRUPT_LABEL` (capital T, unlike `TRUE_VALUE`).
pub const INTERRUPT_LABEL_VALUE: &str = "True";
/// Job label with the label-safe node name (`label_value(node)`).
pub const NODE_LABEL: &str = "skyhook.nvidia.com/node";
/// Job annotation with the full node name.
pub const NODE_ANNOTATION: &str = NODE_LABEL;
/// Job label with the `Stage` wire string.
pub const STAGE_LABEL: &str = "skyhook.nvidia.com/stage";
/// Job label with `resource_id_label(<resource id>)`.
pub const RESOURCE_ID_LABEL: &str = "skyhook.nvidia.com/resource-id";
/// Job annotation with the full resource id.
pub const RESOURCE_ID_ANNOTATION: &str = RESOURCE_ID_LABEL;
/// Job annotation with the attempt index that is also the Job name suffix.
pub const ATTEMPT_ANNOTATION: &str = "skyhook.nvidia.com/attempt";
/// Standard Kubernetes label marking objects we manage.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of `MANAGED_BY_LABEL`.
pub const MANAGED_BY_VALUE: &str = "skyhook-operator";
/// The label the Job controller puts on a Job's pods, naming the Job.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// Set by the API server's LimitRanger; pod validation keys on its presence.
pub const LIMIT_RANGER_ANNOTATION: &str = "kubernetes.io/limit-ranger";

// ----- ConfigMaps -----

/// Package ConfigMap annotation with the package name.
pub const PACKAGE_NAME_ANNOTATION: &str = "skyhook.nvidia.com/Package.Name";
/// Package ConfigMap annotation with the package version.
pub const PACKAGE_VERSION_ANNOTATION: &str = "skyhook.nvidia.com/Package.Version";
/// Node metadata ConfigMap label; value is the Skyhook name.
pub const NODE_META_LABEL: &str = "skyhook.nvidia.com/skyhook-node-meta";
/// Node metadata ConfigMap annotation with the node name.
pub const NODE_NAME_ANNOTATION: &str = "skyhook.nvidia.com/Node.name";
/// Node metadata ConfigMap data key: all node annotations as JSON.
pub const METADATA_ANNOTATIONS_KEY: &str = "annotations.json";
/// Node metadata ConfigMap data key: all node labels as JSON.
pub const METADATA_LABELS_KEY: &str = "labels.json";
/// Node metadata ConfigMap data key: `NodeMetadataPackages` JSON.
pub const METADATA_PACKAGES_KEY: &str = "packages.json";

// ----- Webhook Secret -----

/// Webhook Secret annotation: certificate NotAfter (RFC 3339).
pub const WEBHOOK_EXPIRATION_ANNOTATION: &str = "skyhook.nvidia.com/expiration";
/// Webhook Secret annotation: the service the certificate is for.
pub const WEBHOOK_SERVICE_ANNOTATION: &str = "skyhook.nvidia.com/service";

// ----- Taints -----

/// Default of `RUNTIME_REQUIRED_TAINT` (kubectl taint syntax; parse with `TaintSpec`).
/// The taints the node lifecycle controller puts on a node that is not ready or not reachable.
pub const NOT_READY_TAINT_KEY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE_TAINT_KEY: &str = "node.kubernetes.io/unreachable";
pub const DEFAULT_RUNTIME_REQUIRED_TAINT: &str = "skyhook.nvidia.com=runtime-required:NoSchedule";
/// Upstream's default runtime-required taint since v0.18 (delta D31): nodes provisioned for
/// upstream carry it, so it is tolerated and lifted like the configured one.
pub const UPSTREAM_RUNTIME_REQUIRED_TAINT: &str =
    "nodewright.nvidia.com=runtime-required:NoSchedule";
/// Taint the node lifecycle adds to cordoned nodes; our pods tolerate it (operator `Exists`).
pub const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";

// ----- Rollout -----

/// Compartment name of the default / legacy compartment.
pub const DEFAULT_COMPARTMENT: &str = "__default__";
/// `policy_name` metric label value for Skyhooks without a DeploymentPolicy.
pub const LEGACY_POLICY_NAME: &str = "legacy";

// ---- Job bookkeeping (new in this implementation; Jobs replace the reference's bare pods) ----

/// Set on a Job by earlier versions of this operator once its outcome was folded into the node
/// state; still honoured. Folding is now recorded on the node ([`folded_annotation`]).
pub const RECORDED_ANNOTATION: &str = "skyhook.nvidia.com/recorded";
/// Job annotation: this failed attempt is already counted in the node state's `restarts`.
pub const COUNTED_ANNOTATION: &str = "skyhook.nvidia.com/counted";
/// Job annotation: the node's `resourceVersion` whose stored state includes this Job's stage
/// (the version the node patch before the create returned, or the one the pass read). A node
/// copy at least this new that no longer has the stage means the state was reset or moved on
/// under the running Job (§4.7); an older copy is only a cache behind the Job's own write.
pub const NODE_VERSION_ANNOTATION: &str = "skyhook.nvidia.com/node-resource-version";
/// Reboot interrupt Job annotation: the node's boot id when the Job was created. The interrupt
/// is done only once the node reports another boot id: agent v7 may exit 0 while the host is
/// still going down (`agent-v7-contract.md`), and post-interrupt or the uncordon must not run in
/// the boot that is ending.
pub const BOOT_ID_ANNOTATION: &str = "skyhook.nvidia.com/boot-id";
/// Hash of everything a Job's template was built from; a Job whose hash differs from the current
/// spec's is stale.
pub const SPEC_HASH_ANNOTATION: &str = "skyhook.nvidia.com/spec-hash";
/// Why the operator failed a Job itself (an image that cannot be pulled, a pod that cannot start).
pub const FAILURE_REASON_ANNOTATION: &str = "skyhook.nvidia.com/failure-reason";
/// The waiting message behind [`FAILURE_REASON_ANNOTATION`].
pub const FAILURE_MESSAGE_ANNOTATION: &str = "skyhook.nvidia.com/failure-message";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_skyhook_keys() {
        assert_eq!(
            node_state_annotation("sh"),
            "skyhook.nvidia.com/nodeState_sh"
        );
        assert_eq!(status_annotation("sh"), "skyhook.nvidia.com/status_sh");
        assert_eq!(status_label("sh"), "skyhook.nvidia.com/status_sh");
        assert_eq!(cordon_annotation("sh"), "skyhook.nvidia.com/cordon_sh");
        assert_eq!(
            node_version_annotation("sh"),
            "skyhook.nvidia.com/version_sh"
        );
        assert_eq!(
            auto_taint_annotation("skyhook.nvidia.com"),
            "skyhook.nvidia.com/autoTaint_skyhook.nvidia.com"
        );
    }

    #[test]
    fn node_state_key_scan() {
        assert_eq!(
            skyhook_of_node_state_annotation("skyhook.nvidia.com/nodeState_simple-skyhook"),
            Some("simple-skyhook")
        );
        assert_eq!(
            skyhook_of_node_state_annotation("skyhook.nvidia.com/nodeState_"),
            None
        );
        assert_eq!(
            skyhook_of_node_state_annotation("skyhook.nvidia.com/status_x"),
            None
        );
        assert_eq!(
            skyhook_of_node_state_annotation("other.io/nodeState_x"),
            None
        );
        let key = node_state_annotation("abc");
        assert_eq!(skyhook_of_node_state_annotation(&key), Some("abc"));
    }

    #[test]
    fn skyhook_keys() {
        assert!(is_skyhook_key("skyhook.nvidia.com/anything"));
        assert!(is_skyhook_key(IGNORE_LABEL));
        assert!(!is_skyhook_key("skyhook.nvidia.comx/a"));
        assert!(!is_skyhook_key("skyhook.nvidia.com"));
        assert!(!is_skyhook_key("kubernetes.io/hostname"));
    }

    #[test]
    fn skyhook_version_value_passes_the_reference_plugin_gate() {
        for (operator, want) in [
            ("v0.1.0", "v0.13.0+skyhook-rs.0.1.0"),
            ("0.2.0-rc.1", "v0.13.0+skyhook-rs.0.2.0-rc.1"),
            ("v1.0.0+abc_def", "v0.13.0+skyhook-rs.1.0.0-abc-def"),
            ("v..1", "v0.13.0+skyhook-rs.1"),
            ("", "v0.13.0"),
            ("v", "v0.13.0"),
        ] {
            let got = skyhook_version_value(operator);
            assert_eq!(got, want, "operator {operator:?}");
            assert!(crate::schema::is_valid_semver(&got), "{got}");
            assert_ne!(
                crate::schema::semver_compare(&got, MIN_OPERATOR_VERSION_FOR_ANNOTATIONS),
                std::cmp::Ordering::Less,
                "{got}"
            );
        }
    }
}
