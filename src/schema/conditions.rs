//! Condition types, reasons and messages on Nodes and Skyhooks.

use super::Status;

// ----- Node conditions (one pair per Skyhook) -----

/// Node condition type `skyhook.nvidia.com/<sh>/NotReady`: `True` while the node is incomplete.
pub fn node_not_ready_condition(skyhook: &str) -> String {
    format!("{}NotReady", node_condition_prefix(skyhook))
}

/// Node condition type `skyhook.nvidia.com/<sh>/Erroring`: `True` while any package is
/// `erroring` or `unknown`.
pub fn node_erroring_condition(skyhook: &str) -> String {
    format!("{}Erroring", node_condition_prefix(skyhook))
}

/// Prefix of every node condition type of a Skyhook; migration removes those other than
/// NotReady and Erroring (older versions wrote more kinds).
pub fn node_condition_prefix(skyhook: &str) -> String {
    format!("skyhook.nvidia.com/{skyhook}/")
}

/// Reason of NotReady when `True`.
pub const NOT_READY_REASON_INCOMPLETE: &str = "Incomplete";
/// Reason of NotReady when `False`.
pub const NOT_READY_REASON_COMPLETE: &str = "Complete";
/// Reason of Erroring when `True`.
pub const ERRORING_REASON_ERRORING: &str = "Package(s) Erroring or Unknown";
/// Reason of Erroring when `False`.
pub const ERRORING_REASON_NOT_ERRORING: &str = "Not Erroring";

/// Message of the NotReady condition (same for both statuses).
pub fn node_not_ready_message(skyhook: &str) -> String {
    format!("Skyhook {skyhook} Ready")
}

/// Message of the Erroring condition (same for both statuses).
pub fn node_erroring_message(skyhook: &str) -> String {
    format!("Package Erroring or Unknown for {skyhook}")
}

// ----- Skyhook conditions -----

/// Upstream v0.16 (delta D15): `True` while every targeted node is complete, so that
/// `kubectl wait --for=condition=Ready skyhook/<name>` waits for a rollout. Written under the
/// bare type and, with the same content, under [`LEGACY_READY_CONDITION`], as upstream does.
pub const READY_CONDITION: &str = "Ready";
/// The prefixed copy of [`READY_CONDITION`] upstream v0.16 and v0.17 also write.
pub const LEGACY_READY_CONDITION: &str = "skyhook.nvidia.com/Ready";
/// Nodes of one status a Ready message names; past it, upstream's truncation note.
pub const READY_NODES_LISTED: usize = 10;

/// Upstream v0.20 (delta D42): the interrupt of some node waits for pods matching
/// `podNonInterruptLabels`.
pub const BLOCKED_CONDITION: &str = "Blocked";
pub const NON_INTERRUPT_PODS_RUNNING_REASON: &str = "NonInterruptPodsRunning";
/// This project's condition beside [`BLOCKED_CONDITION`] (issue 51, upstream #543): each node
/// that waits for protected pods, with the pods, since when, and its batch slot; reason
/// [`NON_INTERRUPT_PODS_RUNNING_REASON`].
pub const WAITING_FOR_PROTECTED_PODS_CONDITION: &str = "WaitingForProtectedPods";
/// Event reason upstream publishes when such pods begin to hold a node.
pub const DRAIN_REASON: &str = "Drain";

/// Upstream's message of `Blocked`: the count and the sorted names (at most 10, then how many
/// more).
pub fn non_interrupt_pods_message(nodes: &[&str]) -> String {
    const LISTED: usize = 10;
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    let list = super::short_list(sorted, LISTED, ", ");
    format!(
        "{} node(s) blocked by non-interrupt pods ({list}). Waiting.",
        nodes.len()
    )
}

/// Upstream v0.20 (delta D41): PodDisruptionBudgets refuse the evictions of some node's drain.
pub const DRAIN_BLOCKED_CONDITION: &str = "DrainBlocked";
pub const PDB_REASON: &str = "PodDisruptionBudget";

