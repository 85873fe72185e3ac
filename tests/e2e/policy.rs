//! DeploymentPolicy rollouts on the real control plane: compartments, strategies, the failure
//! stop, batch state continued from the Go operator, missing policies, resets and the preview.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::{BatchState, CompartmentStatus, DeploymentPolicy, Skyhook};
use skyhook::plan::CompartmentPlan;
use skyhook::schema::{self, Status};

use crate::support::plugin::plugin;
use crate::support::{Env, label, pkg, setup, skyhook, sleep};

fn policy(name: &str, compartments: Value, default: Value, reset: bool) -> DeploymentPolicy {
    serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": {"compartments": compartments, "default": default,
                 "resetBatchStateOnCompletion": reset},
    }))
    .expect("valid DeploymentPolicy")
}

async fn create_policy(env: &Env, p: &DeploymentPolicy) {
    let api: Api<DeploymentPolicy> = Api::all(env.ctx.client.clone());
    api.create(&PostParams::default(), p)
        .await
        .expect("create DeploymentPolicy");
}

/// A policy of the default compartment only, created under the test's name; returns its name.
async fn default_only_policy(env: &Env, budget: Value, strategy: Value, reset: bool) -> String {
    let name = env.ctx.name("policy");
    let default = json!({"budget": budget, "strategy": strategy});
    create_policy(env, &policy(&name, json!([]), default, reset)).await;
    name
}

