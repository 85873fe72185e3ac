//! The words of every admission rule. Each names the field it is about; fixtures under
//! tests/fixtures/invalid expect them verbatim, and the operator-side validation
//! ([`super::validate`]) uses the same words, so a user reads the same message whichever side
//! rejects an object.

/// Skyhook name too long.
pub const MSG_NAME_TOO_LONG: &str = "Skyhook name must be at most 53 characters";
/// Legacy budget with both fields.
pub const MSG_BUDGET_BOTH: &str =
    "interruptionBudget: both percent and count can not be set at the same time";
/// Policy and legacy budget together.
pub const MSG_POLICY_AND_BUDGET: &str =
    "deploymentPolicy and interruptionBudget are mutually exclusive";
/// Package name differs from its key.
pub const MSG_PACKAGE_NAME_KEY: &str = "package name must equal its key";
/// Package key is not a valid package name.
pub const MSG_PACKAGE_NAME_INVALID: &str = "package name is not valid";
/// Dependency on a package (or version) that is not in the Skyhook.
pub const MSG_DEPENDENCY_MISSING: &str =
    "dependsOn must name a package of this Skyhook with exactly that version";
/// Dependency without a version.
pub const MSG_DEPENDENCY_EMPTY_VERSION: &str = "dependsOn version is empty";
/// Dependency cycle (operator only).
pub const MSG_DEPENDENCY_CYCLE: &str = "dependsOn forms a cycle";
/// Version is not semver.
pub const MSG_VERSION_INVALID: &str = "version must be a valid semantic version";
/// Version too long (operator side; the API server reports its own maxLength error).
pub const MSG_VERSION_TOO_LONG: &str = "version must be at most 63 characters";
/// configInterrupts key that is not a configMap key.
pub const MSG_CONFIG_INTERRUPT_KEY: &str =
    "configInterrupts key must be a configMap key or a glob containing '*'";
/// configInterrupts glob matching nothing (operator only).
pub const MSG_CONFIG_INTERRUPT_GLOB: &str = "does not match any configMap key";
/// Resources partially set.
pub const MSG_RESOURCES_ALL_OR_NONE: &str = "resources: if any resource override is set, all of cpuRequest, cpuLimit, memoryRequest, memoryLimit must be set";
/// Negative resources.
pub const MSG_RESOURCES_POSITIVE: &str = "resources: all resource values must be positive";
/// CPU limit below request.
pub const MSG_RESOURCES_CPU: &str = "resources: cpuLimit must be >= cpuRequest";
/// Memory limit below request.
pub const MSG_RESOURCES_MEMORY: &str = "resources: memoryLimit must be >= memoryRequest";
/// gracefulShutdown not a Go duration, or over [`MAX_GRACEFUL_SHUTDOWN`] (the Go operator could
/// not even decode a value that is not a duration or is past Go's 2562047h).
pub const MSG_GRACEFUL_SHUTDOWN: &str =
    "gracefulShutdown must be a Go duration such as 30s or 1m30s, at most 24h";
/// stageTimeout not a Go duration within [`MAX_STAGE_TIMEOUT`].
pub const MSG_STAGE_TIMEOUT: &str =
    "stageTimeout must be a Go duration such as 30m or 2h, at most 168h (0 for no limit)";
/// drainConfig.timeout not a Go duration within [`MAX_STAGE_TIMEOUT`].
pub const MSG_DRAIN_TIMEOUT: &str =
    "drainConfig.timeout must be a Go duration such as 10m, at most 168h (0 for no limit)";
/// drainConfig.gracePeriod not a Go duration within [`MAX_GRACEFUL_SHUTDOWN`].
pub const MSG_DRAIN_GRACE_PERIOD: &str =
    "drainConfig.gracePeriod must be a Go duration such as 30s, at most 24h";
/// uninstall.apply without uninstall.enabled (upstream's webhook words).
pub const MSG_UNINSTALL_APPLY: &str = "uninstall.apply requires uninstall.enabled to be true";
/// A maintenance window's time zone unknown (this project's extension).
pub const MSG_WINDOW_TIME_ZONE: &str =
    "must be a time zone of the IANA database, such as Europe/Berlin or UTC";
/// A maintenance window's start or end not HH:MM.
pub const MSG_WINDOW_TIME: &str = "must be a time of day HH:MM (24-hour), such as 22:00";
/// A window that is neither start and end nor cron and duration.
pub const MSG_WINDOW_SHAPE: &str =
    "a window has either start and end (and optional days) or cron and duration";
/// A cron window's duration.
pub const MSG_WINDOW_DURATION: &str = "must be a Go duration such as 4h, above 0 and at most 168h";
/// A cron expression without five fields.
pub const MSG_WINDOW_CRON: &str = "must be a cron expression of five fields (minute hour day-of-month month day-of-week), such as 0 22 * * 1-5";
/// A soak not a Go duration within a week.
pub const MSG_SOAK: &str = "must be a Go duration such as 10m, at most 168h";
/// A health gate's timeout.
pub const MSG_HEALTH_TIMEOUT: &str = "must be a Go duration such as 10m, at most 168h";
/// A health gate's pod selector that selects nothing.
pub const MSG_HEALTH_SELECTOR: &str = "must have matchLabels or matchExpressions (an empty selector would wait for every pod of the node)";
/// A health gate's node condition status.
pub const MSG_HEALTH_CONDITION_STATUS: &str = "must be True, False or Unknown";
/// Selector requirement values inconsistent with the operator.
pub const MSG_SELECTOR_VALUES: &str = "matchExpressions: values must be non-empty for operators In and NotIn and empty for Exists and DoesNotExist";
/// Selector that does not parse (operator side).
pub const MSG_SELECTOR_INVALID: &str = "is not a valid label selector";
/// configMap over what one ConfigMap can carry (after `spec.packages[<name>].configMap`).
pub const MSG_CONFIG_MAP_TOO_LARGE: &str =
    "holds more bytes of keys and values than a ConfigMap can carry";
/// Numeric bound (operator side; the API server reports its own error).
pub const MSG_OUT_OF_RANGE: &str = "is out of range";

/// DeploymentPolicy default budget unset.
pub const MSG_DEFAULT_BUDGET_NONE: &str =
    "default budget: exactly one of percent or count must be set";
/// DeploymentPolicy default budget with both fields.
pub const MSG_DEFAULT_BUDGET_BOTH: &str =
    "default budget: percent and count are mutually exclusive";
/// DeploymentPolicy default strategy not exactly one type.
pub const MSG_DEFAULT_STRATEGY: &str =
    "default strategy: exactly one of fixed, linear, or exponential must be set";
/// Reserved compartment name.
pub const MSG_COMPARTMENT_RESERVED: &str =
    "compartment name \"__default__\" is reserved and cannot be used";
/// Duplicate compartment name (after `compartment name "<n>"`).
pub const MSG_COMPARTMENT_NOT_UNIQUE: &str = "is not unique";
/// Identical compartment selectors.
pub const MSG_COMPARTMENT_IDENTICAL_SELECTOR: &str = "identical selector";
/// Compartment budget unset (after `compartment "<n>" `).
pub const MSG_COMPARTMENT_BUDGET_NONE: &str = "budget: exactly one of percent or count must be set";
/// Compartment budget with both fields (after `compartment "<n>" `).
pub const MSG_COMPARTMENT_BUDGET_BOTH: &str = "budget: percent and count are mutually exclusive";
/// Compartment strategy with several types (after `compartment "<n>" `).
pub const MSG_COMPARTMENT_STRATEGY: &str =
    "strategy: at most one of fixed, linear, or exponential may be set";