/// Upstream's message of `DrainBlocked`: `<n>/<total> nodes blocked draining (<names>)`, then
/// `; <ns>/<pod> on <node>: <API server message>` for at most 10 pods (sorted), then a note.
pub fn drain_blocked_message(blocks: &[(&str, &str, &str)], total: usize) -> String {
    const LISTED: usize = 10;
    let mut blocks = blocks.to_vec();
    blocks.sort_unstable();
    blocks.dedup();
    let mut nodes: Vec<&str> = blocks.iter().map(|(n, _, _)| *n).collect();
    nodes.dedup();
    let mut message = format!(
        "{}/{total} nodes blocked draining ({})",
        nodes.len(),
        nodes.join(", ")
    );
    for (node, pod, why) in blocks.iter().take(LISTED) {
        message.push_str(&format!("; {pod} on {node}: {why}"));
    }
    if blocks.len() > LISTED {
        message.push_str(" (additional detail truncated; see controller logs)");
    }
    message
}

/// Upstream v0.16 (delta D16): some node's `nodeState_<sh>` cannot be parsed.
pub const NODE_STATE_MALFORMED_CONDITION: &str = "NodeStateMalformed";
pub const NODE_STATE_MALFORMED_REASON: &str = "ParseError";

/// Upstream's message of `NodeStateMalformed`: the count, then at most 5 names (sorted, each
/// cut to 10 characters and `...`), then `and N more`.
pub fn node_state_malformed_message(nodes: &[&str]) -> String {
    const LISTED: usize = 5;
    const NAME: usize = 10;
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    let cut = sorted.iter().map(|n| match n.char_indices().nth(NAME) {
        Some((cut, _)) => format!("{}...", &n[..cut]),
        None => (*n).to_string(),
    });
    let list = super::short_list(cut, LISTED, ", ");
    format!(
        "nodeState annotation cannot be parsed on {} node(s): {list}",
        nodes.len()
    )
}

/// Upstream's reason of `Ready`, from the Skyhook's aggregate status.
pub fn ready_reason(status: Status) -> &'static str {
    match status {
        Status::Complete => "NodesConverged",
        Status::InProgress => "Progressing",
        Status::Blocked => "Blocked",
        Status::Erroring => "Erroring",
        Status::Paused => "Paused",
        Status::Waiting => "Waiting",
        Status::Disabled => "Disabled",
        Status::Unknown => "Unknown",
    }
}

/// Upstream's message of `Ready`: `<complete>/<total> nodes complete (<names>)`, then
/// `, <n> <status> (<names>)` for each other status that has nodes, in upstream's order, the
/// names sorted and replaced by a note past [`READY_NODES_LISTED`].
pub fn ready_message<'a>(nodes: impl IntoIterator<Item = (&'a str, Status)>) -> String {
    let mut by_status: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    let mut total = 0;
    for (node, status) in nodes {
        by_status.entry(status.as_str()).or_default().push(node);
        total += 1;
    }
    let listed = |nodes: &mut Vec<&str>| -> String {
        nodes.sort_unstable();
        match nodes.len() {
            0 => String::new(),
            n if n > READY_NODES_LISTED => " (list truncated; see controller logs)".to_string(),
            _ => format!(" ({})", nodes.join(", ")),
        }
    };
    let mut complete = by_status
        .remove(Status::Complete.as_str())
        .unwrap_or_default();
    let mut parts = vec![format!(
        "{}/{total} nodes complete{}",
        complete.len(),
        listed(&mut complete)
    )];
    for status in [
        Status::InProgress,
        Status::Blocked,
        Status::Erroring,
        Status::Waiting,
        Status::Paused,
        Status::Disabled,
        Status::Unknown,
    ] {
        if let Some(mut nodes) = by_status.remove(status.as_str()) {
            let label = match status {
                Status::InProgress => "in progress",
                other => other.as_str(),
            };
            parts.push(format!("{} {label}{}", nodes.len(), listed(&mut nodes)));
        }
    }
    parts.join(", ")
}

