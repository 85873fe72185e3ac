//! The reference's CLI scenarios (`k8s-tests/chainsaw/cli/`): the same `kubectl skyhook`
//! command lines against this test's own Skyhook and nodes, the same object changes, and the
//! plugin's output where it carries the information the reference prints.
//!
//! The chainsaw scripts run the CLI with no stdin. Where a command line of the scenario has no
//! `--confirm` (`resume`, `enable`, and here `node ignore`/`unignore`, which ask too), the
//! reference's CLI prompts, reads EOF and prints `Aborted.`, changing nothing, with exit code 0;
//! ours fails (exit 1, "no answer to the confirmation prompt"), changing nothing, so that a
//! script that forgot `--confirm` notices (docs/compatibility.md). These tests run that exact
//! line and assert the refusal, then answer `y` (or pass `--confirm`) to make the change the
//! scenario's README describes, and assert it.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::{BatchState, DeploymentPolicy, Skyhook};
use skyhook::schema::{self, Stage, State, Status};

use crate::support::plugin::{plugin, plugin_with};
use crate::support::{Env, label, setup, skyhook, sleep};

/// The scenarios' shellscript package: a configMap `apply.sh` that echoes `text`.
fn shellscript(text: &str) -> Value {
    json!({"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
           "env": sleep("2"),
           "configMap": {"apply.sh": format!("#!/bin/bash\necho \"{text}\"\nsleep 2\n")}})
}

/// The scenarios' `hello-world` agentless package.
fn hello_world(env: Value) -> Value {
    json!({"version": "3.2.3", "image": "ghcr.io/nvidia/skyhook/agentless", "env": env})
}

fn sorted(nodes: &[String]) -> Vec<String> {
    let mut v = nodes.to_vec();
    v.sort();
    v
}

fn status_of(sk: &Skyhook) -> Option<Status> {
    sk.status.as_ref().and_then(|s| s.status)
}

async fn skyhook_annotation(env: &Env, name: &str, key: &str) -> Option<String> {
    env.skyhooks
        .get(name)
        .await
        .expect("get Skyhook")
        .annotations()
        .get(key)
        .cloned()
}

async fn get_node(env: &Env, name: &str) -> Node {
    env.node_api.get(name).await.expect("get node")
}

/// Apply Jobs of `sk` per node.
async fn apply_jobs(env: &Env, sk: &str, node: &str) -> usize {
    env.jobs_of(sk)
        .await
        .iter()
        .filter(|j| {
            label(j, schema::NODE_LABEL) == node && label(j, schema::STAGE_LABEL) == "apply"
        })
        .count()
}

/// The package is complete on `node` (its config stage done).
async fn package_complete(env: &Env, node: &str, sk: &str, pkg: &str, version: &str) -> bool {
    env.node_state(node, sk).await.is_some_and(|(_, s)| {
        s.get(pkg, version)
            .is_some_and(|e| (e.stage, e.state) == (Stage::Config, Some(State::Complete)))
    })
}

/// Whitespace-split rows of a plugin table, from its `NODE` header on.
fn table(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .skip_while(|l| !l.starts_with("NODE"))
        .map(|l| l.split_whitespace().collect())
        .collect()
}

