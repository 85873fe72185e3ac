//! Issue 39, acceptance 5: every query of upstream's v0.20 Grafana dashboard is answered for a
//! NodeWright rollout, and a Skyhook's series carry both names while NodeWrights are served.
//!
//! As for the reference dashboard (`monitoring.rs`), the dashboard is not copied here: what it
//! queries is, in `tests/e2e/fixtures/nodewright-dashboard-uses.json`, derived by
//! `support::promql` from NVIDIA/nodewright `docs/observability/dashboards/skyhook-dashboard.json`
//! at commit 1a0c341a47bacba233d9291f283a20abbcae13b3 (v0.20.0's; 42 distinct expressions, 64
//! targets). `SKYHOOK_NODEWRIGHT_DASHBOARD=<its JSON>` derives it again and compares.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;
use skyhook::schema::Status;

use super::{create_nodewright, create_nodewright_policy, nodewright, nw_setup};
use crate::support::promql::{Use, fixture_uses, merged, missing, read_uses, scrape, series};
use crate::support::{pkg, skyhook, sleep};

const FIXTURE: &str = "tests/e2e/fixtures/nodewright-dashboard-uses.json";
const REFERENCE_FIXTURE: &str = "tests/e2e/fixtures/reference-dashboard-uses.json";

fn upstream_uses() -> Vec<Use> {
    fixture_uses(FIXTURE, "SKYHOOK_NODEWRIGHT_DASHBOARD", 40)
}

/// Upstream's v0.20 dashboard asks what the v0.13 one asked, under the new names: so a
/// NodeWright is watched exactly as a Skyhook was.
#[test]
fn the_v0_20_dashboard_is_the_reference_dashboard_renamed() {
    let renamed = |u: Use| Use {
        metric: u.metric.replacen("skyhook_", "nodewright_", 1),
        labels: u
            .labels
            .into_iter()
            .map(|l| l.replace("skyhook_name", "nodewright_name"))
            .collect(),
        values: u.values,
    };
    let reference = merged(read_uses(REFERENCE_FIXTURE).into_iter().map(renamed));
    let upstream = merged(upstream_uses());
    assert_eq!(upstream, reference);
}

#[tokio::test]
async fn the_upstream_v0_20_dashboard_is_answered_for_a_nodewright_and_a_skyhook() {
    let wanted = merged(upstream_uses());
    assert_eq!(wanted.len(), 6, "{:?}", wanted.keys());
    let env = nw_setup("nw-metrics", 2, &[]).await;
    let policy = create_nodewright_policy(
        &env.ctx,
        json!({"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}}),
    )
    .await;
    let nw = env.ctx.name("nw");
    let packages = json!({"alpha": pkg("1.0.0", sleep("2")), "bravo": pkg("2.0.0", sleep("1"))});
    create_nodewright(
        &env.ctx,
        &nw,
        json!({"deploymentPolicy": policy, "packages": packages}),
    )
    .await;
    let sk = env.ctx.name("sk");
    env.create(&skyhook(&env.ctx, &sk, json!({"packages": packages})))
        .await;

    let mut served: BTreeMap<String, BTreeSet<BTreeMap<String, String>>> = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let nw_done = nodewright(&env.ctx, &nw)
            .await
            .and_then(|s| s.status?.status)
            == Some(Status::Complete);
        let sk_done = env.is_complete(&sk).await;
        for (m, sets) in series(&scrape(env.op.metrics_port).unwrap_or_default()) {
            served.entry(m).or_default().extend(sets);
        }
        if nw_done && sk_done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rollouts did not complete in 180 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for name in [&nw, &sk] {
        let lacking = missing(&wanted, &served, "nodewright_name", name);
        assert!(
            lacking.is_empty(),
            "/metrics lacks what upstream's v0.20 dashboard asks of {name}:\n  {}",
            lacking.join("\n  ")
        );
    }
    // The legacy names, for both (upstream dual-publishes until v0.21).
    let legacy = merged(read_uses(REFERENCE_FIXTURE));
    for name in [&nw, &sk] {
        let lacking = missing(&legacy, &served, "skyhook_name", name);
        assert!(lacking.is_empty(), "{name}: {}", lacking.join("\n  "));
    }
}

/// `PUBLISH_LEGACY_METRICS=false` (upstream's switch, chart
/// `controllerManager.manager.env.publishLegacyMetrics`): a Skyhook's series are published under
/// the new names only.
#[tokio::test]
async fn publish_legacy_metrics_false_drops_the_legacy_names() {
    let env = nw_setup("nw-newnames", 1, &[("PUBLISH_LEGACY_METRICS", "false")]).await;
    let sk = env.ctx.name("sk");
    let packages = json!({"alpha": pkg("1.0.0", sleep("1"))});
    env.create(&skyhook(&env.ctx, &sk, json!({"packages": packages})))
        .await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(90))
        .await;
    let want = format!(r#"nodewright_status{{nodewright_name="{sk}",status="complete"}} 1"#);
    let text = env
        .ctx
        .wait_for(
            "the complete status under the new name",
            Duration::from_secs(30),
            || {
                let text = scrape(env.op.metrics_port).unwrap_or_default();
                let found = text.lines().any(|l| l == want);
                async move { found.then_some(text) }
            },
        )
        .await;
    let legacy: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("skyhook_name=") || l.starts_with("skyhook_status"))
        .collect();
    assert!(legacy.is_empty(), "legacy series: {legacy:?}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("skyhook_operator_pass_seconds")),
        "the operator's own families keep their one name:\n{text}"
    );
}
