//! Nodes that leave a rollout (issue 35, acceptance 4): one relabelled out of the selector during
//! its interrupt, another deleted mid-rollout. The first is let go once its interrupt ends
//! (uncordoned, an Event saying why), the second's Jobs are deleted, the remaining node
//! completes, and the budget of one node at a time is never exceeded on the way.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Stage, State};

use crate::support::interrupts::{SlowInterrupts, finished};
use crate::support::{Env, label, pkg, setup, skyhook};

/// The most nodes (of those that still exist) with an unfinished Job of `sk` at once, sampled
/// every 300 ms until stopped.
fn budget_sampler(
    env: &Env,
    sk: &str,
) -> (
    Arc<AtomicBool>,
    tokio::task::JoinHandle<(usize, Vec<String>)>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let jobs = env.jobs.clone();
    let nodes = env.node_api.clone();
    let lp = ListParams::default().labels(&format!("{}={sk}", schema::NAME_LABEL));
    let handle = tokio::spawn(async move {
        let mut most = (0, Vec::new());
        while !flag.load(Ordering::SeqCst) {
            if let (Ok(js), Ok(ns)) = (jobs.list(&lp).await, nodes.list(&Default::default()).await)
            {
                let present: BTreeSet<String> = ns.items.iter().map(|n| n.name_any()).collect();
                let at_work: BTreeSet<String> = js
                    .items
                    .iter()
                    .filter(|j| !finished(j) && j.metadata.deletion_timestamp.is_none())
                    .map(|j| j.annotations().get(schema::NODE_ANNOTATION).cloned())
                    .filter_map(|n| n.filter(|n| present.contains(n)))
                    .collect();
                if at_work.len() > most.0 {
                    most = (at_work.len(), at_work.into_iter().collect());
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        most
    });
    (stop, handle)
}

fn on_node<'a>(jobs: &'a [Job], node: &str) -> impl Iterator<Item = &'a Job> {
    let node = node.to_string();
    jobs.iter().filter(move |j| {
        j.annotations()
            .get(schema::NODE_ANNOTATION)
            .map(String::as_str)
            == Some(node.as_str())
    })
}

#[tokio::test]
async fn nodes_that_leave_are_released_and_the_budget_holds() {
    let env = setup("release", 3, &[]).await;
    let _slow = SlowInterrupts::install(&env.ctx, "SLEEP_LEN", "8").await;
    let sk = env.ctx.name("sk");
    let mut kernel = pkg("1.0.0", json!([]));
    kernel["interrupt"] = json!({"type": "reboot"});
    let (stop, sampler) = budget_sampler(&env, &sk);
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"interruptionBudget": {"count": 1}, "packages": {"kernel": kernel}}),
    ))
    .await;

    // The first node to reach its interrupt leaves the selector while it runs.
    let interrupt = env
        .ctx
        .wait_for("an interrupt running", Duration::from_secs(90), || async {
            env.jobs_of(&sk)
                .await
                .into_iter()
                .find(|j| label(j, schema::STAGE_LABEL) == "interrupt" && !finished(j))
        })
        .await;
    let left = interrupt.annotations()[schema::NODE_ANNOTATION].clone();
    let (test_key, _) = env.ctx.test_label();
    env.node_api
        .patch(
            &left,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {test_key: null}}})),
        )
        .await
        .expect("relabel out of the selector");

    // Its interrupt is waited for, then the node is let go.
    // Node names are reused by later tests: only this Skyhook's Event counts.
    let wanted = format!("[skyhook:{sk}]");
    env.wait_event("the release Event on the node", &left, |e| {
        e.reason.as_deref() == Some(schema::RELEASED_REASON)
            && e.message.as_deref().is_some_and(|m| m.contains(&wanted))
    })
    .await;
    let done = env
        .jobs
        .get(&interrupt.name_any())
        .await
        .expect("interrupt Job");
    assert!(finished(&done), "released before its interrupt ended");
    assert!(!n_unschedulable(&env, &left).await, "left cordoned");
    let n = env.node_api.get(&left).await.expect("node");
    assert!(
        !n.annotations()
            .contains_key(&schema::cordon_annotation(&sk)),
        "our cordon key left behind"
    );

    // The next node is deleted mid-rollout: its Jobs go.
    let next = env
        .ctx
        .wait_for("the next node at work", Duration::from_secs(60), || async {
            let jobs = env.jobs_of(&sk).await;
            env.nodes
                .iter()
                .filter(|n| **n != left)
                .find(|n| on_node(&jobs, n).any(|j| !finished(j)))
                .cloned()
        })
        .await;
    env.ctx.kubectl(&["delete", "node", &next, "--wait=false"]);
    env.ctx
        .wait_for(
            "the deleted node's Jobs gone",
            Duration::from_secs(60),
            || async {
                let jobs = env.jobs_of(&sk).await;
                on_node(&jobs, &next)
                    .all(|j| j.metadata.deletion_timestamp.is_some())
                    .then_some(())
            },
        )
        .await;

    // The remaining node completes, one node at a time throughout.
    let last = env
        .nodes
        .iter()
        .find(|n| **n != left && **n != next)
        .expect("a third node")
        .clone();
    env.ctx
        .wait_for(
            "the last node complete",
            Duration::from_secs(120),
            || async {
                let (_, s) = env.node_state(&last, &sk).await?;
                let e = s.get("kernel", "1.0.0")?;
                ((e.stage, e.state) == (Stage::PostInterrupt, Some(State::Complete))).then_some(())
            },
        )
        .await;
    stop.store(true, Ordering::SeqCst);
    let (most, at_once) = sampler.await.expect("sampler");
    assert!(most <= 1, "the budget of one was exceeded: {at_once:?}");
    assert!(
        !n_unschedulable(&env, &last).await,
        "the last node left cordoned"
    );
}

async fn n_unschedulable(env: &Env, node: &str) -> bool {
    let n = env.node_api.get(node).await.expect("node");
    n.spec.and_then(|s| s.unschedulable).unwrap_or(false)
}
