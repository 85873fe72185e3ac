//! Admission rules enforced by the API server itself (this project runs no webhook): CEL
//! `x-kubernetes-validations` and the schema bounds they need to stay within the CEL cost budget.
//!
//! [`crate::crd::generate`] places every rule and bound at its schema path. The message texts are
//! shared with [`crate::crd::validate`], which re-checks the same rules in the operator (objects
//! stored before these rules existed are not re-validated by the API server), so a user sees the
//! same words whichever side rejects an object.
//!
//! Schema paths are dot-separated property names, with `*` for a map's values
//! (`additionalProperties`) and `[]` for a list's items.

/// Longest Skyhook name: node annotation keys `skyhook.nvidia.com/nodeState_<name>` have a
/// 63-character name part.
pub const MAX_SKYHOOK_NAME: usize = 53;

/// Package names (and map keys), as in the upstream CRD.
pub const PACKAGE_NAME_PATTERN: &str = "^[a-z][-a-z0-9]{0,41}[a-z]$";

/// Go `golang.org/x/mod/semver` syntax with an optional leading `v` (the Go operator prefixes
/// one when absent). Written with `[.]`/`[+]` so it needs no escaping in CEL string literals.
pub const SEMVER_PATTERN: &str = concat!(
    "^v?(0|[1-9][0-9]*)",
    "([.](0|[1-9][0-9]*)",
    "([.](0|[1-9][0-9]*)",
    "(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)([.](0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?",
    "([+][0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?",
    ")?)?$"
);

/// Kubernetes quantity syntax (what controller-gen puts on every `resource.Quantity`).
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

// Bounds added for the CEL cost estimator. Without them the API server assumes a map or list
// could fill a whole 3 MiB request and refuses the rules. Each is far above real use.

/// Packages per Skyhook (rules iterate the package map and, for dependencies, pairs of it).
pub const MAX_PACKAGES: i64 = 100;
/// `dependsOn` entries per package: a package cannot depend on more packages than exist.
pub const MAX_DEPENDS_ON: i64 = MAX_PACKAGES;
/// `configInterrupts` entries per package.
pub const MAX_CONFIG_INTERRUPTS: i64 = 128;
/// Version length: the version ends up in pod label values (`<pkg>-<version>`), which are
/// limited to 63 characters anyway.
pub const MAX_VERSION_LENGTH: i64 = 63;
/// Image length: Docker caps repository names at 255 characters; this leaves room for a tag or
/// digest that a user may have left on the image.
pub const MAX_IMAGE_LENGTH: i64 = 512;
/// Length of a resource quantity string (`quantity()` parsing cost grows with it).
pub const MAX_QUANTITY_LENGTH: i64 = 64;
/// Compartments per DeploymentPolicy (uniqueness rules compare every pair).
pub const MAX_COMPARTMENTS: i64 = 100;
/// Compartment name length (names are compared pairwise).
pub const MAX_COMPARTMENT_NAME_LENGTH: i64 = 253;
/// `matchExpressions` per compartment selector (checked per compartment).
pub const MAX_COMPARTMENT_MATCH_EXPRESSIONS: i64 = 64;
/// The most bytes of keys and values a package's `configMap` may hold: the API server's 1 MiB
/// ConfigMap limit, less room for the object's metadata and labels.
pub const MAX_CONFIG_MAP_BYTES: usize = 1_000_000;
/// Keys of a package's `configMap` (the size rule sums over them).
pub const MAX_CONFIG_MAP_KEYS: i64 = 4096;

/// Largest value of a status counter. Status is written by the operator, but anyone who may
/// patch the status subresource can write any number; the bound keeps hand-patched values in the
/// range the operator's saturating arithmetic stops at, so its own next status write is never
/// refused. Go's `int32` ceiling: no count of nodes or batches comes near it.
pub const MAX_STATUS_COUNT: i64 = 2_147_483_647;

/// Label selector operators accepted by `metav1.LabelSelectorAsSelector`.
pub const SELECTOR_OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

