//! How the rollout gates of issue 38 show on the Skyhook: conditions and Events.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::actions::Note;
use super::compartments::Compartment;
use super::condition::present_while;
use crate::crd::SkyhookStatus;
use crate::schema;

/// `skyhook.nvidia.com/Soaking` while compartments soak (Normal Event when it begins), and a
/// Warning `SoakFailed` Event for each compartment whose soaking batch failed in this pass.
pub fn soak(
    list: &mut Vec<Condition>,
    prior: &SkyhookStatus,
    compartments: &[Compartment],
    events: &mut Vec<Note>,
    generation: i64,
    now: Timestamp,
) {
    let soaking: Vec<(String, String)> = compartments
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.soaking?.to_string())))
        .collect();
    let present = (!soaking.is_empty()).then(|| {
        let message = schema::soaking_message(&soaking);
        (schema::SOAKING_REASON, message)
    });
    let was = prior
        .conditions
        .iter()
        .any(|c| c.type_ == schema::SOAKING_CONDITION);
    if let (Some((reason, message)), false) = (&present, was) {
        events.push(Note::skyhook(reason, message.clone()));
    }
    present_while(list, schema::SOAKING_CONDITION, present, generation, now);
    for c in compartments.iter().filter(|c| !c.soak_failed.is_empty()) {
        let message = schema::soak_failed_message(&c.name, &c.soak_failed);
        events.push(Note::skyhook(schema::SOAK_FAILED_REASON, message).warning());
    }
}

/// `skyhook.nvidia.com/HealthGate` while nodes wait for the health gate or failed it: reason
/// `HealthGateFailed` when any failed, else `HealthGateHolding`.
pub fn health(
    list: &mut Vec<Condition>,
    failed: &[(String, String)],
    holding: &[(String, String)],
    generation: i64,
    now: Timestamp,
) {
    let present = (!failed.is_empty() || !holding.is_empty()).then(|| {
        let reason = if failed.is_empty() {
            schema::HEALTH_GATE_HOLDING_REASON
        } else {
            schema::HEALTH_GATE_FAILED_REASON
        };
        (reason, schema::health_gate_message(failed, holding))
    });
    present_while(
        list,
        schema::HEALTH_GATE_CONDITION,
        present,
        generation,
        now,
    );
}

/// `skyhook.nvidia.com/AlertGate` while the policy's alert gate holds (or cannot read its
/// source), with an Event when that begins (a Warning for an unreachable source).
pub fn alerts(
    list: &mut Vec<Condition>,
    prior: &SkyhookStatus,
    alert: Option<&(&crate::crd::AlertGate, super::alerts::AlertHold)>,
    events: &mut Vec<Note>,
    generation: i64,
    now: Timestamp,
) {
    let present = alert.and_then(|(gate, hold)| super::alerts::condition(gate, hold));
    let before = prior
        .conditions
        .iter()
        .find(|c| c.type_ == schema::ALERT_GATE_CONDITION)
        .map(|c| c.reason.as_str());
    if let Some((reason, message)) = &present
        && before != Some(*reason)
    {
        let note = Note::skyhook(reason, message.clone());
        events.push(if *reason == schema::ALERT_SOURCE_UNREACHABLE_REASON {
            note.warning()
        } else {
            note
        });
    }
    // An unreachable source the gate proceeds past is said, with status False: not holding.
    let holding = alert.is_some_and(|(_, hold)| hold.holds());
    match present {
        Some((reason, message)) if !holding => {
            super::condition::set_condition(
                list,
                schema::ALERT_GATE_CONDITION,
                false,
                reason,
                message,
                generation,
                now,
            );
        }
        present => present_while(list, schema::ALERT_GATE_CONDITION, present, generation, now),
    }
}