/// Aggregate status changed; reason is the new status string.
pub const TRANSITION_CONDITION: &str = "skyhook.nvidia.com/Transition";
/// A package pod/Job was created.
pub const APPLY_PACKAGE_CONDITION: &str = "skyhook.nvidia.com/ApplyPackage";
/// Some targeted nodes have taints the Skyhook does not tolerate.
pub const TAINT_NOT_TOLERABLE_CONDITION: &str = "skyhook.nvidia.com/TaintNotTolerable";
/// Some targeted nodes carry the ignore label.
pub const NODES_IGNORED_CONDITION: &str = "skyhook.nvidia.com/NodesIgnored";
/// The referenced DeploymentPolicy does not exist.
pub const DEPLOYMENT_POLICY_NOT_FOUND_CONDITION: &str =
    "skyhook.nvidia.com/DeploymentPolicyNotFound";
/// Ours: `False` while the spec fails validation (the reference only errors the reconcile).
pub const VALID_CONDITION: &str = "skyhook.nvidia.com/Valid";
/// Ours: `True` while some package is erroring on some node.
pub const PACKAGE_ERRORING_CONDITION: &str = "skyhook.nvidia.com/PackageErroring";
/// Ours: `True` while a drain is blocked by a protected pod or a PodDisruptionBudget.
pub const NODE_BLOCKED_CONDITION: &str = "skyhook.nvidia.com/NodeBlocked";

/// Ours: `True` while some node's stored state for this Skyhook cannot be read; those nodes are
/// left untouched. Written only once it has been `True`.
pub const NODE_STATE_UNREADABLE_CONDITION: &str = "skyhook.nvidia.com/NodeStateUnreadable";

/// Ours: `True` while a compartment's failure threshold has stopped its rollout
/// (`batchState.shouldStop`); only a batch-state reset resumes it. Written only once it has
/// been `True`.
pub const ROLLOUT_STOPPED_CONDITION: &str = "skyhook.nvidia.com/RolloutStopped";

/// Ours: `True` while some write of this Skyhook's pass keeps failing (a ConfigMap refused by a
/// quota or an admission policy, a node patch denied): the message names each object and the
/// API server's reason. Written only once it has been `True`.
pub const WRITE_FAILED_CONDITION: &str = "skyhook.nvidia.com/WriteFailed";
/// Reason of WriteFailed when `True` (and of its Warning Event).
pub const WRITE_FAILED_REASON: &str = "WriteFailed";
/// Reason of WriteFailed when `False`.
pub const WRITES_SUCCEEDED_REASON: &str = "WritesSucceeded";

/// Ours: `True` while the status lists only some nodes in its per-node maps (they would not fit
/// in the object); the node annotations hold every node. Written only once it has been `True`.
pub const STATUS_TRIMMED_CONDITION: &str = "skyhook.nvidia.com/StatusTrimmed";

pub const APPLY_PACKAGE_REASON: &str = "ApplyPackage";
pub const TAINT_NOT_TOLERABLE_REASON: &str = "TaintNotTolerable";
pub const NODES_IGNORED_REASON: &str = "NodesIgnored";
pub const DEPLOYMENT_POLICY_NOT_FOUND_REASON: &str = "DeploymentPolicyNotFound";

/// `True` while compartments with nodes to do are outside their maintenance windows (this
/// project's extension, issue 38); absent otherwise.
pub const MAINTENANCE_WINDOW_CONDITION: &str = "skyhook.nvidia.com/MaintenanceWindow";
/// Its reason, also the reason of the Event when a hold begins.
pub const OUTSIDE_MAINTENANCE_WINDOW_REASON: &str = "OutsideMaintenanceWindow";

/// The compartments held by their windows, each with its next opening (RFC 3339).
pub fn maintenance_window_message(holds: &[(String, Option<String>)]) -> String {
    let parts: Vec<String> = holds
        .iter()
        .map(|(c, next)| match next {
            Some(t) => format!("compartment {c} waits for its maintenance window opening at {t}"),
            None => format!(
                "compartment {c} is outside its maintenance windows, none opens within a week"
            ),
        })
        .collect();
    format!(
        "{}; nodes at work finish, no new node starts",
        parts.join("; ")
    )
}

