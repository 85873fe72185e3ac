//! The operator running as a pod from our image, installed as users install it (the Helm chart),
//! onto a real node: two replicas, one leader, a rollout over the real node and two kwok nodes, a
//! `helm upgrade` that changes a setting without losing the rollout, and `helm uninstall`, whose
//! pre-delete hook runs for real and leaves nothing behind.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema;

use super::shellscript;
use crate::support::plugin::plugin;
use crate::support::real::{Images, images};
use crate::support::{TestCtx, install_crds, nodewrights, run};

fn helm(ctx: &TestCtx) -> Command {
    let mut cmd = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/helm"));
    cmd.env("KUBECONFIG", &ctx.cluster.kubeconfig);
    cmd
}

/// The operator image from `deploy/image/build`, pushed to the cluster's registry as
/// `skyhook/operator:<tag>`; returns (repository, tag).
fn push_operator_image(ctx: &TestCtx) -> (String, String) {
    let _image = crate::support::image::lock();
    crate::support::image::build();
    let tag = format!("e2e-{}", ctx.prefix);
    let out = run(Command::new(crate::support::cluster_dir().join("images"))
        .arg("push-layout")
        .arg(crate::support::image::layout())
        .arg(format!("skyhook/operator:{tag}"))
        .env("KUBECONFIG", &ctx.cluster.kubeconfig));
    let full = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (repo, _) = full.rsplit_once(':').expect("REPO:TAG");
    (repo.to_string(), tag)
}

