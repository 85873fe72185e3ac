//! D26 (issue 37): a package's `stageTimeout` bounds each attempt of its stages (the Job's
//! `activeDeadlineSeconds`); with the operator's JOB_BACKOFF_LIMIT the stage gives up after that
//! many retries and stays `erroring`, with no further attempt, until `package rerun`.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use serde_json::json;
use skyhook::schema::{self, State};

use crate::support::plugin::plugin_async;
use crate::support::{label, pkg, setup, skyhook, sleep};

/// The `Failed` condition's reason of a finished Job.
fn failed_reason(j: &Job) -> Option<String> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .and_then(|c| c.reason.clone())
}

#[tokio::test]
async fn stage_timeout_fails_each_attempt_and_the_backoff_limit_parks_the_stage() {
    let env = setup(
        "up-stage-timeout",
        1,
        &[("JOB_BACKOFF_LIMIT", "1"), ("RETRY_BASE", "1s")],
    )
    .await;
    let node = env.nodes[0].clone();
    let sk = env.ctx.name("sk");
    let mut slow = pkg("1.0.0", sleep("600"));
    slow["stageTimeout"] = json!("3s");
    env.create(&skyhook(&env.ctx, &sk, json!({"packages": {"slow": slow}})))
        .await;

    // Two attempts (JOB_BACKOFF_LIMIT=1), each ended by its deadline.
    let jobs = env
        .ctx
        .wait_for(
            "two attempts ended by stageTimeout",
            Duration::from_secs(90),
            || async {
                let jobs = env.jobs_of(&sk).await;
                let failed: Vec<Job> = jobs
                    .into_iter()
                    .filter(|j| failed_reason(j).is_some())
                    .collect();
                (failed.len() >= 2).then_some(failed)
            },
        )
        .await;
    for j in &jobs {
        assert_eq!(
            j.spec.as_ref().and_then(|s| s.active_deadline_seconds),
            Some(3)
        );
        assert_eq!(failed_reason(j).as_deref(), Some("DeadlineExceeded"));
        assert_eq!(label(j, schema::STAGE_LABEL), "apply");
    }
    env.ctx
        .eventually(
            "the node erroring after two attempts",
            Duration::from_secs(30),
            || async {
                let (_, state) = env.node_state(&node, &sk).await.ok_or("no state")?;
                let e = state.get("slow", "1.0.0").ok_or("no entry")?;
                (e.state == Some(State::Erroring) && e.restarts == 2)
                    .then_some(())
                    .ok_or(format!("{e:?}"))
            },
        )
        .await;
    // Parked: no third attempt, although the backoff (1 s, 2 s) is long past.
    env.ctx
        .holds_for(
            "no attempt past JOB_BACKOFF_LIMIT",
            Duration::from_secs(12),
            || async {
                match env.jobs_of(&sk).await.len() {
                    2 => Ok(()),
                    n => Err(format!("{n} Jobs")),
                }
            },
        )
        .await;
    let node_status = env
        .ctx
        .kubectl(&["get", "skyhook", &sk, "-o", "jsonpath={.status.status}"]);
    assert_eq!(String::from_utf8_lossy(&node_status.stdout), "erroring");

    // `package rerun` starts the stage again.
    plugin_async(
        &env.ctx,
        &[
            "package",
            "rerun",
            "slow",
            "--skyhook",
            &sk,
            "--node",
            &node,
            "--confirm",
        ],
    )
    .await
    .ok();
    env.ctx
        .wait_for(
            "a new attempt after the rerun",
            Duration::from_secs(60),
            || async { (env.jobs_of(&sk).await.len() >= 3).then_some(()) },
        )
        .await;
}