fn label_nodes(env: &Env, nodes: &[String], labels: &[&str]) {
    let mut args = vec!["label", "node", "--overwrite"];
    args.extend(nodes.iter().map(String::as_str));
    args.extend(labels);
    let out = env.ctx.kubectl(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A one-package Skyhook on `policy` that the test's operator does not own yet (its selector
/// wants the test label), so a preview sees it before any work; returns its name.
async fn unowned_skyhook(env: &Env, policy: &str, stage_seconds: &str) -> String {
    let name = env.ctx.name("sk");
    let mut sk = skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": policy, "packages": {"tool": pkg("1.0.0", sleep(stage_seconds))}}),
    );
    sk.metadata.labels = None;
    env.create(&sk).await;
    name
}

fn compartments(sk: &Skyhook) -> BTreeMap<String, CompartmentStatus> {
    sk.status
        .as_ref()
        .map(|s| s.compartment_statuses.clone())
        .unwrap_or_default()
}

/// When each node's work started (its first Job created) and ended (its last Job finished).
fn spans(jobs: &[Job]) -> BTreeMap<String, (Timestamp, Timestamp)> {
    let mut out: BTreeMap<String, (Timestamp, Timestamp)> = BTreeMap::new();
    for j in jobs {
        let node = label(j, schema::NODE_LABEL).to_string();
        let created = j.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let finished = j
            .status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .map(|t| t.0);
        let (Some(c), Some(f)) = (created, finished) else {
            panic!("Job {} has not finished", j.name_any());
        };
        let e = out.entry(node).or_insert((c, f));
        e.0 = e.0.min(c);
        e.1 = e.1.max(f);
    }
    out
}

/// Batch sizes of a set of nodes: a node starting before every node of the current batch has
/// ended joins it; one starting after the whole batch has ended opens the next. A node that
/// starts while part of the batch has ended means batches overlapped, which fails the test.
fn batches(spans: &BTreeMap<String, (Timestamp, Timestamp)>, nodes: &[String]) -> Vec<usize> {
    let mut list: Vec<(Timestamp, Timestamp, &str)> = nodes
        .iter()
        .map(|n| {
            let (s, e) = spans.get(n).unwrap_or_else(|| panic!("no Job ran on {n}"));
            (*s, *e, n.as_str())
        })
        .collect();
    list.sort();
    let mut sizes: Vec<usize> = Vec::new();
    let (mut first_end, mut last_end) = (None::<Timestamp>, None::<Timestamp>);
    for (start, end, node) in list {
        match (first_end, last_end) {
            (Some(fe), _) if start < fe => {
                *sizes.last_mut().expect("a batch") += 1;
                last_end = last_end.max(Some(end));
                first_end = first_end.min(Some(end));
            }
            (_, Some(le)) if start < le => {
                panic!("{node} started at {start} while its batch was still at work (ends {le})")
            }
            _ => {
                sizes.push(1);
                first_end = Some(end);
                last_end = Some(end);
            }
        }
    }
    sizes
}

fn batch(current: i64, completed: i64, last: i64) -> BatchState {
    BatchState {
        current_batch: current,
        completed_nodes: completed,
        last_batch_size: last,
        ..BatchState::default()
    }
}

/// Acceptance 1, 2, 4 (rule 1), 8 and 9: four compartments side by side, previewed first.
#[tokio::test]
async fn compartments_roll_out_batch_by_batch_within_their_ceilings() {
    let env = setup("dp-shape", 25, &[]).await;
    let n = &env.nodes;
    label_nodes(&env, &n[0..2], &["canary=true"]);
    label_nodes(&env, &n[2..10], &["tier=prod"]);
    label_nodes(&env, &n[10..18], &["exp=true"]);
    label_nodes(&env, &n[18..24], &["capped=true"]);
    // Matches exp (exponential) and capped (fixed): the safer strategy takes it.
    label_nodes(&env, &n[24..25], &["exp=true", "capped=true"]);
    let pname = env.ctx.name("policy");
    let sel = |k: &str, v: &str| json!({"matchLabels": {k: v}});
    create_policy(
        &env,
        &policy(
            &pname,
            json!([
                {"name": "canary", "selector": sel("canary", "true"), "budget": {"count": 2},
                 "strategy": {"fixed": {"initialBatch": 1}}},
                {"name": "production", "selector": sel("tier", "prod"), "budget": {"percent": 50},
                 "strategy": {"linear": {"initialBatch": 1, "delta": 1}}},
                {"name": "exp", "selector": sel("exp", "true"), "budget": {"count": 8},
                 "strategy": {"exponential": {"initialBatch": 1, "growthFactor": 2}}},
                {"name": "capped", "selector": sel("capped", "true"), "budget": {"count": 2},
                 "strategy": {"fixed": {"initialBatch": 4}}},
            ]),
            json!({"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 1}}}),
            false,
        ),
    )
    .await;
    let name = unowned_skyhook(&env, &pname, "2").await;

    let ran = plugin(
        &env.ctx,
        &["deployment-policy", "preview", &name, "-o", "json"],
    );
    let preview: Value = serde_json::from_str(ran.ok()).expect("preview JSON");
    let parsed: Vec<CompartmentPlan> =
        serde_json::from_value(preview["compartments"].clone()).expect("compartments round-trip");
    assert_eq!(
        serde_json::to_value(&parsed).expect("json"),
        preview["compartments"]
    );
    assert_eq!(preview["policy"], json!(pname));
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    // (nodes, first batch size, ceiling) per compartment; node order is the cluster's.
    let first: BTreeMap<&str, (Vec<String>, usize, i64)> = parsed
        .iter()
        .map(|c| {
            assert!(c.batch.iter().all(|b| c.nodes.contains(b)), "{c:?}");
            (
                c.name.as_str(),
                (sorted(c.nodes.clone()), c.batch.len(), c.ceiling),
            )
        })
        .collect();
    let names = |r: std::ops::Range<usize>| sorted(n[r].to_vec());
    let mut capped_nodes = n[18..24].to_vec();
    capped_nodes.push(n[24].clone());
    assert_eq!(first["canary"], (names(0..2), 1, 2));
    assert_eq!(first["production"], (names(2..10), 1, 4));
    assert_eq!(first["exp"], (names(10..18), 1, 8));
    assert_eq!(
        first["capped"],
        (sorted(capped_nodes.clone()), 2, 2),
        "the ceiling caps initialBatch 4"
    );
    assert_eq!(first["__default__"], (vec![], 0, 0));
    let table = plugin(&env.ctx, &["deployment-policy", "preview", &name]);
    for word in [
        "canary",
        "production",
        "linear",
        "exponential",
        "count 2",
        "50%",
    ] {
        assert!(
            table.ok().contains(word),
            "{word} missing from\n{}",
            table.stdout
        );
    }
    assert!(
        env.jobs_of(&name).await.is_empty(),
        "the preview started nothing"
    );

    // Hand it to the operator and sample the capped compartment every second.
    let (k, v) = env.ctx.test_label();
    let give = json!({"metadata": {"labels": {k: v}}});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&give))
        .await
        .expect("label the Skyhook");
    let mut most_capped = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let done = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the rollout did not complete in 300 s"
        );
        let jobs = env.jobs_of(&name).await;
        let busy: std::collections::BTreeSet<&str> = jobs
            .iter()
            .filter(|j| {
                j.status
                    .as_ref()
                    .and_then(|s| s.completion_time.as_ref())
                    .is_none()
            })
            .filter(|j| j.status.as_ref().is_none_or(|s| s.failed.unwrap_or(0) <= 0))
            .map(|j| label(j, schema::NODE_LABEL))
            .collect();
        let capped = capped_nodes
            .iter()
            .filter(|x| busy.contains(x.as_str()))
            .count();
        most_capped = most_capped.max(capped);
        assert!(
            capped <= 2,
            "{capped} capped nodes at work at once: {busy:?}"
        );
        let sk = env.skyhooks.get(&name).await.expect("get");
        if sk.status.as_ref().and_then(|s| s.status) == Some(Status::Complete) {
            break sk;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(most_capped, 2, "the capped compartment used its ceiling");

    let spans = spans(&env.jobs_of(&name).await);
    assert_eq!(batches(&spans, &names(0..2)), [1, 1], "canary");
    assert_eq!(batches(&spans, &names(2..10)), [1, 2, 3, 2], "production");
    assert_eq!(batches(&spans, &names(10..18)), [1, 2, 4, 1], "exponential");
    assert_eq!(batches(&spans, &capped_nodes), [2, 2, 2, 1], "capped");

    let got = compartments(&done);
    let want = |matched, ceiling, batch_state| CompartmentStatus {
        matched,
        ceiling,
        in_progress: 0,
        completed: matched,
        progress_percent: if matched == 0 { 0 } else { 100 },
        batch_state: Some(batch_state),
    };
    assert_eq!(got["canary"], want(2, 2, batch(3, 2, 1)));
    assert_eq!(got["production"], want(8, 4, batch(5, 8, 2)));
    assert_eq!(got["exp"], want(8, 8, batch(5, 8, 1)));
    assert_eq!(got["capped"], want(7, 2, batch(5, 7, 1)));
    assert_eq!(got["__default__"], want(0, 0, BatchState::fresh()));
    assert_eq!(got.len(), 5);

    // The operator's metrics carry the policy, compartment and strategy.
    let metrics = crate::support::metrics::metrics(env.op.metrics_port);
    let line = format!(
        "skyhook_rollout_progress_percent{{skyhook_name=\"{name}\",policy_name=\"{pname}\",compartment_name=\"production\",strategy=\"linear\"}} 100"
    );
    assert!(metrics.lines().any(|l| l == line), "{line} missing");

    // node status -o wide shows each node's compartment.
    let wide = plugin(&env.ctx, &["node", "status", &n[2], "-o", "wide"]);
    assert!(wide.ok().contains("production"), "{}", wide.stdout);
}

/// Acceptance 3: a failing first batch stops the compartment; the CLI's reset resumes it.
#[tokio::test]
async fn a_failing_batch_stops_the_rollout_until_the_batch_state_is_reset() {
    let env = setup("dp-stop", 3, &[]).await;
    let pname = default_only_policy(
        &env,
        json!({"count": 1}),
        json!({"fixed": {"initialBatch": 1, "batchThreshold": 100, "failureThreshold": 1}}),
        true,
    )
    .await;
    let name = env.ctx.name("sk");
    let failing = pkg("1.0.0", json!([{"name": "EXIT_CODE", "value": "1"}]));
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": pname, "packages": {"broken": failing}}),
    ))
    .await;
    let stopped = env
        .ctx
        .wait_for(
            "the compartment to stop",
            Duration::from_secs(90),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                let b = compartments(&sk).get("__default__")?.batch_state.clone()?;
                b.should_stop.then_some(sk)
            },
        )
        .await;
    let cond = stopped
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == schema::ROLLOUT_STOPPED_CONDITION)
        })
        .expect("RolloutStopped condition");
    assert_eq!(cond.status, "True");
    assert!(
        cond.message.contains("deployment-policy reset"),
        "{}",
        cond.message
    );
    env.wait_event("a RolloutStopped Warning", &name, |e| {
        e.reason.as_deref() == Some(schema::ROLLOUT_STOPPED_REASON)
            && e.type_.as_deref() == Some("Warning")
    })
    .await;
    let nodes_with_jobs = || async {
        let jobs = env.jobs_of(&name).await;
        jobs.iter()
            .map(|j| label(j, schema::NODE_LABEL).to_string())
            .collect::<std::collections::BTreeSet<String>>()
    };
    assert_eq!(nodes_with_jobs().await.len(), 1);
    env.ctx
        .holds_for(
            "no further node starting",
            Duration::from_secs(8),
            || async {
                let n = nodes_with_jobs().await.len();
                if n == 1 {
                    Ok(())
                } else {
                    Err(format!("{n} nodes have Jobs"))
                }
            },
        )
        .await;

    plugin(&env.ctx, &["deployment-policy", "reset", &name, "-y"]).ok();
    env.ctx
        .wait_for(
            "a second node to start after the reset",
            Duration::from_secs(60),
            || async { (nodes_with_jobs().await.len() >= 2).then_some(()) },
        )
        .await;
}

