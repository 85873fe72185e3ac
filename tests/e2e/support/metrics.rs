//! The operator's `/metrics`, read the way the reference's `metrics_test.py` reads it.

use std::collections::BTreeMap;

/// The operator's `/metrics` text; empty while it is not listening yet (callers poll). On a
/// NodeWright run ([`super::kind`]), as the test reads it: see [`as_seen`].
pub fn metrics(port: u16) -> String {
    as_seen(raw_metrics(port), super::kind())
}

/// `/metrics` as a test written for Skyhooks reads it on a run of `kind`: on NodeWrights, the
/// `nodewright_*` series (label `nodewright_name`) under the legacy names, and none of the legacy
/// object series, so the run shows upstream's names are served.
pub fn as_seen(text: String, kind: skyhook::schema::Api) -> String {
    if kind == skyhook::schema::Api::Skyhook {
        return text;
    }
    text.lines()
        .filter(|l| !(l.starts_with("skyhook_") && l.contains("skyhook_name=")))
        .map(|l| {
            l.replacen("nodewright_", "skyhook_", 1)
                .replace("nodewright_name=", "skyhook_name=")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The operator's `/metrics` text as served.
pub fn raw_metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let mut out = String::new();
    let sent = write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
    if sent.is_err() || s.read_to_string(&mut out).is_err() {
        return String::new();
    }
    out
}

/// (verb, resource) → count, successful or not, from `skyhook_api_requests_total`.
pub fn requests(text: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("skyhook_api_requests_total{"))
    {
        let label = |k: &str| -> String {
            let start = line.find(&format!("{k}=\"")).map(|i| i + k.len() + 2);
            start
                .and_then(|s| line[s..].find('"').map(|e| line[s..s + e].to_string()))
                .unwrap_or_default()
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry((label("verb"), label("resource"))).or_default() += value;
    }
    out
}

/// (name, labels, value) of every sample on the operator's /metrics.
pub fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty() && !l.starts_with("HTTP/"))
        .filter_map(|l| {
            let (head, value) = l.rsplit_once(' ')?;
            let (name, labels) = match head.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (head, ""),
            };
            Some((name.to_string(), parse_labels(labels), value.to_string()))
        })
        .collect()
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut end = after.len();
        let mut chars = after.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i;
                    break;
                }
                _ => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[(end + 1).min(after.len())..];
    }
    out
}
