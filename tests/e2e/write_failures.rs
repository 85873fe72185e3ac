//! A write that keeps failing surfaces instead of freezing the Skyhook (issue 35, acceptance
//! 5): a ValidatingAdmissionPolicy of the test refuses one package's ConfigMap; within a minute
//! the Skyhook's `WriteFailed` condition and a Warning Event name the ConfigMap and the API
//! server's reason and the metric counts it, while the Jobs already running finish and are
//! recorded; once the policy goes, the rollout completes and the condition clears. A
//! `configMap` too large for a ConfigMap is refused at admission, naming the field.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use skyhook::schema::{self, Stage, State};

use crate::support::metrics::{metrics, samples};
use crate::support::refusal::Refusal;
use crate::support::{TestCtx, pkg, setup, skyhook, sleep};

/// Refuses ConfigMaps of the test's namespace that carry the key `blocked.conf`.
async fn refuse_config_maps(ctx: &TestCtx) -> Refusal {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(ctx.client.clone(), &ctx.ns);
    let probe: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "probe"}, "data": {"blocked.conf": "x"}}))
    .expect("probe");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    Refusal::install(
        ctx,
        "configmaps",
        true,
        "!has(object.data) || !('blocked.conf' in object.data)",
        "e2e policy refuses blocked.conf",
        || async { cms.create(&dry, &probe).await.is_err() },
    )
    .await
}

