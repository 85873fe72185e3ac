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

    fn policy(name: &str, budget: serde_json::Value) -> Arc<DeploymentPolicy> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
                "metadata": {"name": name},
                "spec": {"default": {"budget": budget, "strategy": {"fixed": {}}}},
            }))
            .expect("policy"),
        )
    }

    #[test]
    fn batch_size_table() {
        use serde_json::json;
        let policies = vec![
            policy("two", json!({"count": 2})),
            policy("ten", json!({"count": 10})),
            policy("quarter", json!({"percent": 25})),
            policy("none", json!({})),
        ];
        // (case, legacy percent, legacy count, deploymentPolicy, nodes, batch size)
        let cases: &[(&str, Option<i64>, Option<i64>, Option<&str>, usize, usize)] = &[
            (
                "count over the node count is capped",
                None,
                Some(10),
                None,
                3,
                3,
            ),
            ("count under the node count", None, Some(2), None, 5, 2),
            ("count equal to the node count", None, Some(4), None, 4, 4),
            (
                "negative count still starts one",
                None,
                Some(-3),
                None,
                4,
                1,
            ),
            (
                "percent 29 of 100 is 28 (float math)",
                Some(29),
                None,
                None,
                100,
                28,
            ),
            ("percent 33 of 3 is 1", Some(33), None, None, 3, 1),
            ("percent 1 of 50 is at least 1", Some(1), None, None, 50, 1),
            ("percent 50 of 7 truncates to 3", Some(50), None, None, 7, 3),
            (
                "percent 100 of 7 is every node",
                Some(100),
                None,
                None,
                7,
                7,
            ),
            ("percent with no node", Some(50), None, None, 0, 0),
            ("no budget: every node", None, None, None, 9, 9),
            ("no budget and no node", None, None, None, 0, 0),
            (
                "an empty policy name reads as no policy",
                None,
                Some(2),
                Some(""),
                6,
                2,
            ),
            (
                "missing policy starts nothing",
                None,
                None,
                Some("gone"),
                5,
                0,
            ),
            (
                "missing policy ignores the legacy budget",
                None,
                Some(3),
                Some("gone"),
                5,
                0,
            ),
            ("policy default count", None, None, Some("two"), 10, 2),
            (
                "policy default count capped by nodes",
                None,
                None,
                Some("ten"),
                4,
                4,
            ),
            ("policy default percent", None, None, Some("quarter"), 10, 2),
            (
                "policy default percent, at least 1",
                None,
                None,
                Some("quarter"),
                3,
                1,
            ),
            (
                "the policy wins over interruptionBudget",
                None,
                Some(5),
                Some("two"),
                10,
                2,
            ),
            (
                "policy without a budget: every node",
                None,
                None,
                Some("none"),
                6,
                6,
            ),
        ];
        for &(name, percent, count, pol, nodes, want) in cases {
            let mut s = sk(percent, count);
            s.spec.deployment_policy = pol.map(String::from);
            assert_eq!(batch_size(&s, &policies, nodes), want, "case: {name}");
        }
    }

    #[test]
    fn ceiling_table() {
        // (case, percent, count, matched, ceiling)
        let cases: &[(&str, Option<i64>, Option<i64>, usize, usize)] = &[
            ("percent 29 of 100", Some(29), None, 100, 28),
            ("percent 33 of 3", Some(33), None, 3, 1),
            ("percent 1 of 50 has a minimum of 1", Some(1), None, 50, 1),
            ("percent 20 of 15", Some(20), None, 15, 3),
            ("percent of no node", Some(50), None, 0, 0),
            (
                "count is taken as is, like the reference",
                None,
                Some(4),
                2,
                4,
            ),
            ("count wins over percent", Some(100), Some(1), 10, 1),
            ("negative count is 0", None, Some(-5), 10, 0),
            ("neither", None, None, 10, 0),
        ];
        for &(name, percent, count, matched, want) in cases {
            assert_eq!(ceiling(percent, count, matched), want, "case: {name}");
        }
    }
}
