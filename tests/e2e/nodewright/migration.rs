//! The migration on request (issue 39, acceptance 2): an operator restarted with
//! `MIGRATE_TO_NODEWRIGHT=true` mirrors every Skyhook and the DeploymentPolicy it names into the
//! new group. The mirror of a complete Skyhook reports complete with no Job; one of a Skyhook
//! mid-rollout waits for it (following its spec meanwhile), then takes over with no rerun either;
//! the legacy keys go `LEGACY_CLEANUP_DELAY` later.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use super::{
    assert_keys_under_both_prefixes, jobs_labelled, nodewright, nodewright_policies, nw_setup,
    wait_nodewright,
};
use crate::support::{create_policy, pkg, skyhook, sleep};

const NW_NAME_LABEL: &str = "nodewright.nvidia.com/name";

#[tokio::test]
async fn turned_on_it_mirrors_skyhooks_and_their_policy_and_takes_over_with_no_rerun() {
    let mut env = nw_setup("nw-migrate", 2, &[("LEGACY_CLEANUP_DELAY", "8s")]).await;
    let policy = create_policy(
        &env.ctx,
        json!({"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}}),
    )
    .await;
    let done = env.ctx.name("done");
    let spec = |secs: &str| json!({"deploymentPolicy": policy, "packages": {"tool": pkg("1.0.0", sleep(secs))}});
    env.create(&skyhook(&env.ctx, &done, spec("1"))).await;
    env.wait_status(&done, Status::Complete, Duration::from_secs(90))
        .await;
    let moving = env.ctx.name("moving");
    env.create(&skyhook(&env.ctx, &moving, spec("12"))).await;
    env.wait_status(&moving, Status::InProgress, Duration::from_secs(60))
        .await;
    assert!(nodewright(&env.ctx, &done).await.is_none());

    env.op
        .restart_with(&env.ctx, &[("MIGRATE_TO_NODEWRIGHT", "true")]);

    // The complete Skyhook's mirror: stamped, complete, its nodes taken over without a Job.
    let mirrored = wait_nodewright(&env, &done, Status::Complete, Duration::from_secs(60)).await;
    let stamp = mirrored.metadata.annotations.unwrap_or_default();
    assert_eq!(
        stamp
            .get("nodewright.nvidia.com/mirrored-from")
            .map(String::as_str),
        Some(done.as_str()),
        "{stamp:?}"
    );
    assert_eq!(
        mirrored.spec.deployment_policy.as_deref(),
        Some(policy.as_str())
    );
    assert_eq!(jobs_labelled(&env, NW_NAME_LABEL, &done).await, 0);
    assert_keys_under_both_prefixes(&env, &done).await;
    env.wait_event("the Skyhook says where its mirror is", &done, |e| {
        e.reason.as_deref() == Some(schema::MIRRORED_REASON)
    })
    .await;

    // Its policy, mirrored into the new group.
    let p = nodewright_policies(&env.ctx)
        .get(&policy)
        .await
        .expect("the policy's mirror");
    assert_eq!(
        p.metadata
            .annotations
            .unwrap_or_default()
            .get("nodewright.nvidia.com/mirrored-from"),
        Some(&policy)
    );

    // The Skyhook mid-rollout holds its mirror, which follows its spec meanwhile.
    let waiting = env
        .ctx
        .wait_for(
            "the mid-rollout Skyhook's mirror",
            Duration::from_secs(30),
            || async { nodewright(&env.ctx, &moving).await },
        )
        .await;
    assert!(
        waiting.status.as_ref().and_then(|s| s.status).is_none(),
        "the mirror of a Skyhook mid-rollout must wait: {:?}",
        waiting.status
    );
    env.skyhooks
        .patch(
            &moving,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"priority": 7}})),
        )
        .await
        .expect("edit the Skyhook mid-rollout");
    env.ctx
        .wait_for(
            "the mirror follows the edit",
            Duration::from_secs(20),
            || async { (nodewright(&env.ctx, &moving).await?.spec.priority == 7).then_some(()) },
        )
        .await;
    env.wait_event("the mirror waits for its Skyhook", &moving, |e| {
        e.reason.as_deref() == Some(schema::WAITING_FOR_SKYHOOK_REASON)
    })
    .await;
    env.wait_status(&moving, Status::Complete, Duration::from_secs(120))
        .await;
    wait_nodewright(&env, &moving, Status::Complete, Duration::from_secs(60)).await;
    assert_eq!(jobs_labelled(&env, NW_NAME_LABEL, &moving).await, 0);
    assert_keys_under_both_prefixes(&env, &moving).await;

    // The delay after the take-over, the legacy node state of the name goes.
    let legacy = schema::node_state_annotation(&done);
    env.ctx
        .eventually("the legacy keys gone", Duration::from_secs(60), || async {
            for node in &env.nodes {
                let n = env.node_api.get(node).await.map_err(|e| e.to_string())?;
                if n.metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key(&legacy)
                {
                    return Err(format!("{node} still has {legacy}"));
                }
            }
            Ok(())
        })
        .await;
    wait_nodewright(&env, &done, Status::Complete, Duration::from_secs(10)).await;
}

/// Issue 49, acceptance 3: an install whose roles lack `create` on NodeWrights (the shipped ones
/// lacked it before) cannot mirror. The legacy Skyhook says so, in a Warning Event and its
/// `WriteFailed` condition, naming the missing grant; it is not only a log line.
#[tokio::test]
async fn a_refused_mirror_is_a_warning_and_a_condition_on_the_skyhook() {
    crate::support::install_nodewright_crds();
    crate::support::install_crds();
    let mut ctx = crate::support::TestCtx::new("nw-refused").await;
    let nodes = ctx.add_test_nodes(1);
    let trimmed = crate::support::rights::trimmed_kubeconfig(
        &ctx,
        "nodewright.nvidia.com",
        "nodewrights",
        "create",
    );
    let kubeconfig = trimmed.display().to_string();
    let op = crate::support::Operator::start_unchecked(
        &ctx,
        "",
        &[
            ("KUBECONFIG", &kubeconfig),
            ("MIGRATE_TO_NODEWRIGHT", "true"),
        ],
        "its role lacks create on nodewrights on purpose",
    );
    let env = crate::support::Env::new(ctx, op, nodes);
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(90))
        .await;
    let warned = env
        .wait_event("a MigrationRefused Warning", &name, |e| {
            e.reason.as_deref() == Some(schema::MIGRATION_REFUSED_REASON)
                && e.type_.as_deref() == Some("Warning")
        })
        .await;
    let said = warned.message.unwrap_or_default();
    assert!(
        said.contains("create") && said.contains("nodewrights"),
        "the Warning names the missing grant: {said}"
    );
    // The condition comes with the Skyhook's next pass (an edit brings one at once).
    env.skyhooks
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"poke": "1"}}})),
        )
        .await
        .expect("touch the Skyhook");
    env.ctx
        .wait_for(
            "the WriteFailed condition naming the refusal",
            Duration::from_secs(60),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                sk.status?
                    .conditions
                    .into_iter()
                    .find(|c| {
                        c.type_ == schema::WRITE_FAILED_CONDITION
                            && c.status == "True"
                            && c.message.contains("MIGRATE_TO_NODEWRIGHT")
                    })
                    .map(drop)
            },
        )
        .await;
    assert!(nodewright(&env.ctx, &name).await.is_none());
}
