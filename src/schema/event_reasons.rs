//! Kubernetes Event reasons and messages (all events are type `Normal`).

use super::{Stage, State, Status};

/// Reporting component of every event.
pub const EVENT_COMPONENT: &str = "skyhook-controller";

pub const APPLY_REASON: &str = "Apply";
/// A NodeWright waits for the Skyhook of its name to finish its rollout before taking over.
pub const WAITING_FOR_SKYHOOK_REASON: &str = "WaitingForSkyhook";
/// Warning on a Skyhook edited after the NodeWright of its name took it over: the edit is not
/// applied.
pub const EDIT_NOT_APPLIED_REASON: &str = "EditNotApplied";
/// Warning on a Skyhook its owner released from its NodeWright: its spec runs again.
pub const RELEASED_FROM_NODEWRIGHT_REASON: &str = "ReleasedFromNodeWright";
/// Warning on a legacy object whose mirror the API server refuses for good (a 403: the operator
/// lacks a right), so the migration cannot go on.
pub const MIGRATION_REFUSED_REASON: &str = "MigrationRefused";
/// A legacy Skyhook or DeploymentPolicy mirrored into the `nodewright.nvidia.com` group.
pub const MIRRORED_REASON: &str = "MirroredToNodeWright";
pub const INTERRUPT_REASON: &str = "Interrupt";
pub const STATE_REASON: &str = "State";
pub const REBOOT_REASON: &str = "Reboot";
/// A node this Skyhook no longer selects (or that is gone) is let go.
pub const RELEASED_REASON: &str = "Released";
/// Warning on a node whose auto-taint was refused (upstream's reason, delta D47).
pub const AUTO_TAINT_REASON: &str = "AutoTaint";
/// Warning: a drain took longer than `drainConfig.timeout` (upstream v0.18's reason).
pub const DRAIN_TIMEOUT_REASON: &str = "DrainTimeout";

/// On the Node and the Skyhook when a node that left the selector is let go.
pub fn node_released_message(skyhook: &str, node: &str) -> String {
    format!(
        "Node [{node}] is no longer selected by [skyhook:{skyhook}]: its cordon and \
         runtime-required taint are released"
    )
}

/// On the Skyhook when the Jobs of a node that no longer exists are deleted.
pub fn node_gone_message(node: &str, jobs: usize) -> String {
    format!("Node [{node}] no longer exists: its {jobs} Job(s) of this Skyhook are deleted")
}

/// On the Node when a stage starts.
pub fn node_apply_message(package: &str, version: &str, skyhook: &str, stage: Stage) -> String {
    format!("Applying package [{package}:{version}] from [skyhook:{skyhook}] stage [{stage}]")
}

/// On the Skyhook when a stage starts.
pub fn skyhook_apply_message(package: &str, version: &str, node: &str, stage: Stage) -> String {
    format!("Applying package [{package}:{version}] to node [{node}] stage [{stage}]")
}

/// On the Node when one stage of several packages starts in the same pass (one Event instead
/// of one per package; `packages` are `name:version`).
pub fn node_apply_many_message(packages: &[String], skyhook: &str, stage: Stage) -> String {
    match packages {
        [one] => format!("Applying package [{one}] from [skyhook:{skyhook}] stage [{stage}]"),
        many => format!(
            "Applying packages [{}] from [skyhook:{skyhook}] stage [{stage}]",
            many.join(", ")
        ),
    }
}

/// On the Skyhook when one stage of a package starts on several nodes in the same pass (one
/// Event per package and stage instead of one per node; a long list is cut).
pub fn skyhook_apply_many_message(
    package: &str,
    version: &str,
    nodes: &[String],
    stage: Stage,
) -> String {
    const SHOWN: usize = 5;
    match nodes {
        [one] => skyhook_apply_message(package, version, one, stage),
        many => {
            let list = super::short_list(many, SHOWN, ", ");
            format!("Applying package [{package}:{version}] to nodes [{list}] stage [{stage}]")
        }
    }
}

/// On the Node when packages completed in the same pass.
pub fn node_packages_complete_message(packages: &[String], skyhook: &str) -> String {
    match packages {
        [one] => format!("Package [{one}] state complete on [skyhook:{skyhook}]"),
        many => format!(
            "Packages [{}] state complete on [skyhook:{skyhook}]",
            many.join(", ")
        ),
    }
}

/// On the Node when a stage finished (`state` is `complete` or `erroring`).
pub fn node_package_state_message(
    package: &str,
    version: &str,
    state: State,
    skyhook: &str,
) -> String {
    format!("Package [{package}:{version}] state {state} on [skyhook:{skyhook}]")
}

/// On the Node when it is drained.
pub fn node_drain_message(node: &str, package: &str, version: &str, skyhook: &str) -> String {
    format!("draining node [{node}] package [{package}:{version}] from [skyhook:{skyhook}]")
}

/// On the Skyhook when the interrupt starts.
pub fn skyhook_interrupt_message(
    node: &str,
    package: &str,
    version: &str,
    skyhook: &str,
) -> String {
    format!("Interrupting node [{node}] package [{package}:{version}] from [skyhook:{skyhook}]")
}

/// On the Node when the Skyhook completed there.
pub fn node_complete_message(skyhook: &str) -> String {
    format!("Skyhook [{skyhook}] complete.")
}

/// On the Skyhook when its aggregate status changed.
pub fn skyhook_transition_message(old: Status, new: Status) -> String {
    format!("Skyhook transitioned [{old}] -> [{new}]")
}

/// On the Skyhook when a node reboot resets it.
pub fn skyhook_reboot_message(node: &str) -> String {
    format!("detected reboot, resetting node [{node}] to be reapplied")
}

/// On the Node when a reboot resets it.
pub fn node_reboot_message(skyhook: &str) -> String {
    format!("detected reboot, resetting node for [{skyhook}] to be reapplied")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        assert_eq!(
            node_apply_message("p", "1", "sh", Stage::Apply),
            "Applying package [p:1] from [skyhook:sh] stage [apply]"
        );
        assert_eq!(
            skyhook_apply_message("p", "1", "n", Stage::Config),
            "Applying package [p:1] to node [n] stage [config]"
        );
        assert_eq!(
            node_package_state_message("p", "1", State::Complete, "sh"),
            "Package [p:1] state complete on [skyhook:sh]"
        );
        assert_eq!(
            node_drain_message("n", "p", "1", "sh"),
            "draining node [n] package [p:1] from [skyhook:sh]"
        );
        assert_eq!(
            skyhook_interrupt_message("n", "p", "1", "sh"),
            "Interrupting node [n] package [p:1] from [skyhook:sh]"
        );
        assert_eq!(node_complete_message("sh"), "Skyhook [sh] complete.");
        assert_eq!(
            skyhook_transition_message(Status::InProgress, Status::Complete),
            "Skyhook transitioned [in_progress] -> [complete]"
        );
        assert_eq!(
            skyhook_reboot_message("n"),
            "detected reboot, resetting node [n] to be reapplied"
        );
        assert_eq!(
            node_reboot_message("sh"),
            "detected reboot, resetting node for [sh] to be reapplied"
        );
    }
}