// The messages, shared with the operator-side validation.
pub use super::cel::{
    CelRule, GO_DURATION_PATTERN, MAX_GO_DURATION_LENGTH, MAX_GRACEFUL_SHUTDOWN,
    MAX_GRACEFUL_SHUTDOWN_TEXT, MAX_STAGE_TIMEOUT, MAX_STAGE_TIMEOUT_TEXT, SchemaPatch,
};
use super::cel::{patch, rule};
use super::later_rules;
pub use super::messages::*;

fn rule_with(
    path: &'static str,
    expr: impl Into<String>,
    message: impl Into<String>,
    message_expression: impl Into<String>,
) -> CelRule {
    CelRule {
        message_expression: Some(message_expression.into()),
        ..rule(path, expr, message)
    }
}

/// CEL for "this int-or-string quantity field is set to a non-zero value" (Go treats a zero
/// quantity as unset).
// `compareTo` rather than `sign`: the API server declares `sign` as a global function although
// its documentation shows it as a method, so avoid depending on either spelling.
fn quantity_set(field: &str) -> String {
    format!("(has(self.{field}) && quantity(string(self.{field})).compareTo(quantity('0')) != 0)")
}

fn quantity_not_negative(field: &str) -> String {
    format!("(!has(self.{field}) || quantity(string(self.{field})).compareTo(quantity('0')) >= 0)")
}

fn limit_ge_request(limit: &str, request: &str) -> String {
    format!(
        "!({} && {}) || quantity(string(self.{limit})).compareTo(quantity(string(self.{request}))) >= 0",
        quantity_set(limit),
        quantity_set(request)
    )
}

/// Values of a selector requirement must agree with its operator.
fn selector_values_rule(path: &'static str) -> CelRule {
    rule(
        path,
        "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)",
        MSG_SELECTOR_VALUES,
    )
}

/// Every CEL rule of the Skyhook CRD.
pub fn skyhook_rules() -> Vec<CelRule> {
    let mut rules = skyhook_object_rules();
    rules.extend(package_map_rules());
    rules.extend(package_rules());
    rules.extend(package_resources_rules());
    rules.extend(later_rules::drain_config_rules());
    rules.extend(later_rules::health_gate_rules());
    rules.push(selector_values_rule(
        "spec.nodeSelectors.matchExpressions.[]",
    ));
    rules.push(selector_values_rule(
        "spec.podNonInterruptLabels.matchExpressions.[]",
    ));
    rules
}

/// Rules on the Skyhook as a whole: its name and how its rollout is limited.
fn skyhook_object_rules() -> Vec<CelRule> {
    vec![
        rule(
            "",
            format!("!has(self.metadata.name) || size(self.metadata.name) <= {MAX_SKYHOOK_NAME}"),
            format!(
                "metadata.name: {MSG_NAME_TOO_LONG} (it is part of node annotation keys, whose name part is limited to 63 characters)"
            ),
        ),
        rule(
            "spec",
            "!(has(self.deploymentPolicy) && self.deploymentPolicy != '' && has(self.interruptionBudget) && (has(self.interruptionBudget.percent) || has(self.interruptionBudget.count)))",
            format!(
                "spec.deploymentPolicy: {MSG_POLICY_AND_BUDGET}, remove interruptionBudget.percent and interruptionBudget.count when a deploymentPolicy is set"
            ),
        ),
        rule(
            "spec.interruptionBudget",
            "!(has(self.percent) && has(self.count))",
            format!("spec.{MSG_BUDGET_BOTH}, set only one of them"),
        ),
    ]
}

/// Rules on the package map: keys, names and dependencies between packages.
fn package_map_rules() -> Vec<CelRule> {
    vec![
        rule(
            "spec.packages",
            format!("self.all(k, k.matches('{PACKAGE_NAME_PATTERN}'))"),
            format!(
                "spec.packages: {MSG_PACKAGE_NAME_INVALID}, keys must match {PACKAGE_NAME_PATTERN}"
            ),
        ),
        rule(
            "spec.packages",
            "self.all(k, !has(self[k].name) || self[k].name == k)",
            format!(
                "spec.packages: {MSG_PACKAGE_NAME_KEY}, remove name from the package or set it to the key"
            ),
        ),
        rule(
            "spec.packages",
            "self.all(k, !has(self[k].dependsOn) || self[k].dependsOn.all(d, self[k].dependsOn[d] == '' || (d in self && self[d].version == self[k].dependsOn[d])))",
            format!("spec.packages: {MSG_DEPENDENCY_MISSING}"),
        ),
    ]
}

