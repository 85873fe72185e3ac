//! Taking over from the Go operator in mid-stage: its package pod (the reference's labels,
//! annotation and pod shape, §2.6 and §4.2) is still on the node when this operator starts. It
//! is awaited and its outcome recorded, or deleted if stale, and only then does a Job run.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, NodeState, Stage, State};

use crate::support::{Env, Operator, TestCtx, install_crds, label, skyhook};

const IMAGE: &str = "ghcr.io/nvidia/skyhook-packages/shellscript";
const PKG: &str = "spencer";

fn env(pairs: &[(&str, &str)]) -> Value {
    json!(
        pairs
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect::<Vec<_>>()
    )
}

/// The Go operator's stage pod for `version` at `stage` on `node` (§4.2): owned by the Skyhook,
/// `restartPolicy: OnFailure`, init containers `<pkg>-init`, `<pkg>-<stage>` and
/// `<pkg>-<stage>check` (the last two with the package env), and a pause container.
fn go_pod(sk: &Skyhook, version: &str, stage: Stage, node: &str, pkg_env: Value) -> Pod {
    let name = sk.name_any();
    let uid = sk.metadata.uid.clone().unwrap_or_default();
    let copy_dir = format!("/var/lib/skyhook/{name}/{PKG}-{version}-{uid}-1");
    let mut agent_env = pkg_env.as_array().cloned().unwrap_or_default();
    agent_env.extend([
        json!({"name": "SKYHOOK_LOG_DIR", "value": format!("/var/log/skyhook/{name}")}),
        json!({"name": "SKYHOOK_ROOT_DIR", "value": format!("/var/lib/skyhook/{name}")}),
        json!({"name": "COPY_RESOLV", "value": "false"}),
        json!({"name": "SKYHOOK_RESOURCE_ID", "value": format!("{name}-{uid}-1_{PKG}_{version}")}),
    ]);
    let s = stage.as_str();
    let agent = |container: String, arg: String| {
        json!({"name": container, "image": "nvcr.io/nvidia/skyhook/agent:v6.2.0",
               "args": [arg, "/root", copy_dir], "env": agent_env,
               "securityContext": {"privileged": true},
               "volumeMounts": [{"name": "root-mount", "mountPath": "/root",
                                 "mountPropagation": "HostToContainer"}]})
    };
    let annotation = format!(
        r#"{{"name":"{PKG}","version":"{version}","skyhook":"{name}","stage":"{s}","image":"{IMAGE}"}}"#
    );
    serde_json::from_value(json!({
        "metadata": {
            "name": schema::stage_pod_name(&name, PKG, version, stage, node),
            "labels": {schema::NAME_LABEL: name, schema::PACKAGE_LABEL: format!("{PKG}-{version}")},
            "annotations": {schema::PACKAGE_ANNOTATION: annotation},
            "ownerReferences": [{"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
                "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": node, "restartPolicy": "OnFailure", "hostPID": true, "hostNetwork": true,
            "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
            "volumes": [{"name": "root-mount", "hostPath": {"path": "/"}}],
            "initContainers": [
                {"name": format!("{PKG}-init"), "image": format!("{IMAGE}:{version}"),
                 "command": ["/bin/sh"],
                 "args": ["-c", "mkdir -p /root/${SKYHOOK_DIR} && cp -r /skyhook-package/* /root/${SKYHOOK_DIR}"],
                 "env": [{"name": "SKYHOOK_DIR", "value": copy_dir}]},
                agent(format!("{PKG}-{s}"), s.to_string()),
                agent(format!("{PKG}-{s}check"), format!("{s}-check")),
            ],
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "20Mi"},
                              "limits": {"cpu": "100m", "memory": "20Mi"}}}],
        },
    }))
    .expect("Go operator pod")
}

/// What the Go operator left: the Skyhook (`spencer` at `version`), the node state it wrote for
/// `state_version` at `stage` (in progress), and its pod for that stage, seen running on the
/// node. This operator is started only then, with `operator_env`.
struct Handover {
    env: Env,
    name: String,
    node: String,
    pod: String,
    pods: Api<Pod>,
}

async fn handover(
    test: &str,
    version: &str,
    state_version: &str,
    pod_env: Value,
    operator_env: &[(&str, &str)],
) -> Handover {
    install_crds();
    let mut ctx = TestCtx::new(test).await;
    let nodes = ctx.add_test_nodes(1);
    let node = nodes[0].clone();
    let name = ctx.name("sk");
    let spec = json!({"packages": {PKG: {"version": version, "image": IMAGE,
        "env": env(&[("SLEEP_LEN", "1")])}}});
    let skyhooks: Api<Skyhook> = Api::all(ctx.client.clone());
    let sk = skyhooks
        .create(&PostParams::default(), &skyhook(&ctx, &name, spec))
        .await
        .expect("create Skyhook");
    let state = format!(
        r#"{{"{PKG}|{state_version}":{{"name":"{PKG}","version":"{state_version}","image":"{IMAGE}","stage":"apply","state":"in_progress"}}}}"#
    );
    let nodes_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {
        "annotations": {
            schema::node_state_annotation(&name): state,
            schema::status_annotation(&name): "in_progress",
            schema::node_version_annotation(&name): "v0.13.0",
        },
        "labels": {schema::status_label(&name): "in_progress"},
    }});
    nodes_api
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("write the Go operator's node state");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let pod = pods
        .create(
            &PostParams::default(),
            &go_pod(&sk, state_version, Stage::Apply, &node, pod_env),
        )
        .await
        .expect("create the Go operator's pod")
        .name_any();
    ctx.wait_for(
        "the Go operator's stage container to run",
        Duration::from_secs(30),
        || async { stage_running(&pods.get(&pod).await.ok()?).then_some(()) },
    )
    .await;
    let ns = ctx.ns.clone();
    ctx.report_on_failure(&["get", "pods", "-n", &ns, "-o", "yaml"]);
    let op = Operator::start(&ctx, operator_env);
    Handover {
        env: Env::new(ctx, op, nodes),
        name,
        node,
        pod,
        pods,
    }
}