async fn delete_skyhook_and_wait(env: &Env, name: &str, step: &str) {
    env.skyhooks
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{step}: delete Skyhook {name}: {e}"));
    env.ctx
        .wait_for(step, Duration::from_secs(60), || async {
            env.skyhooks
                .get_opt(name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
}

/// `k8s-tests/chainsaw/cli/deployment-policy`: a rollout whose Skyhook turns the policy's
/// reset-on-completion off keeps its batch state (batch > 1); `deployment-policy reset`
/// brings it back to batch 1.
#[tokio::test]
async fn deployment_policy() {
    scenario_deployment_policy().await;
}

pub(crate) async fn scenario_deployment_policy() {
    let env = setup("sc-cli-dp", 2, &[]).await;
    let pname = env.ctx.name("policy");
    let policy: DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": pname},
        "spec": {"resetBatchStateOnCompletion": true, "default": {"budget": {"count": 1},
                 "strategy": {"exponential": {"initialBatch": 1, "growthFactor": 2}}}},
    }))
    .expect("valid DeploymentPolicy");
    let policies: Api<DeploymentPolicy> = Api::all(env.ctx.client.clone());
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("setup-policy: create DeploymentPolicy");
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": pname,
               "deploymentPolicyOptions": {"resetBatchStateOnCompletion": false},
               "packages": {"test-package": shellscript("DP reset CLI test")}}),
    ))
    .await;

    let batch_of = |sk: &Skyhook| {
        sk.status
            .as_ref()
            .and_then(|s| s.compartment_statuses.get(schema::DEFAULT_COMPARTMENT))
            .and_then(|c| c.batch_state.clone())
    };
    let done = env
        .ctx
        .wait_for(
            "setup-skyhook: complete, __default__ at 100% with its batch state kept (batch > 1)",
            Duration::from_secs(90),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                let c = sk
                    .status
                    .as_ref()?
                    .compartment_statuses
                    .get(schema::DEFAULT_COMPARTMENT)?;
                (status_of(&sk) == Some(Status::Complete)
                    && c.progress_percent == 100
                    && c.batch_state.as_ref().is_some_and(|b| b.current_batch > 1))
                .then_some(sk)
            },
        )
        .await;
    let before = batch_of(&done).expect("a batch state");

    let ran = plugin(
        &env.ctx,
        &["deployment-policy", "reset", &name, "--confirm"],
    );
    assert_eq!(
        ran.ok(),
        format!(
            "Skyhook: {name}\nCompartments: 1 total, 1 with batch state\n\nCurrent batch state:\n  - __default__: batch {}, {} completed, {} failed\n\nSuccessfully reset batch state for Skyhook {name:?}\n",
            before.current_batch, before.completed_nodes, before.failed_nodes
        ),
        "test-deployment-policy-reset: the command's output"
    );
    // The reference sleeps 2 s, then asserts batch 1: the state is fresh and stays so.
    env.ctx
        .holds_for(
            "test-deployment-policy-reset: the batch state back at batch 1, every counter zero",
            Duration::from_secs(3),
            || async {
                let sk = env.skyhooks.get(&name).await.map_err(|e| e.to_string())?;
                match batch_of(&sk) {
                    Some(b) if b == BatchState::fresh() => Ok(()),
                    other => Err(format!("batch state {other:?}")),
                }
            },
        )
        .await;

    delete_skyhook_and_wait(&env, &name, "cleanup: the Skyhook deleted").await;
    policies
        .delete(&pname, &DeleteParams::default())
        .await
        .expect("cleanup: delete DeploymentPolicy");
}

/// `k8s-tests/chainsaw/cli/lifecycle`: `pause`, `resume`, `disable` and `enable` set and
/// remove the Skyhook's pause and disable annotations, each independently of the other.
#[tokio::test]
async fn lifecycle() {
    scenario_lifecycle().await;
}

