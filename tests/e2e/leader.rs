//! Leader election: of two operator processes only the leader writes; when it is killed the
//! other takes over within the lease duration and finishes the rollout with no duplicate Job.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema;

use crate::support::metrics::{metrics, requests};
use crate::support::{Operator, TestCtx, install_crds, jobs_per_attempt};

const LEASE: &[(&str, &str)] = &[
    ("LEADER_ELECTION", "true"),
    ("LEADER_ELECTION_LEASE_DURATION", "6s"),
    ("LEADER_ELECTION_RENEW_DEADLINE", "4s"),
    ("LEADER_ELECTION_RETRY_PERIOD", "1s"),
];

/// Writes other than the Lease's, and whether the process says it leads.
fn writes_and_leading(op: &Operator) -> Option<(f64, bool)> {
    let text = std::panic::catch_unwind(|| metrics(op.metrics_port)).ok()?;
    let writes = requests(&text)
        .into_iter()
        .filter(|((verb, resource), _)| {
            ["create", "update", "patch", "delete"].contains(&verb.as_str())
                && !resource.starts_with("leases")
                && !resource.starts_with("events")
        })
        .map(|(_, n)| n)
        .sum();
    let leading = text
        .lines()
        .any(|l| l.trim() == "skyhook_operator_leader 1");
    Some((writes, leading))
}

#[tokio::test]
async fn only_the_leader_writes_and_a_follower_takes_over() {
    install_crds();
    let mut ctx = TestCtx::new("leader").await;
    let nodes = ctx.add_test_nodes(3);
    let mut a = Operator::start_named(&ctx, "a", LEASE);
    let mut b = Operator::start_named(&ctx, "b", LEASE);
    let (k, v) = ctx.test_label();
    let name = ctx.name("sk");
    let pkg = |sleep: &str| {
        json!({"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
        "env": [{"name": "SLEEP_LEN", "value": sleep}]})
    };
    let sk: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": name, "labels": {k.clone(): v.clone()}},
        "spec": {"nodeSelectors": {"matchLabels": {k: v}}, "interruptionBudget": {"count": 1},
                 "packages": {"alpha": pkg("2"), "bravo": pkg("2"), "charlie": pkg("1")}},
    }))
    .expect("Skyhook");
    let skyhooks: Api<Skyhook> = Api::all(ctx.client.clone());
    skyhooks
        .create(&PostParams::default(), &sk)
        .await
        .expect("create");

    // Exactly one leads, and the other has written nothing while the rollout runs.
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let by_name = ListParams::default().labels(&format!("{}={name}", schema::NAME_LABEL));
    ctx.wait_for("the first Jobs", Duration::from_secs(60), || async {
        let n = jobs.list(&by_name).await.ok()?.items.len();
        (n >= 2).then_some(())
    })
    .await;
    let (leader, follower) = {
        let sa = writes_and_leading(&a).expect("metrics of a");
        let sb = writes_and_leading(&b).expect("metrics of b");
        assert!(sa.1 != sb.1, "exactly one must lead: a {sa:?}, b {sb:?}");
        if sa.1 {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        }
    };
    let (leader_writes, _) = writes_and_leading(leader).expect("leader metrics");
    let (follower_writes, _) = writes_and_leading(follower).expect("follower metrics");
    assert!(leader_writes > 0.0, "the leader wrote nothing");
    assert_eq!(follower_writes, 0.0, "the follower wrote");

    // Kill the leader mid-rollout: the follower leads within the lease duration (6 s) plus a
    // retry period and some scheduling slack.
    let status = skyhooks
        .get(&name)
        .await
        .ok()
        .and_then(|s| s.status?.status);
    assert_ne!(
        status,
        Some(schema::Status::Complete),
        "the rollout ended too early"
    );
    leader.kill();
    let killed = Instant::now();
    ctx.wait_for("the follower to lead", Duration::from_secs(15), || async {
        writes_and_leading(follower).and_then(|(_, leading)| leading.then_some(()))
    })
    .await;
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(10), "take-over took {took:?}");

    ctx.wait_for(
        "the rollout to complete",
        Duration::from_secs(240),
        || async {
            let s = skyhooks.get(&name).await.ok()?.status?.status?;
            (s == schema::Status::Complete).then_some(())
        },
    )
    .await;
    let seen = jobs_per_attempt(&jobs.list(&by_name).await.expect("jobs").items);
    assert!(seen.values().all(|n| *n == 1), "duplicate Jobs: {seen:?}");
    assert_eq!(seen.len(), 3 * 2 * nodes.len(), "{seen:?}");
}