/// Acceptance 5: batch state and node state written by the Go operator are continued.
#[tokio::test]
async fn the_go_operators_batch_state_is_continued() {
    let env = setup(
        "dp-handover",
        6,
        &[("SKYHOOK_SELECTOR", "skyhook-e2e=nobody")],
    )
    .await;
    let pname = default_only_policy(
        &env,
        json!({"percent": 100}),
        json!({"linear": {"initialBatch": 1, "delta": 1}}),
        false,
    )
    .await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": pname, "packages": {"tool": pkg("1.0.0", sleep("2"))}}),
    ))
    .await;
    // Batches 1 and 2 (1 + 2 nodes) ran under the Go operator.
    let done = r#"{"tool|1.0.0":{"name":"tool","version":"1.0.0","image":"ghcr.io/nvidia/skyhook-packages/shellscript","stage":"config","state":"complete"}}"#;
    for node in &env.nodes[0..3] {
        let patch = json!({"metadata": {"annotations": {
            schema::node_state_annotation(&name): done,
            schema::status_annotation(&name): "complete",
        }}});
        env.node_api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch node");
    }
    let status = json!({"status": {"status": "in_progress", "compartmentStatuses": {"__default__": {
        "matched": 6, "ceiling": 6, "inProgress": 0, "completed": 3, "progressPercent": 50,
        "batchState": {"currentBatch": 3, "completedNodes": 3, "lastBatchSize": 2}}}}});
    env.skyhooks
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("write the Go operator's status");

    let mut op = env.op;
    op.kill();
    let op = crate::support::Operator::start(&env.ctx, &[]);
    let env = Env { op, ..env };
    let sk = env
        .wait_status(&name, Status::Complete, Duration::from_secs(120))
        .await;
    let spans = spans(&env.jobs_of(&name).await);
    assert!(
        spans.keys().all(|n| env.nodes[3..].contains(n)),
        "completed nodes ran nothing: {spans:?}"
    );
    assert_eq!(
        batches(&spans, &env.nodes[3..]),
        [3],
        "batch 3 is 2 + delta 1 nodes"
    );
    assert_eq!(
        compartments(&sk)["__default__"].batch_state,
        Some(batch(4, 6, 3))
    );
}

