//! Interrupt pods that stay up, or fail, on kwok. An interrupt Job's container carries only the
//! agent env (as in the reference), so a package's `SLEEP_LEN` never reaches it and it finishes
//! at once. [`SlowInterrupts`] installs a MutatingAdmissionPolicy scoped to the test's namespace
//! that adds one variable (`SLEEP_LEN`, `HANG`, `EXIT_CODE`) to the pods of interrupt Jobs as
//! they are created; kwok then follows its usual conventions (docs/testing.md).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::json;
use skyhook::schema;

use super::{TestCtx, cluster};

/// A MutatingAdmissionPolicy (and its binding) that adds one env variable to the container of
/// every interrupt pod created in the test's namespace. Removed on drop.
pub struct SlowInterrupts {
    name: String,
    ns: String,
    client: kube::Client,
    var: (String, String),
}

/// The cluster-scoped admissionregistration.k8s.io/v1 API of `kind` (policies and bindings).
pub fn admission_api(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::all_with(client.clone(), &ar)
}

impl SlowInterrupts {
    /// Installs the policy and waits until the API server applies it.
    pub async fn install(ctx: &TestCtx, var: &str, value: &str) -> SlowInterrupts {
        let name = ctx.name("slow-interrupts");
        let patch = format!(
            r#"[JSONPatch{{op: "add", path: "/spec/containers/0/env/-", value: Object.spec.containers.env{{name: "{var}", value: "{value}"}}}}]"#
        );
        let policy: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "matchConstraints": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ctx.ns}},
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["pods"]}],
                },
                // A Skyhook's interrupt pods or a NodeWright's (its label under its prefix).
                "matchConditions": [{"name": "interrupt-pods", "expression": format!(
                    r#"has(object.metadata.labels) && object.metadata.labels.exists(k, k == "{}" || k == "{}")"#,
                    schema::INTERRUPT_LABEL,
                    schema::Api::NodeWright.local(schema::INTERRUPT_LABEL))}],
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
            },
        }))
        .expect("policy");
        let binding: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name},
        }))
        .expect("binding");
        let pp = PostParams::default();
        admission_api(
            &ctx.client,
            "MutatingAdmissionPolicy",
            "mutatingadmissionpolicies",
        )
        .create(&pp, &policy)
        .await
        .expect("create MutatingAdmissionPolicy");
        admission_api(
            &ctx.client,
            "MutatingAdmissionPolicyBinding",
            "mutatingadmissionpolicybindings",
        )
        .create(&pp, &binding)
        .await
        .expect("create MutatingAdmissionPolicyBinding");
        let slow = SlowInterrupts {
            name,
            ns: ctx.ns.clone(),
            client: ctx.client.clone(),
            var: (var.to_string(), value.to_string()),
        };
        ctx.wait_for(
            "the MutatingAdmissionPolicy to take effect",
            Duration::from_secs(30),
            || async { slow.effective().await.then_some(()) },
        )
        .await;
        slow
    }

    /// Whether an interrupt pod created now gets the variable (a server-side dry run).
    async fn effective(&self) -> bool {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "probe", "labels": {schema::INTERRUPT_LABEL: "True"}},
            "spec": {"automountServiceAccountToken": false,
                "containers": [{"name": "interrupt", "image": "example.com/x:1",
                    "env": [{"name": "PROBE", "value": "1"}]}]},
        }))
        .expect("pod");
        let pp = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let p = match pods.create(&pp, &pod).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("probing the MutatingAdmissionPolicy: {e}");
                return false;
            }
        };
        p.spec
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.env)
            .unwrap_or_default()
            .iter()
            .any(|e| e.name == self.var.0 && e.value.as_deref() == Some(self.var.1.as_str()))
    }

    /// Removes the policy and waits until new interrupt pods are left alone.
    pub async fn remove(&self, ctx: &TestCtx) {
        self.delete();
        ctx.wait_for(
            "the MutatingAdmissionPolicy to be gone",
            Duration::from_secs(30),
            || async { (!self.effective().await).then_some(()) },
        )
        .await;
    }

    fn delete(&self) {
        let _ = cluster()
            .kubectl()
            .args([
                "delete",
                &format!("mutatingadmissionpolicybinding/{}", self.name),
                &format!("mutatingadmissionpolicy/{}", self.name),
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
    }
}

impl Drop for SlowInterrupts {
    fn drop(&mut self) {
        self.delete();
    }
}

/// The Job has finished (Complete or Failed).
pub fn finished(j: &Job) -> bool {
    j.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// The pod has finished (Succeeded or Failed).
pub fn pod_done(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}
