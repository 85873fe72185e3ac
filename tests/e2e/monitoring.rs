//! Monitoring (issue 15): every metric and label that the reference's Grafana dashboard
//! (NVIDIA/skyhook `docs/metrics/dashboards/skyhook-dashboard.json`) and our alerts
//! (`deploy/monitoring/prometheus-rule.yaml`) query is served by the operator's `/metrics`
//! during a rollout.
//!
//! The dashboard is not copied into this repository: what it queries is, derived by the analyser
//! (`support::promql`), in `tests/e2e/fixtures/reference-dashboard-uses.json`. With
//! `SKYHOOK_REFERENCE_DASHBOARD=<path to the dashboard JSON>` the test derives it again from the
//! reference's file and fails if the fixture differs (`SKYHOOK_WRITE_FIXTURE=1` rewrites it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use skyhook::crd::DeploymentPolicy;
use skyhook::schema;

use crate::support::deploy::repo;
use crate::support::promql::{
    Use, analyse, dashboard_exprs, fixture_uses, merged, missing, scrape, series,
};
use crate::support::{pkg, setup, skyhook, sleep};

/// Labels Prometheus adds to every series at scrape time (the alerts filter on `namespace`);
/// `/metrics` itself never carries them.
const TARGET_LABELS: [&str; 7] = [
    "namespace",
    "job",
    "instance",
    "pod",
    "service",
    "endpoint",
    "container",
];

/// Metrics the alerts read from other exporters: kube-state-metrics' node cordon.
const FOREIGN_METRICS: [&str; 1] = ["kube_node_spec_unschedulable"];

/// What the dashboard queries, to notice the analyser (or the dashboard file) going blind.
const DASHBOARD_METRICS: [&str; 6] = [
    "skyhook_node_status_count",
    "skyhook_node_target_count",
    "skyhook_package_restarts_count",
    "skyhook_package_stage_count",
    "skyhook_package_state_count",
    "skyhook_status",
];

/// The PromQL of this project's own dashboard (`deploy/monitoring/skyhook-gates-dashboard.json`).
fn our_dashboard_exprs() -> Vec<String> {
    let path = repo().join("deploy/monitoring/skyhook-gates-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("read our dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    exprs
}

fn rule_exprs() -> Vec<String> {
    let path = repo().join("deploy/monitoring/prometheus-rule.yaml");
    let text = std::fs::read_to_string(&path).expect("read the PrometheusRule");
    let rule: Value = serde_saphyr::from_str(&text).expect("PrometheusRule YAML");
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| r["expr"].as_str().expect("expr").to_string())
        .collect()
}

const DASHBOARD_FIXTURE: &str = "tests/e2e/fixtures/reference-dashboard-uses.json";

/// What the reference's dashboard queries: the committed fixture, checked against the
/// dashboard itself when `SKYHOOK_REFERENCE_DASHBOARD` names it.
fn dashboard_uses() -> Vec<Use> {
    fixture_uses(DASHBOARD_FIXTURE, "SKYHOOK_REFERENCE_DASHBOARD", 60)
}