/// Acceptance 6 (its second half): a missing policy blocks the Skyhook and says so; creating
/// the policy lets it go on by itself.
#[tokio::test]
async fn a_missing_policy_blocks_until_it_is_created() {
    let env = setup("dp-missing", 2, &[]).await;
    let pname = env.ctx.name("policy");
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": pname, "packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    let sk = env
        .wait_status(&name, Status::Blocked, Duration::from_secs(30))
        .await;
    let cond = sk
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == schema::DEPLOYMENT_POLICY_NOT_FOUND_CONDITION)
        })
        .expect("DeploymentPolicyNotFound condition");
    assert_eq!(cond.status, "True");
    assert_eq!(
        cond.message,
        format!("DeploymentPolicy {pname:?} not found")
    );
    env.wait_event("a DeploymentPolicyNotFound Warning", &name, |e| {
        e.reason.as_deref() == Some(schema::DEPLOYMENT_POLICY_NOT_FOUND_REASON)
            && e.message.as_deref().is_some_and(|m| m.contains(&pname))
    })
    .await;
    env.ctx
        .holds_for(
            "no Job while the policy is missing",
            Duration::from_secs(5),
            || async {
                let n = env.jobs_of(&name).await.len();
                if n == 0 {
                    Ok(())
                } else {
                    Err(format!("{n} Jobs"))
                }
            },
        )
        .await;
    let ran = plugin(&env.ctx, &["deployment-policy", "preview", &name]);
    ran.fails(1, "does not exist");

    // The same name the Skyhook names.
    let strategy = json!({"fixed": {"initialBatch": 2}});
    default_only_policy(&env, json!({"count": 2}), strategy, false).await;
    let sk = env
        .wait_status(&name, Status::Complete, Duration::from_secs(90))
        .await;
    let conds = sk.status.map(|s| s.conditions).unwrap_or_default();
    assert!(
        !conds
            .iter()
            .any(|c| c.type_ == schema::DEPLOYMENT_POLICY_NOT_FOUND_CONDITION),
        "{conds:?}"
    );
}

