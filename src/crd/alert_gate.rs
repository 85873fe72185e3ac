//! `spec.alertGate` of a DeploymentPolicy (this project's extension, issue 38): firing alerts of
//! a Prometheus or an Alertmanager that match hold the rollout before a batch starts.

use std::collections::BTreeMap;

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which API serves the alerts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AlertApi {
    /// Prometheus's `/api/v1/alerts` (alerts in state `firing`).
    #[default]
    Prometheus,
    /// Alertmanager's `/api/v2/alerts` (active, neither silenced nor inhibited).
    Alertmanager,
}

/// What the gate does when the alert source cannot be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Unreachable {
    /// Hold the rollout (the safe default: a silent source is not a healthy fleet).
    #[default]
    Hold,
    /// Go on as if no alert fired (the condition still says the source is unreachable).
    Proceed,
}

/// Firing alerts that match hold the rollout: no new batch starts while one fires; nodes at
/// work finish.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertGate {
    /// Base URL of the Prometheus or Alertmanager (`http://` or `https://`).
    pub url: String,
    /// `Prometheus` (default) or `Alertmanager`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<AlertApi>,
    /// Label matchers, all of which an alert must satisfy to hold the rollout, as PromQL
    /// writes them: `severity="critical"`, `alertname=~"GPU.*"`, `team!="web"`. None: any
    /// firing alert holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matchers: Vec<String>,
    /// `Hold` (default) or `Proceed` when the source cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_unreachable: Option<Unreachable>,
    /// A Secret in the operator's namespace with the credentials: key `token` (a bearer
    /// token), or keys `username` and `password` (basic authentication).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
}

/// One parsed label matcher.
#[derive(Clone, Debug)]
pub struct Matcher {
    pub name: String,
    op: Op,
    value: String,
    regex: Option<Regex>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Re,
    NotRe,
}

impl Matcher {
    /// Parses `name<op>value` (`=`, `!=`, `=~`, `!~`), the value optionally double-quoted.
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let t = text.trim();
        let at = t
            .find(['=', '!'])
            .ok_or_else(|| format!("{text:?} has no operator (=, !=, =~ or !~)"))?;
        let name = t[..at].trim();
        let rest = &t[at..];
        let (op, value) = if let Some(v) = rest.strip_prefix("=~") {
            (Op::Re, v)
        } else if let Some(v) = rest.strip_prefix("!~") {
            (Op::NotRe, v)
        } else if let Some(v) = rest.strip_prefix("!=") {
            (Op::Ne, v)
        } else if let Some(v) = rest.strip_prefix('=') {
            (Op::Eq, v)
        } else {
            return Err(format!("{text:?} has no operator (=, !=, =~ or !~)"));
        };
        let valid_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid_name {
            return Err(format!("{text:?}: {name:?} is not a label name"));
        }
        let value = value.trim();
        let value = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(v) => v.to_string(),
            None => value.to_string(),
        };
        let regex = match op {
            Op::Re | Op::NotRe => Some(
                Regex::new(&format!("^(?:{value})$"))
                    .map_err(|e| format!("{text:?}: the regular expression is invalid: {e}"))?,
            ),
            _ => None,
        };
        Ok(Matcher {
            name: name.to_string(),
            op,
            value,
            regex,
        })
    }

    /// Whether an alert with these labels satisfies the matcher (a missing label is empty, as
    /// in PromQL).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.name).map_or("", String::as_str);
        match (self.op, &self.regex) {
            (Op::Eq, _) => v == self.value,
            (Op::Ne, _) => v != self.value,
            (Op::Re, Some(re)) => re.is_match(v),
            (Op::NotRe, Some(re)) => !re.is_match(v),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matchers_parse_and_match_as_promql() {
        let labels: BTreeMap<String, String> = [("alertname", "GPUXid"), ("severity", "critical")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let cases = [
            ("severity=\"critical\"", true),
            ("severity = critical", true),
            ("severity!=\"critical\"", false),
            ("alertname=~\"GPU.*\"", true),
            ("alertname=~\"Xid\"", false),
            ("alertname!~\"Node.*\"", true),
            ("team=\"\"", true),
        ];
        for (text, want) in cases {
            let m = Matcher::parse(text).expect(text);
            assert_eq!(m.matches(&labels), want, "{text}");
        }
        for bad in ["severity", "=x", "9a=x", "a=~\"(\""] {
            assert!(Matcher::parse(bad).is_err(), "{bad}");
        }
    }
}
