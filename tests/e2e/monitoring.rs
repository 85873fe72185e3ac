//! Monitoring (issue 15): every metric and label that the reference's Grafana dashboard
//! (NVIDIA/skyhook `docs/metrics/dashboards/skyhook-dashboard.json`) and our alerts
//! (`deploy/monitoring/prometheus-rule.yaml`) query is served by the operator's `/metrics`
//! during a rollout.
//!
//! The dashboard is not copied into this repository: what it queries is, derived by the analyser
//! below, in `tests/e2e/fixtures/reference-dashboard-uses.json`. With
//! `SKYHOOK_REFERENCE_DASHBOARD=<path to the dashboard JSON>` the test derives it again from the
//! reference's file and fails if the fixture differs (`SKYHOOK_WRITE_FIXTURE=1` rewrites it).
//!
//! The PromQL is read by a small analyser (below), not a full parser: selectors
//! `metric{label op "value", ...}`, the labels of `by`/`without` (attributed to the metrics of the
//! aggregated expression), of `on`/`ignoring` (every metric of the expression), the source labels
//! of `label_join`/`label_replace`, and `label_values(metric, label)` of dashboard variables. Each
//! PromQL expression was also checked with Prometheus's own parser (v0.316.0) when this was
//! written.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use skyhook::crd::DeploymentPolicy;
use skyhook::schema;

use crate::support::deploy::repo;
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

// ---------------------------------------------------------------------------------------------
// PromQL analyser.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    /// Operators and punctuation: ( ) { } [ ] , = != =~ !~ == > < >= <= + - * / % ^
    Punct(String),
    Number(String),
}

fn tokenize(expr: &str) -> Vec<Tok> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            // A comment runs to the end of the line.
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' || c == '`' {
            let q = c;
            let mut s = String::new();
            i += 1;
            while i < chars.len() && chars[i] != q {
                if chars[i] == '\\' && q != '`' && i + 1 < chars.len() {
                    i += 1;
                }
                s.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' || c == '$' {
            // `$var` (a Grafana variable) reads as an identifier too.
            let start = i;
            i += 1;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Tok::Number(chars[start..i].iter().collect()));
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["!=", "=~", "!~", "==", ">=", "<="].contains(&two.as_str()) {
                out.push(Tok::Punct(two));
                i += 2;
            } else {
                out.push(Tok::Punct(c.to_string()));
                i += 1;
            }
        }
    }
    out
}

const KEYWORDS: [&str; 13] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
];

const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "limitk",
    "limit_ratio",
];

/// One selector of an expression, with every label the expression needs on it.
#[derive(Debug, Default, Clone)]
struct Use {
    metric: String,
    /// Label names: matchers, grouping, joins.
    labels: BTreeSet<String>,
    /// `label="value"` matchers with a literal value (Grafana variables left out).
    values: BTreeSet<(String, String)>,
}

fn is(t: Option<&Tok>, p: &str) -> bool {
    matches!(t, Some(Tok::Punct(x)) if x == p)
}

