//! Deletion protection of DeploymentPolicies in use, the way Kubernetes protects a bound
//! PersistentVolumeClaim: a finalizer held while some Skyhook names the policy. The reference
//! refuses such deletes in its admission webhook; there is no webhook here, so the delete is
//! accepted and completes once the last Skyhook lets go of the policy.

use std::sync::Arc;

use kube::ResourceExt;

use crate::crd::{DeploymentPolicy, Skyhook};
use crate::schema;

/// What the operator does with one policy's finalizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// In use and unprotected: add the finalizer.
    Protect,
    /// Protected and no longer in use: remove the finalizer (a pending delete completes).
    Release,
    /// Deleted while in use by these Skyhooks: keep the finalizer and say who holds it.
    Hold {
        users: Vec<String>,
    },
    Nothing,
}

/// The Skyhooks naming `policy`, sorted.
pub fn users(policy: &DeploymentPolicy, skyhooks: &[Arc<Skyhook>]) -> Vec<String> {
    let name = policy.name_any();
    let mut out: Vec<String> = skyhooks
        .iter()
        .filter(|s| s.spec.deployment_policy.as_deref() == Some(name.as_str()))
        .map(|s| s.name_any())
        .collect();
    out.sort();
    out
}

pub fn guard(policy: &DeploymentPolicy, skyhooks: &[Arc<Skyhook>]) -> Guard {
    let users = users(policy, skyhooks);
    let protected = policy
        .finalizers()
        .iter()
        .any(|f| f == schema::POLICY_FINALIZER);
    let deleting = policy.metadata.deletion_timestamp.is_some();
    match (protected, users.is_empty(), deleting) {
        (true, true, _) => Guard::Release,
        (true, false, true) => Guard::Hold { users },
        (false, false, false) => Guard::Protect,
        _ => Guard::Nothing,
    }
}

/// The Event a held deletion publishes, naming the Skyhooks and the fix.
pub fn hold_message(policy: &str, users: &[String]) -> String {
    format!(
        "DeploymentPolicy {policy} is still used by Skyhook(s) {}; it is deleted once none names \
         it (change or remove their spec.deploymentPolicy, or delete them)",
        users.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use crate::plan::fixtures::{policy, skyhook};

    /// Policy `p`, protected by its finalizer or not, being deleted or not.
    fn policy_in(finalized: bool, deleting: bool) -> DeploymentPolicy {
        let mut p = policy(
            json!([]),
            json!({"budget": {"count": 1}, "strategy": {"fixed": {}}}),
        );
        if finalized {
            p.metadata.finalizers = Some(vec![schema::POLICY_FINALIZER.to_string()]);
        }
        if deleting {
            p.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        }
        p
    }

    #[test]
    fn guard_table() {
        let using = vec![
            skyhook("b").policy("p").arc(),
            skyhook("a").policy("p").arc(),
            skyhook("c").policy("q").arc(),
        ];
        let none = vec![skyhook("c").policy("q").arc(), skyhook("d").arc()];
        let held = Guard::Hold {
            users: vec!["a".into(), "b".into()],
        };
        // (case, finalizer, deleting, skyhooks, guard)
        let cases: Vec<(&str, bool, bool, &Vec<Arc<Skyhook>>, Guard)> = vec![
            (
                "in use, unprotected: protect",
                false,
                false,
                &using,
                Guard::Protect,
            ),
            (
                "in use, protected: nothing",
                true,
                false,
                &using,
                Guard::Nothing,
            ),
            (
                "unused, protected: release",
                true,
                false,
                &none,
                Guard::Release,
            ),
            (
                "unused, unprotected: nothing",
                false,
                false,
                &none,
                Guard::Nothing,
            ),
            (
                "deleted in use: hold, naming the users",
                true,
                true,
                &using,
                held,
            ),
            (
                "deleted, no longer used: release",
                true,
                true,
                &none,
                Guard::Release,
            ),
            (
                "deleted before it was protected: nothing to hold",
                false,
                true,
                &using,
                Guard::Nothing,
            ),
        ];
        for (case, finalized, deleting, skyhooks, want) in cases {
            assert_eq!(
                guard(&policy_in(finalized, deleting), skyhooks),
                want,
                "case: {case}"
            );
        }
    }
}