/// Rules on the fields of one package (each runs once per package, within the bounds of
/// [`skyhook_tightenings`]).
fn package_rules() -> Vec<CelRule> {
    vec![
        rule(
            "spec.packages.*",
            "!has(self.configInterrupts) || self.configInterrupts.all(k, k.contains('*') || (has(self.configMap) && k in self.configMap))",
            format!("configInterrupts: {MSG_CONFIG_INTERRUPT_KEY}"),
        ),
        rule(
            "spec.packages.*.dependsOn",
            "self.all(k, self[k] != '')",
            format!(
                "dependsOn: {MSG_DEPENDENCY_EMPTY_VERSION}, set the exact version of the dependency"
            ),
        ),
        rule(
            "spec.packages.*.version",
            format!("self.matches('{SEMVER_PATTERN}')"),
            format!("version: {MSG_VERSION_INVALID} such as 1.2.3 (a leading v is allowed)"),
        ),
        // The API server's error path names the package (`spec.packages[<key>]`). CEL counts
        // characters: converting to bytes costs more than the CRD's rule budget allows, so the
        // operator's validation counts the bytes (multi-byte text under this bound).
        rule(
            "spec.packages.*",
            format!(
                "!has(self.configMap) || self.configMap.map(k, size(k) + size(self.configMap[k])).sum() <= {MAX_CONFIG_MAP_BYTES}"
            ),
            format!(
                "configMap: {MSG_CONFIG_MAP_TOO_LARGE} ({MAX_CONFIG_MAP_BYTES} bytes); move large files into the package image"
            ),
        ),
        later_rules::duration_rule(
            "spec.packages.*.gracefulShutdown",
            MAX_GRACEFUL_SHUTDOWN_TEXT,
            format!(
                "gracefulShutdown: {MSG_GRACEFUL_SHUTDOWN} (it becomes the pods' terminationGracePeriodSeconds)"
            ),
        ),
        later_rules::duration_rule(
            "spec.packages.*.stageTimeout",
            MAX_STAGE_TIMEOUT_TEXT,
            format!("stageTimeout: {MSG_STAGE_TIMEOUT}"),
        ),
        rule(
            "spec.packages.*.uninstall",
            "!self.apply || self.enabled",
            format!("uninstall: {MSG_UNINSTALL_APPLY}"),
        ),
    ]
}

/// Rules on a package's resource overrides: all or none, not negative, limits over requests.
fn package_resources_rules() -> Vec<CelRule> {
    let quantities = ["cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit"];
    vec![
        rule(
            "spec.packages.*.resources",
            format!(
                "[{}].filter(x, x).size() in [0, 4]",
                quantities.map(quantity_set).join(", ")
            ),
            MSG_RESOURCES_ALL_OR_NONE,
        ),
        rule(
            "spec.packages.*.resources",
            quantities.map(quantity_not_negative).join(" && "),
            MSG_RESOURCES_POSITIVE,
        ),
        rule(
            "spec.packages.*.resources",
            limit_ge_request("cpuLimit", "cpuRequest"),
            MSG_RESOURCES_CPU,
        ),
        rule(
            "spec.packages.*.resources",
            limit_ge_request("memoryLimit", "memoryRequest"),
            MSG_RESOURCES_MEMORY,
        ),
    ]
}

fn strategy_count(expr: &str) -> String {
    format!(
        "(has({expr}.fixed) ? 1 : 0) + (has({expr}.linear) ? 1 : 0) + (has({expr}.exponential) ? 1 : 0)"
    )
}

/// Every CEL rule of the DeploymentPolicy CRD.
pub fn deployment_policy_rules() -> Vec<CelRule> {
    let mut rules = policy_rules();
    rules.extend(later_rules::window_rules());
    rules.extend(later_rules::soak_rules());
    rules.extend(later_rules::alert_gate_rules());
    rules
}

