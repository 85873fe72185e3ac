//! Operator-side validation.
//!
//! Admission (CEL, see [`super::admission`]) rejects most invalid objects, but objects stored
//! before a rule existed are never re-checked by the API server, and some rules cannot be
//! written in CEL (dependency cycles, glob matching, full label-selector syntax). The operator
//! therefore re-checks everything here, with the same message texts, before acting on an
//! object. Errors are reported in a deterministic order (packages sorted by key).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

use kube::ResourceExt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use regex::Regex;

use super::admission::{
    MAX_SKYHOOK_NAME, MAX_VERSION_LENGTH, MSG_BUDGET_BOTH, MSG_COMPARTMENT_BUDGET_BOTH,
    MSG_COMPARTMENT_BUDGET_NONE, MSG_COMPARTMENT_IDENTICAL_SELECTOR, MSG_COMPARTMENT_NOT_UNIQUE,
    MSG_COMPARTMENT_RESERVED, MSG_COMPARTMENT_STRATEGY, MSG_CONFIG_INTERRUPT_GLOB,
    MSG_CONFIG_INTERRUPT_KEY, MSG_DEFAULT_BUDGET_BOTH, MSG_DEFAULT_BUDGET_NONE,
    MSG_DEFAULT_STRATEGY, MSG_DEPENDENCY_CYCLE, MSG_DEPENDENCY_EMPTY_VERSION,
    MSG_DEPENDENCY_MISSING, MSG_NAME_TOO_LONG, MSG_PACKAGE_NAME_INVALID, MSG_PACKAGE_NAME_KEY,
    MSG_POLICY_AND_BUDGET, MSG_RESOURCES_ALL_OR_NONE, MSG_RESOURCES_CPU, MSG_RESOURCES_MEMORY,
    MSG_RESOURCES_POSITIVE, MSG_SELECTOR_INVALID, MSG_SELECTOR_VALUES, MSG_VERSION_INVALID,
    MSG_VERSION_TOO_LONG, PACKAGE_NAME_PATTERN, SELECTOR_OPERATORS,
};
mod errors;
mod settings;
use errors::Errors;
pub use errors::{ValidationError, format_errors};
use settings::{check_drain_config, check_gates, check_health_gate, check_package_settings};

use super::policy::{DEFAULT_COMPARTMENT, DeploymentBudget, DeploymentStrategy};
use super::skyhook::{Package, PackageResources};
use super::{DeploymentPolicy, Skyhook, quantity};
use crate::schema::{glob_match, is_qualified_name, is_valid_label_value, is_valid_semver};

/// What the operator-side validation finds wrong with the Skyhook and the policy it names (the
/// policy has no status of its own, so its problems show on the Skyhooks that use it).
pub fn problems(sk: &Skyhook, policies: &[Arc<DeploymentPolicy>]) -> Vec<String> {
    let mut invalid: Vec<String> = match validate_skyhook(sk) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    };
    let policy = sk
        .spec
        .deployment_policy
        .as_deref()
        .and_then(|p| policies.iter().find(|x| x.name_any() == p));
    if let Some(policy) = policy
        && let Err(errs) = validate_deployment_policy(policy)
    {
        let name = policy.name_any();
        invalid.extend(
            errs.iter()
                .map(|e| format!("deploymentPolicy {name:?}: {e}")),
        );
    }
    invalid
}