/// The pods of the operator's Deployment that are Running and Ready, by name.
async fn ready_operator_pods(pods: &Api<Pod>, fullname: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels("control-plane=controller-manager");
    let Ok(list) = pods.list(&lp).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|p| p.name_any().starts_with(fullname))
        .filter(|p| {
            p.status.as_ref().is_some_and(|s| {
                s.phase.as_deref() == Some("Running")
                    && s.conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        })
        .collect()
}

fn lease_holder(ctx: &TestCtx) -> String {
    let out = ctx.kubectl(&[
        "get",
        "lease",
        "3c22c1ae.nvidia.com",
        "-n",
        &ctx.ns,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A test of its own for an installed operator: a real node, kwok nodes, the operator image in
/// the cluster's registry, and a namespace that admits the privileged package pods.
struct Install {
    ctx: TestCtx,
    real: String,
    kwok: Vec<String>,
    imgs: Images,
    /// The operator image's repository and tag in the cluster's registry.
    repo: String,
    tag: String,
}

async fn install_env(test: &str, kwok: usize) -> Install {
    install_crds();
    // Both APIs, as `kubectl apply -k deploy/` installs them: the chart's migration needs the
    // NodeWright CRDs.
    crate::support::install_nodewright_crds();
    let mut ctx = TestCtx::new(test).await;
    let real = ctx.add_real_node();
    let kwok = if kwok > 0 {
        ctx.add_test_nodes(kwok)
    } else {
        Vec::new()
    };
    let imgs = images(&ctx);
    let (repo, tag) = push_operator_image(&ctx);
    let ns = ctx.ns.clone();
    ctx.report_on_failure(&[
        "get",
        "deployments,pods,jobs,leases",
        "-n",
        &ns,
        "-o",
        "wide",
    ]);
    run(ctx.cluster.kubectl().args([
        "label",
        "namespace",
        &ns,
        "pod-security.kubernetes.io/enforce=privileged",
        "--overwrite",
    ]));
    Install {
        ctx,
        real,
        kwok,
        imgs,
        repo,
        tag,
    }
}

/// Two ready pods of the operator `fullname`, both on `real`, one of them the leader: their names
/// and the lease's holder.
async fn two_replicas_one_leader(
    ctx: &TestCtx,
    fullname: &str,
    real: &str,
) -> (Vec<String>, String) {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let running = ctx
        .wait_for(
            "two ready operator pods",
            Duration::from_secs(180),
            || async {
                let ready = ready_operator_pods(&pods, fullname).await;
                (ready.len() == 2).then_some(ready)
            },
        )
        .await;
    for p in &running {
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(real),
            "{} is not on the real node",
            p.name_any()
        );
    }
    let names: Vec<String> = running.iter().map(|p| p.name_any()).collect();
    let holder = ctx
        .wait_for("a leader", Duration::from_secs(60), || async {
            let h = lease_holder(ctx);
            names.iter().any(|n| h.contains(n.as_str())).then_some(h)
        })
        .await;
    (names, holder)
}

async fn is_complete(skyhooks: &Api<Skyhook>, sk: &str) -> bool {
    skyhooks
        .get(sk)
        .await
        .ok()
        .and_then(|s| s.status)
        .is_some_and(|s| s.status == Some(schema::Status::Complete))
}

/// A Skyhook `sk` of one shellscript package (its config script echoes `text`) over the test's
/// nodes, waited for until it is complete on each of `nodes`.
async fn roll_out(ctx: &TestCtx, sk: &str, nodes: &[&String], text: &str) {
    let pkg = shellscript(
        ctx,
        json!({"config.sh": format!("#!/bin/bash\necho {text}\n")}),
        json!({}),
    );
    let skyhooks: Api<Skyhook> = Api::all(ctx.client.clone());
    skyhooks
        .create(
            &Default::default(),
            &crate::support::objects::skyhook(ctx, sk, json!({"packages": {"op": pkg}})),
        )
        .await
        .expect("create Skyhook");
    ctx.wait_for(
        "the rollout to complete",
        Duration::from_secs(240),
        || async { is_complete(&skyhooks, sk).await.then_some(()) },
    )
    .await;
    let status = skyhooks
        .get(sk)
        .await
        .expect("Skyhook")
        .status
        .expect("status");
    for node in nodes {
        assert_eq!(
            status.node_status.get(*node),
            Some(&schema::Status::Complete),
            "{node}: {:?}",
            status.node_status
        );
    }
}

#[tokio::test]
async fn helm_installs_two_replicas_on_a_real_node_that_roll_out_upgrade_and_uninstall() {
    let Install {
        ctx,
        real,
        kwok,
        imgs,
        repo,
        tag,
    } = install_env("rn-helm", 2).await;
    let ns = ctx.ns.clone();
    let (k, v) = ctx.test_label();
    let (agent_repo, agent_tag) = imgs.agent.rsplit_once(':').expect("agent tag");
    let (kubectl_repo, kubectl_tag) = imgs.kubectl.rsplit_once(':').expect("kubectl tag");
    let fullname = format!("{}-op", ctx.prefix);
    let values = json!({
        "fullnameOverride": fullname,
        "estimatedNodeCount": 3,
        "controllerManager": {
            "replicas": 2,
            "schedulerName": imgs.scheduler,
            "selectors": {"kubernetes.io/hostname": real},
            "manager": {
                "image": {"repository": repo, "tag": tag},
                "imagePullPolicy": "Always",
                "agent": {"repository": agent_repo, "tag": agent_tag, "digest": ""},
                "env": {"skyhookSelector": format!("{k}={v}"), "logEncoder": "console"},
                "extraEnv": [{"name": "RETRY_BASE", "value": "2s"}, {"name": "RETRY_MAX", "value": "10s"}],
            },
        },
        "cleanup": {"jobTimeoutSeconds": 150, "image": {"repository": kubectl_repo, "tag": kubectl_tag, "digest": ""}},
    });
    let values_file = std::env::temp_dir().join(format!("skyhook-rn-helm-{}.json", ctx.prefix));
    std::fs::write(&values_file, values.to_string()).expect("write values");
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/skyhook-operator");
    run(helm(&ctx)
        .args(["install", &ctx.prefix])
        .arg(&chart)
        .args(["-n", &ns, "--wait", "--timeout", "3m", "-f"])
        .arg(&values_file));

    let (names, holder) = two_replicas_one_leader(&ctx, &fullname, &real).await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);

    // A rollout over the real node and the two kwok nodes.
    let sk = ctx.name("sk");
    let nodes: Vec<&String> = kwok.iter().chain([&real]).collect();
    roll_out(&ctx, &sk, &nodes, "rolled out by the operator pod").await;
    let skyhooks: Api<Skyhook> = Api::all(ctx.client.clone());
    assert!(
        !ctx.list_on_node(&real, &format!("/var/log/skyhook/{sk}/shellscript/1.1.1"))
            .is_empty(),
        "the agent ran on the real node"
    );

    // `kubectl skyhook version` names both.
    let version = plugin(&ctx, &["version", "-n", &ns]).ok().to_string();
    assert!(
        version.contains("Skyhook plugin:") && version.contains("Skyhook operator:"),
        "{version}"
    );
    assert!(!version.contains("unknown"), "{version}");

    // `helm upgrade` changes a setting; the pods are replaced, the rollout is not redone.
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let jobs_before: Vec<String> = jobs
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();
    run(helm(&ctx)
        .args(["upgrade", &ctx.prefix])
        .arg(&chart)
        .args(["-n", &ns, "--reuse-values", "--wait", "--timeout", "3m"])
        .args(["--set", "controllerManager.manager.env.logLevel=debug"]));
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let dep = deployments.get(&fullname).await.expect("deployment");
    let env = dep
        .spec
        .as_ref()
        .expect("spec")
        .template
        .spec
        .as_ref()
        .expect("pod spec")
        .containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e.name == "LOG_LEVEL" && e.value.as_deref() == Some("debug")),
        "the upgrade did not reach the Deployment: {env:?}"
    );
    let new_holder = ctx
        .wait_for(
            "a leader among the new pods",
            Duration::from_secs(120),
            || async {
                let ready = ready_operator_pods(&pods, &fullname).await;
                let h = lease_holder(&ctx);
                (ready.len() == 2
                    && !names.iter().any(|n| h.contains(n.as_str()))
                    && ready.iter().any(|p| h.contains(&p.name_any())))
                .then_some(h)
            },
        )
        .await;
    assert_ne!(new_holder, holder);
    ctx.holds_for(
        "the rollout to stay complete, with no new Job",
        Duration::from_secs(15),
        || async {
            if !is_complete(&skyhooks, &sk).await {
                return Err("the Skyhook is no longer complete".to_string());
            }
            let now: Vec<String> = jobs
                .list(&ListParams::default())
                .await
                .map(|l| l.items.iter().map(|j| j.name_any()).collect())
                .unwrap_or_default();
            match now.iter().find(|j| !jobs_before.contains(j)) {
                Some(j) => Err(format!("new Job {j}")),
                None => Ok(()),
            }
        },
    )
    .await;

    // `nodewright.migrate=true` (issue 49): the operator pods, with the chart's rights, mirror
    // the Skyhook into a NodeWright, which takes its nodes over with no stage run again.
    run(helm(&ctx)
        .args(["upgrade", &ctx.prefix])
        .arg(&chart)
        .args(["-n", &ns, "--reuse-values", "--wait", "--timeout", "3m"])
        .args(["--set", "nodewright.migrate=true"]));
    // The mirrored NodeWright takes over and completes.
    nodewrights::wait_nodewright_in(
        &ctx,
        &sk,
        schema::Status::Complete,
        Duration::from_secs(180),
    )
    .await;
    ctx.wait_for(
        "the Skyhook recorded as taken over",
        Duration::from_secs(30),
        || async {
            let s = skyhooks.get(&sk).await.ok()?;
            s.annotations()
                .contains_key(schema::TAKEN_OVER_ANNOTATION)
                .then_some(())
        },
    )
    .await;
    let nw_label = schema::Api::NodeWright
        .local(schema::NAME_LABEL)
        .into_owned();
    let nw_jobs = jobs
        .list(&ListParams::default().labels(&format!("{nw_label}={sk}")))
        .await
        .expect("jobs")
        .items;
    assert!(
        nw_jobs.is_empty(),
        "the take-over ran stages again: {nw_jobs:?}"
    );
    let operator_logs = ctx.kubectl(&[
        "logs",
        "-n",
        &ns,
        "-l",
        "control-plane=controller-manager",
        "--tail=-1",
    ]);
    let operator_logs = String::from_utf8_lossy(&operator_logs.stdout);
    let refused = crate::support::rights::forbidden_in(&operator_logs);
    assert!(
        refused.is_empty(),
        "the operator pods met 403s: {refused:?}"
    );

    // `helm uninstall`: the pre-delete hook (kubectl from the cluster's registry, on the real
    // node) deletes the NodeWright and the Skyhook, the operator cleans up, then the release
    // goes.
    run(helm(&ctx).args(["uninstall", &ctx.prefix, "-n", &ns, "--timeout", "4m"]));
    assert!(
        skyhooks.get_opt(&sk).await.expect("get").is_none(),
        "the Skyhook is still there"
    );
    assert!(
        nodewrights::nodewright(&ctx, &sk).await.is_none(),
        "the NodeWright is still there"
    );
    ctx.wait_for(
        "the release's pods and Jobs to be gone",
        Duration::from_secs(90),
        || async {
            let pods_left = pods.list(&ListParams::default()).await.ok()?.items;
            let jobs_left = jobs.list(&ListParams::default()).await.ok()?.items;
            let deps_left = deployments.list(&ListParams::default()).await.ok()?.items;
            (pods_left.is_empty() && jobs_left.is_empty() && deps_left.is_empty()).then_some(())
        },
    )
    .await;
    for node in kwok.iter().chain([&real]) {
        let n: k8s_openapi::api::core::v1::Node =
            Api::all(ctx.client.clone()).get(node).await.expect("node");
        let left: Vec<&String> = n
            .annotations()
            .keys()
            .chain(n.labels().keys())
            .filter(|k| k.ends_with(&sk))
            .collect();
        assert!(left.is_empty(), "{node} still carries {left:?}");
        assert_ne!(
            n.spec.as_ref().and_then(|s| s.unschedulable),
            Some(true),
            "{node} left cordoned"
        );
    }
}