/// `True` while compartments soak after a finished batch (this project's extension, issue 38);
/// absent otherwise.
pub const SOAKING_CONDITION: &str = "skyhook.nvidia.com/Soaking";
/// Its reason, also the reason of the Event when a soak begins.
pub const SOAKING_REASON: &str = "Soaking";
/// Warning: a node of a soaking batch went NotReady (or failed its health gate's pods or node
/// condition), which failed the batch.
pub const SOAK_FAILED_REASON: &str = "SoakFailed";

/// The soaking compartments, each with the end of its soak (RFC 3339).
pub fn soaking_message(soaking: &[(String, String)]) -> String {
    let parts: Vec<String> = soaking
        .iter()
        .map(|(c, until)| format!("compartment {c} soaks its finished batch until {until}"))
        .collect();
    format!("{}; no new batch starts before", parts.join("; "))
}

/// A soaking batch failed.
pub fn soak_failed_message(compartment: &str, nodes: &[String]) -> String {
    format!(
        "compartment {compartment}: node(s) {} went NotReady or unhealthy (health gate) while their batch soaked: the batch failed",
        nodes.join(", ")
    )
}

/// Present while the policy's alert gate holds the rollout (or cannot read its source): this
/// project's extension, issue 38.
pub const ALERT_GATE_CONDITION: &str = "skyhook.nvidia.com/AlertGate";
/// Matching alerts fire (also the Event when the hold begins).
pub const ALERTS_FIRING_REASON: &str = "AlertsFiring";
/// The alert source cannot be read (also the Warning Event when that begins).
pub const ALERT_SOURCE_UNREACHABLE_REASON: &str = "AlertSourceUnreachable";

/// `True` while nodes wait for the Skyhook's health gate, or failed it (this project's extension,
/// issue 38); absent otherwise.
pub const HEALTH_GATE_CONDITION: &str = "skyhook.nvidia.com/HealthGate";
/// Its reason while nodes wait within the timeout (also the Event when a node begins to wait).
pub const HEALTH_GATE_HOLDING_REASON: &str = "HealthGateHolding";
/// Its reason when a node is past the timeout (also the Warning Event about that node).
pub const HEALTH_GATE_FAILED_REASON: &str = "HealthGateFailed";
/// The Event when a node that waited passes its health gate.
pub const HEALTH_GATE_PASSED_REASON: &str = "HealthGatePassed";

/// Most nodes a health gate condition names (the count says the rest).
const HEALTH_GATE_NODES_NAMED: usize = 10;

/// The nodes that wait for the health gate or failed it, each with why.
pub fn health_gate_message(failed: &[(String, String)], holding: &[(String, String)]) -> String {
    let mut parts = Vec::new();
    for (what, list) in [("failed", failed), ("waiting", holding)] {
        if list.is_empty() {
            continue;
        }
        let named = list.iter().map(|(n, why)| format!("node {n}: {why}"));
        parts.push(format!(
            "{} node(s) {what}: {}",
            list.len(),
            super::short_list(named, HEALTH_GATE_NODES_NAMED, "; ")
        ));
    }
    parts.join(". ")
}

/// Reasons of our own conditions (CamelCase as `metav1.Condition` requires).
pub const VALID_REASON: &str = "Valid";
pub const INVALID_SPEC_REASON: &str = "InvalidSpec";
pub const PACKAGE_ERRORING_REASON: &str = "PackageErroring";
pub const NO_PACKAGE_ERRORING_REASON: &str = "NoPackageErroring";
pub const DRAIN_BLOCKED_REASON: &str = "DrainBlocked";
/// `NodeBlocked` when only nodes that gave their batch slot back for a fault of their own (a
/// stalled Job, writes refused for good) are named.
pub const SLOT_RELEASED_REASON: &str = "SlotReleased";
pub const NOT_BLOCKED_REASON: &str = "NotBlocked";
pub const NODE_STATE_UNREADABLE_REASON: &str = "NodeStateUnreadable";
pub const ROLLOUT_STOPPED_REASON: &str = "RolloutStopped";
pub const ROLLOUT_RUNNING_REASON: &str = "RolloutRunning";
pub const STATUS_TRIMMED_REASON: &str = "StatusTrimmed";
pub const STATUS_COMPLETE_REASON: &str = "StatusComplete";

