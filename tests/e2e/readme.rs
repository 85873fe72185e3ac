//! Acceptance: the README's install steps, followed as written on the local cluster, end with
//! the operator's objects created and `kubectl skyhook version` reporting both versions.
//!
//! The commands are read from the README itself (the `sh` block under **kustomize** in
//! "## Install"), so the test follows the text when it changes. They run with `bash` from the
//! repository root, with the cluster's `kubectl` first on PATH. Two things differ from a real
//! cluster, and the test stands in for them:
//!
//! * There is no scheduler here, so the Deployment's pods stay Pending and `rollout status`
//!   would fail ("exceeded its progress deadline"). Before that step the test binds them to a
//!   node of its own, as the scheduler would; kwok then marks them Running and Ready. The node
//!   is removed when the test passes, and the pods with it.
//! * The plugin is not `cargo install`ed (that would compile it again into `~/.cargo/bin`):
//!   the binary cargo built for this test goes on PATH instead, which is what `cargo install`
//!   achieves, so `kubectl skyhook` is found by kubectl's plugin lookup.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::TestCtx;
use crate::support::deploy::{
    APPLY_LOCK, OPERATOR_NS, expected_objects, object_ids, parse_json, repo,
};
use crate::support::plugin::PLUGIN;

const DEPLOYMENT: &str = "skyhook-operator";

