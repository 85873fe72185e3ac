//! Reference scenario `skyhook/strict-order`: priority ordering is per node, with pause and
//! disable.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema;

use crate::support::{Env, label, setup, skyhook, wait_metric};

fn foobar(sleep: &str, interrupt: bool) -> serde_json::Value {
    let mut p = json!({"version": "1.2", "image": "ghcr.io/nvidia/skyhook/agentless",
        "env": [{"name": "SLEEP_LEN", "value": sleep}]});
    if interrupt {
        p["interrupt"] = json!({"type": "service", "services": ["cron"]});
    }
    json!({"foobar": p})
}

fn ordered(
    env: &Env,
    name: &str,
    priority: u32,
    packages: serde_json::Value,
    flags: (&str, &str),
) -> Skyhook {
    let mut sk = skyhook(
        &env.ctx,
        name,
        json!({"priority": priority, "packages": packages}),
    );
    sk.annotations_mut()
        .insert(schema::DISABLE_ANNOTATION.into(), flags.0.into());
    sk.annotations_mut()
        .insert(schema::PAUSE_ANNOTATION.into(), flags.1.into());
    sk
}

async fn sk_status(env: &Env, sk: &str) -> Option<String> {
    let s = env.skyhooks.get(sk).await.ok()?;
    Some(s.status?.status?.as_str().to_string())
}

/// Reference `k8s-tests/chainsaw/skyhook/strict-order`: four Skyhooks (priority 1 `zzz`;
/// priority 2 `b` paused, `c`, `d` disabled) on two nodes, the second held back by an untolerated
/// taint. The first node moves on to priority 2 (and pauses at `b`) while the second is still at
/// priority 1; once `b` is resumed and the taint lifted, the nodes run different priorities at the
/// same time; both end complete, `d` disabled. Metrics are checked as the scenario does.
#[tokio::test]
async fn strict_order() {
    scenario_strict_order().await;
}

