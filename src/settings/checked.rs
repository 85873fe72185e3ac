//! Checks shared by the settings of the operator and of its servers.

use std::time::Duration;

use crate::schema::parse_go_duration;

/// A duration setting; one that is invalid or below `min` reads as `min`, and is reported.
pub(super) fn checked_duration(
    name: &str,
    value: &str,
    min: Duration,
    errs: &mut Vec<String>,
) -> Duration {
    match parse_go_duration(value) {
        Ok(d) if d >= min => d,
        Ok(_) => {
            errs.push(format!("{name} must be at least {min:?}, got {value:?}"));
            min
        }
        Err(e) => {
            errs.push(format!("{name}: {e}"));
            min
        }
    }
}