/// Validates a Skyhook: every admission rule plus dependency cycles, configInterrupts globs,
/// semver and label-selector syntax.
pub fn validate_skyhook(skyhook: &Skyhook) -> Result<(), Vec<ValidationError>> {
    let mut errs = Errors::default();
    let spec = &skyhook.spec;
    if let Some(name) = &skyhook.metadata.name
        && name.chars().count() > MAX_SKYHOOK_NAME
    {
        errs.push(
            "metadata.name",
            format!(
                "{MSG_NAME_TOO_LONG} (it is part of node annotation keys), but {name:?} has {}; choose a shorter name",
                name.chars().count()
            ),
        );
    }
    let cordon = crate::schema::NON_INTERRUPT_CORDON_ANNOTATION;
    if let Err(why) =
        crate::schema::ProtectedCordon::of(skyhook.annotations().get(cordon).map(String::as_str))
    {
        errs.push(format!("metadata.annotations[{cordon}]"), why);
    }
    let budget = &spec.interruption_budget;
    errs.range(
        "spec.interruptionBudget.percent",
        budget.percent,
        0,
        Some(100),
    );
    errs.range("spec.interruptionBudget.count", budget.count, 0, None);
    if budget.percent.is_some() && budget.count.is_some() {
        errs.push(
            "spec.interruptionBudget",
            format!("{MSG_BUDGET_BOTH}, set only one of them"),
        );
    }
    if spec
        .deployment_policy
        .as_deref()
        .is_some_and(|p| !p.is_empty())
        && (budget.percent.is_some() || budget.count.is_some())
    {
        errs.push(
            "spec.deploymentPolicy",
            format!(
                "{MSG_POLICY_AND_BUDGET}, remove interruptionBudget.percent and interruptionBudget.count when a deploymentPolicy is set"
            ),
        );
    }
    errs.range("spec.priority", Some(spec.priority), 1, None);

    check_selector(&mut errs, "spec.nodeSelectors", &spec.node_selectors);
    check_selector(
        &mut errs,
        "spec.podNonInterruptLabels",
        &spec.pod_non_interrupt_labels,
    );

    check_drain_config(&mut errs, spec.drain_config.as_ref());
    check_health_gate(&mut errs, spec.health_gate.as_ref());
    for (key, package) in &spec.packages {
        check_package(&mut errs, key, package, &spec.packages);
        if let Some(why) = super::config_size::too_large(package) {
            errs.push(format!("spec.packages[{key}].configMap"), why);
        }
    }
    for cycle in dependency_cycles(&spec.packages) {
        let first = cycle.first().cloned().unwrap_or_default();
        errs.push(
            format!("spec.packages[{first}].dependsOn"),
            format!(
                "{MSG_DEPENDENCY_CYCLE}: {}; remove one of these dependencies",
                cycle.join(" -> ")
            ),
        );
    }
    errs.finish()
}

// A constant pattern, so `None` cannot happen; if it did, the key check would be skipped
// rather than panicking in the controller.
static PACKAGE_NAME_RE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(PACKAGE_NAME_PATTERN).ok());

fn check_package(errs: &mut Errors, key: &str, package: &Package, all: &BTreeMap<String, Package>) {
    let field = format!("spec.packages[{key}]");
    if PACKAGE_NAME_RE.as_ref().is_some_and(|re| !re.is_match(key)) {
        errs.push(
            &field,
            format!("{MSG_PACKAGE_NAME_INVALID}: [{key}] must match {PACKAGE_NAME_PATTERN}"),
        );
    }
    if !package.name.is_empty() && package.name != key {
        errs.push(
            format!("{field}.name"),
            format!(
                "{MSG_PACKAGE_NAME_KEY}, but package {key} has name {}; remove name from the package or set it to the key",
                package.name
            ),
        );
    }
    if !is_valid_semver(&package.version) {
        errs.push(
            format!("{field}.version"),
            format!(
                "version: {MSG_VERSION_INVALID} such as 1.2.3 (a leading v is allowed), got {:?}",
                package.version
            ),
        );
    } else if i64::try_from(package.version.len()).unwrap_or(i64::MAX) > MAX_VERSION_LENGTH {
        errs.push(
            format!("{field}.version"),
            format!("{MSG_VERSION_TOO_LONG} (it is part of pod label values)"),
        );
    }
    check_config_interrupts(errs, &field, package);
    check_package_settings(errs, &field, package);
    for (dep, version) in &package.depends_on {
        if version.is_empty() {
            errs.push(
                format!("{field}.dependsOn[{dep}]"),
                format!(
                    "dependsOn: {MSG_DEPENDENCY_EMPTY_VERSION} for [{dep}], set the exact version of the dependency"
                ),
            );
        } else if all.get(dep).is_none_or(|p| &p.version != version) {
            errs.push(
                format!("{field}.dependsOn[{dep}]"),
                format!("{MSG_DEPENDENCY_MISSING}, missing: [{dep}|{version}]"),
            );
        }
    }
    if let Some(resources) = &package.resources {
        check_resources(errs, &format!("{field}.resources"), resources);
    }
}

