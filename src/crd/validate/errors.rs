//! A validation problem, and the list a validation collects.

use crate::crd::messages::MSG_OUT_OF_RANGE;

/// One problem with an object: where it is and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// Path of the offending field, e.g. `spec.packages[tuning].version`.
    pub field: String,
    /// What is wrong (naming the field) and how to fix it.
    pub message: String,
}

impl ValidationError {
    pub(super) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Joins errors into one line each, for logs, events and conditions.
pub fn format_errors(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Default)]
pub(super) struct Errors(Vec<ValidationError>);

impl Errors {
    pub(super) fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(ValidationError::new(field, message));
    }

    pub(super) fn finish(self) -> Result<(), Vec<ValidationError>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }

    pub(super) fn range(&mut self, field: &str, value: Option<i64>, min: i64, max: Option<i64>) {
        let Some(v) = value else { return };
        if v < min || max.is_some_and(|m| v > m) {
            let bounds = match max {
                Some(m) => format!("between {min} and {m}"),
                None => format!("at least {min}"),
            };
            self.push(
                field,
                format!("{field} {MSG_OUT_OF_RANGE}: {v}, it must be {bounds}"),
            );
        }
    }
}
