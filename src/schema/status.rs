//! Per-node / per-Skyhook `Status` and per-package `State`, with their exact wire strings.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::wire_enum::wire_enum;

wire_enum! {
    // Declared in the order of the reference's metrics and cheat-sheet. `FromStr` is strict;
    // `parse_lenient` is the reference's reading.
    /// Status of a Skyhook on a node (`status_<sh>` annotation/label) and of a Skyhook as a whole
    /// (`.status.status`).
    ///
    /// Deserialisation is lenient like Go's `GetStatus`: an unrecognised string becomes `Unknown`,
    /// so one bad value cannot make a whole Skyhook object unreadable.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
    pub serde enum Status {
        Complete = "complete",
        Blocked = "blocked",
        Waiting = "waiting",
        Disabled = "disabled",
        Paused = "paused",
        InProgress = "in_progress",
        Erroring = "erroring",
        #[default]
        #[serde(other)]
        Unknown = "unknown",
    }
    kind = "status";
}

impl Status {
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

wire_enum! {
    // Declared in the order of the reference's metrics.
    /// State of a package at its current stage on a node.
    ///
    /// Deserialisation maps unrecognised strings to `Unknown` (the reference only ever accepts that
    /// value, never writes it).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
    pub serde enum State {
        Complete = "complete",
        InProgress = "in_progress",
        Skipped = "skipped",
        Erroring = "erroring",
        #[default]
        #[serde(other)]
        Unknown = "unknown",
    }
    kind = "state";
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
