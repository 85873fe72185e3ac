//! Admission rules and schema bounds of the fields later upstream releases added
//! (`stageTimeout`, `drainConfig`) and of this project's extensions (maintenance windows, soak),
//! kept apart from the v0.13 contract's rules in [`super::admission`].

use serde_json::json;

pub(super) use super::cel::duration_rule;
use super::cel::{
    CelRule, MAX_GO_DURATION_LENGTH, MAX_GRACEFUL_SHUTDOWN_TEXT, MAX_STAGE_TIMEOUT_TEXT,
    SchemaPatch, patch, rule,
};
use super::messages::{
    MSG_DRAIN_GRACE_PERIOD, MSG_DRAIN_TIMEOUT, MSG_HEALTH_CONDITION_STATUS, MSG_HEALTH_SELECTOR,
    MSG_HEALTH_TIMEOUT, MSG_SOAK, MSG_WINDOW_CRON, MSG_WINDOW_DURATION, MSG_WINDOW_SHAPE,
    MSG_WINDOW_TIME, MSG_WINDOW_TIME_ZONE,
};

/// Rules on `drainConfig` (upstream v0.18).
pub(super) fn drain_config_rules() -> Vec<CelRule> {
    vec![
        duration_rule(
            "spec.drainConfig.timeout",
            MAX_STAGE_TIMEOUT_TEXT,
            format!("drainConfig.timeout: {MSG_DRAIN_TIMEOUT}"),
        ),
        duration_rule(
            "spec.drainConfig.gracePeriod",
            MAX_GRACEFUL_SHUTDOWN_TEXT,
            format!("drainConfig.gracePeriod: {MSG_DRAIN_GRACE_PERIOD}"),
        ),
    ]
}

/// Rules on `healthGate` (this project's extension): a bounded timeout, a selector that
/// selects, a condition status Kubernetes uses.
pub(super) fn health_gate_rules() -> Vec<CelRule> {
    vec![
        duration_rule(
            "spec.healthGate.timeout",
            MAX_STAGE_TIMEOUT_TEXT,
            format!("healthGate.timeout: {MSG_HEALTH_TIMEOUT}"),
        ),
        rule(
            "spec.healthGate.pods.selector",
            "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",
            format!("healthGate.pods.selector: {MSG_HEALTH_SELECTOR}"),
        ),
        rule(
            "spec.healthGate.check.image",
            "size(self.trim()) > 0",
            "healthGate.check.image: must name the image of the check Job".to_string(),
        ),
        rule(
            "spec.healthGate.nodeCondition.status",
            "self in ['True', 'False', 'Unknown']",
            format!("healthGate.nodeCondition.status: {MSG_HEALTH_CONDITION_STATUS}"),
        ),
    ]
}

/// A time of day, HH:MM (24-hour).
pub const WINDOW_TIME_PATTERN: &str = "^([01][0-9]|2[0-3]):[0-5][0-9]$";
/// Most maintenance windows of a policy or compartment (bounds the rules' CEL cost).
pub const MAX_WINDOWS: i64 = 16;
/// Longest IANA time zone name accepted (the longest in the database has 32 characters).
pub const MAX_TIME_ZONE_LENGTH: i64 = 64;

/// Rules on maintenance windows (this project's extension), under both roots. An unknown time
/// zone makes CEL's `getHours` fail: the API server refuses the object naming the field.
pub(super) fn window_rules() -> Vec<CelRule> {
    let mut rules = Vec::new();
    for [root, start, end, zone, cron, duration] in [
        [
            "spec.windows.[]",
            "spec.windows.[].start",
            "spec.windows.[].end",
            "spec.windows.[].timeZone",
            "spec.windows.[].cron",
            "spec.windows.[].duration",
        ],
        [
            "spec.compartments.[].windows.[]",
            "spec.compartments.[].windows.[].start",
            "spec.compartments.[].windows.[].end",
            "spec.compartments.[].windows.[].timeZone",
            "spec.compartments.[].windows.[].cron",
            "spec.compartments.[].windows.[].duration",
        ],
    ] {
        let time = format!("self.matches('{WINDOW_TIME_PATTERN}')");
        rules.push(rule(
            start,
            time.clone(),
            format!("start: {MSG_WINDOW_TIME}"),
        ));
        rules.push(rule(end, time, format!("end: {MSG_WINDOW_TIME}")));
        rules.push(rule(
            zone,
            "timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",
            format!("timeZone: {MSG_WINDOW_TIME_ZONE}"),
        ));
        rules.push(rule(
            root,
            "(has(self.cron) && has(self.duration) && !has(self.start) && !has(self.end) && !has(self.days)) || (!has(self.cron) && !has(self.duration) && has(self.start) && has(self.end))",
            MSG_WINDOW_SHAPE.to_string(),
        ));
        rules.push(rule(
            cron,
            "self.matches('^\\\\s*\\\\S+(\\\\s+\\\\S+){4}\\\\s*$')",
            format!("cron: {MSG_WINDOW_CRON}"),
        ));
        rules.push(duration_rule(
            duration,
            MAX_STAGE_TIMEOUT_TEXT,
            format!("duration: {MSG_WINDOW_DURATION}"),
        ));
    }
    rules
}

