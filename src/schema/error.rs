//! The one error type of the schema module.

/// Everything that can go wrong while parsing or building a contract value.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A JSON document of the contract (node state, package annotation, …) did not parse.
    #[error("invalid {what} JSON: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A wire string that must be one of a closed set of values was something else.
    #[error("unknown {kind} {value:?}")]
    UnknownValue { kind: &'static str, value: String },
    /// Job attempt indices are capped so that `<name>-<attempt>` stays within 63 characters.
    #[error("job attempt {0} is out of range (0..=999)")]
    AttemptOutOfRange(u32),
    /// A `SKYHOOK_RESOURCE_ID` must split into exactly three parts on `_`, as the agent requires.
    #[error("invalid SKYHOOK_RESOURCE_ID {0:?}: expected <resource id>_<package>_<version>")]
    InvalidAgentResourceId(String),
    /// Same condition and wording as Go's `filepath.ErrBadPattern`.
    #[error("syntax error in pattern")]
    BadGlobPattern,
    /// A kubectl-style taint spec (`key[=value]:Effect`) was rejected.
    #[error("invalid taint spec: {spec}{}", reason.as_deref().map(|r| format!(", {r}")).unwrap_or_default())]
    InvalidTaint {
        spec: String,
        reason: Option<String>,
    },
    /// Wording of kubectl's `validateTaintEffect`.
    #[error("invalid taint effect: {0}, unsupported taint effect")]
    InvalidTaintEffect(String),
    /// A node pattern looked like a regex but did not compile.
    #[error("invalid regex pattern {pattern:?}: {message}")]
    InvalidNodePattern { pattern: String, message: String },
}