pub(crate) async fn scenario_lifecycle() {
    let env = setup("sc-cli-life", 2, &[]).await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"test-package": shellscript("Lifecycle test apply")}}),
    ))
    .await;
    env.ctx
        .wait_for(
            "setup-skyhook: the Skyhook exists",
            Duration::from_secs(30),
            || async { env.skyhooks.get_opt(&name).await.ok().flatten() },
        )
        .await;
    let pause = || skyhook_annotation(&env, &name, schema::PAUSE_ANNOTATION);
    let disable = || skyhook_annotation(&env, &name, schema::DISABLE_ANNOTATION);
    let t = Some("true".to_string());
    let run = |verb: &str, confirm: bool, stdin: Option<&str>| {
        let mut args = vec![verb, name.as_str()];
        if confirm {
            args.push("--confirm");
        }
        plugin_with(&env.ctx, &args, &[], stdin).ok().to_string()
    };
    let prompt = |verb: &str| format!("This will {verb} Skyhook {name:?}. Continue? [y/N]: ");
    let unanswered = |verb: &str| {
        let ran = plugin_with(&env.ctx, &[verb, name.as_str()], &[], None);
        assert_eq!(ran.code, 1, "{verb} without --confirm or input: {ran:?}");
        assert!(
            ran.stderr.contains("no answer to the confirmation prompt"),
            "{ran:?}"
        );
        ran.stdout
    };

    // test-pause
    assert_eq!(
        run("pause", true, None),
        format!("Skyhook {name:?} paused\n"),
        "test-pause"
    );
    assert_eq!(pause().await, t, "test-pause: pause annotation");

    // test-resume: the scenario's line (no --confirm, no stdin) aborts; answering y resumes.
    assert_eq!(
        unanswered("resume"),
        prompt("resume"),
        "test-resume without --confirm or input"
    );
    assert_eq!(
        pause().await,
        t,
        "test-resume: an aborted resume keeps the pause"
    );
    assert_eq!(
        run("resume", false, Some("y\n")),
        format!("{}Skyhook {name:?} resumed\n", prompt("resume")),
        "test-resume answered y"
    );
    assert_eq!(pause().await, None, "test-resume: pause annotation removed");

    // test-disable
    assert_eq!(
        run("disable", true, None),
        format!("Skyhook {name:?} disabled\n"),
        "test-disable"
    );
    assert_eq!(disable().await, t, "test-disable: disable annotation");

    // test-enable: as test-resume.
    assert_eq!(
        unanswered("enable"),
        prompt("enable"),
        "test-enable without --confirm or input"
    );
    assert_eq!(
        disable().await,
        t,
        "test-enable: an aborted enable keeps the disable"
    );
    assert_eq!(
        run("enable", false, Some("y\n")),
        format!("{}Skyhook {name:?} enabled\n", prompt("enable")),
        "test-enable answered y"
    );
    assert_eq!(
        disable().await,
        None,
        "test-enable: disable annotation removed"
    );

    // test-pause-and-disable: resume removes only the pause, enable the disable.
    assert_eq!(
        run("pause", true, None),
        format!("Skyhook {name:?} paused\n")
    );
    assert_eq!(
        run("disable", true, None),
        format!("Skyhook {name:?} disabled\n")
    );
    assert_eq!(
        (pause().await, disable().await),
        (t.clone(), t.clone()),
        "test-pause-and-disable: both annotations set"
    );
    run("resume", false, Some("y\n"));
    assert_eq!(
        (pause().await, disable().await),
        (None, t.clone()),
        "test-pause-and-disable: resume leaves the Skyhook disabled"
    );
    run("enable", false, Some("y\n"));
    assert_eq!(
        (pause().await, disable().await),
        (None, None),
        "test-pause-and-disable: enable removes the disable"
    );

    delete_skyhook_and_wait(&env, &name, "cleanup: the Skyhook deleted").await;
}

/// `k8s-tests/chainsaw/cli/node`: `node list`, `node status` (table and JSON) report the
/// Skyhook's nodes; `node ignore`/`unignore` set and remove the ignore label; `node reset`
/// removes the node's state, so its package runs again there.
#[tokio::test]
async fn node() {
    scenario_node().await;
}

