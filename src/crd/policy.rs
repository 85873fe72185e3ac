//! `DeploymentPolicy` (`deploymentpolicies.skyhook.nvidia.com`): rollout budgets and batch
//! strategies per node compartment.
//!
//! Strategy parameters are optional on the wire. The served CRD defaults them, but objects
//! stored before (or written past the Go webhook) may lack them, so code must read them through
//! [`DeploymentStrategy::effective`] (or call [`DeploymentPolicySpec::apply_defaults`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::go_int::GoInt;

/// Name of the implicit compartment holding the nodes no compartment selects.
pub const DEFAULT_COMPARTMENT: &str = "__default__";

/// Strategy default: first batch size.
pub const DEFAULT_INITIAL_BATCH: i64 = 1;
/// Strategy default: minimum success percentage of a batch.
pub const DEFAULT_BATCH_THRESHOLD: i64 = 100;
/// Strategy default: progress percentage below which failures count towards stopping.
pub const DEFAULT_SAFETY_LIMIT: i64 = 50;
/// Linear strategy default: batch growth per successful batch.
pub const DEFAULT_DELTA: i64 = 1;
/// Exponential strategy default: batch growth factor.
pub const DEFAULT_GROWTH_FACTOR: i64 = 2;

/// Rollout ceilings and strategies, by default and per compartment.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "skyhook.nvidia.com",
    version = "v1alpha1",
    kind = "DeploymentPolicy",
    plural = "deploymentpolicies",
    singular = "deploymentpolicy",
    derive = "PartialEq",
    derive = "Default",
    doc = "DeploymentPolicy sets how fast Skyhooks roll out: a default budget and strategy, and overrides for compartments of nodes."
)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPolicySpec {
    /// Named node groups with their own budget and optional strategy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compartments: Vec<Compartment>,

    /// Budget and strategy of the nodes no compartment selects.
    pub default: PolicyDefault,

    /// Reset the batch state when a rollout completes or the spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_batch_state_on_completion: Option<bool>,

    /// Maintenance windows of the default compartment and of every compartment without its own
    /// (an extension of this project): new nodes start only inside one. None: any time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<MaintenanceWindow>,

    /// How long a finished batch soaks before the next batch starts, as a Go duration, for the
    /// default compartment and every compartment without its own (an extension of this
    /// project). A node of the batch that goes NotReady meanwhile fails the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<String>,

    /// Firing alerts of a Prometheus or Alertmanager that hold every compartment's next batch
    /// (an extension of this project).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_gate: Option<super::alert_gate::AlertGate>,
}

/// A recurring maintenance window (an extension of this project; the reference ignores it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// Days the window opens on, in its time zone; none: every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<WindowDay>,
    /// Opening time of day, HH:MM (24-hour); with `end`, instead of `cron` and `duration`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub start: String,
    /// Closing time of day, HH:MM (24-hour); not after `start`: on the next day.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub end: String,
    /// A five-field cron expression (minute hour day-of-month month day-of-week) in the time
    /// zone: the window opens at each time it fires; with `duration`, instead of `start` and
    /// `end` (and `days`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// How long a `cron` window stays open, as a Go duration (at most 168h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// IANA time zone of `days`, `start` and `end`, such as Europe/Berlin; default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// A day of the week.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WindowDay {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

/// Budget and strategy of the default compartment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDefault {
    /// Exactly one of percent or count.
    // A Go value type: absent reads as `{}` (which validation then rejects), as in Go.
    #[serde(default)]
    pub budget: DeploymentBudget,

    /// Exactly one of fixed, linear or exponential.
    pub strategy: DeploymentStrategy,
}

/// A named group of nodes with its own budget and optional strategy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Compartment {
    /// Unique name within the policy (`__default__` is reserved).
    #[schemars(length(min = 1))]
    pub name: String,

    /// Nodes of this compartment.
    pub selector: LabelSelector,

    /// Exactly one of percent or count.
    pub budget: DeploymentBudget,

    /// Strategy override; without one the ceiling is the batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<DeploymentStrategy>,

    /// Maintenance windows of this compartment (an extension of this project), instead of the
    /// policy's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<MaintenanceWindow>,

    /// This compartment's soak between batches (an extension of this project), instead of the
    /// policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<String>,
}