pub(crate) async fn scenario_strict_order() {
    let env = setup("sc-order", 2, &[]).await;
    let (worker, worker2) = (env.nodes[0].clone(), env.nodes[1].clone());
    let [zzz, b, c, d] = ["zzz", "b", "c", "d"].map(|s| env.ctx.name(&format!("strict-order-{s}")));
    let taint = env.ctx.kubectl(&[
        "taint",
        "node",
        &worker2,
        "test-block=true:NoSchedule",
        "--overwrite",
    ]);
    assert!(taint.status.success(), "taint worker2");

    // Phase 2: the four Skyhooks; two nodes targeted by each.
    env.create(&ordered(
        &env,
        &zzz,
        1,
        foobar("1", true),
        ("false", "false"),
    ))
    .await;
    env.create(&ordered(&env, &b, 2, foobar("5", true), ("false", "true")))
        .await;
    env.create(&ordered(
        &env,
        &c,
        2,
        foobar("5", false),
        ("false", "false"),
    ))
    .await;
    env.create(&ordered(&env, &d, 2, foobar("5", false), ("true", "false")))
        .await;
    for sk in [&zzz, &b, &c, &d] {
        wait_metric(
            &env,
            &format!("phase 2: {sk} targets 2 nodes"),
            "skyhook_node_target_count",
            &[("skyhook_name", sk.as_str())],
            "2",
        )
        .await;
    }
    for (sk, status) in [(&d, "disabled"), (&b, "paused")] {
        wait_metric(
            &env,
            &format!("phase 2: {sk} {status}"),
            "skyhook_status",
            &[("skyhook_name", sk.as_str()), ("status", status)],
            "1",
        )
        .await;
    }

    // Phase 3: worker completes priority 1 and pauses at b; worker2 is blocked at priority 1.
    env.ctx
        .wait_for(
            "phase 3: worker at b (paused), worker2 blocked",
            Duration::from_secs(60),
            || async {
                let w_zzz = env.node_status(&worker, &zzz).await?;
                let w_b = env.node_status(&worker, &b).await?;
                let w2_zzz = env.node_status(&worker2, &zzz).await?;
                (w_zzz == "complete" && w_b == "paused" && w2_zzz == "blocked").then_some(())
            },
        )
        .await;
    let jobs_on = |jobs: &[k8s_openapi::api::batch::v1::Job], node: &str| {
        jobs.iter()
            .filter(|j| label(j, schema::NODE_LABEL) == node)
            .count()
    };
    assert!(
        jobs_on(&env.jobs_of(&zzz).await, &worker) > 0,
        "phase 3: worker ran zzz"
    );
    for sk in [&zzz, &b, &c, &d] {
        assert_eq!(
            jobs_on(&env.jobs_of(sk).await, &worker2),
            0,
            "phase 3: worker2 ran {sk}"
        );
    }
    assert_eq!(
        env.node_status(&worker2, &b).await.as_deref(),
        Some("waiting"),
        "phase 3: worker2 waits for zzz before b, so it is not counted as paused"
    );
    for (sk, status, want) in [
        (&zzz, "complete", "1"),
        (&zzz, "blocked", "1"),
        (&b, "paused", "1"),
    ] {
        wait_metric(
            &env,
            &format!("phase 3: {sk} nodes {status}"),
            "skyhook_node_status_count",
            &[("skyhook_name", sk.as_str()), ("status", status)],
            want,
        )
        .await;
    }
    wait_metric(
        &env,
        "phase 3: foobar complete on one node of zzz",
        "skyhook_package_state_count",
        &[
            ("skyhook_name", zzz.as_str()),
            ("package_name", "foobar"),
            ("package_version", "1.2"),
            ("state", "complete"),
        ],
        "1",
    )
    .await;

    // Phase 4: resume b and lift worker2's taint together. (The reference's patch also edits
    // SLEEP_LEN, which reruns packages; only the pause matters to the ordering, so only it moves.)
    let unpause = json!({"metadata": {"annotations": {schema::PAUSE_ANNOTATION: "false"}}});
    env.skyhooks
        .patch(&b, &PatchParams::default(), &Patch::Merge(&unpause))
        .await
        .expect("unpause b");
    let untaint = env.ctx.kubectl(&["taint", "node", &worker2, "test-block-"]);
    assert!(untaint.status.success(), "untaint worker2");

    // Phase 5: the two nodes run different priorities at the same time. Read from the nodes:
    // b's Skyhook status may follow its node a few seconds later (status replaces are spaced
    // when the API server is slow), by which time zzz may be done on worker2.
    env.ctx
        .wait_for(
            "phase 5: b runs on worker while zzz runs on worker2",
            Duration::from_secs(90),
            || async {
                let w_zzz = env.node_status(&worker, &zzz).await?;
                let w_b = env.node_status(&worker, &b).await?;
                let w2_zzz = env.node_status(&worker2, &zzz).await?;
                let zzz_s = sk_status(&env, &zzz).await?;
                let c_s = sk_status(&env, &c).await?;
                let d_s = sk_status(&env, &d).await?;
                (w_zzz == "complete"
                    && w2_zzz != "complete"
                    && (zzz_s == "in_progress" || zzz_s == "blocked")
                    && w_b == "in_progress"
                    && c_s == "waiting"
                    && d_s == "disabled")
                    .then_some(())
            },
        )
        .await;
    env.ctx
        .wait_for(
            "phase 5: b's status says it runs",
            Duration::from_secs(30),
            || async {
                let b_s = sk_status(&env, &b).await?;
                (b_s == "in_progress" || b_s == "complete").then_some(())
            },
        )
        .await;
    wait_metric(
        &env,
        "phase 5: b no longer paused",
        "skyhook_status",
        &[("skyhook_name", b.as_str()), ("status", "paused")],
        "0",
    )
    .await;

    // Phase 6: both nodes complete every Skyhook; d stays disabled.
    env.ctx
        .wait_for(
            "phase 6: both nodes complete",
            Duration::from_secs(120),
            || async {
                for node in [&worker, &worker2] {
                    for sk in [&zzz, &b, &c] {
                        if env.node_status(node, sk).await? != "complete" {
                            return None;
                        }
                    }
                    if env.node_status(node, &d).await? != "disabled" {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    for sk in [&zzz, &b, &c] {
        wait_metric(
            &env,
            &format!("phase 6: {sk} complete on 2 nodes"),
            "skyhook_node_status_count",
            &[("skyhook_name", sk.as_str()), ("status", "complete")],
            "2",
        )
        .await;
        wait_metric(
            &env,
            &format!("phase 6: foobar complete on 2 nodes of {sk}"),
            "skyhook_package_state_count",
            &[
                ("skyhook_name", sk.as_str()),
                ("package_name", "foobar"),
                ("package_version", "1.2"),
                ("state", "complete"),
            ],
            "2",
        )
        .await;
    }
    wait_metric(
        &env,
        "phase 6: d disabled",
        "skyhook_status",
        &[("skyhook_name", d.as_str()), ("status", "disabled")],
        "1",
    )
    .await;
    assert!(
        env.jobs_of(&d).await.is_empty(),
        "phase 6: the disabled Skyhook ran"
    );
}
