//! The reference's ported scenarios (`crate::scenarios`) run a second time on NodeWrights (issue
//! 39, acceptance 1): the same steps, with the objects, node keys, taint and metric names of the
//! `nodewright.nvidia.com` API. The operator serves NodeWrights alone; the test speaks the legacy
//! API through a translating proxy (`support::translate`), which hides every legacy key the
//! cluster holds, so a pass here means the NodeWright keys carried the scenario.

use skyhook::schema::Api;

use crate::scenarios;
use crate::support::under;

mod cli {
    use super::*;

    #[tokio::test]
    async fn deployment_policy() {
        under(
            Api::NodeWright,
            scenarios::cli::scenario_deployment_policy(),
        )
        .await;
    }

    #[tokio::test]
    async fn lifecycle() {
        under(Api::NodeWright, scenarios::cli::scenario_lifecycle()).await;
    }

    #[tokio::test]
    async fn node() {
        under(Api::NodeWright, scenarios::cli::scenario_node()).await;
    }

    #[tokio::test]
    async fn package() {
        under(Api::NodeWright, scenarios::cli::scenario_package()).await;
    }

    #[tokio::test]
    async fn reset() {
        under(Api::NodeWright, scenarios::cli::scenario_reset()).await;
    }
}

mod config {
    use super::*;

    #[tokio::test]
    async fn config_skyhook() {
        under(
            Api::NodeWright,
            scenarios::config::scenario_config_skyhook(),
        )
        .await;
    }
}

mod lifecycle {
    use super::*;

    #[tokio::test]
    async fn simple_skyhook() {
        under(
            Api::NodeWright,
            scenarios::lifecycle::scenario_simple_skyhook(),
        )
        .await;
    }

    #[tokio::test]
    async fn simple_update_skyhook() {
        under(
            Api::NodeWright,
            scenarios::lifecycle::scenario_simple_update_skyhook(),
        )
        .await;
    }

    #[tokio::test]
    async fn skyhook_upgrade() {
        under(
            Api::NodeWright,
            scenarios::lifecycle::scenario_skyhook_upgrade(),
        )
        .await;
    }

    #[tokio::test]
    async fn uninstall_upgrade_skyhook() {
        under(
            Api::NodeWright,
            scenarios::lifecycle::scenario_uninstall_upgrade_skyhook(),
        )
        .await;
    }

    #[tokio::test]
    async fn validate_packages() {
        under(
            Api::NodeWright,
            scenarios::lifecycle::scenario_validate_packages(),
        )
        .await;
    }

    #[tokio::test]
    async fn delete_skyhook() {
        under(
            Api::NodeWright,
            scenarios::lifecycle::scenario_delete_skyhook(),
        )
        .await;
    }

    #[tokio::test]
    async fn depends_on() {
        under(Api::NodeWright, scenarios::lifecycle::scenario_depends_on()).await;
    }

    #[tokio::test]
    async fn cleanup_pods() {
        under(
            Api::NodeWright,
            scenarios::lifecycle::scenario_cleanup_pods(),
        )
        .await;
    }
}

mod order {
    use super::*;

    #[tokio::test]
    async fn strict_order() {
        under(Api::NodeWright, scenarios::order::scenario_strict_order()).await;
    }
}

mod policy {
    use super::*;

    #[tokio::test]
    async fn batch_state_reset() {
        under(
            Api::NodeWright,
            scenarios::policy::scenario_batch_state_reset(),
        )
        .await;
    }

    #[tokio::test]
    async fn legacy_compatibility() {
        under(
            Api::NodeWright,
            scenarios::policy::scenario_legacy_compatibility(),
        )
        .await;
    }

    #[tokio::test]
    async fn linear_strategy() {
        under(
            Api::NodeWright,
            scenarios::policy::scenario_linear_strategy(),
        )
        .await;
    }

    #[tokio::test]
    async fn multi_compartment() {
        under(
            Api::NodeWright,
            scenarios::policy::scenario_multi_compartment(),
        )
        .await;
    }

    #[tokio::test]
    async fn overlapping_selectors() {
        under(
            Api::NodeWright,
            scenarios::policy::scenario_overlapping_selectors(),
        )
        .await;
    }
}

mod rollout {
    use super::*;

    #[tokio::test]
    async fn interrupt() {
        under(Api::NodeWright, scenarios::rollout::scenario_interrupt()).await;
    }

    #[tokio::test]
    async fn interrupt_grouping() {
        under(
            Api::NodeWright,
            scenarios::rollout::scenario_interrupt_grouping(),
        )
        .await;
    }

    #[tokio::test]
    async fn runtime_required() {
        under(
            Api::NodeWright,
            scenarios::rollout::scenario_runtime_required(),
        )
        .await;
    }

    #[tokio::test]
    async fn auto_taint_new_nodes() {
        under(
            Api::NodeWright,
            scenarios::rollout::scenario_auto_taint_new_nodes(),
        )
        .await;
    }

    #[tokio::test]
    async fn taint_scheduling() {
        under(
            Api::NodeWright,
            scenarios::rollout::scenario_taint_scheduling(),
        )
        .await;
    }

    #[tokio::test]
    async fn failure_skyhook() {
        under(
            Api::NodeWright,
            scenarios::rollout::scenario_failure_skyhook(),
        )
        .await;
    }
}