fn check_config_interrupts(errs: &mut Errors, field: &str, package: &Package) {
    for pattern in package.config_interrupts.keys() {
        if !pattern.contains('*') {
            if !package.config_map.contains_key(pattern) {
                errs.push(
                    format!("{field}.configInterrupts[{pattern}]"),
                    format!(
                        "configInterrupts: {MSG_CONFIG_INTERRUPT_KEY}, but {pattern:?} is not a configMap key; add it to configMap or fix the key"
                    ),
                );
            }
            continue;
        }
        let mut matched = false;
        for k in package.config_map.keys() {
            match glob_match(pattern, k) {
                Ok(true) => {
                    matched = true;
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    errs.push(
                        format!("{field}.configInterrupts[{pattern}]"),
                        format!("configInterrupts glob {pattern:?} is not a valid pattern: {e}"),
                    );
                    matched = true;
                    break;
                }
            }
        }
        if !matched {
            errs.push(
                format!("{field}.configInterrupts[{pattern}]"),
                format!(
                    "configInterrupts glob {pattern:?} {MSG_CONFIG_INTERRUPT_GLOB}; fix the glob or add a matching configMap key"
                ),
            );
        }
    }
}

fn check_resources(errs: &mut Errors, field: &str, r: &PackageResources) {
    let values = [
        ("cpuRequest", &r.cpu_request),
        ("cpuLimit", &r.cpu_limit),
        ("memoryRequest", &r.memory_request),
        ("memoryLimit", &r.memory_limit),
    ];
    let mut parsed = [0.0_f64; 4];
    for (i, (name, q)) in values.iter().enumerate() {
        if let Some(q) = q {
            match quantity::parse(q) {
                Some(v) => parsed[i] = v,
                None => {
                    errs.push(
                        format!("{field}.{name}"),
                        format!("{name} {:?} is not a valid quantity (e.g. 500m, 1Gi)", q.0),
                    );
                    return;
                }
            }
        }
    }
    let set = parsed.map(|v| v != 0.0);
    if set.iter().any(|s| *s) && !set.iter().all(|s| *s) {
        errs.push(field, MSG_RESOURCES_ALL_OR_NONE);
        return;
    }
    if parsed.iter().any(|v| *v < 0.0) {
        errs.push(field, MSG_RESOURCES_POSITIVE);
        return;
    }
    let [cpu_req, cpu_lim, mem_req, mem_lim] = parsed;
    if set[0] && set[1] && cpu_lim < cpu_req {
        errs.push(field, MSG_RESOURCES_CPU);
    }
    if set[2] && set[3] && mem_lim < mem_req {
        errs.push(field, MSG_RESOURCES_MEMORY);
    }
}

fn check_selector(errs: &mut Errors, field: &str, selector: &LabelSelector) {
    let short = field.rsplit('.').next().unwrap_or(field);
    let mut invalid = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        if !is_qualified_name(k) {
            invalid.push(format!("matchLabels key {k:?} is not a valid label key"));
        }
        if !is_valid_label_value(v) {
            invalid.push(format!(
                "matchLabels value {v:?} of {k:?} is not a valid label value"
            ));
        }
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        if !is_qualified_name(&req.key) {
            invalid.push(format!(
                "matchExpressions[{i}].key {:?} is not a valid label key",
                req.key
            ));
        }
        let values = req.values.as_deref().unwrap_or_default();
        if !SELECTOR_OPERATORS.contains(&req.operator.as_str()) {
            invalid.push(format!(
                "matchExpressions[{i}].operator {:?} is not one of {}",
                req.operator,
                SELECTOR_OPERATORS.join(", ")
            ));
        } else if matches!(req.operator.as_str(), "In" | "NotIn") == values.is_empty() {
            errs.push(
                format!("{field}.matchExpressions[{i}]"),
                MSG_SELECTOR_VALUES,
            );
        }
        for v in values {
            if !is_valid_label_value(v) {
                invalid.push(format!(
                    "matchExpressions[{i}] value {v:?} is not a valid label value"
                ));
            }
        }
    }
    for detail in invalid {
        errs.push(field, format!("{short} {MSG_SELECTOR_INVALID}: {detail}"));
    }
}

