//! Rollout notifications (issue 38): what changed between the stored status and the one this
//! pass writes that people want to hear about. Each has an id made of the Skyhook's uid, the
//! resourceVersion the pass read and the change, so a pass repeated after a failed write (by
//! this operator after a restart, or by a new leader) names the same notification again and
//! the outbox takes it once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::crd::{SkyhookStatus, Status};
use crate::schema;

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    BatchStarted,
    NodeErroring,
    RolloutStopped,
    GateHolding,
    RolloutComplete,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::BatchStarted => "BatchStarted",
            Kind::NodeErroring => "NodeErroring",
            Kind::RolloutStopped => "RolloutStopped",
            Kind::GateHolding => "GateHolding",
            Kind::RolloutComplete => "RolloutComplete",
        }
    }
}

/// One notification, as the outbox stores it and the sender sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    pub id: String,
    pub skyhook: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compartment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub message: String,
    /// When the pass saw it (RFC 3339).
    pub time: String,
}

/// Most nodes a `NodeErroring` message names (it counts the rest).
const NODES_NAMED: usize = 20;

/// The gate conditions whose appearance (or new reason) is a `GateHolding` notification.
const GATES: [&str; 4] = [
    schema::MAINTENANCE_WINDOW_CONDITION,
    schema::ALERT_GATE_CONDITION,
    schema::HEALTH_GATE_CONDITION,
    schema::SOAKING_CONDITION,
];

/// What the pass reads to name its notifications.
pub struct Source<'a> {
    pub skyhook: &'a str,
    pub uid: &'a str,
    /// Names the status the change is from (a digest of it).
    pub version: &'a str,
    pub time: String,
}

/// The notifications of the change from `before` to `after`.
pub fn changes(src: &Source, before: &SkyhookStatus, after: &SkyhookStatus) -> Vec<Notification> {
    let mut out = Vec::new();
    batches(src, before, after, &mut out);
    // The nodes that became erroring in one pass are one message (a thousand nodes failing
    // together must not be a thousand messages, nor outgrow the outbox).
    let erroring: Vec<&String> = after
        .node_status
        .iter()
        .filter(|(n, s)| {
            **s == Status::Erroring && before.node_status.get(*n) != Some(&Status::Erroring)
        })
        .map(|(n, _)| n)
        .collect();
    if let Some(first) = erroring.first() {
        let message = format!(
            "Skyhook {}: {} node(s) erroring: {}",
            src.skyhook,
            erroring.len(),
            crate::schema::short_list(&erroring, NODES_NAMED, ", ")
        );
        let node = (erroring.len() == 1).then_some(first.as_str());
        out.push(src.note(Kind::NodeErroring, first, None, node, message));
    }
    gates(src, before, after, &mut out);
    if after.status == Some(Status::Complete) && before.status != Some(Status::Complete) {
        let message = format!("Skyhook {}: the rollout is complete", src.skyhook);
        out.push(src.note(Kind::RolloutComplete, "", None, None, message));
    }
    out
}

impl Source<'_> {
    fn note(
        &self,
        kind: Kind,
        subject: &str,
        compartment: Option<&str>,
        node: Option<&str>,
        message: String,
    ) -> Notification {
        Notification {
            id: format!("{}/{}/{}/{subject}", self.uid, self.version, kind.as_str()),
            skyhook: self.skyhook.to_string(),
            kind,
            compartment: compartment.map(str::to_string),
            node: node.map(str::to_string),
            message,
            time: self.time.clone(),
        }
    }
}

/// Batches started and compartments stopped.
fn batches(
    src: &Source,
    before: &SkyhookStatus,
    after: &SkyhookStatus,
    out: &mut Vec<Notification>,
) {
    let of = |s: &SkyhookStatus| -> BTreeMap<String, (i64, bool)> {
        s.compartment_statuses
            .iter()
            .filter_map(|(c, st)| {
                let b = st.batch_state.as_ref()?;
                Some((c.clone(), (b.current_batch, b.should_stop)))
            })
            .collect()
    };
    let (was, now) = (of(before), of(after));
    for (c, (batch, stop)) in &now {
        let (old_batch, old_stop) = was.get(c).copied().unwrap_or((0, false));
        if *batch > old_batch && *batch > 0 {
            let message = format!(
                "Skyhook {}: compartment {c} started batch {batch}",
                src.skyhook
            );
            let subject = format!("{c}/{batch}");
            out.push(src.note(Kind::BatchStarted, &subject, Some(c), None, message));
        }
        if *stop && !old_stop {
            let message = format!(
                "Skyhook {}: compartment {c} stopped its rollout (the batch failure threshold was reached)",
                src.skyhook
            );
            out.push(src.note(Kind::RolloutStopped, c, Some(c), None, message));
        }
    }
}

/// A gate's condition appearing, or its reason changing.
fn gates(src: &Source, before: &SkyhookStatus, after: &SkyhookStatus, out: &mut Vec<Notification>) {
    for gate in GATES {
        let reason = |s: &SkyhookStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == gate)
                .map(|c| (c.reason.clone(), c.message.clone()))
        };
        if let Some((r, m)) = reason(after)
            && reason(before).map(|(r, _)| r) != Some(r.clone())
        {
            let message = format!("Skyhook {}: {r}: {m}", src.skyhook);
            let subject = format!("{gate}/{r}");
            out.push(src.note(Kind::GateHolding, &subject, None, None, message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BatchState, CompartmentStatus};

    fn with_batch(batch: i64, stop: bool) -> SkyhookStatus {
        let mut s = SkyhookStatus::default();
        s.compartment_statuses.insert(
            "__default__".into(),
            CompartmentStatus {
                batch_state: Some(BatchState {
                    current_batch: batch,
                    should_stop: stop,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        s
    }

    #[test]
    fn each_change_is_one_notification_with_a_repeatable_id() {
        let src = Source {
            skyhook: "sh",
            uid: "u1",
            version: "42",
            time: "2026-11-28T10:00:00Z".into(),
        };
        let mut after = with_batch(2, true);
        after.status = Some(Status::Complete);
        after.node_status.insert("n1".into(), Status::Erroring);
        let before = with_batch(1, false);
        let got = changes(&src, &before, &after);
        let kinds: Vec<Kind> = got.iter().map(|n| n.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::BatchStarted,
                Kind::RolloutStopped,
                Kind::NodeErroring,
                Kind::RolloutComplete
            ]
        );
        assert_eq!(got[0].id, "u1/42/BatchStarted/__default__/2");
        assert_eq!(
            got,
            changes(&src, &before, &after),
            "the same pass names the same ids"
        );
        assert!(
            changes(&src, &after, &after).is_empty(),
            "no change, no notification"
        );
        let mut many = SkyhookStatus::default();
        for i in 0..30 {
            many.node_status
                .insert(format!("n{i:02}"), Status::Erroring);
        }
        let got = changes(&src, &SkyhookStatus::default(), &many);
        assert_eq!(got.len(), 1, "one message for the nodes of one pass");
        assert!(got[0].message.contains("30 node(s)") && got[0].message.contains("and 10 more"));
        assert_eq!(got[0].node, None);
    }
}
