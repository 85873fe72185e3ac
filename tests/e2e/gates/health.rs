//! The health gate (issue 38, acceptance 1): after its last stage a node stays cordoned and at
//! work until its selected pods are Ready and its node condition holds; past the timeout it is
//! `erroring`, a failed node of its batch (the policy's threshold then stops the rollout), and
//! it completes once it recovers.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::{Env, create_policy, label, reboot_pkg, setup, skyhook};

/// A device-plugin-like pod `name` on `node` (it tolerates the cordon, as a DaemonSet's pods do,
/// so the drain leaves it), once kwok runs it.
async fn plugin_pod(env: &Env, name: &str, node: &str, app: &str) -> Api<Pod> {
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node,
            "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
            "containers": [{"name": "plugin", "image": "example.com/plugin:1"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the plugin pod");
    env.ctx
        .wait_for("the plugin pod Ready", Duration::from_secs(30), || async {
            ready(&pods.get(name).await.ok()?).then_some(())
        })
        .await;
    pods
}

fn ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Sets the pod's Ready condition (kwok leaves a running pod's status alone).
async fn set_pod_ready(pods: &Api<Pod>, name: &str, status: &str) {
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status},
        {"type": "ContainersReady", "status": status}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("patch the pod's Ready condition");
}

async fn node_of(env: &Env, name: &str) -> Node {
    env.node_api.get(name).await.expect("node")
}

fn annotation<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Waits until `node` waits for its health gate: in progress, cordoned, its clock started, and
/// the Skyhook's HealthGate condition set.
async fn wait_holding(env: &Env, sk: &str, node: &str) {
    let clock = schema::health_gate_annotation(sk);
    let status = schema::status_annotation(sk);
    env.ctx
        .eventually(
            "the node held by its health gate",
            Duration::from_secs(120),
            || async {
                let n = node_of(env, node).await;
                let got = (
                    annotation(&n, &status).map(str::to_owned),
                    annotation(&n, &clock).is_some(),
                    crate::support::cordoned(&n),
                );
                // The node's keys are written before the status in a pass: wait for the
                // condition too, or a read between the two writes finds none.
                let condition = env
                    .condition(sk, schema::HEALTH_GATE_CONDITION)
                    .await
                    .is_some();
                match (got, condition) {
                    ((Some(s), true, true), true) if s == "in_progress" => Ok(()),
                    other => Err(format!(
                        "((status, clock, cordoned), condition) = {other:?}"
                    )),
                }
            },
        )
        .await;
}

