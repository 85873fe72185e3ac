//! A ValidatingAdmissionPolicy of the test that refuses some writes, removed on drop: for tests
//! of writes refused for good (a policy engine saying no).

use std::future::Future;
use std::time::Duration;

use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use super::interrupts::admission_api;
use super::{TestCtx, cluster};

/// The policy and its binding, named after the test.
pub struct Refusal {
    name: String,
}

impl Refusal {
    /// Refuses CREATE and UPDATE of `resource` objects (a core plural such as `configmaps`, or
    /// `group/version/plural` such as `batch/v1/jobs`; `namespaced`: only in the test's
    /// namespace) for which `expression` is false, with `message`. Returns once `refused` (a
    /// dry run of such a write) says the API server applies it.
    pub async fn install<F, Fut>(
        ctx: &TestCtx,
        resource: &str,
        namespaced: bool,
        expression: &str,
        message: &str,
        mut refused: F,
    ) -> Refusal
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        // One name per policy: a test (the fault campaign) may hold two at once, or install one
        // while the last one's removal has not reached the API server.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = ctx.name(&format!("refuse-{n}"));
        let (group, version, plural) = match resource.splitn(3, '/').collect::<Vec<_>>()[..] {
            [g, v, p] => (g, v, p),
            _ => ("", "v1", resource),
        };
        let mut constraints = json!({
            "resourceRules": [{"apiGroups": [group], "apiVersions": [version],
                "operations": ["CREATE", "UPDATE"], "resources": [plural]}],
        });
        if namespaced {
            constraints["namespaceSelector"] =
                json!({"matchLabels": {"kubernetes.io/metadata.name": ctx.ns}});
        }
        let object = |v: Value| -> DynamicObject { serde_json::from_value(v).expect("object") };
        let policy = object(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": constraints,
                "validations": [{"expression": expression, "message": message}],
            },
        }));
        let binding = object(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }));
        let pp = PostParams::default();
        let kinds = [
            (
                "ValidatingAdmissionPolicy",
                "validatingadmissionpolicies",
                policy,
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "validatingadmissionpolicybindings",
                binding,
            ),
        ];
        for (kind, plural, obj) in kinds {
            admission_api(&ctx.client, kind, plural)
                .create(&pp, &obj)
                .await
                .unwrap_or_else(|e| panic!("create {kind}: {e}"));
        }
        // The policy is served from an informer: wait until a dry run is refused.
        ctx.wait_for("the policy to refuse", Duration::from_secs(30), || {
            let probe = refused();
            async move { probe.await.then_some(()) }
        })
        .await;
        Refusal { name }
    }

    /// Removes the policy (also done on drop); whether the API server took the deletes (false
    /// while it is down, so that a caller can try again).
    pub fn remove(&self) -> bool {
        cluster()
            .kubectl()
            .args([
                "delete",
                &format!("validatingadmissionpolicybinding/{}", self.name),
                &format!("validatingadmissionpolicy/{}", self.name),
                "--ignore-not-found",
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for Refusal {
    fn drop(&mut self) {
        self.remove();
    }
}
