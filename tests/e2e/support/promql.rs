//! PromQL as the e2e tests read it: a small analyser of what a query needs from a series
//! (metrics, labels, literal label values), the queries of a Grafana dashboard, fixtures of what a
//! dashboard queries, and the operator's `/metrics` exposition.
//!
//! The analyser is not a full parser: selectors `metric{label op "value", ...}`, the labels of
//! `by`/`without` (attributed to the metrics of the aggregated expression), of `on`/`ignoring`
//! (every metric of the expression), the source labels of `label_join`/`label_replace`, and
//! `label_values(metric, label)` of dashboard variables. Each PromQL expression of the reference
//! dashboard was also checked with Prometheus's own parser (v0.316.0) when this was written.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::deploy::repo;

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
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Use {
    pub metric: String,
    /// Label names: matchers, grouping, joins.
    pub labels: BTreeSet<String>,
    /// `label="value"` matchers with a literal value (Grafana variables left out).
    pub values: BTreeSet<(String, String)>,
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
pub fn analyse(expr: &str) -> Vec<Use> {
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

/// Every PromQL string of a Grafana dashboard: panel targets (`expr`) and variable queries
/// (`query`, `definition`).
/// Every PromQL string of a Grafana dashboard: panel targets (`expr`) and variable queries
/// (`query`, `definition`).
pub fn dashboard_exprs(v: &Value, out: &mut Vec<String>) {
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

/// What a dashboard queries: the committed `fixture` (a list of uses), checked against the
/// dashboard itself when the environment variable `source` names its JSON file
/// (`SKYHOOK_WRITE_FIXTURE=1` rewrites the fixture from it). `min` expressions at least, to notice
/// the analyser (or the file) going blind.
pub fn fixture_uses(fixture: &str, source: &str, min: usize) -> Vec<Use> {
    let path = repo().join(fixture);
    if let Ok(dashboard) = std::env::var(source) {
        let parsed: Value =
            serde_json::from_str(&std::fs::read_to_string(&dashboard).expect("read the dashboard"))
                .expect("dashboard JSON");
        let mut exprs = Vec::new();
        dashboard_exprs(&parsed, &mut exprs);
        assert!(
            exprs.len() >= min,
            "only {} dashboard expressions",
            exprs.len()
        );
        let derived: Vec<Use> = exprs.iter().flat_map(|e| analyse(e)).collect();
        let want = serde_json::to_string_pretty(&uses_to_json(&derived)).expect("json") + "\n";
        if std::env::var("SKYHOOK_WRITE_FIXTURE").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &want).expect("write the fixture");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(have, want, "{fixture} differs from {dashboard}");
    }
    read_uses(fixture)
}

/// The uses a committed fixture lists.
pub fn read_uses(fixture: &str) -> Vec<Use> {
    let text = std::fs::read_to_string(repo().join(fixture)).expect("read the dashboard fixture");
    uses_from_json(&serde_json::from_str(&text).expect("fixture JSON"))
}

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

/// Uses of one metric merged into one.
pub fn merged(uses: impl IntoIterator<Item = Use>) -> BTreeMap<String, Use> {
    let mut wanted: BTreeMap<String, Use> = BTreeMap::new();
    for u in uses {
        let w = wanted.entry(u.metric.clone()).or_insert_with(|| Use {
            metric: u.metric.clone(),
            ..Use::default()
        });
        w.labels.extend(u.labels);
        w.values.extend(u.values);
    }
    wanted
}

/// What of `wanted` the `served` series lack, for the object `name` where a series carries its
/// `name_label`.
pub fn missing(
    wanted: &BTreeMap<String, Use>,
    served: &BTreeMap<String, BTreeSet<BTreeMap<String, String>>>,
    name_label: &str,
    name: &str,
) -> Vec<String> {
    let mut missing = Vec::new();
    for w in wanted.values() {
        let Some(sets) = served.get(&w.metric) else {
            missing.push(format!("metric {} is not served", w.metric));
            continue;
        };
        let ours: Vec<&BTreeMap<String, String>> = sets
            .iter()
            .filter(|l| l.get(name_label).is_none_or(|n| n == name))
            .collect();
        if ours.is_empty() {
            missing.push(format!("{} has no series for {name}", w.metric));
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
    missing
}

// ---------------------------------------------------------------------------------------------
// The operator's exposition.

/// `GET /metrics` of the operator on 127.0.0.1:`port`; `None` until it listens.
pub fn scrape(port: u16) -> Option<String> {
    let text = super::metrics::raw_metrics(port);
    (!text.is_empty()).then_some(text)
}

/// Every series of an OpenMetrics text: name → label sets.
pub fn series(text: &str) -> BTreeMap<String, BTreeSet<BTreeMap<String, String>>> {
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