fn write_failed(sk: &skyhook::crd::Skyhook) -> Option<(String, String)> {
    sk.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == schema::WRITE_FAILED_CONDITION)
        .map(|c| (c.status.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_refused_configmap_is_reported_and_the_rest_goes_on() {
    let env = setup("writefail", 2, &[]).await;
    let sk = env.ctx.name("sk");
    let mut conf = pkg("1.0.0", sleep("1"));
    conf["configMap"] = json!({"a.conf": "1"});
    conf["dependsOn"] = json!({"tools": "1.0.0"});
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"tools": pkg("1.0.0", sleep("8")), "conf": conf}}),
    ))
    .await;
    env.ctx
        .wait_for(
            "tools applying on both nodes",
            Duration::from_secs(60),
            || async {
                let mut applying = 0;
                for n in &env.nodes {
                    let (_, s) = env.node_state(n, &sk).await?;
                    let e = s.get("tools", "1.0.0")?;
                    if (e.stage, e.state) == (Stage::Apply, Some(State::InProgress)) {
                        applying += 1;
                    }
                }
                (applying == env.nodes.len()).then_some(())
            },
        )
        .await;

    // The conf package's ConfigMap gains a key the cluster refuses.
    let refuse = refuse_config_maps(&env.ctx).await;
    env.skyhooks
        .patch(
            &sk,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"packages": {"conf": {"configMap": {"blocked.conf": "x"}}}}}),
            ),
        )
        .await
        .expect("edit the configMap");
    let cm = schema::package_configmap_name(&sk, "conf", "1.0.0");
    let reported = env
        .ctx
        .wait_for("WriteFailed", Duration::from_secs(60), || async {
            let s = env.skyhooks.get(&sk).await.ok()?;
            let (status, message) = write_failed(&s)?;
            (status == "True").then_some(message)
        })
        .await;
    assert!(
        reported.contains(&cm) && reported.contains("e2e policy refuses blocked.conf"),
        "the condition names neither the object nor the reason: {reported}"
    );
    env.wait_event("the WriteFailed Warning", &sk, |e| {
        e.reason.as_deref() == Some(schema::WRITE_FAILED_REASON)
            && e.type_.as_deref() == Some("Warning")
            && e.message.as_deref().is_some_and(|m| m.contains(&cm))
    })
    .await;
    let port = env.op.metrics_port;
    let text = tokio::task::spawn_blocking(move || metrics(port))
        .await
        .expect("metrics");
    let counted = samples(&text).into_iter().any(|(n, l, v)| {
        n == "skyhook_write_failures"
            && l.get("skyhook_name") == Some(&sk)
            && v.parse::<f64>().is_ok_and(|v| v >= 1.0)
    });
    assert!(counted, "skyhook_write_failures does not count it");

    // The Jobs already running finish and are recorded meanwhile.
    env.ctx
        .wait_for(
            "tools' apply recorded on both nodes",
            Duration::from_secs(60),
            || async {
                for n in &env.nodes {
                    let (_, s) = env.node_state(n, &sk).await?;
                    let e = s.get("tools", "1.0.0")?;
                    if e.stage == Stage::Apply && e.state == Some(State::InProgress) {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;

    // The cause goes: the rollout completes and the condition clears.
    assert!(refuse.remove(), "removing the admission policy failed");
    let done = env
        .wait_status(&sk, schema::Status::Complete, Duration::from_secs(120))
        .await;
    assert_eq!(
        write_failed(&done).map(|(s, _)| s).as_deref(),
        Some("False")
    );
}

/// Issue 35, acceptance 5: the API server refuses a `configMap` over what a ConfigMap can carry,
/// naming the package and the field; one just under the bound is stored. The operator's
/// validation, which also covers objects stored before the rule existed, counts bytes.
#[tokio::test]
async fn a_config_map_too_large_to_write_is_refused_at_admission_naming_the_field() {
    let env = setup("cmsize", 1, &[]).await;
    let sk = env.ctx.name("sk");
    let mut big = pkg("1.0.0", json!([]));
    big["configMap"] = json!({"blob.bin": "x".repeat(1_000_001)});
    let refused = env
        .skyhooks
        .create(
            &PostParams::default(),
            &skyhook(&env.ctx, &sk, json!({"packages": {"big": big}})),
        )
        .await
        .expect_err("a configMap over the bound is refused");
    let message = refused.to_string();
    assert!(
        message.contains("spec.packages[big]")
            && message.contains("configMap")
            && message.contains(::skyhook::crd::admission::MSG_CONFIG_MAP_TOO_LARGE),
        "{message}"
    );
    assert!(env.skyhooks.get_opt(&sk).await.expect("get").is_none());
    // CEL counts characters (counting bytes would cost more than the API server allows), so
    // 333,334 three-byte characters pass admission; the operator counts bytes and marks the
    // Skyhook invalid with the same words, naming the field.
    let wide_sk = env.ctx.name("wide");
    let mut wide = pkg("1.0.0", json!([]));
    wide["configMap"] = json!({"w": "\u{20ac}".repeat(333_334)});
    env.create(&skyhook(
        &env.ctx,
        &wide_sk,
        json!({"packages": {"wide": wide}}),
    ))
    .await;
    let message = env
        .ctx
        .wait_for("Valid=False", Duration::from_secs(30), || async {
            let s = env.skyhooks.get(&wide_sk).await.ok()?;
            let c = s
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == schema::VALID_CONDITION)?;
            (c.status == "False").then_some(c.message)
        })
        .await;
    assert!(
        message.contains("spec.packages[wide].configMap")
            && message.contains(::skyhook::crd::admission::MSG_CONFIG_MAP_TOO_LARGE)
            && message.contains("1000003 of 1000000 bytes"),
        "{message}"
    );
    assert!(
        env.jobs_of(&wide_sk).await.is_empty(),
        "an invalid Skyhook started Jobs"
    );
    let mut fits = pkg("1.0.0", json!([]));
    fits["configMap"] = json!({"blob.bin": "x".repeat(999_000)});
    env.create(&skyhook(&env.ctx, &sk, json!({"packages": {"fits": fits}})))
        .await;
}

/// The node's status for `sk` as stored on it.
/// Issue 50, item 1: an eviction the API server refuses for good (a pod covered by two
/// PodDisruptionBudgets: the eviction API answers 500) is recorded against its node, with the
/// pod and the API server's words, and a Warning Event; the other node completes. Before, the
/// whole pass failed at the evictions, every 5 s, with no status, condition or Event.
#[tokio::test]
async fn a_refused_eviction_is_recorded_on_its_node_and_the_other_node_completes() {
    let env = setup("evictfail", 2, &[]).await;
    let (stuck, free) = (env.nodes[0].clone(), env.nodes[1].clone());
    let app = env.ctx.name("app");
    let pod = env.ctx.name("guarded");
    env.run_workload(&pod, &stuck, json!({"labels": {"app": app}}))
        .await;
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    for i in 0..2 {
        let pdb = serde_json::from_value(json!({
            "metadata": {"name": format!("{app}-{i}")},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
        }))
        .expect("pdb");
        pdbs.create(&PostParams::default(), &pdb)
            .await
            .expect("create a PodDisruptionBudget");
    }
    let sk = env.ctx.name("sk");
    let mut driver = pkg("1.0.0", sleep("1"));
    driver["interrupt"] = json!({"type": "reboot"});
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"driver": driver}}),
    ))
    .await;

    let what = format!("eviction of pod {}/{pod} on node {stuck}", env.ctx.ns);
    let reported = env
        .ctx
        .wait_for(
            "WriteFailed naming the eviction",
            Duration::from_secs(90),
            || async {
                let s = env.skyhooks.get(&sk).await.ok()?;
                let (status, message) = write_failed(&s)?;
                (status == "True" && message.contains(&what)).then_some(message)
            },
        )
        .await;
    assert!(
        reported.contains("PodDisruptionBudget"),
        "the API server's words are missing: {reported}"
    );
    env.wait_event("the WriteFailed Warning", &sk, |e| {
        e.reason.as_deref() == Some(schema::WRITE_FAILED_REASON)
            && e.type_.as_deref() == Some("Warning")
            && e.message.as_deref().is_some_and(|m| m.contains(&pod))
    })
    .await;
    env.ctx
        .wait_for(
            "the other node completes",
            Duration::from_secs(90),
            || async {
                (env.node_status(&free, &sk).await.as_deref() == Some("complete")).then_some(())
            },
        )
        .await;
    assert_ne!(
        env.node_status(&stuck, &sk).await.as_deref(),
        Some("complete"),
        "the guarded node waits"
    );
}

