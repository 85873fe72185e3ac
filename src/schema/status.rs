//! Per-node / per-Skyhook `Status` and per-package `State`, with their exact wire strings.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use super::SchemaError;

/// Status of a Skyhook on a node (`status_<sh>` annotation/label) and of a Skyhook as a whole
/// (`.status.status`).
///
/// Deserialisation is lenient like Go's `GetStatus`: an unrecognised string becomes `Unknown`,
/// so one bad value cannot make a whole Skyhook object unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum Status {
    #[serde(rename = "complete")]
    Complete,
    #[serde(rename = "blocked")]
    Blocked,
    #[serde(rename = "waiting")]
    Waiting,
    #[serde(rename = "disabled")]
    Disabled,
    #[serde(rename = "paused")]
    Paused,
    #[serde(rename = "in_progress")]
    InProgress,
    #[serde(rename = "erroring")]
    Erroring,
    #[default]
    #[serde(rename = "unknown", other)]
    Unknown,
}

impl Status {
    /// Every status, in the order of the reference's metrics and cheat-sheet.
    pub const ALL: [Status; 8] = [
        Status::Complete,
        Status::Blocked,
        Status::Waiting,
        Status::Disabled,
        Status::Paused,
        Status::InProgress,
        Status::Erroring,
        Status::Unknown,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Complete => "complete",
            Status::Blocked => "blocked",
            Status::Waiting => "waiting",
            Status::Disabled => "disabled",
            Status::Paused => "paused",
            Status::InProgress => "in_progress",
            Status::Erroring => "erroring",
            Status::Unknown => "unknown",
        }
    }

    /// Reads a node's status annotation the way the reference does: missing or unrecognised
    /// values are `Unknown`.
    pub fn from_annotation(value: Option<&str>) -> Status {
        value.map_or(Status::Unknown, Status::parse_lenient)
    }

    /// Go's `GetStatus`: an unrecognised string is `Unknown`.
    pub fn parse_lenient(value: &str) -> Status {
        value.parse().unwrap_or(Status::Unknown)
    }
}

impl FromStr for Status {
    type Err = SchemaError;

    /// Strict: only the eight wire strings. Use `parse_lenient` for the reference reading.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| SchemaError::UnknownValue {
                kind: "status",
                value: s.to_owned(),
            })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// State of a package at its current stage on a node.
///
/// Deserialisation maps unrecognised strings to `Unknown` (the reference only ever accepts that
/// value, never writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum State {
    #[serde(rename = "complete")]
    Complete,
    #[serde(rename = "in_progress")]
    InProgress,
    #[serde(rename = "skipped")]
    Skipped,
    #[serde(rename = "erroring")]
    Erroring,
    #[default]
    #[serde(rename = "unknown", other)]
    Unknown,
}

impl State {
    /// Every state, in the order of the reference's metrics.
    pub const ALL: [State; 5] = [
        State::Complete,
        State::InProgress,
        State::Skipped,
        State::Erroring,
        State::Unknown,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            State::Complete => "complete",
            State::InProgress => "in_progress",
            State::Skipped => "skipped",
            State::Erroring => "erroring",
            State::Unknown => "unknown",
        }
    }
}

impl FromStr for State {
    type Err = SchemaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| SchemaError::UnknownValue {
                kind: "state",
                value: s.to_owned(),
            })
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_wire_strings_roundtrip() {
        let wire: Vec<_> = Status::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            wire,
            [
                "complete",
                "blocked",
                "waiting",
                "disabled",
                "paused",
                "in_progress",
                "erroring",
                "unknown"
            ]
        );
        for s in Status::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), s);
            assert_eq!(s.as_str().parse::<Status>().unwrap(), s);
        }
    }

    #[test]
    fn status_lenient() {
        assert_eq!(Status::from_annotation(None), Status::Unknown);
        assert_eq!(Status::from_annotation(Some("bogus")), Status::Unknown);
        assert_eq!(Status::from_annotation(Some("complete")), Status::Complete);
        assert_eq!(Status::parse_lenient("paused"), Status::Paused);
        assert_eq!(Status::parse_lenient(""), Status::Unknown);
        assert_eq!(
            serde_json::from_str::<Status>("\"bogus\"").unwrap(),
            Status::Unknown
        );
        assert!("bogus".parse::<Status>().is_err());
        assert!("Complete".parse::<Status>().is_err());
    }

    #[test]
    fn state_wire_strings_roundtrip() {
        let wire: Vec<_> = State::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            wire,
            ["complete", "in_progress", "skipped", "erroring", "unknown"]
        );
        for s in State::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<State>(&json).unwrap(), s);
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
        }
        assert_eq!(
            serde_json::from_str::<State>("\"weird\"").unwrap(),
            State::Unknown
        );
        assert!("weird".parse::<State>().is_err());
    }
}
