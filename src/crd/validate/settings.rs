//! Operator-side checks of a package's durations and uninstall switch, `drainConfig` and a
//! policy's maintenance windows and soak: the admission rules of the later fields, re-checked
//! for objects stored before them.

use std::sync::LazyLock;

use regex::Regex;

use super::errors::Errors;
use crate::crd::admission::{
    GO_DURATION_PATTERN, MAX_GO_DURATION_LENGTH, MAX_GRACEFUL_SHUTDOWN, MAX_STAGE_TIMEOUT,
    MSG_DRAIN_GRACE_PERIOD, MSG_DRAIN_TIMEOUT, MSG_GRACEFUL_SHUTDOWN, MSG_HEALTH_CONDITION_STATUS,
    MSG_HEALTH_SELECTOR, MSG_HEALTH_TIMEOUT, MSG_SOAK, MSG_STAGE_TIMEOUT, MSG_UNINSTALL_APPLY,
};
use crate::crd::skyhook::{DrainConfig, Package};
use crate::schema::parse_go_duration;

static GO_DURATION_RE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(GO_DURATION_PATTERN).ok());

/// The admission rules on a package's durations and uninstall switch, re-checked for objects
/// stored before they existed.
pub(super) fn check_package_settings(errs: &mut Errors, field: &str, package: &Package) {
    let durations = [
        (
            "gracefulShutdown",
            &package.graceful_shutdown,
            MAX_GRACEFUL_SHUTDOWN,
            MSG_GRACEFUL_SHUTDOWN,
        ),
        (
            "stageTimeout",
            &package.stage_timeout,
            MAX_STAGE_TIMEOUT,
            MSG_STAGE_TIMEOUT,
        ),
    ];
    for (name, value, max, msg) in durations {
        check_duration(errs, &format!("{field}.{name}"), value.as_deref(), max, msg);
    }
    if package
        .uninstall
        .as_ref()
        .is_some_and(|u| u.apply && !u.enabled)
    {
        errs.push(
            format!("{field}.uninstall"),
            format!("uninstall: {MSG_UNINSTALL_APPLY}; set enabled: true (the package has uninstall scripts) or apply: false"),
        );
    }
}

/// `drainConfig`'s durations.
pub(super) fn check_drain_config(errs: &mut Errors, config: Option<&DrainConfig>) {
    let Some(c) = config else { return };
    let durations = [
        ("timeout", &c.timeout, MAX_STAGE_TIMEOUT, MSG_DRAIN_TIMEOUT),
        (
            "gracePeriod",
            &c.grace_period,
            MAX_GRACEFUL_SHUTDOWN,
            MSG_DRAIN_GRACE_PERIOD,
        ),
    ];
    for (name, value, max, msg) in durations {
        let field = format!("spec.drainConfig.{name}");
        check_duration(errs, &field, value.as_deref(), max, msg);
    }
}

/// `healthGate`: its timeout, a selector that selects and parses, a condition status.
pub(super) fn check_health_gate(errs: &mut Errors, gate: Option<&crate::crd::HealthGate>) {
    let Some(g) = gate else { return };
    check_duration(
        errs,
        "spec.healthGate.timeout",
        g.timeout.as_deref(),
        MAX_STAGE_TIMEOUT,
        MSG_HEALTH_TIMEOUT,
    );
    if let Some(pods) = &g.pods {
        let sel = &pods.selector;
        let empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
        let field = "spec.healthGate.pods.selector";
        if empty {
            errs.push(
                field,
                format!("healthGate.pods.selector: {MSG_HEALTH_SELECTOR}"),
            );
        } else if let Err(e) = kube::core::Selector::try_from(sel.clone()) {
            errs.push(field, format!("healthGate.pods.selector: {e}"));
        }
    }
    check_health_check(errs, g.check.as_ref());
    if let Some(c) = &g.node_condition {
        if !matches!(c.status.as_str(), "True" | "False" | "Unknown") {
            errs.push(
                "spec.healthGate.nodeCondition.status",
                format!(
                    "healthGate.nodeCondition.status: {MSG_HEALTH_CONDITION_STATUS}, got {:?}",
                    c.status
                ),
            );
        }
        if c.type_.is_empty() {
            errs.push(
                "spec.healthGate.nodeCondition.type",
                "healthGate.nodeCondition.type: must name a node condition, such as KernelDeadlock",
            );
        }
    }
}