pub(crate) async fn scenario_node() {
    let env = setup("sc-cli-node", 2, &[]).await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"hello-world": hello_world(sleep("2"))}}),
    ))
    .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(90))
        .await;
    let nodes = sorted(&env.nodes);
    let first = nodes[0].as_str();

    // test-node-list
    let list = plugin(&env.ctx, &["node", "list", "--skyhook", &name]);
    let text = list.ok();
    assert!(
        text.starts_with(&format!("Skyhook: {name}\n\n")),
        "test-node-list:\n{text}"
    );
    assert!(
        text.contains("Summary: 2 nodes (2 complete, 0 erroring, 0 in progress)"),
        "test-node-list:\n{text}"
    );
    let rows = table(text);
    assert_eq!(
        rows[0],
        ["NODE", "STATUS", "PACKAGES"],
        "test-node-list:\n{text}"
    );
    let want: Vec<Vec<&str>> = nodes
        .iter()
        .map(|n| vec![n.as_str(), "complete", "1/1"])
        .collect();
    assert_eq!(rows[1..], want[..], "test-node-list:\n{text}");
    let json_list: Value = serde_json::from_str(
        plugin(
            &env.ctx,
            &["node", "list", "--skyhook", &name, "-o", "json"],
        )
        .ok(),
    )
    .expect("test-node-list: JSON");
    let want: Vec<Value> = nodes
        .iter()
        .map(|n| {
            json!({"nodeName": n, "status": "complete", "packagesComplete": 1,
                        "packagesTotal": 1, "restarts": 0})
        })
        .collect();
    assert_eq!(
        json_list,
        json!({"skyhookName": name, "nodes": want}),
        "test-node-list -o json"
    );

    // test-node-status: the first node, alone, with --skyhook, and as JSON.
    for args in [
        vec!["node", "status", first],
        vec!["node", "status", first, "--skyhook", name.as_str()],
    ] {
        let ran = plugin(&env.ctx, &args);
        let rows = table(ran.ok());
        assert_eq!(
            rows,
            [
                // Upstream CLI v0.4's columns (delta D38), after the reference's four.
                vec![
                    "NODE",
                    "SKYHOOK",
                    "STATUS",
                    "PACKAGES",
                    "CORDONED",
                    "RUNTIME-REQUIRED-CORDON"
                ],
                vec![first, name.as_str(), "complete", "1/1", "false", "false"]
            ],
            "test-node-status {args:?}:\n{}",
            ran.stdout
        );
    }
    let status: Value =
        serde_json::from_str(plugin(&env.ctx, &["node", "status", first, "-o", "json"]).ok())
            .expect("test-node-status: JSON");
    let (_, state) = env.node_state(first, &name).await.expect("node state");
    let entry = state
        .get("hello-world", "3.2.3")
        .expect("hello-world entry");
    assert_eq!(
        status,
        json!([{"nodeName": first, "skyhookName": name, "status": "complete",
                "packagesComplete": 1, "packagesTotal": 1,
                "packages": [{"name": "hello-world", "version": "3.2.3", "stage": "config",
                              "state": "complete", "restarts": 0, "image": entry.image}],
                "cordoned": false, "runtimeRequiredCordon": false}]),
        "test-node-status -o json"
    );

    // test-node-ignore / test-node-unignore
    // The scenario's lines have no --confirm: refused without an answer, nothing changed.
    let ignored = |n: Node| n.labels().get(schema::IGNORE_LABEL).cloned();
    let refused = plugin(&env.ctx, &["node", "ignore", first]);
    assert_eq!(refused.code, 1, "test-node-ignore as written: {refused:?}");
    assert_eq!(
        ignored(get_node(&env, first).await),
        None,
        "test-node-ignore as written"
    );
    assert_eq!(
        plugin(&env.ctx, &["node", "ignore", first, "--confirm"]).ok(),
        format!("Ignoring 1 node(s):\n  - {first}\n\nSuccessfully ignored 1 node(s)\n"),
        "test-node-ignore"
    );
    assert_eq!(
        ignored(get_node(&env, first).await).as_deref(),
        Some("true"),
        "test-node-ignore: the ignore label"
    );
    assert_eq!(
        plugin(&env.ctx, &["node", "unignore", first, "--confirm"]).ok(),
        format!("Unignoring 1 node(s):\n  - {first}\n\nSuccessfully unignored 1 node(s)\n"),
        "test-node-unignore"
    );
    assert_eq!(
        ignored(get_node(&env, first).await),
        None,
        "test-node-unignore: the ignore label removed"
    );

    // test-node-reset: the state goes, and the package runs again on that node only.
    let others: Vec<(String, usize)> = {
        let mut v = Vec::new();
        for n in &nodes[1..] {
            v.push((n.clone(), apply_jobs(&env, &name, n).await));
        }
        v
    };
    let ran = plugin(
        &env.ctx,
        &["node", "reset", first, "--skyhook", &name, "--confirm"],
    );
    assert_eq!(
        ran.ok(),
        format!(
            "Skyhook: {name}\nNodes to reset (1):\n  - {first} (1 packages)\n\nSuccessfully reset 1 node(s) for Skyhook {name:?}\n"
        ),
        "test-node-reset"
    );
    env.ctx
        .wait_for(
            "test-node-reset: a second apply Job on the reset node",
            Duration::from_secs(60),
            || async { (apply_jobs(&env, &name, first).await >= 2).then_some(()) },
        )
        .await;
    env.ctx
        .wait_for(
            "test-node-reset: hello-world complete again on the reset node",
            Duration::from_secs(60),
            || async {
                package_complete(&env, first, &name, "hello-world", "3.2.3")
                    .await
                    .then_some(())
            },
        )
        .await;
    for (n, before) in others {
        assert_eq!(
            apply_jobs(&env, &name, &n).await,
            before,
            "test-node-reset: node {n} was not reset and ran nothing again"
        );
    }
}

/// `k8s-tests/chainsaw/cli/package`: `package status` (table and JSON) and `package logs`
/// during the rollout; after it, `package rerun --dry-run` changes nothing and
/// `package rerun --stage apply` puts the node back `in_progress` and re-runs the package.
#[tokio::test]
async fn package() {
    scenario_package().await;
}

