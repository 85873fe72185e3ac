//! The node annotation `nonInterruptWait_<skyhook>`: since when the node's interrupt has waited
//! for pods matching `podNonInterruptLabels`, and which (issue 51, upstream #543). The operator
//! writes it; `kubectl skyhook node status` shows it; the reference ignores it.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

/// One node's wait for its protected pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedWait {
    /// The first pass that saw protected pods hold the node.
    pub since: Timestamp,
    /// The protected pods (`namespace/name`), sorted, as the last pass saw them.
    pub pods: Vec<String>,
}

impl ProtectedWait {
    /// The stored value; `None` when absent or unreadable (a clock we cannot read starts over:
    /// it only decides when a batch slot is given back, never an interrupt).
    pub fn parse(raw: Option<&str>) -> Option<ProtectedWait> {
        serde_json::from_str(raw?).ok()
    }

    pub fn to_json(&self) -> String {
        // A struct of a timestamp and strings always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// How long it has waited at `now` (zero for a clock ahead of it).
    pub fn waited(&self, now: Timestamp) -> SignedDuration {
        now.duration_since(self.since).max(SignedDuration::ZERO)
    }

    /// Why the node's interrupt waits (the `NodeBlocked` line), with `more` after it (empty, or
    /// `, …` words on the cordon or the batch slot).
    pub fn blocked_message(&self, more: &str) -> String {
        format!(
            "waiting since {} for protected pod(s) {} (podNonInterruptLabels) to finish{more}",
            self.since.round(jiff::Unit::Second).unwrap_or(self.since),
            self.pods.join(", ")
        )
    }

    /// `ns/a, ns/b since <time>`, then ` (<age>)` given `now`: what the plugin prints; the
    /// conditions leave the age out, so that a pass does not rewrite them for it alone.
    pub fn describe(&self, now: Option<Timestamp>) -> String {
        let pods = super::short_list(&self.pods, 5, ", ");
        let since = self.since.round(jiff::Unit::Second).unwrap_or(self.since);
        match now {
            Some(now) => {
                let age = self
                    .waited(now)
                    .round(jiff::Unit::Second)
                    .unwrap_or_default();
                format!("{pods} since {since} ({age:#})")
            }
            None => format!("{pods} since {since}"),
        }
    }
}

/// Skyhook annotation: when a node whose interrupt waits for protected pods is cordoned.
pub const NON_INTERRUPT_CORDON_ANNOTATION: &str = "skyhook.nvidia.com/non-interrupt-cordon";

/// The values of [`NON_INTERRUPT_CORDON_ANNOTATION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProtectedCordon {
    /// Cordoned before the wait begins (upstream's behaviour): no new workload lands, so the
    /// wait ends; the node's capacity is idle meanwhile.
    #[default]
    WaitStart,
    /// Cordoned only once no protected pod runs: the node keeps taking work while it waits,
    /// which a new protected pod may prolong; the pods are checked again once it is cordoned.
    PodsGone,
}

impl ProtectedCordon {
    pub const WAIT_START: &'static str = "wait-start";
    pub const PODS_GONE: &'static str = "pods-gone";

    /// The annotation's value read, or the message that names it and the values it takes.
    pub fn of(value: Option<&str>) -> Result<ProtectedCordon, String> {
        match value.map(str::trim) {
            None | Some("") | Some(Self::WAIT_START) => Ok(ProtectedCordon::WaitStart),
            Some(Self::PODS_GONE) => Ok(ProtectedCordon::PodsGone),
            Some(other) => Err(format!(
                "{other:?} is not a cordon choice: set it to {:?} (cordon before waiting for protected pods, the default) or {:?} (cordon once they are gone), or remove it",
                Self::WAIT_START,
                Self::PODS_GONE
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_description() {
        let since: Timestamp = "2026-12-06T10:00:00Z".parse().unwrap();
        let w = ProtectedWait {
            since,
            pods: vec!["apps/train-0".into(), "apps/train-1".into()],
        };
        assert_eq!(ProtectedWait::parse(Some(&w.to_json())), Some(w.clone()));
        assert_eq!(ProtectedWait::parse(Some("not json")), None);
        assert_eq!(ProtectedWait::parse(None), None);
        let now: Timestamp = "2026-12-06T10:02:05Z".parse().unwrap();
        assert_eq!(
            w.describe(None),
            "apps/train-0, apps/train-1 since 2026-12-06T10:00:00Z"
        );
        assert_eq!(
            w.describe(Some(now)),
            "apps/train-0, apps/train-1 since 2026-12-06T10:00:00Z (2m 5s)"
        );
        assert_eq!(
            w.waited(since - SignedDuration::from_secs(5)),
            SignedDuration::ZERO
        );
    }

    #[test]
    fn cordon_choices() {
        assert_eq!(ProtectedCordon::of(None), Ok(ProtectedCordon::WaitStart));
        assert_eq!(
            ProtectedCordon::of(Some("wait-start")),
            Ok(ProtectedCordon::WaitStart)
        );
        assert_eq!(
            ProtectedCordon::of(Some("pods-gone")),
            Ok(ProtectedCordon::PodsGone)
        );
        let err = ProtectedCordon::of(Some("later")).unwrap_err();
        assert!(
            err.contains("\"later\"") && err.contains("pods-gone"),
            "{err}"
        );
    }
}
