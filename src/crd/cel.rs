//! The building blocks of the CRDs' admission rules: a CEL rule, a schema patch, and the
//! bounds of Go duration fields, shared by the v0.13 contract's rules ([`super::admission`])
//! and the later fields' ([`super::later_rules`]).

/// Longest `gracefulShutdown`. The value becomes the package pods' `terminationGracePeriodSeconds`,
/// for which neither Kubernetes nor the reference sets a ceiling (§1.3). While a stage pod is
/// being stopped (drain, deadline, failed Job) its node stays busy and its package stays
/// `in_progress`, so a grace period of more than a day is a mistake; a day also stays far inside
/// every duration arithmetic (Go's own ceiling is 2562047h).
pub const MAX_GRACEFUL_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// [`MAX_GRACEFUL_SHUTDOWN`] in Go syntax, as CEL's `duration()` reads it.
pub const MAX_GRACEFUL_SHUTDOWN_TEXT: &str = "24h";
/// Longest `stageTimeout` and `drainConfig.timeout`: a week. A longer bound is a mistake, and
/// stays within [`GO_DURATION_PATTERN`]'s reach.
pub const MAX_STAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(168 * 3600);
/// [`MAX_STAGE_TIMEOUT`] in Go syntax.
pub const MAX_STAGE_TIMEOUT_TEXT: &str = "168h";
/// Characters of a Go duration field (`gracefulShutdown` (`23h59m59.999999999s` has 19).
pub const MAX_GO_DURATION_LENGTH: usize = 20;

/// Go `time.ParseDuration` syntax as [`crate::schema::parse_go_duration`] reads it, with at most
/// 3 significant integer digits for hours, 5 for minutes, 6 for seconds, 9 for milliseconds, 12
/// for microseconds and 15 for nanoseconds: one digit more than 24h needs, so a value the
/// pattern refuses for its digits is over [`MAX_GRACEFUL_SHUTDOWN`] anyway. Each accepted
/// component is under 1700h, so within [`MAX_GO_DURATION_LENGTH`] the sum stays far below
/// Go's ceiling: CEL's `duration()`, which fails past it, only ever sees values it can represent.
/// Written with `[.]`/`[+]` so it needs no escaping in CEL string literals; `µs` is the micro
/// sign U+00B5, the one `parse_go_duration` knows.
pub const GO_DURATION_PATTERN: &str = concat!(
    "^[+]?(0|(",
    "0*([0-9]{1,3}([.][0-9]*)?|[.][0-9]+)h|",
    "0*([0-9]{1,5}([.][0-9]*)?|[.][0-9]+)m|",
    "0*([0-9]{1,6}([.][0-9]*)?|[.][0-9]+)s|",
    "0*([0-9]{1,9}([.][0-9]*)?|[.][0-9]+)ms|",
    "0*([0-9]{1,12}([.][0-9]*)?|[.][0-9]+)(us|\u{b5}s)|",
    "0*([0-9]{1,15}([.][0-9]*)?|[.][0-9]+)ns",
    ")+)$"
);

/// One CEL rule and where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CelRule {
    /// Schema path of the node that carries the rule.
    pub path: &'static str,
    /// The CEL expression (`self` is the node's value).
    pub rule: String,
    /// Static message (also the fallback when `message_expression` fails).
    pub message: String,
    /// Message naming the offending key or item, evaluated only on failure.
    pub message_expression: Option<String>,
}

/// A schema keyword added (or set) at a path.
#[derive(Clone, Debug, PartialEq)]
pub struct SchemaPatch {
    /// Schema path.
    pub path: String,
    /// Keyword (`maxProperties`, `enum`, `default`, ...).
    pub keyword: &'static str,
    /// Value.
    pub value: serde_json::Value,
}

pub(super) fn rule(
    path: &'static str,
    rule: impl Into<String>,
    message: impl Into<String>,
) -> CelRule {
    CelRule {
        path,
        rule: rule.into(),
        message: message.into(),
        message_expression: None,
    }
}

pub(super) fn patch(
    path: impl Into<String>,
    keyword: &'static str,
    value: serde_json::Value,
) -> SchemaPatch {
    SchemaPatch {
        path: path.into(),
        keyword,
        value,
    }
}

/// A Go duration of at most `max`. The pattern first: `&&` yields false without an error when
/// it does not match, so `duration()` never sees a value it cannot parse (see
/// [`GO_DURATION_PATTERN`]).
pub(super) fn duration_rule(path: &'static str, max: &str, message: String) -> CelRule {
    rule(
        path,
        format!("self.matches('{GO_DURATION_PATTERN}') && duration(self) <= duration('{max}')"),
        message,
    )
}
