//! `deployment-policy preview S`: the shape of a rollout, compartment by compartment, computed
//! by the operator's own planner on the cluster as it is now. Nothing is written: the plan
//! the operator would apply is computed and only its compartments are shown.

use std::io::Write;

use kube::ResourceExt;
use serde::{Deserialize, Serialize};
use skyhook::crd::{self, DeploymentBudget, DeploymentPolicy, Skyhook};
use skyhook::plan::CompartmentPlan;
use skyhook::schema;

use crate::app::Ctx;
use crate::app::error::CliError;
use crate::app::output::{Field, OutputFormat, structured};
use crate::app::planner;

/// What `-o json|yaml` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    pub skyhook: String,
    /// The DeploymentPolicy, or `legacy` (the Skyhook's interruptionBudget).
    pub policy: String,
    pub compartments: Vec<CompartmentPlan>,
    /// The rollout gates besides the windows (shown per compartment): soak, alert gate, health
    /// gate, and those holding the Skyhook now (from its conditions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<String>,
}

pub async fn run(ctx: &Ctx, out: &mut dyn Write, name: &str) -> Result<(), CliError> {
    let kube = ctx.kube().await?;
    let mut sk = kube.skyhook(name).await?;
    crd::normalize(&mut sk);
    let (plan, world) = planner::plan_now(&kube, &ctx.global.namespace, &sk).await?;
    if let Some(policy) = sk
        .spec
        .deployment_policy
        .as_deref()
        .filter(|p| !p.is_empty())
        && plan.compartments.is_empty()
    {
        return Err(CliError::PolicyNotFound {
            skyhook: name.to_string(),
            policy: policy.to_string(),
        });
    }
    let policy = sk
        .spec
        .deployment_policy
        .as_deref()
        .and_then(|p| world.policies.iter().find(|x| x.name_any() == p));
    let preview = Preview {
        skyhook: name.to_string(),
        policy: plan.policy_label.clone(),
        compartments: plan.compartments,
        gates: gates(&sk, policy.map(|p| &**p)),
    };
    if let Some(text) = structured(ctx.global.output, &preview)? {
        write!(out, "{text}")?;
        return Ok(());
    }
    write!(out, "{}", table(ctx, &preview))?;
    Ok(())
}

/// The gates in words, one line each.
fn gates(sk: &Skyhook, policy: Option<&DeploymentPolicy>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = policy {
        if let Some(s) = &p.spec.soak {
            out.push(format!("soak: {s} after each batch"));
        }
        for c in &p.spec.compartments {
            if let Some(s) = &c.soak {
                out.push(format!("soak of compartment {}: {s}", c.name));
            }
        }
        if let Some(a) = &p.spec.alert_gate {
            let api = a.api.unwrap_or_default();
            let matchers = if a.matchers.is_empty() {
                "any firing alert".to_string()
            } else {
                a.matchers.join(", ")
            };
            let unreachable = a.on_unreachable.unwrap_or_default();
            out.push(format!(
                "alert gate: {api:?} at {} ({matchers}); unreachable: {unreachable:?}",
                a.url
            ));
        }
    }
    if let Some(h) = &sk.spec.health_gate {
        let mut checks = vec!["node Ready".to_string()];
        if let Some(c) = &h.node_condition {
            checks.push(format!("condition {}={}", c.type_, c.status));
        }
        if let Some(p) = &h.pods {
            let ns = p.namespace.as_deref().unwrap_or("any namespace");
            let labels: Vec<String> = p
                .selector
                .match_labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            checks.push(format!("pods {} in {ns} Ready", labels.join(",")));
        }
        if let Some(c) = &h.check {
            checks.push(format!("check Job {}", c.image));
        }
        let timeout = h.timeout.as_deref().unwrap_or("10m");
        out.push(format!(
            "health gate: {} within {timeout}",
            checks.join(", ")
        ));
    }
    let holding = sk.status.iter().flat_map(|s| &s.conditions).filter(|c| {
        c.status == "True"
            && [
                schema::MAINTENANCE_WINDOW_CONDITION,
                schema::ALERT_GATE_CONDITION,
                schema::SOAKING_CONDITION,
                schema::HEALTH_GATE_CONDITION,
            ]
            .contains(&c.type_.as_str())
    });
    for c in holding {
        out.push(format!("holding now: {}: {}", c.reason, c.message));
    }
    out
}

fn budget(b: &DeploymentBudget) -> String {
    match (b.percent, b.count) {
        (_, Some(c)) => format!("count {c}"),
        (Some(p), None) => format!("{p}%"),
        (None, None) => "-".to_string(),
    }
}

fn nodes(list: &[String]) -> String {
    if list.is_empty() {
        "-".to_string()
    } else {
        list.join(",")
    }
}

fn table(ctx: &Ctx, p: &Preview) -> String {
    let wide = ctx.global.output == OutputFormat::Wide;
    let mut headers = vec![
        "COMPARTMENT",
        "STRATEGY",
        "BUDGET",
        "CEILING",
        "NODES",
        "BATCH #",
        "STOPPED",
        "WINDOW",
        "BATCH (AT WORK OR NEXT)",
    ];
    if wide {
        headers.push("ALL NODES");
    }
    let rows: Vec<Vec<Field>> = p
        .compartments
        .iter()
        .map(|c| {
            let mut row: Vec<Field> = vec![
                c.name.as_str().into(),
                c.strategy.as_str().into(),
                budget(&c.budget).into(),
                c.ceiling.to_string().into(),
                c.nodes.len().to_string().into(),
                c.batch_state.current_batch.to_string().into(),
                if c.batch_state.should_stop {
                    "yes"
                } else {
                    "no"
                }
                .into(),
                c.window.as_deref().unwrap_or("-").into(),
                nodes(&c.batch).into(),
            ];
            if wide {
                row.push(nodes(&c.nodes).into());
            }
            row
        })
        .collect();
    let gates: String = p.gates.iter().map(|g| format!("Gate: {g}\n")).collect();
    format!(
        "Skyhook: {}\nPolicy: {}\n{gates}\n{}",
        p.skyhook,
        p.policy,
        ctx.painter.table(&headers, &rows)
    )
}
