//! Setting one Skyhook condition: its time moves only when its status flips, so an unchanged
//! world writes nothing.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub fn set_condition(
    list: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: i64,
    now: Timestamp,
) {
    let status = if status { "True" } else { "False" }.to_string();
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = Time(now);
        }
        c.status = status;
        c.reason = reason.to_string();
        c.message = message;
        c.observed_generation = Some(generation);
    } else {
        list.push(Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message,
            observed_generation: Some(generation),
            last_transition_time: Time(now),
        });
    }
}

/// Condition `kind`, `True` with `reason` and `message` while `present` says so, and removed
/// otherwise (upstream's conditions that exist only while they hold).
pub fn present_while(
    list: &mut Vec<Condition>,
    kind: &str,
    present: Option<(&str, String)>,
    generation: i64,
    now: Timestamp,
) {
    match present {
        Some((reason, message)) => {
            set_condition(list, kind, true, reason, message, generation, now)
        }
        None => list.retain(|c| c.type_ != kind),
    }
}

/// Condition `kind`, `True` with `reason` and `message` while `holding` says so; once it has
/// been set, `False` with `clear` afterwards. A Skyhook that never had it does not carry it.
pub fn kept_once_set(
    list: &mut Vec<Condition>,
    kind: &str,
    holding: Option<(&str, String)>,
    clear: (&str, &str),
    generation: i64,
    now: Timestamp,
) {
    let known = list.iter().any(|c| c.type_ == kind);
    match holding {
        Some((reason, message)) => {
            set_condition(list, kind, true, reason, message, generation, now)
        }
        None if known => {
            let (reason, message) = clear;
            set_condition(
                list,
                kind,
                false,
                reason,
                message.to_string(),
                generation,
                now,
            )
        }
        None => {}
    }
}