/// The alert gate: an http(s) URL, matchers that parse, a Secret name.
pub(crate) fn check_alert_gate(errs: &mut Errors, gate: Option<&crate::crd::AlertGate>) {
    let Some(g) = gate else { return };
    let url = g.url.trim();
    let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
    if !scheme_ok || url.parse::<http::Uri>().is_err() {
        errs.push(
            "spec.alertGate.url",
            format!("alertGate.url: must be an http:// or https:// URL of a Prometheus or Alertmanager, got {url:?}"),
        );
    }
    for (i, m) in g.matchers.iter().enumerate() {
        if let Err(why) = crate::crd::Matcher::parse(m) {
            errs.push(
                format!("spec.alertGate.matchers[{i}]"),
                format!("alertGate.matchers[{i}]: {why}"),
            );
        }
    }
    if let Some(s) = &g.credentials_secret
        && !crate::schema::is_dns1123_subdomain(s)
    {
        errs.push(
            "spec.alertGate.credentialsSecret",
            format!("alertGate.credentialsSecret: {s:?} is not a Secret name"),
        );
    }
}

/// A check Job needs an image.
fn check_health_check(errs: &mut Errors, check: Option<&crate::crd::HealthCheck>) {
    if check.is_some_and(|c| c.image.trim().is_empty()) {
        errs.push(
            "spec.healthGate.check.image",
            "healthGate.check.image: must name the image of the check Job",
        );
    }
}

/// A Go duration field: what admission accepts (at most [`MAX_GO_DURATION_LENGTH`] characters
/// matching [`GO_DURATION_PATTERN`], at most `max`).
fn check_duration(
    errs: &mut Errors,
    field: &str,
    value: Option<&str>,
    max: std::time::Duration,
    msg: &str,
) {
    let Some(value) = value else { return };
    if !go_duration_allowed(value, max) {
        let name = field.rsplit('.').next().unwrap_or(field);
        let name = if field.starts_with("spec.drainConfig") {
            format!("drainConfig.{name}")
        } else if field.starts_with("spec.healthGate") {
            format!("healthGate.{name}")
        } else {
            name.to_owned()
        };
        errs.push(
            field,
            format!("{name}: {msg} (at most {MAX_GO_DURATION_LENGTH} characters), got {value:?}"),
        );
    }
}

fn go_duration_allowed(value: &str, max: std::time::Duration) -> bool {
    value.chars().count() <= MAX_GO_DURATION_LENGTH
        && GO_DURATION_RE.as_ref().is_some_and(|re| re.is_match(value))
        && parse_go_duration(value).is_ok_and(|d| d <= max)
}

/// Maintenance windows (this project's extension): time zone and times readable.
fn check_windows(errs: &mut Errors, field: &str, windows: &[crate::crd::MaintenanceWindow]) {
    for (i, w) in windows.iter().enumerate() {
        if let Err((at, why)) = crate::crd::window::Window::parse(w, &format!("{field}[{i}]")) {
            errs.push(at, why);
        }
    }
}

/// A policy's or compartment's gates (under `at`): maintenance windows and soak.
pub(super) fn check_gates(
    errs: &mut Errors,
    at: &str,
    windows: &[crate::crd::MaintenanceWindow],
    soak: Option<&str>,
) {
    check_windows(errs, &format!("{at}.windows"), windows);
    check_duration(
        errs,
        &format!("{at}.soak"),
        soak,
        MAX_STAGE_TIMEOUT,
        MSG_SOAK,
    );
}