fn policy_rules() -> Vec<CelRule> {
    vec![
        rule(
            "spec.default",
            "has(self.budget) && (has(self.budget.percent) || has(self.budget.count))",
            format!("spec.default.budget: {MSG_DEFAULT_BUDGET_NONE}"),
        ),
        rule(
            "spec.default",
            "!has(self.budget) || !(has(self.budget.percent) && has(self.budget.count))",
            format!("spec.default.budget: {MSG_DEFAULT_BUDGET_BOTH}"),
        ),
        rule(
            "spec.default.strategy",
            format!("{} == 1", strategy_count("self")),
            format!("spec.default.strategy: {MSG_DEFAULT_STRATEGY}"),
        ),
        rule(
            "spec.compartments",
            "self.all(c, self.filter(d, d.name == c.name).size() == 1)",
            format!(
                "spec.compartments: a compartment name {MSG_COMPARTMENT_NOT_UNIQUE}, rename the duplicates"
            ),
        ),
        rule(
            "spec.compartments",
            "self.all(c, self.filter(d, d.selector == c.selector).size() == 1)",
            format!(
                "spec.compartments: two compartments have an {MSG_COMPARTMENT_IDENTICAL_SELECTOR}, give each compartment its own selector"
            ),
        ),
        rule_with(
            "spec.compartments.[]",
            "has(self.budget.percent) || has(self.budget.count)",
            format!("spec.compartments: compartment {MSG_COMPARTMENT_BUDGET_NONE}"),
            format!(
                "'spec.compartments: compartment \"' + self.name + '\" {MSG_COMPARTMENT_BUDGET_NONE}'"
            ),
        ),
        rule_with(
            "spec.compartments.[]",
            "!(has(self.budget.percent) && has(self.budget.count))",
            format!("spec.compartments: compartment {MSG_COMPARTMENT_BUDGET_BOTH}"),
            format!(
                "'spec.compartments: compartment \"' + self.name + '\" {MSG_COMPARTMENT_BUDGET_BOTH}'"
            ),
        ),
        rule_with(
            "spec.compartments.[]",
            format!(
                "!has(self.strategy) || {} <= 1",
                strategy_count("self.strategy")
            ),
            format!("spec.compartments: compartment {MSG_COMPARTMENT_STRATEGY}"),
            format!(
                "'spec.compartments: compartment \"' + self.name + '\" {MSG_COMPARTMENT_STRATEGY}'"
            ),
        ),
        rule(
            "spec.compartments.[].name",
            "self != '__default__'",
            format!("spec.compartments: {MSG_COMPARTMENT_RESERVED}"),
        ),
        selector_values_rule("spec.compartments.[].selector.matchExpressions.[]"),
    ]
}

/// Status counters, bounded by [`MAX_STATUS_COUNT`] (a percentage by 100).
fn status_bounds() -> Vec<SchemaPatch> {
    use serde_json::json;
    let compartment = "status.compartmentStatuses.*";
    let batch = "status.compartmentStatuses.*.batchState";
    let counters = [
        "status.nodesInProgress".to_owned(),
        "status.nodeOrderOffset".to_owned(),
        format!("{compartment}.matched"),
        format!("{compartment}.ceiling"),
        format!("{compartment}.inProgress"),
        format!("{compartment}.completed"),
        format!("{batch}.currentBatch"),
        format!("{batch}.consecutiveFailures"),
        format!("{batch}.completedNodes"),
        format!("{batch}.failedNodes"),
        format!("{batch}.lastBatchSize"),
    ];
    let mut out: Vec<SchemaPatch> = counters
        .into_iter()
        .flat_map(|path| {
            [
                patch(path.clone(), "minimum", json!(0)),
                patch(path, "maximum", json!(MAX_STATUS_COUNT)),
            ]
        })
        .collect();
    let percent = format!("{compartment}.progressPercent");
    out.push(patch(percent.clone(), "minimum", json!(0)));
    out.push(patch(percent, "maximum", json!(100)));
    out
}