pub(crate) async fn scenario_package() {
    const LOG_TEXT: &str = "hello-world says hello";
    let env = setup("sc-cli-pkg", 2, &[]).await;
    let name = env.ctx.name("sk");
    let ns = env.ctx.ns.clone();
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"hello-world": hello_world(json!([
            {"name": "SLEEP_LEN", "value": "3"}, {"name": "LOG_TEXT", "value": LOG_TEXT}]))}}),
    ))
    .await;
    let nodes = sorted(&env.nodes);
    let first = nodes[0].as_str();

    // test-package-status, once every node has an entry for the package.
    env.ctx
        .wait_for(
            "test-package-status: every node has hello-world state",
            Duration::from_secs(60),
            || async {
                for n in &nodes {
                    let (_, s) = env.node_state(n, &name).await?;
                    s.get("hello-world", "3.2.3")?;
                }
                Some(())
            },
        )
        .await;
    let ran = plugin(
        &env.ctx,
        &["package", "status", "hello-world", "--skyhook", &name],
    );
    let text = ran.ok();
    assert!(
        text.starts_with(&format!("Skyhook: {name}\nPackages: hello-world:3.2.3\n\n")),
        "test-package-status:\n{text}"
    );
    let rows = table(text);
    assert_eq!(
        rows[0],
        ["NODE", "PACKAGE", "VERSION", "STAGE", "STATE"],
        "{text}"
    );
    assert_eq!(
        rows.len(),
        3,
        "test-package-status: a row per node:\n{text}"
    );
    for (row, n) in rows[1..].iter().zip(&nodes) {
        assert_eq!(row[..3], [n.as_str(), "hello-world", "3.2.3"], "{text}");
        assert!(
            ["apply", "config"].contains(&row[3]),
            "test-package-status stage:\n{text}"
        );
        assert!(
            ["in_progress", "complete"].contains(&row[4]),
            "test-package-status state:\n{text}"
        );
    }
    let parsed: Vec<Value> = serde_json::from_str(
        plugin(
            &env.ctx,
            &[
                "package",
                "status",
                "hello-world",
                "--skyhook",
                &name,
                "-o",
                "json",
            ],
        )
        .ok(),
    )
    .expect("test-package-status: JSON");
    let seen: Vec<(&str, &str, &str)> = parsed
        .iter()
        .map(|e| {
            (
                e["nodeName"].as_str().unwrap_or(""),
                e["name"].as_str().unwrap_or(""),
                e["version"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let want: Vec<(&str, &str, &str)> = nodes
        .iter()
        .map(|n| (n.as_str(), "hello-world", "3.2.3"))
        .collect();
    assert_eq!(seen, want, "test-package-status -o json");

    // test-package-logs: the reference's Pods are our Jobs' pods, in the operator's namespace
    // (`-n`, the reference's default being `skyhook`). Once the apply stage ran on the node,
    // its output is there.
    env.ctx
        .wait_for(
            "test-package-logs: the apply Job on the first node finished",
            Duration::from_secs(60),
            || async {
                env.jobs_of(&name)
                    .await
                    .iter()
                    .any(|j| {
                        label(j, schema::NODE_LABEL) == first
                            && label(j, schema::STAGE_LABEL) == "apply"
                            && j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0
                    })
                    .then_some(())
            },
        )
        .await;
    // The log agent serves a fake pod's logs a moment after the pod appears (later on a loaded
    // machine): ask again until it does.
    let want = format!("[apply/hello-world-apply] {LOG_TEXT}");
    let args = [
        "package",
        "logs",
        "hello-world",
        "--skyhook",
        &name,
        "--node",
        first,
        "-n",
        &ns,
    ];
    let mut last = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let ran = plugin(&env.ctx, &args);
        last = ran.ok().to_string();
        if last.contains(&want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(last.contains(&want), "test-package-logs:\n{last}");

    // test-package-rerun
    env.wait_status(&name, Status::Complete, Duration::from_secs(90))
        .await;
    let (raw_before, _) = env.node_state(first, &name).await.expect("node state");
    let ran = plugin(
        &env.ctx,
        &[
            "package",
            "rerun",
            "hello-world",
            "--skyhook",
            &name,
            "--node",
            first,
            "--dry-run",
        ],
    );
    assert_eq!(
        ran.ok(),
        format!(
            "Package: hello-world (version 3.2.3)\nSkyhook: {name}\nNodes to reset (1):\n  - {first} (current state: complete, stage: config)\n\n[dry-run] No changes applied\n"
        ),
        "test-package-rerun --dry-run"
    );
    let (raw_after, _) = env.node_state(first, &name).await.expect("node state");
    assert_eq!(
        raw_before, raw_after,
        "test-package-rerun: --dry-run changed the node state"
    );
    let applies = apply_jobs(&env, &name, first).await;
    let ran = plugin(
        &env.ctx,
        &[
            "package",
            "rerun",
            "hello-world",
            "--skyhook",
            &name,
            "--node",
            first,
            "--stage",
            "apply",
            "--confirm",
        ],
    );
    assert_eq!(
        ran.ok(),
        format!(
            "Package: hello-world (version 3.2.3)\nSkyhook: {name}\nRe-run from stage: apply\nNodes to reset (1):\n  - {first} (current state: complete, stage: config)\n\nSuccessfully reset package \"hello-world\" on 1 node(s)\n"
        ),
        "test-package-rerun --stage apply"
    );
    env.ctx
        .wait_for(
            "test-package-rerun: the node's status_<skyhook> annotation in_progress",
            Duration::from_secs(30),
            || async {
                let n = get_node(&env, first).await;
                (n.annotations()
                    .get(&schema::status_annotation(&name))
                    .map(String::as_str)
                    == Some("in_progress"))
                .then_some(())
            },
        )
        .await;
    env.ctx
        .wait_for(
            "test-package-rerun: a new apply Job, and hello-world complete again",
            Duration::from_secs(60),
            || async {
                (apply_jobs(&env, &name, first).await > applies
                    && package_complete(&env, first, &name, "hello-world", "3.2.3").await)
                    .then_some(())
            },
        )
        .await;
}

/// `k8s-tests/chainsaw/cli/reset`: after a completed rollout, `disable` then `reset` removes
/// the Skyhook's node state from every node; the disabled Skyhook marks them `disabled` again
/// and starts nothing.
#[tokio::test]
async fn reset() {
    scenario_reset().await;
}

pub(crate) async fn scenario_reset() {
    let env = setup("sc-cli-reset", 2, &[]).await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"test-package": shellscript("Reset test apply")}}),
    ))
    .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(90))
        .await;
    let nodes = sorted(&env.nodes);

    // disable-skyhook
    assert_eq!(
        plugin(&env.ctx, &["disable", &name, "--confirm"]).ok(),
        format!("Skyhook {name:?} disabled\n"),
        "disable-skyhook"
    );
    assert_eq!(
        skyhook_annotation(&env, &name, schema::DISABLE_ANNOTATION)
            .await
            .as_deref(),
        Some("true"),
        "disable-skyhook: disable annotation"
    );
    // Not in the scenario: wait until the operator has seen it, so the reset cannot race it.
    env.wait_status(&name, Status::Disabled, Duration::from_secs(30))
        .await;

    // test-reset
    let jobs_before = env.jobs_of(&name).await.len();
    let ran = plugin(&env.ctx, &["reset", &name, "--confirm"]);
    let listed: String = nodes
        .iter()
        .map(|n| format!("  - {n} (1 packages)\n"))
        .collect();
    assert_eq!(
        ran.ok(),
        format!(
            "Skyhook: {name}\nNodes to reset (2):\n{listed}\nBatch state will also be reset (use --skip-batch-reset to preserve)\nBatch state reset for Skyhook {name:?}\n\nSuccessfully reset 2 node(s) for Skyhook {name:?}\n"
        ),
        "test-reset: the command's output"
    );
    let state_key = schema::node_state_annotation(&name);
    let cordon_key = schema::cordon_annotation(&name);
    let status_key = schema::status_annotation(&name);
    env.ctx
        .wait_for(
            "test-reset: every node without nodeState_/cordon_ and with status_ = disabled",
            Duration::from_secs(30),
            || async {
                for n in &nodes {
                    let a = get_node(&env, n).await.annotations().clone();
                    if a.contains_key(&state_key)
                        || a.contains_key(&cordon_key)
                        || a.get(&status_key).map(String::as_str) != Some("disabled")
                    {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    env.ctx
        .holds_for(
            "test-reset: the disabled Skyhook starting nothing after the reset",
            Duration::from_secs(3),
            || async {
                let now = env.jobs_of(&name).await.len();
                let states: BTreeSet<bool> = {
                    let mut s = BTreeSet::new();
                    for n in &nodes {
                        s.insert(
                            get_node(&env, n)
                                .await
                                .annotations()
                                .contains_key(&state_key),
                        );
                    }
                    s
                };
                if now == jobs_before && !states.contains(&true) {
                    Ok(())
                } else {
                    Err(format!(
                        "{now} Jobs (before: {jobs_before}), node state back: {states:?}"
                    ))
                }
            },
        )
        .await;
}