/// Index of the token closing the bracket opened at `open`.
fn closing(toks: &[Tok], open: usize) -> usize {
    let (o, c) = match &toks[open] {
        Tok::Punct(p) if p == "(" => ("(", ")"),
        Tok::Punct(p) if p == "{" => ("{", "}"),
        Tok::Punct(p) if p == "[" => ("[", "]"),
        t => panic!("no bracket at {open}: {t:?}"),
    };
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate().skip(open) {
        if is(Some(t), o) {
            depth += 1;
        } else if is(Some(t), c) {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
    }
    panic!("unbalanced {o} at token {open}");
}

/// The identifiers of a `( a, b )` list opening at `open`, and the index after it.
fn ident_list(toks: &[Tok], open: usize) -> (Vec<String>, usize) {
    let close = closing(toks, open);
    let names = toks[open + 1..close]
        .iter()
        .filter_map(|t| match t {
            Tok::Ident(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    (names, close + 1)
}

/// The top-level arguments of the call whose `(` is at `open`: token ranges.
fn args(toks: &[Tok], open: usize) -> Vec<(usize, usize)> {
    let close = closing(toks, open);
    let mut out = Vec::new();
    let mut start = open + 1;
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate().take(close).skip(open + 1) {
        match t {
            Tok::Punct(p) if p == "(" || p == "{" || p == "[" => depth += 1,
            Tok::Punct(p) if p == ")" || p == "}" || p == "]" => depth -= 1,
            Tok::Punct(p) if p == "," && depth == 0 => {
                out.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push((start, close));
    out
}

/// The selectors of one expression, each with the labels and values the expression needs.
fn analyse(expr: &str) -> Vec<Use> {
    let toks = tokenize(expr);
    // The label arguments of label_values(metric, label) are no metrics.
    let mut not_metrics = BTreeSet::new();
    for i in 0..toks.len() {
        if matches!(&toks[i], Tok::Ident(n) if n == "label_values") && is(toks.get(i + 1), "(") {
            for (s, e) in args(&toks, i + 1).into_iter().skip(1) {
                not_metrics.extend(s..e);
            }
        }
    }
    // Pass 1: selectors, by token position.
    let mut uses: Vec<(usize, Use)> = Vec::new();
    let mut skip_until = 0;
    for i in 0..toks.len() {
        if i < skip_until || not_metrics.contains(&i) {
            continue;
        }
        let Tok::Ident(name) = &toks[i] else { continue };
        let next = toks.get(i + 1);
        let lower = name.to_lowercase();
        if AGGREGATIONS.contains(&lower.as_str())
            && matches!(next, Some(Tok::Ident(k)) if k == "by" || k == "without")
        {
            continue;
        }
        if KEYWORDS.contains(&lower.as_str()) {
            // Skip the label list of by/without/on/ignoring/group_*.
            if is(next, "(") {
                skip_until = closing(&toks, i + 1) + 1;
            }
            continue;
        }
        if is(next, "(") || name.starts_with('$') {
            continue; // a function, an aggregation, or a Grafana variable
        }
        let mut u = Use {
            metric: name.clone(),
            ..Use::default()
        };
        if is(next, "{") {
            let close = closing(&toks, i + 1);
            let mut j = i + 2;
            while j + 2 < close + 1 {
                if let (Tok::Ident(l), Tok::Punct(op), Tok::Str(v)) =
                    (&toks[j], &toks[j + 1], &toks[j + 2])
                {
                    u.labels.insert(l.clone());
                    if op == "=" && !v.contains('$') {
                        u.values.insert((l.clone(), v.clone()));
                    }
                    j += 3;
                } else {
                    j += 1;
                }
            }
            skip_until = close + 1;
        }
        uses.push((i, u));
    }
    // Pass 2: labels of grouping and joins, attributed to the selectors they apply to.
    let add = |range: (usize, usize), labels: &[String], uses: &mut Vec<(usize, Use)>| {
        for (pos, u) in uses.iter_mut() {
            if *pos >= range.0 && *pos < range.1 {
                u.labels.extend(labels.iter().cloned());
            }
        }
    };
    for i in 0..toks.len() {
        let Tok::Ident(name) = &toks[i] else { continue };
        let lower = name.to_lowercase();
        let next = toks.get(i + 1);
        if AGGREGATIONS.contains(&lower.as_str()) {
            // `sum by (l) (expr)` or `sum (expr) by (l)`.
            let (labels, arg_open) = match toks.get(i + 1) {
                Some(Tok::Ident(k)) if k == "by" || k == "without" => ident_list(&toks, i + 2),
                _ => (Vec::new(), i + 1),
            };
            if !is(toks.get(arg_open), "(") {
                continue;
            }
            let arg_close = closing(&toks, arg_open);
            let mut labels = labels;
            if let Some(Tok::Ident(k)) = toks.get(arg_close + 1)
                && (k == "by" || k == "without")
            {
                labels.extend(ident_list(&toks, arg_close + 2).0);
            }
            add((arg_open, arg_close), &labels, &mut uses);
        } else if (lower == "on" || lower == "ignoring") && is(next, "(") {
            let labels = ident_list(&toks, i + 1).0;
            add((0, toks.len()), &labels, &mut uses);
        } else if (lower == "label_join" || lower == "label_replace") && is(next, "(") {
            let a = args(&toks, i + 1);
            let sources: Vec<String> = if lower == "label_join" {
                a.iter().skip(3).collect::<Vec<_>>()
            } else {
                a.iter().skip(3).take(1).collect::<Vec<_>>()
            }
            .iter()
            .filter_map(|(s, _)| match &toks[*s] {
                Tok::Str(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
            add(a[0], &sources, &mut uses);
        } else if lower == "label_values" && is(next, "(") {
            let a = args(&toks, i + 1);
            if let Some((s, _)) = a.get(1)
                && let Tok::Ident(l) = &toks[*s]
            {
                add(a[0], std::slice::from_ref(l), &mut uses);
            }
        }
    }
    uses.into_iter().map(|(_, u)| u).collect()
}

// ---------------------------------------------------------------------------------------------
// Sources of PromQL.

/// Every PromQL string of a Grafana dashboard: panel targets (`expr`) and variable queries
/// (`query`, `definition`).
fn dashboard_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                match (k.as_str(), child) {
                    ("expr", Value::String(s)) => out.push(s.clone()),
                    ("query" | "definition", Value::String(s)) if s.contains('(') => {
                        out.push(s.clone())
                    }
                    _ => dashboard_exprs(child, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|c| dashboard_exprs(c, out)),
        _ => {}
    }
}

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

// ---------------------------------------------------------------------------------------------
// The operator's exposition.

/// `GET /metrics` of the operator on 127.0.0.1:`port`; `None` until it listens.
fn scrape(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Every series of an OpenMetrics text: name → label sets.
fn series(text: &str) -> BTreeMap<String, BTreeSet<BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, BTreeSet<BTreeMap<String, String>>> = BTreeMap::new();
    let body = text.split("\r\n\r\n").last().unwrap_or(text);
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = match line.find('{') {
            Some(b) => (&line[..b], &line[b + 1..]),
            None => (line.split(' ').next().unwrap_or(line), ""),
        };
        let mut labels = BTreeMap::new();
        let mut rest = rest;
        while let Some(eq) = rest.find("=\"") {
            let key = rest[..eq].trim_start_matches(',').trim().to_string();
            let after = &rest[eq + 2..];
            let mut value = String::new();
            let mut end = after.len();
            let mut chars = after.char_indices();
            while let Some((k, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, e)) = chars.next() {
                            value.push(e);
                        }
                    }
                    '"' => {
                        end = k;
                        break;
                    }
                    c => value.push(c),
                }
            }
            labels.insert(key, value);
            rest = &after[(end + 1).min(after.len())..];
            if rest.starts_with('}') {
                break;
            }
        }
        out.entry(name.to_string()).or_default().insert(labels);
    }
    out
}

// ---------------------------------------------------------------------------------------------

#[test]
fn the_analyser_reads_selectors_groupings_and_joins() {
    let uses = analyse(
        r#"label_join(sum by (skyhook_name) (a{x="1", y=~"$v"} > 0), "k", "-", "p", "q")
           or max(b) without (w) unless on (o) c or label_values(d{e="f"}, g) or rate(h[5m])"#,
    );
    let got: BTreeMap<String, Use> = uses.into_iter().map(|u| (u.metric.clone(), u)).collect();
    let set = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let vals = |l: &[(&str, &str)]| {
        l.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        got["a"].labels,
        set(&["skyhook_name", "x", "y", "p", "q", "o"])
    );
    assert_eq!(got["a"].values, vals(&[("x", "1")]));
    assert_eq!(got["b"].labels, set(&["w", "o"]));
    assert_eq!(got["c"].labels, set(&["o"]));
    assert_eq!(got["d"].labels, set(&["e", "g", "o"]));
    assert_eq!(got["h"].labels, set(&["o"]));
    assert_eq!(got.len(), 5, "{got:?}");
}

const DASHBOARD_FIXTURE: &str = "tests/e2e/fixtures/reference-dashboard-uses.json";

fn uses_to_json(uses: &[Use]) -> Value {
    let mut merged: BTreeMap<String, Use> = BTreeMap::new();
    for u in uses {
        let m = merged.entry(u.metric.clone()).or_insert_with(|| Use {
            metric: u.metric.clone(),
            ..Use::default()
        });
        m.labels.extend(u.labels.iter().cloned());
        m.values.extend(u.values.iter().cloned());
    }
    Value::Array(
        merged
            .values()
            .map(|u| {
                json!({"metric": u.metric, "labels": u.labels,
                       "values": u.values.iter().map(|(l, v)| json!([l, v])).collect::<Vec<_>>()})
            })
            .collect(),
    )
}

fn uses_from_json(v: &Value) -> Vec<Use> {
    let text = |x: &Value| x.as_str().expect("a string").to_string();
    v.as_array()
        .expect("a list")
        .iter()
        .map(|u| Use {
            metric: text(&u["metric"]),
            labels: u["labels"]
                .as_array()
                .expect("labels")
                .iter()
                .map(text)
                .collect(),
            values: u["values"]
                .as_array()
                .expect("values")
                .iter()
                .map(|p| (text(&p[0]), text(&p[1])))
                .collect(),
        })
        .collect()
}

/// What the reference's dashboard queries: the committed fixture, checked against the
/// dashboard itself when `SKYHOOK_REFERENCE_DASHBOARD` names it.
fn dashboard_uses() -> Vec<Use> {
    let fixture = repo().join(DASHBOARD_FIXTURE);
    if let Ok(path) = std::env::var("SKYHOOK_REFERENCE_DASHBOARD") {
        let dashboard: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read the dashboard"))
                .expect("dashboard JSON");
        let mut exprs = Vec::new();
        dashboard_exprs(&dashboard, &mut exprs);
        assert!(
            exprs.len() >= 60,
            "only {} dashboard expressions",
            exprs.len()
        );
        let derived: Vec<Use> = exprs.iter().flat_map(|e| analyse(e)).collect();
        let want = serde_json::to_string_pretty(&uses_to_json(&derived)).expect("json") + "\n";
        if std::env::var("SKYHOOK_WRITE_FIXTURE").is_ok_and(|v| v == "1") {
            std::fs::write(&fixture, &want).expect("write the fixture");
        }
        let have = std::fs::read_to_string(&fixture).unwrap_or_default();
        assert_eq!(have, want, "{DASHBOARD_FIXTURE} differs from {path}");
    }
    let text = std::fs::read_to_string(&fixture).expect("read the dashboard fixture");
    uses_from_json(&serde_json::from_str(&text).expect("fixture JSON"))
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
    let mut wanted: BTreeMap<String, Use> = BTreeMap::new();
    for u in dash_uses
        .into_iter()
        .chain(rules.iter().flat_map(|e| analyse(e)))
    {
        let w = wanted.entry(u.metric.clone()).or_insert_with(|| Use {
            metric: u.metric.clone(),
            ..Use::default()
        });
        w.labels.extend(u.labels);
        w.values.extend(u.values);
    }
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
    let mut missing = Vec::new();
    for w in wanted.values() {
        let Some(sets) = served.get(&w.metric) else {
            missing.push(format!("metric {} is not served", w.metric));
            continue;
        };
        let ours: Vec<&BTreeMap<String, String>> = sets
            .iter()
            .filter(|l| l.get("skyhook_name").is_none_or(|n| *n == name))
            .collect();
        if ours.is_empty() {
            missing.push(format!("{} has no series for Skyhook {name}", w.metric));
            continue;
        }
        for l in &w.labels {
            if !ours.iter().any(|s| s.contains_key(l)) {
                missing.push(format!("{} has no label {l}", w.metric));
            }
        }
        for (l, val) in &w.values {
            if !ours.iter().any(|s| s.get(l) == Some(val)) {
                missing.push(format!("{} has no series with {l}=\"{val}\"", w.metric));
            }
        }
    }
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