/// Declares a struct of optional Go ints, each with its schema bounds (`range(..)`); unset
/// fields are omitted on the wire.
macro_rules! bounded_ints {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$doc:meta])* $field:ident: range($($range:tt)*),)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            $(
                $(#[$doc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                #[schemars(with = "Option<GoInt>", range($($range)*))]
                pub $field: Option<i64>,
            )+
        }
    };
}

/// Declares a batch strategy. Every strategy has `initialBatch` first and the three stop/threshold
/// fields last, with the same bounds and defaults; a strategy's own growth field (with its
/// default) sits between them, the field order of the Go types (and so of the generated schema
/// and of serialised objects).
macro_rules! batch_strategy {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(#[$initial_doc:meta])*
            initial_batch,
            $($(#[$own_doc:meta])* $own:ident: range($($range:tt)*) = $own_default:expr,)?
        }
    ) => {
        bounded_ints! {
            $(#[$meta])*
            pub struct $name {
                $(#[$initial_doc])*
                initial_batch: range(min = 1),
                $($(#[$own_doc])* $own: range($($range)*),)?
                /// Minimum percentage of a batch that must succeed.
                batch_threshold: range(min = 1, max = 100),
                /// Failed batches in a row that stop the rollout (unset: never stop).
                failure_threshold: range(min = 1),
                /// Progress percentage below which failures count towards stopping.
                safety_limit: range(min = 1, max = 100),
            }
        }

        impl $name {
            /// The shared parameters, defaults applied.
            fn params(&self) -> StrategyParams {
                StrategyParams {
                    initial_batch: self.initial_batch.unwrap_or(DEFAULT_INITIAL_BATCH),
                    batch_threshold: self.batch_threshold.unwrap_or(DEFAULT_BATCH_THRESHOLD),
                    failure_threshold: self.failure_threshold,
                    safety_limit: self.safety_limit.unwrap_or(DEFAULT_SAFETY_LIMIT),
                }
            }

            /// Fills every unset defaulted field in place (`failureThreshold` has no default).
            fn apply_defaults(&mut self) {
                self.initial_batch.get_or_insert(DEFAULT_INITIAL_BATCH);
                $(self.$own.get_or_insert($own_default);)?
                self.batch_threshold.get_or_insert(DEFAULT_BATCH_THRESHOLD);
                self.safety_limit.get_or_insert(DEFAULT_SAFETY_LIMIT);
            }
        }
    };
}

bounded_ints! {
    /// How many nodes may be worked on at once: exactly one of percent or count.
    pub struct DeploymentBudget {
        /// Percentage of the compartment's nodes.
        percent: range(min = 1, max = 100),
        /// Number of nodes.
        count: range(min = 1),
    }
}

/// Batch strategy: exactly one of the three.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStrategy {
    /// Constant batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<FixedStrategy>,
    /// Batch grows by delta after each successful batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear: Option<LinearStrategy>,
    /// Batch grows by growthFactor after each successful batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exponential: Option<ExponentialStrategy>,
}

batch_strategy! {
    /// Fixed batch strategy.
    pub struct FixedStrategy {
        /// Batch size.
        initial_batch,
    }
}

batch_strategy! {
    /// Linear batch strategy.
    pub struct LinearStrategy {
        /// First batch size.
        initial_batch,
        /// Growth per successful batch (and shrink per failed one).
        delta: range(min = 1) = DEFAULT_DELTA,
    }
}

batch_strategy! {
    /// Exponential batch strategy.
    pub struct ExponentialStrategy {
        /// First batch size.
        initial_batch,
        /// Growth factor per successful batch (and divisor per failed one).
        growth_factor: range(min = 2) = DEFAULT_GROWTH_FACTOR,
    }
}

/// Strategy kind, in the order the Go operator ranks them for overlapping compartments (safest
/// first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrategyKind {
    /// Fixed batches.
    Fixed,
    /// Linear growth.
    Linear,
    /// Exponential growth.
    Exponential,
}

impl StrategyKind {
    /// Name used in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fixed => "fixed",
            Self::Linear => "linear",
            Self::Exponential => "exponential",
        }
    }
}

/// Parameters shared by every strategy, with defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrategyParams {
    /// First batch size (fixed: every batch).
    pub initial_batch: i64,
    /// Minimum percentage of a batch that must succeed.
    pub batch_threshold: i64,
    /// Failed batches in a row that stop the rollout; `None` never stops.
    pub failure_threshold: Option<i64>,
    /// Progress percentage below which failures count towards stopping.
    pub safety_limit: i64,
}