/// Schema tightenings of the Skyhook CRD beyond upstream (each explained at its constant).
pub fn skyhook_tightenings() -> Vec<SchemaPatch> {
    use serde_json::json;
    let ops = json!(SELECTOR_OPERATORS);
    let mut patches = vec![
        patch("spec.packages", "maxProperties", json!(MAX_PACKAGES)),
        patch(
            "spec.packages.*.dependsOn",
            "maxProperties",
            json!(MAX_DEPENDS_ON),
        ),
        patch(
            "spec.packages.*.configInterrupts",
            "maxProperties",
            json!(MAX_CONFIG_INTERRUPTS),
        ),
        patch(
            "spec.packages.*.version",
            "maxLength",
            json!(MAX_VERSION_LENGTH),
        ),
        patch(
            "spec.packages.*.image",
            "maxLength",
            json!(MAX_IMAGE_LENGTH),
        ),
        patch(
            "spec.packages.*.gracefulShutdown",
            "maxLength",
            json!(MAX_GO_DURATION_LENGTH),
        ),
        patch(
            "spec.packages.*.resources.cpuRequest",
            "maxLength",
            json!(MAX_QUANTITY_LENGTH),
        ),
        patch(
            "spec.packages.*.resources.cpuLimit",
            "maxLength",
            json!(MAX_QUANTITY_LENGTH),
        ),
        patch(
            "spec.packages.*.resources.memoryRequest",
            "maxLength",
            json!(MAX_QUANTITY_LENGTH),
        ),
        patch(
            "spec.packages.*.resources.memoryLimit",
            "maxLength",
            json!(MAX_QUANTITY_LENGTH),
        ),
        patch(
            "spec.packages.*.configMap",
            "maxProperties",
            json!(MAX_CONFIG_MAP_KEYS),
        ),
        // An unknown operator makes the Go selector conversion fail; an enum reports it without
        // any CEL cost.
        patch(
            "spec.nodeSelectors.matchExpressions.[].operator",
            "enum",
            ops.clone(),
        ),
        patch(
            "spec.podNonInterruptLabels.matchExpressions.[].operator",
            "enum",
            ops,
        ),
    ];
    patches.extend(status_bounds());
    patches.extend(later_rules::skyhook_tightenings());
    patches
}

/// Schema tightenings and additions of the DeploymentPolicy CRD beyond upstream.
pub fn deployment_policy_tightenings() -> Vec<SchemaPatch> {
    use serde_json::json;
    let mut patches = vec![
        patch("spec.compartments", "maxItems", json!(MAX_COMPARTMENTS)),
        patch(
            "spec.compartments.[].name",
            "maxLength",
            json!(MAX_COMPARTMENT_NAME_LENGTH),
        ),
        patch(
            "spec.compartments.[].selector.matchExpressions",
            "maxItems",
            json!(MAX_COMPARTMENT_MATCH_EXPRESSIONS),
        ),
        patch(
            "spec.compartments.[].selector.matchExpressions.[].operator",
            "enum",
            json!(SELECTOR_OPERATORS),
        ),
    ];
    patches.extend(later_rules::policy_tightenings());
    // The Go mutating webhook defaulted these; with no webhook the API server does it (on write
    // and when reading objects stored without them).
    for strategy in ["spec.default.strategy", "spec.compartments.[].strategy"] {
        patches.extend(strategy_defaults(strategy));
    }
    patches
}

fn strategy_defaults(prefix: &str) -> Vec<SchemaPatch> {
    use super::policy::{
        DEFAULT_BATCH_THRESHOLD, DEFAULT_DELTA, DEFAULT_GROWTH_FACTOR, DEFAULT_INITIAL_BATCH,
        DEFAULT_SAFETY_LIMIT,
    };
    use serde_json::json;
    let mut out = Vec::new();
    for kind in ["fixed", "linear", "exponential"] {
        let mut fields = vec![
            ("initialBatch", DEFAULT_INITIAL_BATCH),
            ("batchThreshold", DEFAULT_BATCH_THRESHOLD),
            ("safetyLimit", DEFAULT_SAFETY_LIMIT),
        ];
        match kind {
            "linear" => fields.push(("delta", DEFAULT_DELTA)),
            "exponential" => fields.push(("growthFactor", DEFAULT_GROWTH_FACTOR)),
            _ => {}
        }
        for (field, value) in fields {
            out.push(patch(
                format!("{prefix}.{kind}.{field}"),
                "default",
                json!(value),
            ));
        }
    }
    out
}
