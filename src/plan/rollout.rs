//! How many nodes a rollout may work on at once (§6.2, §6.5). The budget caps every kind of
//! change: installs, upgrades, downgrades, removals and config changes alike (the reference lets
//! version and config changes hit every node at once: §10.2 item 8a).

use std::sync::Arc;

use crate::crd::{DeploymentBudget, DeploymentPolicy, Skyhook};

/// §6.2 with the reference's float arithmetic (percent 29 of 100 nodes is 28).
pub fn ceiling(percent: Option<i64>, count: Option<i64>, matched: usize) -> usize {
    match (count, percent) {
        (Some(c), _) => c.max(0) as usize,
        (None, Some(p)) if matched > 0 => {
            ((matched as f64) * (p as f64 / 100.0)).trunc().max(1.0) as usize
        }
        _ => 0,
    }
}

/// Nodes one batch may hold: the legacy `interruptionBudget` (§6.5: count ⇒ max(1, min(n,
/// count)); percent ⇒ max(1, trunc(n·p/100)); none ⇒ every node), or the referenced policy's
/// default budget. Always at least 1.
pub fn batch_size(sk: &Skyhook, policies: &[Arc<DeploymentPolicy>], nodes: usize) -> usize {
    let budget: Option<DeploymentBudget> = match sk.spec.deployment_policy.as_deref() {
        Some(name) if !name.is_empty() => policies
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .map(|p| p.spec.default.budget.clone()),
        _ => Some(DeploymentBudget {
            percent: sk.spec.interruption_budget.percent,
            count: sk.spec.interruption_budget.count,
        }),
    };
    // A missing policy stops the rollout rather than guessing a budget.
    let Some(budget) = budget else { return 0 };
    let size = match budget {
        DeploymentBudget { count: Some(c), .. } => (c.max(0) as usize).min(nodes),
        DeploymentBudget {
            percent: Some(p), ..
        } => ceiling(Some(p), None, nodes),
        _ => nodes,
    };
    if nodes == 0 { 0 } else { size.max(1) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::SkyhookSpec;

    fn sk(percent: Option<i64>, count: Option<i64>) -> Skyhook {
        let mut spec = SkyhookSpec::default();
        spec.interruption_budget.percent = percent;
        spec.interruption_budget.count = count;
        Skyhook::new("s", spec)
    }

    #[test]
    fn legacy_budgets_match_the_reference_unit_tests() {
        for (nodes, want) in [(2, 1), (6, 1), (10, 2), (15, 3)] {
            assert_eq!(
                batch_size(&sk(Some(20), None), &[], nodes),
                want,
                "20% of {nodes}"
            );
        }
        assert_eq!(batch_size(&sk(Some(0), None), &[], 15), 1);
        assert_eq!(batch_size(&sk(None, Some(1)), &[], 2), 1);
        assert_eq!(batch_size(&sk(None, Some(2)), &[], 6), 2);
        assert_eq!(batch_size(&sk(None, Some(0)), &[], 10), 1);
        assert_eq!(batch_size(&sk(None, None), &[], 7), 7);
        assert_eq!(batch_size(&sk(None, Some(3)), &[], 0), 0);
    }

    #[test]
    fn percent_ceiling_uses_float_math() {
        assert_eq!(ceiling(Some(29), None, 100), 28);
        assert_eq!(ceiling(Some(33), None, 3), 1);
        assert_eq!(ceiling(Some(50), None, 0), 0);
    }

    #[test]
    fn missing_policy_starts_nothing() {
        let mut s = sk(None, None);
        s.spec.deployment_policy = Some("gone".into());
        assert_eq!(batch_size(&s, &[], 5), 0);
    }
}