#[tokio::test]
async fn a_pod_that_stays_not_ready_fails_the_node_and_stops_the_rollout() {
    let env = setup("gates-health-pod", 2, &[]).await;
    let app = env.ctx.name("dp");
    let mut pods = None;
    for (i, node) in env.nodes.iter().enumerate() {
        let name = format!("dp-{i}");
        let api = plugin_pod(&env, &name, node, &app).await;
        set_pod_ready(&api, &name, "False").await;
        pods = Some(api);
    }
    let pods = pods.expect("pods");
    let strategy = json!({"fixed": {"initialBatch": 1, "failureThreshold": 1, "safetyLimit": 100}});
    let policy = create_policy(
        &env.ctx,
        json!({"default": {"budget": {"count": 1}, "strategy": strategy}}),
    )
    .await;
    let sk = env.ctx.name("sk");
    let gate = json!({"timeout": "25s",
        "pods": {"namespace": env.ctx.ns, "selector": {"matchLabels": {"app": app}}}});
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": policy, "healthGate": gate,
            "packages": {"driver": reboot_pkg("1.0.0")}}),
    ))
    .await;
    // The first node finishes its stages and is held: cordoned, in progress, not complete.
    let first = env
        .ctx
        .wait_for(
            "a node's post-interrupt Job",
            Duration::from_secs(120),
            || async {
                let jobs = env.jobs_of(&sk).await;
                let j = jobs
                    .iter()
                    .find(|j| label(j, schema::STAGE_LABEL) == "post-interrupt")?;
                Some(label(j, schema::NODE_LABEL).to_string())
            },
        )
        .await;
    wait_holding(&env, &sk, &first).await;
    // `node status` shows the hold: not complete, the gate's column saying since when.
    let ran = crate::support::plugin::plugin_async(
        &env.ctx,
        &["node", "status", &first, "--skyhook", &sk],
    )
    .await;
    let out = ran.ok();
    assert!(
        out.contains("HEALTH-GATE") && out.contains("waiting since") && out.contains("in_progress"),
        "{out}"
    );
    let i = env.nodes.iter().position(|n| *n == first).expect("index");
    let (reason, message) = env
        .condition(&sk, schema::HEALTH_GATE_CONDITION)
        .await
        .expect("HealthGate condition");
    assert_eq!(reason, schema::HEALTH_GATE_HOLDING_REASON, "{message}");
    assert!(
        message.contains(&first)
            && message.contains(&format!("dp-{i}"))
            && message.contains("not Ready"),
        "the condition names the node and the pod: {message}"
    );
    env.wait_event("HealthGateHolding", &first, |e| {
        e.reason.as_deref() == Some(schema::HEALTH_GATE_HOLDING_REASON)
    })
    .await;
    // At the timeout: erroring, still cordoned; the batch failed and the rollout stops.
    env.wait_event("HealthGateFailed", &sk, |e| {
        e.reason.as_deref() == Some(schema::HEALTH_GATE_FAILED_REASON)
            && e.type_.as_deref() == Some("Warning")
            && e.message.as_deref().is_some_and(|m| m.contains(&first))
    })
    .await;
    let stopped = env
        .ctx
        .wait_for("the batch failed", Duration::from_secs(60), || async {
            let s = env.skyhooks.get(&sk).await.ok()?.status?;
            let b = s
                .compartment_statuses
                .get("__default__")?
                .batch_state
                .clone()?;
            b.should_stop.then_some(s)
        })
        .await;
    assert_eq!(
        stopped.node_status.get(&first),
        Some(&Status::Erroring),
        "{:?}",
        stopped.node_status
    );
    let n = node_of(&env, &first).await;
    assert!(
        crate::support::cordoned(&n),
        "a node that failed its health gate stays cordoned"
    );
    let other = env
        .nodes
        .iter()
        .find(|n| **n != first)
        .expect("node")
        .clone();
    env.ctx
        .holds_for(
            "the stopped rollout starts no node",
            Duration::from_secs(8),
            || async {
                let jobs = env.jobs_of(&sk).await;
                match jobs
                    .iter()
                    .filter(|j| label(j, schema::NODE_LABEL) == other)
                    .count()
                {
                    0 => Ok(()),
                    n => Err(format!("{n} Jobs on {other}")),
                }
            },
        )
        .await;
    // The pod recovers: the node completes and is uncordoned.
    set_pod_ready(&pods, &format!("dp-{i}"), "True").await;
    env.wait_event("HealthGatePassed", &first, |e| {
        e.reason.as_deref() == Some(schema::HEALTH_GATE_PASSED_REASON)
    })
    .await;
    env.ctx
        .eventually(
            "the recovered node complete and uncordoned",
            Duration::from_secs(30),
            || async {
                let n = node_of(&env, &first).await;
                let status = annotation(&n, &schema::status_annotation(&sk)).map(str::to_owned);
                let clock = annotation(&n, &schema::health_gate_annotation(&sk)).map(str::to_owned);
                match (status.as_deref(), clock, crate::support::cordoned(&n)) {
                    (Some("complete"), None, false) => Ok(()),
                    other => Err(format!("(status, clock, cordoned) = {other:?}")),
                }
            },
        )
        .await;
}