/// A strategy with every default applied: what the batch logic works with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EffectiveStrategy {
    /// Constant batch size.
    Fixed(StrategyParams),
    /// Batch grows by `delta`.
    Linear {
        /// Shared parameters.
        params: StrategyParams,
        /// Growth per successful batch.
        delta: i64,
    },
    /// Batch grows by `growth_factor`.
    Exponential {
        /// Shared parameters.
        params: StrategyParams,
        /// Growth factor per successful batch.
        growth_factor: i64,
    },
}

impl EffectiveStrategy {
    /// Kind of the strategy.
    pub fn kind(&self) -> StrategyKind {
        match self {
            Self::Fixed(_) => StrategyKind::Fixed,
            Self::Linear { .. } => StrategyKind::Linear,
            Self::Exponential { .. } => StrategyKind::Exponential,
        }
    }

    /// Shared parameters.
    pub fn params(&self) -> &StrategyParams {
        match self {
            Self::Fixed(p) => p,
            Self::Linear { params, .. } | Self::Exponential { params, .. } => params,
        }
    }
}

impl DeploymentStrategy {
    /// The strategy with defaults applied, or `None` when no type is set. When several are set
    /// (rejected at admission, but possible in old objects) the first of fixed, linear,
    /// exponential wins, as in the Go operator.
    pub fn effective(&self) -> Option<EffectiveStrategy> {
        if let Some(f) = &self.fixed {
            return Some(EffectiveStrategy::Fixed(f.params()));
        }
        if let Some(l) = &self.linear {
            return Some(EffectiveStrategy::Linear {
                params: l.params(),
                delta: l.delta.unwrap_or(DEFAULT_DELTA),
            });
        }
        if let Some(e) = &self.exponential {
            return Some(EffectiveStrategy::Exponential {
                params: e.params(),
                growth_factor: e.growth_factor.unwrap_or(DEFAULT_GROWTH_FACTOR),
            });
        }
        None
    }

    /// Number of strategy types set (valid objects have exactly one).
    pub fn types_set(&self) -> usize {
        usize::from(self.fixed.is_some())
            + usize::from(self.linear.is_some())
            + usize::from(self.exponential.is_some())
    }

    /// Fills every unset defaulted parameter in place, like the Go mutating webhook.
    pub fn apply_defaults(&mut self) {
        if let Some(f) = &mut self.fixed {
            f.apply_defaults();
        }
        if let Some(l) = &mut self.linear {
            l.apply_defaults();
        }
        if let Some(e) = &mut self.exponential {
            e.apply_defaults();
        }
    }
}

impl DeploymentPolicySpec {
    /// Applies the strategy defaults to the default strategy and every compartment's strategy,
    /// like the Go mutating webhook (read-time defaulting for objects stored without them).
    pub fn apply_defaults(&mut self) {
        self.default.strategy.apply_defaults();
        for c in &mut self.compartments {
            if let Some(s) = &mut c.strategy {
                s.apply_defaults();
            }
        }
    }
}

impl DeploymentBudget {
    /// Ceiling for `matched` nodes, with the Go operator's float arithmetic (percent 29 of 100
    /// nodes is 28).
    pub fn ceiling(&self, matched: i64) -> i64 {
        if let Some(count) = self.count {
            return count;
        }
        if let Some(percent) = self.percent {
            if matched == 0 {
                return 0;
            }
            // Truncation of the float product is the reference behaviour, not a rounding bug.
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
            let n = (matched as f64 * (percent as f64 / 100.0)) as i64;
            return n.max(1);
        }
        0
    }
}