/// The command lines of the first ```` ```sh ```` block after the line starting with `marker`
/// inside the `section` heading's section; continuation lines (`\`) joined, comments and blank
/// lines dropped.
fn commands_under(readme: &str, section: &str, marker: &str) -> Vec<String> {
    let mut lines = readme
        .lines()
        .skip_while(|l| l.trim() != section)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .skip_while(|l| !l.starts_with(marker))
        .skip_while(|l| l.trim() != "```sh")
        .skip(1)
        .take_while(|l| l.trim() != "```");
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in lines.by_ref() {
        let line = line.split(" #").next().unwrap_or(line).trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(&format!("{} ", head.trim_end())),
            None => {
                current.push_str(line);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// PATH with the cluster's kubectl and the plugin first.
fn path_for(ctx: &TestCtx) -> String {
    let plugin_dir = Path::new(PLUGIN).parent().expect("plugin dir");
    format!(
        "{}:{}:{}",
        ctx.cluster.bin_dir.display(),
        plugin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// One README line through bash, from the repository root; retried when it lost a race with
/// another applier of `deploy/`.
fn run_line(ctx: &TestCtx, line: &str) -> Output {
    const TRANSIENT: [&str; 3] = [
        "already exists",
        "the object has been modified",
        "Operation cannot be fulfilled",
    ];
    let mut attempt = 1;
    loop {
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", line])
            .current_dir(repo())
            .env("PATH", path_for(ctx))
            .env("KUBECONFIG", &ctx.cluster.kubeconfig)
            .output()
            .expect("run bash");
        let err = text(&out.stderr);
        if out.status.success() || attempt >= 4 || !TRANSIENT.iter().any(|t| err.contains(t)) {
            return out;
        }
        attempt += 1;
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// What the scheduler would do: bind the operator's Pending pods to `node`.
async fn schedule_operator_pods(ctx: &TestCtx, node: &str) {
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), OPERATOR_NS);
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=skyhook-operator"))
        .await
        .expect("list operator pods");
    for pod in list.items {
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if bound || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        // A pod bound meanwhile (or replaced) answers Conflict or NotFound: nothing to do.
        let _ = pods
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await;
    }
}

/// Deletes the operator pods the test bound to its node, however the test ends (before the node
/// goes): the shared Deployment's ReplicaSet then makes Pending ones again, as before the test.
struct Unbind<'a> {
    ctx: &'a TestCtx,
    node: String,
}

impl Drop for Unbind<'_> {
    fn drop(&mut self) {
        let selector = format!("spec.nodeName={}", self.node);
        let _ = self.ctx.kubectl(&[
            "-n",
            OPERATOR_NS,
            "delete",
            "pods",
            "--field-selector",
            &selector,
            "--force",
            "--grace-period=0",
        ]);
    }
}

#[test]
fn readme_commands_are_found() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let commands = commands_under(&readme, "## Install", "**kustomize**");
    assert!(
        commands
            .iter()
            .any(|c| c.starts_with("kubectl apply -k deploy")),
        "{commands:?}"
    );
    let helm = commands_under(&readme, "## Install", "**Helm**");
    assert!(
        helm.iter()
            .any(|c| c.starts_with("helm install skyhook-operator")),
        "continuation lines are joined: {helm:?}"
    );
    let sample = "## Install\n\n**kustomize**:\n\n```sh\na \\\n  b  # c\n\n# d\ne\n```\n";
    assert_eq!(
        commands_under(sample, "## Install", "**kustomize**"),
        ["a b", "e"]
    );
}

#[tokio::test]
async fn install_steps_as_written_end_with_both_versions() {
    let mut ctx = TestCtx::new("readme").await;
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let commands = commands_under(&readme, "## Install", "**kustomize**");
    assert!(
        !commands.is_empty(),
        "no ```sh block under **kustomize** in README.md's ## Install"
    );
    assert!(
        readme.contains("cargo install --path . --bin kubectl-skyhook --locked"),
        "the README no longer installs the plugin with cargo install; update this test"
    );
    ctx.report_on_failure(&[
        "-n",
        OPERATOR_NS,
        "get",
        "deployment,replicaset,pods",
        "-o",
        "wide",
    ]);
    let node = ctx.add_nodes(1).remove(0);
    let _unbind = Unbind {
        ctx: &ctx,
        node: node.clone(),
    };

    for line in &commands {
        if line.contains("rollout status") {
            // The scheduler's part, then wait for the Deployment to count its replicas ready, so
            // that `rollout status` (as written) sees a finished rollout.
            let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), OPERATOR_NS);
            ctx.wait_for(
                "the operator Deployment's replicas available",
                Duration::from_secs(90),
                || {
                    let deployments = deployments.clone();
                    let ctx = &ctx;
                    let node = node.clone();
                    async move {
                        schedule_operator_pods(ctx, &node).await;
                        let d = deployments.get(DEPLOYMENT).await.ok()?;
                        let want = d.spec.as_ref()?.replicas.unwrap_or(1);
                        let status = d.status.as_ref()?;
                        (status.available_replicas == Some(want)
                            && status.updated_replicas == Some(want))
                        .then_some(())
                    }
                },
            )
            .await;
        }
        let out = if line.starts_with("kubectl apply") {
            let _guard = APPLY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            run_line(&ctx, line)
        } else {
            run_line(&ctx, line)
        };
        assert!(
            out.status.success(),
            "README step `{line}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        eprintln!("$ {line}\n{}", text(&out.stdout).trim_end());
    }

    // The operator's objects exist.
    let dir = repo().join("deploy").display().to_string();
    let got = ctx.kubectl(&["get", "-k", &dir, "-o", "json"]);
    assert!(
        got.status.success(),
        "kubectl get -k deploy/ failed (some object is missing?):\n{}",
        text(&got.stderr)
    );
    assert_eq!(
        object_ids(&parse_json(&got, "kubectl get -k deploy/")),
        expected_objects()
    );

    // `kubectl skyhook version`, found by kubectl's plugin lookup on PATH.
    let out = run_line(&ctx, "kubectl skyhook version");
    let stdout = text(&out.stdout);
    eprintln!("$ kubectl skyhook version\n{}", stdout.trim_end());
    assert!(
        out.status.success(),
        "kubectl skyhook version failed:\n{stdout}{}",
        text(&out.stderr)
    );
    let deployment = Api::<Deployment>::namespaced(ctx.client.clone(), OPERATOR_NS)
        .get(DEPLOYMENT)
        .await
        .expect("operator Deployment");
    let operator_version = deployment
        .metadata
        .labels
        .unwrap_or_default()
        .get("app.kubernetes.io/version")
        .cloned()
        .expect("version label");
    assert_eq!(
        stdout,
        format!(
            "Skyhook plugin:\t{}\nSkyhook operator:\t{operator_version}\n",
            env!("CARGO_PKG_VERSION")
        ),
        "kubectl skyhook version"
    );
    assert_eq!(operator_version, format!("v{}", env!("CARGO_PKG_VERSION")));
}