/// Dependency cycles among packages (edges only for dependencies that resolve to a package of
/// the Skyhook with exactly the named version). Each cycle is listed from its smallest key and
/// closed (`a -> b -> a`); cycles are reported once each, in key order.
pub fn dependency_cycles(packages: &BTreeMap<String, Package>) -> Vec<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit<'a>(
        key: &'a str,
        packages: &'a BTreeMap<String, Package>,
        marks: &mut BTreeMap<&'a str, Mark>,
        stack: &mut Vec<&'a str>,
        found: &mut BTreeSet<Vec<String>>,
    ) {
        marks.insert(key, Mark::Active);
        stack.push(key);
        if let Some(p) = packages.get(key) {
            for (dep, version) in &p.depends_on {
                let Some((dep_key, dep_pkg)) = packages.get_key_value(dep) else {
                    continue;
                };
                if &dep_pkg.version != version {
                    continue;
                }
                match marks.get(dep_key.as_str()).copied().unwrap_or(Mark::New) {
                    Mark::New => visit(dep_key, packages, marks, stack, found),
                    Mark::Active => {
                        if let Some(start) = stack.iter().position(|k| *k == dep_key) {
                            found.insert(canonical_cycle(&stack[start..]));
                        }
                    }
                    Mark::Done => {}
                }
            }
        }
        stack.pop();
        marks.insert(key, Mark::Done);
    }

    let mut marks = BTreeMap::new();
    let mut found = BTreeSet::new();
    for key in packages.keys() {
        if marks.get(key.as_str()).copied().unwrap_or(Mark::New) == Mark::New {
            visit(key, packages, &mut marks, &mut Vec::new(), &mut found);
        }
    }
    found.into_iter().collect()
}

/// Rotates a cycle to start at its smallest key and closes it.
fn canonical_cycle(cycle: &[&str]) -> Vec<String> {
    let start = cycle
        .iter()
        .enumerate()
        .min_by_key(|(_, k)| **k)
        .map_or(0, |(i, _)| i);
    let mut out: Vec<String> = cycle[start..]
        .iter()
        .chain(&cycle[..start])
        .map(|k| (*k).to_owned())
        .collect();
    if let Some(first) = out.first().cloned() {
        out.push(first);
    }
    out
}