/// Acceptance 7: batch state resets on completion and on a version bump when the Skyhook's
/// option (over the policy's) says so.
#[tokio::test]
async fn batch_state_resets_on_completion_and_version_bumps() {
    let env = setup("dp-reset", 3, &[]).await;
    let pname = default_only_policy(
        &env,
        json!({"count": 1}),
        json!({"fixed": {"initialBatch": 1}}),
        true,
    )
    .await;
    let spec = |version: &str, option: Option<bool>| {
        let mut spec =
            json!({"deploymentPolicy": pname, "packages": {"tool": pkg(version, sleep("2"))}});
        if let Some(on) = option {
            spec["deploymentPolicyOptions"] = json!({"resetBatchStateOnCompletion": on});
        }
        spec
    };
    // The policy says reset: after completion the state is fresh.
    let follows = env.ctx.name("follows");
    env.create(&skyhook(&env.ctx, &follows, spec("1.0.0", None)))
        .await;
    // The Skyhook's option overrides the policy: kept.
    let keeps = env.ctx.name("keeps");
    env.create(&skyhook(&env.ctx, &keeps, spec("1.0.0", Some(false))))
        .await;
    let sk = env
        .wait_status(&follows, Status::Complete, Duration::from_secs(180))
        .await;
    assert_eq!(
        compartments(&sk)["__default__"].batch_state,
        Some(BatchState::fresh())
    );
    let sk = env
        .wait_status(&keeps, Status::Complete, Duration::from_secs(180))
        .await;
    assert_eq!(
        compartments(&sk)["__default__"].batch_state,
        Some(batch(4, 3, 1))
    );

    // A version bump on a Skyhook whose state was kept, with the option now on: the rollout
    // of 2.0.0 starts from batch 1 (reset at once, then counted afresh).
    let bump = json!({"spec": spec("2.0.0", Some(true))});
    env.skyhooks
        .patch(&keeps, &PatchParams::default(), &Patch::Merge(&bump))
        .await
        .expect("bump");
    env.ctx
        .wait_for(
            "the batch state to restart",
            Duration::from_secs(30),
            || async {
                let sk = env.skyhooks.get(&keeps).await.ok()?;
                let b = compartments(&sk).get("__default__")?.batch_state.clone()?;
                (b.current_batch <= 2 && b.completed_nodes <= 1).then_some(())
            },
        )
        .await;
    env.wait_status(&keeps, Status::Complete, Duration::from_secs(180))
        .await;
}