#[tokio::test]
async fn a_node_passes_once_its_condition_holds_and_its_pod_is_ready() {
    let env = setup("gates-health-pass", 1, &[]).await;
    let node = env.nodes[0].clone();
    let app = env.ctx.name("dp");
    let sk = env.ctx.name("sk");
    let condition = format!("E2EHealthy{}", &app[app.len() - 4..]).replace('-', "");
    let gate = json!({"timeout": "10m",
        "nodeCondition": {"type": condition, "status": "True"},
        "pods": {"selector": {"matchLabels": {"app": app}}}});
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"healthGate": gate, "packages": {"driver": reboot_pkg("1.0.0")}}),
    ))
    .await;
    wait_holding(&env, &sk, &node).await;
    let (_, message) = env
        .condition(&sk, schema::HEALTH_GATE_CONDITION)
        .await
        .expect("HealthGate condition");
    assert!(
        message.contains(&condition) && message.contains("absent"),
        "the condition names the missing node condition: {message}"
    );
    // The node condition comes (as node-problem-detector would set it): still no pod.
    let patch = json!({"status": {"conditions": [{"type": condition, "status": "True",
        "reason": "E2E", "message": "set by the health gate test"}]}});
    env.node_api
        .patch_status(&node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("set the node condition");
    env.ctx
        .eventually(
            "the gate waiting for the pod",
            Duration::from_secs(30),
            || async {
                match env.condition(&sk, schema::HEALTH_GATE_CONDITION).await {
                    Some((_, m)) if m.contains("no pod matching") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    assert!(
        crate::support::cordoned(&node_of(&env, &node).await),
        "held nodes stay cordoned"
    );
    // The pod comes and is Ready: the node completes, uncordoned, and the condition goes.
    plugin_pod(&env, "dp", &node, &app).await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(60))
        .await;
    let n = node_of(&env, &node).await;
    assert!(
        !crate::support::cordoned(&n),
        "a node that passed is uncordoned"
    );
    assert_eq!(annotation(&n, &schema::health_gate_annotation(&sk)), None);
    assert_eq!(
        env.condition(&sk, schema::HEALTH_GATE_CONDITION).await,
        None
    );
}

#[tokio::test]
async fn a_bad_health_gate_is_refused_naming_the_field() {
    let env = setup("gates-health-bad", 1, &[]).await;
    let cases = [
        (json!({"timeout": "soon"}), "healthGate.timeout"),
        (
            json!({"pods": {"selector": {}}}),
            "healthGate.pods.selector",
        ),
        (
            json!({"nodeCondition": {"type": "X", "status": "yes"}}),
            "healthGate.nodeCondition.status",
        ),
    ];
    for (gate, field) in cases {
        let sk = skyhook(
            &env.ctx,
            &env.ctx.name("bad"),
            json!({"healthGate": gate, "packages": {"driver": reboot_pkg("1.0.0")}}),
        );
        let err = env
            .skyhooks
            .create(&PostParams::default(), &sk)
            .await
            .expect_err("a bad health gate is refused");
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
}

#[tokio::test]
async fn a_check_job_that_fails_then_succeeds_passes_the_gate() {
    let env = setup("gates-health-check", 1, &[]).await;
    let node = env.nodes[0].clone();
    let sk = env.ctx.name("sk");
    let check = |code: &str| {
        json!({"image": "example.com/gpu-check:1", "command": ["/check"],
            "env": [{"name": "EXIT_CODE", "value": code}, {"name": "SLEEP_LEN", "value": "1"}]})
    };
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"healthGate": {"timeout": "5m", "check": check("1")},
            "packages": {"tool": crate::support::pkg("1.0.0", crate::support::sleep("1"))}}),
    ))
    .await;
    let checks = |jobs: Vec<k8s_openapi::api::batch::v1::Job>| {
        jobs.into_iter()
            .filter(|j| label(j, schema::STAGE_LABEL) == schema::HEALTH_CHECK_STAGE)
            .collect::<Vec<_>>()
    };
    let failed = |j: &k8s_openapi::api::batch::v1::Job| {
        j.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
    };
    // The first attempt fails: the node is held, the condition says why.
    env.ctx
        .wait_for(
            "a failed check attempt",
            Duration::from_secs(120),
            || async {
                checks(env.jobs_of(&sk).await)
                    .iter()
                    .any(failed)
                    .then_some(())
            },
        )
        .await;
    env.ctx
        .eventually(
            "the gate naming the failed check",
            Duration::from_secs(30),
            || async {
                match env.condition(&sk, schema::HEALTH_GATE_CONDITION).await {
                    Some((_, m)) if m.contains("check Job") && m.contains("failed") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    let n = node_of(&env, &node).await;
    assert_eq!(
        annotation(&n, &schema::status_annotation(&sk)),
        Some("in_progress"),
        "a node whose check failed is not complete"
    );
    // The check is fixed: the next attempt succeeds and the node completes.
    env.skyhooks
        .patch(
            &sk,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"healthGate": {"check": check("0")}}})),
        )
        .await
        .expect("fix the check");
    env.wait_status(&sk, Status::Complete, Duration::from_secs(90))
        .await;
    let runs = checks(env.jobs_of(&sk).await);
    assert!(runs.len() >= 2, "{} check Jobs", runs.len());
    let pod_node = |j: &k8s_openapi::api::batch::v1::Job| {
        j.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.node_name.clone())
    };
    assert!(
        runs.iter()
            .all(|j| pod_node(j).as_deref() == Some(node.as_str()))
    );
    assert_eq!(
        env.condition(&sk, schema::HEALTH_GATE_CONDITION).await,
        None
    );
}

#[tokio::test]
async fn a_pod_failing_during_the_soak_fails_the_batch() {
    let env = setup("gates-health-soak", 2, &[]).await;
    let app = env.ctx.name("dp");
    let mut apis = Vec::new();
    for (i, node) in env.nodes.iter().enumerate() {
        apis.push(plugin_pod(&env, &format!("dp-{i}"), node, &app).await);
    }
    let strategy = json!({"fixed": {"initialBatch": 1, "failureThreshold": 1, "safetyLimit": 100}});
    let spec = json!({"default": {"budget": {"count": 1}, "strategy": strategy}, "soak": "5m"});
    let name = create_policy(&env.ctx, spec).await;
    let sk = env.ctx.name("sk");
    let gate =
        json!({"pods": {"namespace": env.ctx.ns, "selector": {"matchLabels": {"app": app}}}});
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": name, "healthGate": gate,
            "packages": {"tool": crate::support::pkg("1.0.0", crate::support::sleep("1"))}}),
    ))
    .await;
    let soaking = env
        .ctx
        .wait_for(
            "batch 1 passed its gate and soaking",
            Duration::from_secs(120),
            || async {
                let b = env.batch_state(&sk).await?;
                (b.soak_until.is_some() && b.soak_nodes.len() == 1).then_some(b)
            },
        )
        .await;
    let sick = soaking.soak_nodes[0].clone();
    let i = env.nodes.iter().position(|n| *n == sick).expect("index");
    set_pod_ready(&apis[i], &format!("dp-{i}"), "False").await;
    env.wait_event("SoakFailed", &sk, |e| {
        e.reason.as_deref() == Some(schema::SOAK_FAILED_REASON)
            && e.message.as_deref().is_some_and(|m| m.contains(&sick))
    })
    .await;
    let b = env.batch_state(&sk).await.expect("batch state");
    assert!(b.should_stop && b.last_batch_failed, "{b:?}");
}