/// The pod's `<pkg>-apply` init container runs (kwok holds it there for SLEEP_LEN).
fn stage_running(p: &Pod) -> bool {
    let inits = p
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref());
    inits.into_iter().flatten().any(|c| {
        c.name == format!("{PKG}-apply") && c.state.as_ref().is_some_and(|s| s.running.is_some())
    })
}

impl Handover {
    /// Waits for the Go pod to be gone, checking at every sample that no Job of this Skyhook
    /// exists while it is there.
    async fn no_job_until_the_pod_is_gone(&self, timeout: Duration) {
        self.env
            .ctx
            .wait_for("the Go operator's pod to go", timeout, || async {
                let present = self.pods.get_opt(&self.pod).await.ok()?.is_some();
                let jobs = self.env.jobs_of(&self.name).await;
                assert!(
                    !present || jobs.is_empty(),
                    "a Job was created beside the Go operator's pod: {:?}",
                    jobs.iter().map(|j| j.name_any()).collect::<Vec<_>>()
                );
                (!present).then_some(())
            })
            .await;
    }

    async fn state(&self) -> NodeState {
        self.env
            .node_state(&self.node, &self.name)
            .await
            .map(|(_, s)| s)
            .unwrap_or_default()
    }

    /// `<package>-<version>/<stage>` of every Job of the Skyhook, sorted.
    async fn ran(&self) -> Vec<String> {
        let mut ran: Vec<String> = (self.env.jobs_of(&self.name).await.iter())
            .map(|j| {
                format!(
                    "{}/{}",
                    label(j, schema::PACKAGE_LABEL),
                    label(j, schema::STAGE_LABEL)
                )
            })
            .collect();
        ran.sort();
        ran
    }
}

/// Acceptance #9: the Go pod runs for 6 s after this operator starts. No Job starts for its stage
/// meanwhile; its success is recorded (apply complete), the pod is deleted as the reference's
/// PodReconcile would, and the rollout goes on from config.
#[tokio::test]
async fn a_running_go_pod_is_awaited_and_its_success_recorded() {
    let h = handover(
        "handover-run",
        "3.2.3",
        "3.2.3",
        env(&[("SLEEP_LEN", "6")]),
        &[],
    )
    .await;
    h.no_job_until_the_pod_is_gone(Duration::from_secs(60))
        .await;
    h.env
        .wait_status(&h.name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    // apply was the Go pod's: never run again.
    assert_eq!(h.ran().await, vec![format!("{PKG}-3.2.3/config")]);
    let state = h.state().await;
    let e = state.get(PKG, "3.2.3").expect("spencer's state");
    assert_eq!((e.stage, e.state), (Stage::Config, Some(State::Complete)));
}

/// A Go pod whose stage fails (crash-looping, as the kubelet leaves it): erroring with restarts
/// 1 is recorded while the pod is still there, with a Warning Event; after the retry backoff the
/// pod is deleted and the stage runs again as a Job.
#[tokio::test]
async fn a_failed_go_pod_is_recorded_erroring_then_retried_as_a_job() {
    let h = handover(
        "handover-fail",
        "3.2.3",
        "3.2.3",
        env(&[("SLEEP_LEN", "3"), ("EXIT_CODE", "3")]),
        &[("RETRY_BASE", "5s")],
    )
    .await;
    h.env
        .ctx
        .wait_for(
            "apply erroring with restarts 1 while the Go pod is there",
            Duration::from_secs(30),
            || async {
                let state = h.state().await;
                let e = state.get(PKG, "3.2.3")?;
                let erroring =
                    (e.stage, e.state, e.restarts) == (Stage::Apply, Some(State::Erroring), 1);
                if erroring {
                    // Kept for the 5 s backoff: the failure is recorded from the pod itself.
                    let pod_there = h.pods.get_opt(&h.pod).await.ok()?.is_some();
                    assert!(pod_there, "erroring seen only after the Go pod went");
                }
                erroring.then_some(())
            },
        )
        .await;
    h.env
        .wait_event(
            "a Warning Event naming the Go pod's failure",
            &h.name,
            |e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("CrashLoopBackOff")
                    && e.message
                        .as_deref()
                        .unwrap_or_default()
                        .contains("attempt 1")
            },
        )
        .await;
    h.no_job_until_the_pod_is_gone(Duration::from_secs(60))
        .await;
    h.env
        .wait_status(&h.name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    assert_eq!(
        h.ran().await,
        vec![format!("{PKG}-3.2.3/apply"), format!("{PKG}-3.2.3/config")]
    );
}

/// A Go pod of a version the spec no longer has (it would run for ever): deleted through the API
/// before any Job starts; the node then upgrades to the spec's version.
#[tokio::test]
async fn a_stale_go_pod_is_deleted_before_the_job_starts() {
    let h = handover(
        "handover-stale",
        "3.2.3",
        "3.2.2",
        env(&[("HANG", "true")]),
        &[],
    )
    .await;
    h.no_job_until_the_pod_is_gone(Duration::from_secs(30))
        .await;
    h.env
        .wait_status(&h.name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    assert_eq!(
        h.ran().await,
        vec![
            format!("{PKG}-3.2.3/config"),
            format!("{PKG}-3.2.3/upgrade")
        ]
    );
    let state = h.state().await;
    assert!(state.get(PKG, "3.2.2").is_none(), "{state:?}");
}