/// Acceptance 6 (its first half): a policy in use is not deleted under its Skyhook; the Event
/// on it names who holds it, and it goes once nothing names it.
#[tokio::test]
async fn a_policy_in_use_is_deleted_only_once_unused() {
    let env = setup("dp-guard", 1, &[]).await;
    let pname = env.ctx.name("policy");
    let mut p = policy(
        &pname,
        json!([]),
        json!({"budget": {"count": 1}, "strategy": {"fixed": {}}}),
        false,
    );
    // This test's operator guards only the policies carrying its label.
    let (k, v) = env.ctx.test_label();
    p.metadata.labels = Some([(k, v)].into());
    create_policy(&env, &p).await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": pname, "packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    let api: Api<DeploymentPolicy> = Api::all(env.ctx.client.clone());
    env.ctx
        .wait_for("the in-use finalizer", Duration::from_secs(30), || async {
            let p = api.get(&pname).await.ok()?;
            p.finalizers()
                .iter()
                .any(|f| f == schema::POLICY_FINALIZER)
                .then_some(())
        })
        .await;
    let out = env.ctx.kubectl(&[
        "delete",
        "deploymentpolicies.skyhook.nvidia.com",
        &pname,
        "--wait=false",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.wait_event("a PolicyInUse Warning naming the Skyhook", &pname, |e| {
        e.reason.as_deref() == Some(schema::POLICY_IN_USE_REASON)
            && e.message.as_deref().is_some_and(|m| m.contains(&name))
    })
    .await;
    env.ctx
        .holds_for(
            "the policy staying while used",
            Duration::from_secs(5),
            || async {
                match api.get(&pname).await {
                    Ok(p) if p.metadata.deletion_timestamp.is_some() => Ok(()),
                    Ok(_) => Err("not being deleted".to_string()),
                    Err(e) => Err(format!("gone: {e}")),
                }
            },
        )
        .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(60))
        .await;
    let drop = json!({"spec": {"deploymentPolicy": null}});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&drop))
        .await
        .expect("stop naming the policy");
    env.ctx
        .wait_for("the policy to go", Duration::from_secs(30), || async {
            api.get_opt(&pname).await.ok()?.is_none().then_some(())
        })
        .await;
}