/// The alert gate's URL and matchers (their regular expressions are checked by the operator,
/// which then reports them in the Skyhook's status).
pub(super) fn alert_gate_rules() -> Vec<CelRule> {
    vec![
        rule(
            "spec.alertGate.url",
            "self.matches('^https?://[^\\\\s/]+')",
            "alertGate.url: must be an http:// or https:// URL of a Prometheus or Alertmanager"
                .to_string(),
        ),
        rule(
            "spec.alertGate.matchers.[]",
            "self.matches('^\\\\s*[a-zA-Z_][a-zA-Z0-9_]*\\\\s*(=~|!~|!=|=)')",
            "alertGate.matchers: each must be a label matcher such as severity=\"critical\" or alertname=~\"GPU.*\"".to_string(),
        ),
    ]
}

/// `soak` of a policy and of a compartment: a Go duration within a week.
pub(super) fn soak_rules() -> Vec<CelRule> {
    ["spec.soak", "spec.compartments.[].soak"]
        .map(|path| duration_rule(path, MAX_STAGE_TIMEOUT_TEXT, format!("soak: {MSG_SOAK}")))
        .to_vec()
}

/// Bounds of the later Skyhook fields (each bounds its rule's CEL cost).
pub(super) fn skyhook_tightenings() -> Vec<SchemaPatch> {
    let mut patches: Vec<SchemaPatch> = [
        "spec.packages.*.stageTimeout",
        "spec.drainConfig.timeout",
        "spec.drainConfig.gracePeriod",
        "spec.healthGate.timeout",
    ]
    .map(|path| patch(path, "maxLength", json!(MAX_GO_DURATION_LENGTH)))
    .to_vec();
    patches.push(patch(
        "spec.healthGate.nodeCondition.type",
        "maxLength",
        json!(316),
    ));
    patches.push(patch(
        "spec.healthGate.nodeCondition.status",
        "maxLength",
        json!(7),
    ));
    patches.push(patch(
        "spec.healthGate.pods.namespace",
        "maxLength",
        json!(63),
    ));
    patches
}

/// Bounds of the DeploymentPolicy extensions.
pub(super) fn policy_tightenings() -> Vec<SchemaPatch> {
    let mut patches = Vec::new();
    for root in ["spec.windows", "spec.compartments.[].windows"] {
        patches.push(patch(root, "maxItems", json!(MAX_WINDOWS)));
        patches.push(patch(format!("{root}.[].days"), "maxItems", json!(7)));
        for time in ["start", "end"] {
            patches.push(patch(format!("{root}.[].{time}"), "maxLength", json!(5)));
        }
        patches.push(patch(
            format!("{root}.[].timeZone"),
            "maxLength",
            json!(MAX_TIME_ZONE_LENGTH),
        ));
        patches.push(patch(format!("{root}.[].cron"), "maxLength", json!(128)));
        patches.push(patch(
            format!("{root}.[].duration"),
            "maxLength",
            json!(MAX_GO_DURATION_LENGTH),
        ));
    }
    for soak in ["spec.soak", "spec.compartments.[].soak"] {
        patches.push(patch(soak, "maxLength", json!(MAX_GO_DURATION_LENGTH)));
    }
    patches.push(patch("spec.alertGate.url", "maxLength", json!(2048)));
    patches.push(patch("spec.alertGate.matchers", "maxItems", json!(32)));
    patches.push(patch("spec.alertGate.matchers.[]", "maxLength", json!(512)));
    patches.push(patch(
        "spec.alertGate.credentialsSecret",
        "maxLength",
        json!(253),
    ));
    patches
}