/// Validates a DeploymentPolicy: the Go webhook's rules (budgets, strategies, compartment
/// names and selectors) plus the CRD bounds.
pub fn validate_deployment_policy(policy: &DeploymentPolicy) -> Result<(), Vec<ValidationError>> {
    let mut errs = Errors::default();
    let spec = &policy.spec;

    let budget = &spec.default.budget;
    check_budget_bounds(&mut errs, "spec.default.budget", budget);
    match (budget.percent, budget.count) {
        (None, None) => errs.push("spec.default.budget", MSG_DEFAULT_BUDGET_NONE),
        (Some(_), Some(_)) => errs.push("spec.default.budget", MSG_DEFAULT_BUDGET_BOTH),
        _ => {}
    }
    check_strategy_bounds(&mut errs, "spec.default.strategy", &spec.default.strategy);
    if spec.default.strategy.types_set() != 1 {
        errs.push("spec.default.strategy", MSG_DEFAULT_STRATEGY);
    }

    check_gates(&mut errs, "spec", &spec.windows, spec.soak.as_deref());
    settings::check_alert_gate(&mut errs, spec.alert_gate.as_ref());
    let mut seen_names = BTreeSet::new();
    for (i, c) in spec.compartments.iter().enumerate() {
        let field = format!("spec.compartments[{i}]");
        if c.name.is_empty() {
            errs.push(
                format!("{field}.name"),
                "compartment name must not be empty",
            );
        } else if c.name == DEFAULT_COMPARTMENT {
            errs.push(format!("{field}.name"), MSG_COMPARTMENT_RESERVED);
        } else if !seen_names.insert(c.name.as_str()) {
            errs.push(
                format!("{field}.name"),
                format!(
                    "compartment name {:?} {MSG_COMPARTMENT_NOT_UNIQUE}, rename one of them",
                    c.name
                ),
            );
        }
        check_selector(&mut errs, &format!("{field}.selector"), &c.selector);
        if let Some(earlier) = spec.compartments[..i]
            .iter()
            .find(|e| e.selector == c.selector)
        {
            errs.push(
                format!("{field}.selector"),
                format!(
                    "compartment {:?} has {MSG_COMPARTMENT_IDENTICAL_SELECTOR} to compartment {:?}, give each compartment its own selector",
                    c.name, earlier.name
                ),
            );
        }
        check_budget_bounds(&mut errs, &format!("{field}.budget"), &c.budget);
        match (c.budget.percent, c.budget.count) {
            (None, None) => errs.push(
                format!("{field}.budget"),
                format!("compartment {:?} {MSG_COMPARTMENT_BUDGET_NONE}", c.name),
            ),
            (Some(_), Some(_)) => errs.push(
                format!("{field}.budget"),
                format!("compartment {:?} {MSG_COMPARTMENT_BUDGET_BOTH}", c.name),
            ),
            _ => {}
        }
        check_gates(&mut errs, &field, &c.windows, c.soak.as_deref());
        if let Some(strategy) = &c.strategy {
            check_strategy_bounds(&mut errs, &format!("{field}.strategy"), strategy);
            if strategy.types_set() > 1 {
                errs.push(
                    format!("{field}.strategy"),
                    format!("compartment {:?} {MSG_COMPARTMENT_STRATEGY}", c.name),
                );
            }
        }
    }
    errs.finish()
}

fn check_budget_bounds(errs: &mut Errors, field: &str, b: &DeploymentBudget) {
    errs.range(&format!("{field}.percent"), b.percent, 1, Some(100));
    errs.range(&format!("{field}.count"), b.count, 1, None);
}

fn check_common_bounds(
    errs: &mut Errors,
    field: &str,
    initial: Option<i64>,
    threshold: Option<i64>,
    failure: Option<i64>,
    safety: Option<i64>,
) {
    errs.range(&format!("{field}.initialBatch"), initial, 1, None);
    errs.range(&format!("{field}.batchThreshold"), threshold, 1, Some(100));
    errs.range(&format!("{field}.failureThreshold"), failure, 1, None);
    errs.range(&format!("{field}.safetyLimit"), safety, 1, Some(100));
}

fn check_strategy_bounds(errs: &mut Errors, field: &str, s: &DeploymentStrategy) {
    if let Some(f) = &s.fixed {
        check_common_bounds(
            errs,
            &format!("{field}.fixed"),
            f.initial_batch,
            f.batch_threshold,
            f.failure_threshold,
            f.safety_limit,
        );
    }
    if let Some(l) = &s.linear {
        check_common_bounds(
            errs,
            &format!("{field}.linear"),
            l.initial_batch,
            l.batch_threshold,
            l.failure_threshold,
            l.safety_limit,
        );
        errs.range(&format!("{field}.linear.delta"), l.delta, 1, None);
    }
    if let Some(e) = &s.exponential {
        check_common_bounds(
            errs,
            &format!("{field}.exponential"),
            e.initial_batch,
            e.batch_threshold,
            e.failure_threshold,
            e.safety_limit,
        );
        errs.range(
            &format!("{field}.exponential.growthFactor"),
            e.growth_factor,
            2,
            None,
        );
    }
}