/// Acceptance 4, rules 2 and 3 (rule 1 is in the rollout above): where overlapping
/// compartments put a node, as `deployment-policy preview` reports it.
#[tokio::test]
async fn overlapping_compartments_follow_the_tie_break() {
    let env = setup("dp-overlap", 4, &[]).await;
    let n = &env.nodes;
    label_nodes(&env, &n[0..1], &["wide=true", "narrow=true"]);
    label_nodes(&env, &n[1..2], &["wide=true"]);
    label_nodes(&env, &n[2..3], &["zeta=true", "alpha=true"]);
    label_nodes(&env, &n[3..4], &["zeta=true"]);
    let pname = env.ctx.name("policy");
    let sel = |k: &str| json!({"matchLabels": {k: "true"}});
    let fixed = json!({"fixed": {"initialBatch": 1}});
    create_policy(
        &env,
        &policy(
            &pname,
            json!([
                // Rule 2: same strategy; wide's ceiling is 2 (100% of its 2 nodes), narrow's 1.
                {"name": "wide", "selector": sel("wide"), "budget": {"percent": 100}, "strategy": fixed},
                {"name": "narrow", "selector": sel("narrow"), "budget": {"count": 1}, "strategy": fixed},
                // Rule 3: same strategy and ceiling: the first name.
                {"name": "zeta", "selector": sel("zeta"), "budget": {"count": 2}, "strategy": fixed},
                {"name": "alpha", "selector": sel("alpha"), "budget": {"count": 2}, "strategy": fixed},
            ]),
            json!({"budget": {"percent": 100}, "strategy": fixed}),
            false,
        ),
    )
    .await;
    let name = unowned_skyhook(&env, &pname, "1").await;
    let ran = plugin(&env.ctx, &["dp", "preview", &name, "-o", "json"]);
    let preview: Value = serde_json::from_str(ran.ok()).expect("preview JSON");
    let parsed: Vec<CompartmentPlan> =
        serde_json::from_value(preview["compartments"].clone()).expect("compartments");
    let home: BTreeMap<String, String> = parsed
        .iter()
        .flat_map(|c| c.nodes.iter().map(|node| (node.clone(), c.name.clone())))
        .collect();
    assert_eq!(home[&n[0]], "narrow", "rule 2: the smaller ceiling");
    assert_eq!(home[&n[1]], "wide");
    assert_eq!(home[&n[2]], "alpha", "rule 3: the first name");
    assert_eq!(home[&n[3]], "zeta");
    let wide = plugin(&env.ctx, &["dp", "preview", &name, "-o", "wide"]);
    assert!(wide.ok().contains("ALL NODES"), "{}", wide.stdout);
}

/// Issue 35, acceptance 10: batch counters hand-patched past the CRD's bounds are refused; at
/// the bounds (anyone who may patch the status subresource can) they neither panic the operator
/// nor wrap: the rollout goes on and the batch number stays at the bound.
#[tokio::test]
async fn patched_extreme_batch_counters_neither_panic_nor_wrap() {
    let env = setup("dp-extreme", 3, &[]).await;
    let pname = default_only_policy(
        &env,
        json!({"percent": 100}),
        json!({"linear": {"initialBatch": 1, "delta": 1}}),
        false,
    )
    .await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": pname, "packages": {"tool": pkg("1.0.0", sleep("2"))}}),
    ))
    .await;
    env.ctx
        .wait_for("the first batch", Duration::from_secs(60), || async {
            let sk = env.skyhooks.get(&name).await.ok()?;
            compartments(&sk).contains_key("__default__").then_some(())
        })
        .await;
    // Past the CRD's bounds: refused by the API server, naming the field.
    let status = json!({"status": {"compartmentStatuses": {"__default__": {"batchState": {
        "lastBatchSize": i64::MAX, "failedNodes": i64::MIN}}}}});
    let refused = env
        .skyhooks
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect_err("counters past the bounds are refused")
        .to_string();
    assert!(
        refused.contains("batchState.lastBatchSize") && refused.contains("batchState.failedNodes"),
        "{refused}"
    );
    // At the bounds: accepted, and the operator goes on from there.
    let max = 2_147_483_647_i64;
    let status = json!({"status": {"compartmentStatuses": {"__default__": {"batchState": {
        "currentBatch": max, "consecutiveFailures": max,
        "lastBatchSize": max, "completedNodes": max, "failedNodes": 0}}}}});
    env.skyhooks
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch the batch state");
    let sk = env
        .wait_status(&name, Status::Complete, Duration::from_secs(120))
        .await;
    assert!(
        env.op.running(),
        "the operator died:\n{}",
        env.op.log_tail(40)
    );
    let b = compartments(&sk)["__default__"]
        .batch_state
        .clone()
        .expect("batch state");
    assert_eq!(
        b.current_batch, max,
        "wrapped or went past the bound: {b:?}"
    );
    assert!(
        (0..=max).contains(&b.consecutive_failures),
        "wrapped: {b:?}"
    );
}
