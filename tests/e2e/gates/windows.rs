//! Maintenance windows (issue 38, acceptance 2): a window in a time zone other than UTC opens a
//! minute or two into the test. No node starts before it (the Skyhook says why and when it
//! opens, and so does `deployment-policy preview`), a node starts inside it, and the node at
//! work when it closes finishes while no new node starts.

use std::time::Duration;

use jiff::{Timestamp, ToSpan, tz::TimeZone};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::json;
use skyhook::crd::DeploymentPolicy;
use skyhook::schema;

use crate::support::plugin::plugin;
use crate::support::{create_policy, label, pkg, setup, skyhook, sleep};

const ZONE: &str = "Asia/Kolkata";

fn created(j: &Job) -> Timestamp {
    j.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(Timestamp::MAX)
}

#[tokio::test]
async fn nodes_start_only_inside_the_window_and_work_in_flight_finishes() {
    let env = setup("gates-window", 2, &[]).await;
    // The window: from the first whole minute at least 60 s away, for one minute, in Kolkata.
    let tz = TimeZone::get(ZONE).expect("zone");
    let soon = Timestamp::now().checked_add(60.seconds()).expect("time");
    let local = soon.to_zoned(tz.clone());
    let start = local
        .with()
        .second(0)
        .subsec_nanosecond(0)
        .build()
        .expect("minute")
        .checked_add(1.minute())
        .expect("time");
    let end = start.checked_add(1.minute()).expect("time");
    let hhmm = |t: &jiff::Zoned| format!("{:02}:{:02}", t.hour(), t.minute());
    let opens = start.timestamp().checked_add(10.seconds()).expect("guard");
    let closes = end.timestamp().checked_sub(10.seconds()).expect("guard");

    let spec = json!({
        "default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
        "windows": [{"start": hhmm(&start), "end": hhmm(&end), "timeZone": ZONE}],
    });
    let policy_name = create_policy(&env.ctx, spec).await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": policy_name, "packages": {"slow": pkg("1.0.0", sleep("25"))}}),
    ))
    .await;

    // Before the window: the Skyhook says why and when, the preview too, nothing starts.
    env.ctx
        .wait_for(
            "the MaintenanceWindow condition",
            Duration::from_secs(30),
            || async {
                let s = env.skyhooks.get(&sk).await.ok()?.status?;
                let c = s
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == schema::MAINTENANCE_WINDOW_CONDITION)?;
                (c.reason == schema::OUTSIDE_MAINTENANCE_WINDOW_REASON
                    && c.message.contains(&opens.to_string()))
                .then_some(())
            },
        )
        .await;
    let preview = plugin(&env.ctx, &["deployment-policy", "preview", &sk]);
    assert!(
        preview.ok().contains(&format!("closed until {opens}")),
        "{}",
        preview.stdout
    );
    assert!(
        Timestamp::now() < opens,
        "the test started too late to see the window closed"
    );

    // Inside it: a node starts, not before the window (its guard) opens.
    let first = env
        .ctx
        .wait_for(
            "a node started in the window",
            Duration::from_secs(180),
            || async { env.jobs_of(&sk).await.into_iter().min_by_key(created) },
        )
        .await;
    assert!(
        created(&first) >= opens.checked_sub(1.second()).expect("time"),
        "a Job was created at {} before the window opened at {opens}",
        created(&first)
    );
    let first_node = label(&first, schema::NODE_LABEL).to_string();

    // The window closes while that node works (apply and config, 25 s each): it finishes, the
    // other node does not start.
    env.ctx
        .wait_for(
            "the first node complete",
            Duration::from_secs(180),
            || async {
                let n = env.node_api.get(&first_node).await.ok()?;
                let s = n
                    .metadata
                    .annotations?
                    .get(&schema::status_annotation(&sk))?
                    .clone();
                (s == "complete").then_some(())
            },
        )
        .await;
    assert!(
        Timestamp::now() > closes,
        "the node finished before the window closed"
    );
    env.ctx
        .holds_for(
            "no node starts after the window closed",
            Duration::from_secs(15),
            || async {
                let others: Vec<String> = env
                    .jobs_of(&sk)
                    .await
                    .iter()
                    .map(|j| label(j, schema::NODE_LABEL).to_string())
                    .filter(|n| *n != first_node)
                    .collect();
                if others.is_empty() {
                    Ok(())
                } else {
                    Err(format!("Jobs on {others:?}"))
                }
            },
        )
        .await;
}

#[tokio::test]
async fn a_cron_window_holds_until_it_fires() {
    let env = setup("gates-window-cron", 1, &[]).await;
    let window = |cron: &str| json!([{"cron": cron, "duration": "1h", "timeZone": ZONE}]);
    // Every day at a time twelve hours from now in Kolkata, for an hour: closed now.
    let later = Timestamp::now()
        .checked_add(12.hours())
        .expect("time")
        .to_zoned(TimeZone::get(ZONE).expect("zone"));
    let daily = format!("{} {} * * *", later.minute(), later.hour());
    let spec = json!({
        "default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
        "windows": window(&daily),
    });
    let policy_name = create_policy(&env.ctx, spec).await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"deploymentPolicy": policy_name, "packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    env.ctx
        .eventually(
            "held by the cron window",
            Duration::from_secs(60),
            || async {
                match env
                    .condition(&sk, schema::MAINTENANCE_WINDOW_CONDITION)
                    .await
                {
                    Some((_, m)) if m.contains("waits for its maintenance window opening at") => {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    assert!(
        env.jobs_of(&sk).await.is_empty(),
        "nothing starts outside the window"
    );
    // Every minute, for an hour: open now.
    Api::<DeploymentPolicy>::all(env.ctx.client.clone())
        .patch(
            &policy_name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"spec": {"windows": window("* * * * *")}})),
        )
        .await
        .expect("open the window");
    env.wait_status(&sk, schema::Status::Complete, Duration::from_secs(90))
        .await;
}

#[tokio::test]
async fn a_bad_window_is_refused_naming_the_field() {
    crate::support::install_crds();
    let ctx = crate::support::TestCtx::new("gates-window-bad").await;
    let cases = [
        (
            json!({"start": "22:00", "end": "04:00", "timeZone": "Mars/Olympus"}),
            "timeZone",
        ),
        (json!({"start": "9:00", "end": "10:00"}), "start"),
        (json!({"cron": "0 22 * *", "duration": "1h"}), "cron"),
        (
            json!({"cron": "0 22 * * *", "duration": "200h"}),
            "duration",
        ),
        (
            json!({"cron": "0 22 * * *", "duration": "1h", "start": "22:00", "end": "23:00"}),
            "either",
        ),
    ];
    for (window, field) in cases {
        let p: DeploymentPolicy = serde_json::from_value(json!({
            "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
            "metadata": {"name": ctx.name("bad")},
            "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
                "windows": [window]},
        }))
        .expect("policy");
        let err = Api::<DeploymentPolicy>::all(ctx.client.clone())
            .create(&PostParams::default(), &p)
            .await
            .expect_err("a bad window is refused");
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
}