/// Why the status lists only some nodes, and where the rest are.
pub fn status_trimmed_message(
    skyhook: &str,
    states: usize,
    records: usize,
    nodes: usize,
    budget: usize,
) -> String {
    format!(
        "status.nodeState lists {states} of {nodes} nodes and status.nodeStatus {records} of \
         {nodes} (nodes at work first): the per-node entries are kept under {budget} bytes \
         (STATUS_NODE_BUDGET) so that the object stays within the API server's size limit; \
         every node's progress is in its annotation {}, listed by \
         `kubectl skyhook node list --skyhook {skyhook}`",
        super::node_state_annotation(skyhook)
    )
}

/// Why a compartment stopped, and how to resume it.
pub fn rollout_stopped_message(
    skyhook: &str,
    compartment: &str,
    failures: i64,
    threshold: i64,
) -> String {
    format!(
        "compartment {compartment} stopped after {failures} failed batch(es) in a row \
         (failureThreshold {threshold}); fix the failing package, then run \
         `kubectl skyhook deployment-policy reset {skyhook}` to resume"
    )
}
/// Event reason: a Job name this pass needs is taken by a Job doing other work.
pub const JOB_NAME_TAKEN_REASON: &str = "JobNameTaken";
pub const NODE_STATE_READABLE_REASON: &str = "NodeStateReadable";

/// One node whose stored state cannot be read: which key, why, and the start of the value.
pub fn node_state_unreadable_message(node: &str, key: &str, error: &str, value: &str) -> String {
    let mut shown: String = value.chars().take(80).collect();
    if shown.len() < value.len() {
        shown.push('…');
    }
    format!(
        "node {node}: annotation {key} cannot be read ({error}): {shown:?}; the node is left \
         untouched until the value is fixed or removed (kubectl skyhook node reset {node})"
    )
}

pub fn transition_message(prior: Status, current: Status) -> String {
    format!("Transitioned [{prior}] -> [{current}]")
}

pub fn apply_package_message(package: &str, version: &str, node: &str) -> String {
    format!("Applying package [{package}:{version}] to node [{node}]")
}

/// Node names a condition message lists before counting the rest: the reference lists every one,
/// which at thousands of tainted or ignored nodes puts tens of kilobytes into each status write
/// (outside the per-node budget) and a message no one reads to its end.
pub const MESSAGE_NODES_LISTED: usize = 20;

/// `a, b, c` or, past [`MESSAGE_NODES_LISTED`], the first ones and `and N more`.
fn node_list(nodes: &[&str]) -> String {
    super::short_list(nodes, MESSAGE_NODES_LISTED, ", ")
}

pub fn taint_not_tolerable_message(nodes: &[&str]) -> String {
    if nodes.is_empty() {
        "All nodes have tolerable taints.".to_owned()
    } else {
        format!(
            "Node [{}] has taints that are not tolerable. Skipping.",
            node_list(nodes)
        )
    }
}

pub fn nodes_ignored_message(nodes: &[&str]) -> String {
    if nodes.is_empty() {
        "No nodes have ignore label set.".to_owned()
    } else {
        format!(
            "Node [{}] has ignore label set. Skipping.",
            node_list(nodes)
        )
    }
}