/// `kubectl apply -k` of an overlay on deploy/ (the image from the cluster's registry, this
/// test's namespace and name prefix, its Skyhooks only): two replicas on the real node, one
/// leader, a rollout over the real node and two kwok nodes.
#[tokio::test]
async fn kustomize_installs_two_replicas_on_a_real_node_that_roll_out() {
    let Install {
        ctx,
        real,
        kwok,
        imgs,
        repo,
        tag,
    } = install_env("rn-kust", 2).await;
    let ns = ctx.ns.clone();
    let (k, v) = ctx.test_label();
    let prefix = format!("{}-", ctx.prefix);
    let fullname = format!("{prefix}skyhook-operator");

    let dir = tempfile::tempdir().expect("temp dir");
    run(Command::new("cp")
        .arg("-r")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"))
        .arg(dir.path().join("base")));
    let overlay = format!(
        r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [base]
namespace: {ns}
namePrefix: {prefix}
images:
  - name: ghcr.io/skyhook-rs/skyhook-operator
    newName: {repo}
    newTag: {tag}
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {{name: skyhook-operator, namespace: skyhook}}
      spec:
        template:
          spec:
            schedulerName: {scheduler}
            nodeSelector: {{kubernetes.io/hostname: {real}}}
            containers:
              - name: manager
                imagePullPolicy: Always
                env:
                  - {{name: SKYHOOK_SELECTOR, value: "{k}={v}"}}
                  - {{name: AGENT_IMAGE, value: "{agent}"}}
                  - {{name: LOG_ENCODER, value: console}}
"#,
        scheduler = imgs.scheduler,
        agent = imgs.agent,
    );
    std::fs::write(dir.path().join("kustomization.yaml"), &overlay).expect("write overlay");
    let apply = ctx.kubectl(&[
        "apply",
        "--server-side",
        "-k",
        &dir.path().display().to_string(),
    ]);
    assert!(
        apply.status.success(),
        "kubectl apply -k:\n{}{}",
        String::from_utf8_lossy(&apply.stdout),
        String::from_utf8_lossy(&apply.stderr)
    );
    // The overlay's `namespace:` also moved the Role for Events on Skyhooks and Nodes out of
    // `default` (deploy/README.md, "Namespace"): put a copy back, as such an install must.
    let events = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
  {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
    "metadata": {{"name": "{prefix}skyhook-operator-events", "namespace": "default"}},
    "rules": [{{"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}}]}},
  {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
    "metadata": {{"name": "{prefix}skyhook-operator-events", "namespace": "default"}},
    "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "{prefix}skyhook-operator-events"}},
    "subjects": [{{"kind": "ServiceAccount", "name": "{fullname}", "namespace": "{ns}"}}]}}]}}"#
    );
    let out = ctx.kubectl_stdin(&["apply", "-f", "-"], events.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cluster_objects = [
        format!("clusterrole/{prefix}skyhook-operator"),
        format!("clusterrole/{prefix}skyhook-viewer"),
        format!("clusterrole/{prefix}skyhook-oncall"),
        format!("clusterrolebinding/{prefix}skyhook-operator"),
        format!("validatingadmissionpolicy/{prefix}skyhook-oncall-nodes"),
        format!("validatingadmissionpolicy/{prefix}skyhook-oncall-skyhooks"),
        format!("validatingadmissionpolicybinding/{prefix}skyhook-oncall-nodes"),
        format!("validatingadmissionpolicybinding/{prefix}skyhook-oncall-skyhooks"),
        format!("role/{prefix}skyhook-operator-events"),
        format!("rolebinding/{prefix}skyhook-operator-events"),
    ];
    let _cleanup = ClusterObjects(ctx.cluster, cluster_objects.to_vec());

    two_replicas_one_leader(&ctx, &fullname, &real).await;
    let sk = ctx.name("sk");
    let nodes: Vec<&String> = kwok.iter().chain([&real]).collect();
    roll_out(&ctx, &sk, &nodes, "rolled out by the kustomize install").await;
    // A NodeWright beside it on the same nodes (deploy/ installs both APIs).
    let nw = ctx.name("nw");
    let nw_pkg = shellscript(
        &ctx,
        json!({"config.sh": "#!/bin/bash\necho from the NodeWright\n"}),
        json!({}),
    );
    nodewrights::create_nodewright(&ctx, &nw, json!({"packages": {"nwop": nw_pkg}})).await;
    nodewrights::wait_nodewright_in(
        &ctx,
        &nw,
        schema::Status::Complete,
        Duration::from_secs(240),
    )
    .await;

    // Uninstall as deploy/README.md says: Skyhooks, then NodeWrights, then `kubectl delete -k`
    // (here of the overlay less the CRDs, which the other tests share).
    for what in [
        format!("skyhooks.skyhook.nvidia.com/{sk}"),
        format!("nodewrights.nodewright.nvidia.com/{nw}"),
    ] {
        let out = ctx.kubectl(&["delete", &what, "--wait=true", "--timeout=120s"]);
        assert!(
            out.status.success(),
            "kubectl delete {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let keep_crds = r#"
  - target: {kind: CustomResourceDefinition}
    patch: |-
      $patch: delete
      apiVersion: apiextensions.k8s.io/v1
      kind: CustomResourceDefinition
      metadata: {name: shared}
"#;
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!("{}{keep_crds}", overlay.trim_end()),
    )
    .expect("write the uninstall overlay");
    let deleted = ctx.kubectl(&[
        "delete",
        "-k",
        &dir.path().display().to_string(),
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(
        deleted.status.success(),
        "kubectl delete -k:\n{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
    let left = ctx.kubectl(&["get", "deployments,pods", "-n", &ns, "-o", "name"]);
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "the install is gone"
    );
    for node in kwok.iter().chain([&real]) {
        let n: k8s_openapi::api::core::v1::Node =
            Api::all(ctx.client.clone()).get(node).await.expect("node");
        let ours: Vec<&String> = n
            .annotations()
            .keys()
            .chain(n.labels().keys())
            .filter(|key| key.ends_with(&sk) || key.ends_with(&nw))
            .collect();
        assert!(ours.is_empty(), "{node} still carries {ours:?}");
        let spec = n.spec.unwrap_or_default();
        assert_ne!(spec.unschedulable, Some(true), "{node} left cordoned");
        let taints = spec.taints.unwrap_or_default();
        assert!(
            !taints
                .iter()
                .any(|t| t.key.starts_with("skyhook.nvidia.com")
                    || t.key.starts_with("nodewright.nvidia.com")),
            "{node}: {taints:?}"
        );
    }
}

/// Cluster-scoped objects an overlay created under its own names, deleted when the test ends.
struct ClusterObjects(&'static crate::support::Cluster, Vec<String>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        let _ = self
            .0
            .kubectl()
            .args(["delete", "--ignore-not-found", "--wait=false"])
            .args(&self.1)
            .output();
    }
}

/// The pod of the release that is not yet scheduled, with the scheduler's reason.
async fn unschedulable(pods: &Api<Pod>, fullname: &str) -> Option<String> {
    let lp = ListParams::default().labels("control-plane=controller-manager");
    pods.list(&lp)
        .await
        .ok()?
        .items
        .into_iter()
        .filter(|p| p.name_any().starts_with(fullname))
        .find_map(|p| {
            let c = p
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            (c.reason.as_deref() == Some("Unschedulable")).then(|| c.message.unwrap_or_default())
        })
}

/// Waits until the scheduler refuses the release's pod for `why` (a part of its message).
async fn refused(ctx: &TestCtx, pods: &Api<Pod>, fullname: &str, what: &str, why: &str) {
    let message = ctx
        .wait_for(what, Duration::from_secs(60), || {
            unschedulable(pods, fullname)
        })
        .await;
    assert!(message.contains(why), "{message}");
}

/// The reference's `helm/helm-chart-test` and `helm/helm-node-affinity-test`, on a real node and
/// the test cluster's scheduler: an untolerated taint keeps the operator pod off the node until
/// the taint is one the values tolerate; node affinity that matches no node keeps it Pending, one
/// that matches schedules it; `selectors` with `nodeAffinity.matchExpressions` is refused. (The
/// reference installs cert-manager for its webhook first; this chart has no webhook.)
#[tokio::test]
async fn helm_places_the_operator_by_tolerations_and_node_affinity() {
    let Install {
        ctx,
        real,
        imgs,
        repo,
        tag,
        ..
    } = install_env("rn-place", 0).await;
    let ns = ctx.ns.clone();
    let (k, v) = ctx.test_label();
    let (agent_repo, agent_tag) = imgs.agent.rsplit_once(':').expect("agent tag");
    let (kubectl_repo, kubectl_tag) = imgs.kubectl.rsplit_once(':').expect("kubectl tag");
    let fullname = format!("{}-op", ctx.prefix);
    let kc = |args: &[&str]| {
        run(ctx.cluster.kubectl().args(args));
    };
    kc(&["taint", "node", &real, "dedicated=bogus:NoSchedule"]);
    // Only this test's node: the scheduler sees every node of the shared cluster.
    let placement = |affinity: serde_json::Value| {
        let mut expressions =
            vec![json!({"key": "kubernetes.io/hostname", "operator": "In", "values": [real]})];
        expressions.extend(affinity.as_array().cloned().unwrap_or_default());
        json!({
            "fullnameOverride": fullname,
            "controllerManager": {
                "replicas": 1,
                "schedulerName": imgs.scheduler,
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system-cpu", "effect": "NoSchedule"}],
                "nodeAffinity": {"matchExpressions": expressions},
                "manager": {
                    "image": {"repository": repo, "tag": tag},
                    "agent": {"repository": agent_repo, "tag": agent_tag, "digest": ""},
                    "env": {"skyhookSelector": format!("{k}={v}")},
                },
            },
            "cleanup": {"image": {"repository": kubectl_repo, "tag": kubectl_tag, "digest": ""}},
        })
    };
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/skyhook-operator");
    let values_file = std::env::temp_dir().join(format!("skyhook-rn-place-{}.json", ctx.prefix));
    let install = |verb: &str, values: serde_json::Value| {
        std::fs::write(&values_file, values.to_string()).expect("write values");
        helm(&ctx)
            .args([verb, &ctx.prefix])
            .arg(&chart)
            .args(["-n", &ns, "-f"])
            .arg(&values_file)
            .output()
            .expect("run helm")
    };
    let installed = |verb: &str, values: serde_json::Value| {
        let out = install(verb, values);
        assert!(
            out.status.success(),
            "helm {verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    installed("install", placement(json!([])));

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    refused(
        &ctx,
        &pods,
        &fullname,
        "the scheduler to refuse the tainted node",
        "untolerated taint",
    )
    .await;

    // The taint the values tolerate: the pending pod is placed.
    kc(&["taint", "node", &real, "dedicated=bogus:NoSchedule-"]);
    kc(&["taint", "node", &real, "dedicated=system-cpu:NoSchedule"]);
    ctx.wait_for(
        "the operator pod on the node",
        Duration::from_secs(120),
        || async { (ready_operator_pods(&pods, &fullname).await.len() == 1).then_some(()) },
    )
    .await;

    // Node affinity that no node matches: the new pod stays Pending.
    let nope = json!([{"key": "skyhook.test/affinity", "operator": "In", "values": ["nope"]}]);
    installed("upgrade", placement(nope));
    refused(
        &ctx,
        &pods,
        &fullname,
        "the scheduler to find no node for the affinity",
        "affinity",
    )
    .await;

    // Node affinity the node matches: placed.
    kc(&["label", "node", &real, "skyhook.test/affinity=yes"]);
    let yes = json!([{"key": "skyhook.test/affinity", "operator": "In", "values": ["yes"]}]);
    installed("upgrade", placement(yes));
    ctx.wait_for(
        "the operator pod placed by affinity",
        Duration::from_secs(120),
        || async {
            let ready = ready_operator_pods(&pods, &fullname).await;
            let pending = unschedulable(&pods, &fullname).await;
            (ready.len() == 1 && pending.is_none()).then_some(())
        },
    )
    .await;

    // `selectors` and `nodeAffinity.matchExpressions` together: refused.
    let mut conflict = placement(json!([]));
    conflict["controllerManager"]["selectors"] = json!({"kubernetes.io/hostname": real});
    let out = install("upgrade", conflict);
    assert!(
        !out.status.success(),
        "helm accepted selectors with nodeAffinity"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("selectors") && err.contains("nodeAffinity"),
        "{err}"
    );

    run(helm(&ctx).args([
        "uninstall",
        &ctx.prefix,
        "-n",
        &ns,
        "--wait",
        "--timeout",
        "3m",
    ]));
}
