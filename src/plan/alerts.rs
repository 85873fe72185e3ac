//! The alert gate's decision (issue 38): from the firing alerts an alert source reported (or
//! why it could not be read) and the policy's `alertGate`, whether the rollout's next batches
//! are held, and why in words.

use std::collections::BTreeMap;

use crate::crd::{AlertGate, Matcher, Unreachable};

/// What the alert source said this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertReading {
    /// The firing alerts, each as its labels.
    Firing(Vec<BTreeMap<String, String>>),
    /// It could not be read (why).
    Unreachable(String),
}

/// The gate's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertHold {
    Clear,
    /// Matching alerts fire (each described as `alertname{label="value",…}`).
    Firing(Vec<String>),
    /// The source could not be read; `holding` unless `onUnreachable: Proceed`.
    Unreachable {
        why: String,
        holding: bool,
    },
}

impl AlertHold {
    /// No new batch starts.
    pub fn holds(&self) -> bool {
        matches!(
            self,
            AlertHold::Firing(_) | AlertHold::Unreachable { holding: true, .. }
        )
    }
}

/// Most alerts a condition names (the count says the rest).
const ALERTS_NAMED: usize = 5;

pub fn judge(gate: &AlertGate, reading: &AlertReading) -> AlertHold {
    match reading {
        AlertReading::Unreachable(why) => AlertHold::Unreachable {
            why: why.clone(),
            holding: gate.on_unreachable.unwrap_or_default() == Unreachable::Hold,
        },
        AlertReading::Firing(alerts) => {
            // Validation reports a matcher that does not parse; the gate then holds on every
            // alert rather than on none.
            let matchers: Vec<Matcher> = gate
                .matchers
                .iter()
                .filter_map(|m| Matcher::parse(m).ok())
                .collect();
            let mut firing: Vec<String> = alerts
                .iter()
                .filter(|a| matchers.iter().all(|m| m.matches(a)))
                .map(describe)
                .collect();
            firing.sort();
            firing.dedup();
            if firing.is_empty() {
                AlertHold::Clear
            } else {
                AlertHold::Firing(firing)
            }
        }
    }
}

/// `alertname{label="value",…}`, the other labels sorted.
pub fn describe(labels: &BTreeMap<String, String>) -> String {
    let name = labels.get("alertname").map_or("alert", String::as_str);
    let rest: Vec<String> = labels
        .iter()
        .filter(|(k, _)| k.as_str() != "alertname")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    format!("{name}{{{}}}", rest.join(","))
}

/// The condition's reason and message for a verdict that is not clear.
pub fn condition(gate: &AlertGate, hold: &AlertHold) -> Option<(&'static str, String)> {
    match hold {
        AlertHold::Clear => None,
        AlertHold::Firing(alerts) => {
            let named = crate::schema::short_list(alerts, ALERTS_NAMED, ", ");
            Some((
                crate::schema::ALERTS_FIRING_REASON,
                format!(
                    "{} firing alert(s) match alertGate.matchers at {}: {named}; no new batch starts until they clear",
                    alerts.len(),
                    gate.url
                ),
            ))
        }
        AlertHold::Unreachable { why, holding } => {
            let what = if *holding {
                "no new batch starts until it answers (alertGate.onUnreachable: Hold)"
            } else {
                "the rollout goes on (alertGate.onUnreachable: Proceed)"
            };
            Some((
                crate::schema::ALERT_SOURCE_UNREACHABLE_REASON,
                format!(
                    "the alert source at {} cannot be read: {why}; {what}",
                    gate.url
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matching_firing_alerts_hold_and_an_unreachable_source_holds_by_default() {
        let gate = AlertGate {
            url: "http://prom:9090".into(),
            matchers: vec!["severity=\"critical\"".into()],
            ..Default::default()
        };
        let firing = AlertReading::Firing(vec![
            alert(&[("alertname", "GPUXid"), ("severity", "critical")]),
            alert(&[("alertname", "Disk"), ("severity", "warning")]),
        ]);
        let hold = judge(&gate, &firing);
        assert_eq!(
            hold,
            AlertHold::Firing(vec!["GPUXid{severity=\"critical\"}".into()])
        );
        assert!(hold.holds());
        let calm = AlertReading::Firing(vec![alert(&[
            ("alertname", "Disk"),
            ("severity", "warning"),
        ])]);
        assert_eq!(judge(&gate, &calm), AlertHold::Clear);
        let down = AlertReading::Unreachable("connection refused".into());
        assert!(judge(&gate, &down).holds());
        let proceed = AlertGate {
            on_unreachable: Some(Unreachable::Proceed),
            ..gate.clone()
        };
        let verdict = judge(&proceed, &down);
        assert!(!verdict.holds());
        let (reason, message) = condition(&proceed, &verdict).expect("condition");
        assert_eq!(reason, crate::schema::ALERT_SOURCE_UNREACHABLE_REASON);
        assert!(message.contains("connection refused") && message.contains("Proceed"));
    }
}