pub fn deployment_policy_not_found_message(policy: &str) -> String {
    format!("DeploymentPolicy {policy:?} not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_interrupt_pods_message_as_upstream_words_it() {
        assert_eq!(
            non_interrupt_pods_message(&["n2", "n1"]),
            "2 node(s) blocked by non-interrupt pods (n1, n2). Waiting."
        );
        let many: Vec<String> = (0..12).map(|i| format!("n{i:02}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(non_interrupt_pods_message(&refs).ends_with("n09 and 2 more). Waiting."));
    }

    #[test]
    fn drain_blocked_message_as_upstream_words_it() {
        let blocks = [
            (
                "n2",
                "apps/web-2",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
            (
                "n1",
                "apps/web-1",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
        ];
        assert_eq!(
            drain_blocked_message(&blocks, 3),
            "2/3 nodes blocked draining (n1, n2); apps/web-1 on n1: Cannot evict pod as it would \
             violate the pod's disruption budget.; apps/web-2 on n2: Cannot evict pod as it would \
             violate the pod's disruption budget."
        );
    }

    #[test]
    fn malformed_message_as_upstream_words_it() {
        assert_eq!(
            node_state_malformed_message(&["b", "a-very-long-node-name"]),
            "nodeState annotation cannot be parsed on 2 node(s): a-very-lon..., b"
        );
        let many = ["n1", "n2", "n3", "n4", "n5", "n6", "n7"];
        assert_eq!(
            node_state_malformed_message(&many),
            "nodeState annotation cannot be parsed on 7 node(s): n1, n2, n3, n4, n5 and 2 more"
        );
    }

    /// Upstream's wording (`skyhookReadyConditionMessageFromStatusGroups`, v0.16).
    #[test]
    fn ready_message_counts_nodes_as_upstream_does() {
        use Status::*;
        let cases: Vec<(Vec<(&str, Status)>, &str)> = vec![
            (vec![], "0/0 nodes complete"),
            (
                vec![("b", Complete), ("a", Complete)],
                "2/2 nodes complete (a, b)",
            ),
            (
                vec![("n3", Blocked), ("n1", Complete), ("n2", InProgress)],
                "1/3 nodes complete (n1), 1 in progress (n2), 1 blocked (n3)",
            ),
            (
                vec![("x", Unknown), ("w", Waiting), ("e", Erroring)],
                "0/3 nodes complete, 1 erroring (e), 1 waiting (w), 1 unknown (x)",
            ),
        ];
        for (nodes, want) in cases {
            assert_eq!(ready_message(nodes), want);
        }
        let many: Vec<String> = (0..11).map(|i| format!("n{i:02}")).collect();
        assert_eq!(
            ready_message(many.iter().map(|n| (n.as_str(), Complete))),
            "11/11 nodes complete (list truncated; see controller logs)"
        );
        assert_eq!(ready_reason(Complete), "NodesConverged");
        assert_eq!(ready_reason(InProgress), "Progressing");
    }

    #[test]
    fn node_conditions() {
        assert_eq!(
            node_not_ready_condition("sh"),
            "skyhook.nvidia.com/sh/NotReady"
        );
        assert_eq!(
            node_erroring_condition("sh"),
            "skyhook.nvidia.com/sh/Erroring"
        );
        assert!(node_erroring_condition("sh").starts_with(&node_condition_prefix("sh")));
        assert_eq!(node_not_ready_message("sh"), "Skyhook sh Ready");
        assert_eq!(
            node_erroring_message("sh"),
            "Package Erroring or Unknown for sh"
        );
    }

    #[test]
    fn skyhook_messages() {
        assert_eq!(
            transition_message(Status::InProgress, Status::Complete),
            "Transitioned [in_progress] -> [complete]"
        );
        assert_eq!(
            apply_package_message("dexter", "1.2.3", "kind-worker"),
            "Applying package [dexter:1.2.3] to node [kind-worker]"
        );
        assert_eq!(
            taint_not_tolerable_message(&["a", "b"]),
            "Node [a, b] has taints that are not tolerable. Skipping."
        );
        assert_eq!(
            taint_not_tolerable_message(&[]),
            "All nodes have tolerable taints."
        );
        assert_eq!(
            nodes_ignored_message(&["a"]),
            "Node [a] has ignore label set. Skipping."
        );
        assert_eq!(
            nodes_ignored_message(&[]),
            "No nodes have ignore label set."
        );
        let many: Vec<String> = (0..25).map(|i| format!("n{i:02}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            taint_not_tolerable_message(&many[..MESSAGE_NODES_LISTED]),
            format!(
                "Node [{}] has taints that are not tolerable. Skipping.",
                many[..MESSAGE_NODES_LISTED].join(", ")
            )
        );
        assert_eq!(
            nodes_ignored_message(&many),
            format!(
                "Node [{} and 5 more] has ignore label set. Skipping.",
                many[..MESSAGE_NODES_LISTED].join(", ")
            )
        );
        assert_eq!(
            deployment_policy_not_found_message("p1"),
            "DeploymentPolicy \"p1\" not found"
        );
    }
}