/// Issue 50, item 1: a health check Job the API server refuses for good (here a policy engine
/// saying no) is recorded against its node with the API server's words, and the pass still
/// writes the status (the gate's condition says the node waits). (An image with a trailing
/// space, the review's example, is not refused for a Job: only its pods would be.)
#[tokio::test]
async fn a_refused_health_check_job_is_recorded_and_the_status_is_still_written() {
    let env = setup("checkfail", 1, &[]).await;
    let node = env.nodes[0].clone();
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let probe: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "probe", "labels": {schema::STAGE_LABEL: schema::HEALTH_CHECK_STAGE}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .expect("probe");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let check = schema::HEALTH_CHECK_STAGE;
    let _refuse = Refusal::install(
        &env.ctx,
        "batch/v1/jobs",
        true,
        &format!(
            "!has(object.metadata.labels) || ['skyhook.nvidia.com/stage', \
             'nodewright.nvidia.com/stage'].all(k, !(k in object.metadata.labels) || \
             object.metadata.labels[k] != '{check}')"
        ),
        "e2e policy refuses health check Jobs",
        || async { jobs.create(&dry, &probe).await.is_err() },
    )
    .await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({
            "healthGate": {"timeout": "10m", "check": {"image": "busybox", "command": ["true"]}},
            "packages": {"tool": pkg("1.0.0", sleep("1"))},
        }),
    ))
    .await;
    let what = format!("of node {node}");
    let reported = env
        .ctx
        .wait_for(
            "WriteFailed naming the check Job",
            Duration::from_secs(90),
            || async {
                let s = env.skyhooks.get(&sk).await.ok()?;
                let (status, message) = write_failed(&s)?;
                (status == "True"
                    && message.contains("health check Job")
                    && message.contains(&what))
                .then_some(message)
            },
        )
        .await;
    assert!(
        reported.contains("e2e policy refuses health check Jobs"),
        "{reported}"
    );
    let s = env.skyhooks.get(&sk).await.expect("skyhook");
    let gate = s
        .status
        .as_ref()
        .and_then(|st| {
            st.conditions
                .iter()
                .find(|c| c.type_ == schema::HEALTH_GATE_CONDITION)
        })
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(gate.contains(&node), "the gate's condition: {gate}");
    env.wait_event("the WriteFailed Warning", &sk, |e| {
        e.reason.as_deref() == Some(schema::WRITE_FAILED_REASON)
            && e.type_.as_deref() == Some("Warning")
            && e.message
                .as_deref()
                .is_some_and(|m| m.contains("health check Job"))
    })
    .await;
}