#[tokio::test]
async fn dashboard_and_alert_metrics_are_served_during_a_rollout() {
    // What is queried.
    let dash_uses = dashboard_uses();
    let mut rules = rule_exprs();
    assert!(rules.len() >= 10, "only {} alert expressions", rules.len());
    let ours = our_dashboard_exprs();
    assert!(
        ours.len() >= 8,
        "only {} expressions in our dashboard",
        ours.len()
    );
    rules.extend(ours);
    let dash_metrics: BTreeSet<&str> = dash_uses.iter().map(|u| u.metric.as_str()).collect();
    assert_eq!(
        dash_metrics,
        DASHBOARD_METRICS.into_iter().collect(),
        "the dashboard's metrics"
    );
    let mut wanted = merged(
        dash_uses
            .into_iter()
            .chain(rules.iter().flat_map(|e| analyse(e))),
    );
    for m in FOREIGN_METRICS {
        assert!(wanted.remove(m).is_some(), "{m} is no longer queried");
    }
    for w in wanted.values_mut() {
        w.labels.retain(|l| !TARGET_LABELS.contains(&l.as_str()));
        w.values
            .retain(|(l, _)| !TARGET_LABELS.contains(&l.as_str()));
    }
    for w in wanted.values() {
        eprintln!(
            "queried: {} labels {:?} values {:?}",
            w.metric, w.labels, w.values
        );
    }

    // A rollout under a DeploymentPolicy (so the rollout series exist), scraped until complete.
    let env = setup("monitoring", 2, &[]).await;
    let (k, v) = env.ctx.test_label();
    let policy_name = env.ctx.name("policy");
    let policy: DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": policy_name, "labels": {k: v}},
        "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}},
    }))
    .expect("policy");
    let policies: Api<DeploymentPolicy> = Api::all(env.ctx.client.clone());
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create DeploymentPolicy");
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": policy_name,
               "packages": {"alpha": pkg("1.0.0", sleep("2")), "bravo": pkg("2.0.0", sleep("1"))}}),
    ))
    .await;
    let mut served: BTreeMap<String, BTreeSet<BTreeMap<String, String>>> = BTreeMap::new();
    let mut scrapes = 0;
    let mut seen_in_progress = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let status = env
            .skyhooks
            .get(&name)
            .await
            .ok()
            .and_then(|s| s.status?.status);
        let text = scrape(env.op.metrics_port).unwrap_or_default();
        seen_in_progress |= text.contains(&format!(
            "skyhook_status{{skyhook_name=\"{name}\",status=\"in_progress\"}} 1"
        ));
        for (m, sets) in series(&text) {
            served.entry(m).or_default().extend(sets);
        }
        scrapes += 1;
        if status == Some(schema::Status::Complete) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rollout did not complete in 180 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "{scrapes} scrapes; served: {:?}",
        served.keys().collect::<Vec<_>>()
    );
    assert!(
        seen_in_progress,
        "no scrape caught the rollout in progress ({scrapes} scrapes)"
    );

    // Every queried metric, label and value is served (for this Skyhook where it is per Skyhook).
    let missing = missing(&wanted, &served, "skyhook_name", &name);
    assert!(
        missing.is_empty(),
        "the operator's /metrics lacks what the dashboard or the alerts query:\n  {}",
        missing.join("\n  ")
    );
}

/// Prometheus itself (the one built for the alert gate's tests) loads every alert rule and
/// parses every query of our dashboard.
#[tokio::test]
async fn prometheus_accepts_our_rules_and_dashboard_queries() {
    crate::support::install_crds();
    let ctx = crate::support::TestCtx::new("monitoring-promql").await;
    let path = repo().join("deploy/monitoring/prometheus-rule.yaml");
    let rule: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).expect("read")).expect("YAML");
    let groups = json!({"groups": rule["spec"]["groups"]});
    let prom = crate::support::prometheus::Prometheus::start(
        &ctx,
        &[],
        &serde_json::to_string(&groups).expect("rules"),
    )
    .await;
    let rules = prom.get("/api/v1/rules");
    for r in rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
    {
        let name = r["alert"].as_str().expect("alert name");
        assert!(
            rules.contains(&format!("\"name\":\"{name}\"")),
            "Prometheus did not load {name}:\n{rules}\n{}",
            prom.log_tail()
        );
    }
    // Grafana's `label_values(metric, label)` is a query of the series API, not PromQL.
    for expr in our_dashboard_exprs() {
        if let Some(args) = expr.strip_prefix("label_values(") {
            let metric = args.rsplit_once(',').map_or(args, |(m, _)| m).trim();
            let answer = prom.get(&format!(
                "/api/v1/series?match[]={}",
                urlencode(&metric.replace("$namespace", "skyhook"))
            ));
            assert!(
                answer.contains("\"status\":\"success\""),
                "Prometheus refused {metric}: {answer}"
            );
            continue;
        }
        let q = expr
            .replace("$namespace", "skyhook")
            .replace("$skyhook", ".*");
        let answer = prom.get(&format!("/api/v1/query?query={}", urlencode(&q)));
        assert!(
            answer.contains("\"status\":\"success\""),
            "Prometheus refused {q}: {answer}"
        );
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
