//! `plan -f FILE`: a dry run of a new or changed Skyhook, NodeWright or DeploymentPolicy against
//! the live cluster. The API server validates the object (a server-side dry run, so its
//! admission policies speak), the operator's own validation checks it, then the operator's own
//! planner (`plan::dry_run`, which runs `plan::plan` pass after pass) walks the rollout on a copy
//! of what is in the cluster. Nothing is written. Every decision shown is the planner's: this
//! command reads, and prints.

use std::io::{Read, Write};

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use skyhook::crd::{self, DeploymentPolicy, Skyhook, object_resource, policy_resource};
use skyhook::plan::dry_run::{self, End, Limits, NodeRun, Rollout};
use skyhook::schema::Api as ApiKind;

use crate::app::Ctx;
use crate::app::error::{CliError, one_line};
use crate::app::kube::Kube;
use crate::app::output::{Field, structured};
use crate::app::planner;
use crate::cli::PlanArgs;

/// What `-o json|yaml` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanOutput {
    /// How the objects were validated, and what could not be read, one line each.
    pub validation: Vec<String>,
    pub plans: Vec<Rollout>,
}

/// One document of the file.
enum Doc {
    Object {
        api: ApiKind,
        sk: Box<Skyhook>,
        raw: Value,
    },
    Policy {
        api: ApiKind,
        policy: Box<DeploymentPolicy>,
        raw: Value,
    },
}

pub async fn run(ctx: &Ctx, out: &mut dyn Write, args: &PlanArgs) -> Result<(), CliError> {
    let docs = parse(&read(&args.filename)?, &args.filename)?;
    let objects = docs
        .iter()
        .filter(|d| matches!(d, Doc::Object { .. }))
        .count();
    if args.against.is_some() && objects != 1 {
        return Err(CliError::Flag {
            flag: "--against",
            message: format!(
                "compares one Skyhook or NodeWright with a stored one, and {} holds {objects}",
                args.filename
            ),
        });
    }
    let kube = Kube::connect(&ctx.global).await?;
    let mut output = PlanOutput {
        validation: Vec::new(),
        plans: Vec::new(),
    };
    for doc in &docs {
        output
            .validation
            .push(server_check(&kube, doc, args.against.as_deref()).await?);
    }
    for doc in &docs {
        if let Doc::Object { api, sk, .. } = doc {
            let kube = kube.clone().in_api(*api);
            let name = args.against.clone().unwrap_or_else(|| sk.name_any());
            output.plans.push(
                plan_object(
                    ctx,
                    &mut output.validation,
                    &kube,
                    sk,
                    &name,
                    &policies_of(&docs, *api),
                )
                .await?,
            );
        }
    }
    if objects == 0 {
        plan_users(ctx, &kube, &docs, &mut output).await?;
    }
    if let Some(text) = structured(ctx.global.output, &output)? {
        write!(out, "{text}")?;
        return Ok(());
    }
    for line in &output.validation {
        writeln!(out, "{line}")?;
    }
    if output.plans.is_empty() {
        writeln!(
            out,
            "\nNo Skyhook or NodeWright uses the policies in {}: nothing would run.",
            args.filename
        )?;
    }
    for p in &output.plans {
        write!(out, "\n{}", text(ctx, p))?;
    }
    Ok(())
}

/// A file of policies only: the dry run of every stored object that uses one of them.
async fn plan_users(
    ctx: &Ctx,
    kube: &Kube,
    docs: &[Doc],
    output: &mut PlanOutput,
) -> Result<(), CliError> {
    for doc in docs {
        let Doc::Policy { api, policy, .. } = doc else {
            continue;
        };
        let kube = kube.clone().in_api(*api);
        for sk in users_of(&kube, &policy.name_any()).await? {
            let name = sk.name_any();
            let policies = policies_of(docs, *api);
            let plan =
                plan_object(ctx, &mut output.validation, &kube, &sk, &name, &policies).await?;
            output.plans.push(plan);
        }
    }
    Ok(())
}

/// The file's text; `-` is stdin.
fn read(path: &str) -> Result<String, CliError> {
    let mut text = String::new();
    let res = if path == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    res.map_err(|e| CliError::Flag {
        flag: "--filename",
        message: format!("cannot read {path}: {e}"),
    })?;
    Ok(text)
}

/// Every document of the file, typed by its apiVersion and kind.
fn parse(text: &str, path: &str) -> Result<Vec<Doc>, CliError> {
    let bad = |message: String| CliError::Flag {
        flag: "--filename",
        message,
    };
    let values: Vec<Value> = serde_saphyr::from_multiple(text)
        .map_err(|e| bad(format!("{path} is not YAML: {}", one_line(&e.to_string()))))?;
    let mut docs = Vec::new();
    for (i, raw) in values.into_iter().enumerate().filter(|(_, v)| !v.is_null()) {
        let at = format!("{path} (document {})", i + 1);
        let api_version = raw["apiVersion"].as_str().unwrap_or_default();
        let kind = raw["kind"].as_str().unwrap_or_default();
        let Some(api) = ApiKind::of_api_version(api_version) else {
            return Err(bad(format!(
                "{at}: apiVersion {api_version:?} is neither {} nor {}",
                ApiKind::Skyhook.api_version(),
                ApiKind::NodeWright.api_version()
            )));
        };
        let decode = |e: serde_json::Error| bad(format!("{at}: {kind}: {e}"));
        if kind == api.kind() {
            let mut sk: Skyhook = serde_json::from_value(raw.clone()).map_err(decode)?;
            skyhook::plan::localize::canonical(&mut sk, api);
            docs.push(Doc::Object {
                api,
                sk: Box::new(sk),
                raw,
            });
        } else if kind == "DeploymentPolicy" {
            let policy = serde_json::from_value(raw.clone()).map_err(decode)?;
            docs.push(Doc::Policy {
                api,
                policy: Box::new(policy),
                raw,
            });
        } else {
            return Err(bad(format!(
                "{at}: kind {kind:?} cannot be planned (a {}, or a DeploymentPolicy)",
                api.kind()
            )));
        }
    }
    if docs.is_empty() {
        return Err(bad(format!("{path} holds no object")));
    }
    Ok(docs)
}

/// The policies of the file in `api`'s group.
fn policies_of(docs: &[Doc], api: ApiKind) -> Vec<DeploymentPolicy> {
    docs.iter()
        .filter_map(|d| match d {
            Doc::Policy { api: a, policy, .. } if *a == api => Some((**policy).clone()),
            _ => None,
        })
        .collect()
}

/// The stored objects that name the policy `name`.
async fn users_of(kube: &Kube, name: &str) -> Result<Vec<Skyhook>, CliError> {
    let all = kube
        .skyhooks(&Default::default())
        .await
        .map_err(|e| kube.fail(e, format!("listing {}", kube.api().plural())))?;
    Ok(all
        .into_iter()
        .filter(|s| s.spec.deployment_policy.as_deref() == Some(name))
        .collect())
}

/// The API server's word on the object, by a server-side dry run of its create (or of its
/// update, when it exists): the CRD schema, its CEL rules and every admission policy.
async fn server_check(kube: &Kube, doc: &Doc, against: Option<&str>) -> Result<String, CliError> {
    let (resource, raw, what) = match doc {
        Doc::Object { api, sk, raw } => (object_resource(*api), raw, (api.kind(), sk.name_any())),
        Doc::Policy { api, policy, raw } => (
            policy_resource(*api),
            raw,
            ("DeploymentPolicy", policy.name_any()),
        ),
    };
    let name = match doc {
        Doc::Object { .. } => against.map_or(what.1.clone(), str::to_string),
        Doc::Policy { .. } => what.1.clone(),
    };
    let label = format!("{} {name:?}", what.0);
    let mut obj: DynamicObject =
        serde_json::from_value(raw.clone()).map_err(|e| CliError::Flag {
            flag: "--filename",
            message: format!("{label}: {e}"),
        })?;
    obj.metadata.name = Some(name.clone());
    let api: Api<DynamicObject> = Api::all_with(kube.client(), &resource);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let stored = api.get_opt(&name).await;
    let res = match stored {
        Ok(Some(s)) => {
            obj.metadata.resource_version = s.metadata.resource_version;
            api.replace(&name, &dry, &obj).await.map(|_| "update")
        }
        Ok(None) => api.create(&dry, &obj).await.map(|_| "create"),
        Err(e) => Err(e),
    };
    match res {
        Ok(verb) => Ok(format!(
            "{label}: the API server accepts it (a dry run of its {verb})"
        )),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(format!(
            "{label}: not checked by the API server's admission ({}); checked by the operator's own rules only",
            one_line(&s.message)
        )),
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => {
            let causes: Vec<String> = s
                .details
                .iter()
                .flat_map(|d| &d.causes)
                .map(|c| {
                    if c.field.is_empty() {
                        c.message.clone()
                    } else {
                        format!("{}: {}", c.field, c.message)
                    }
                })
                .collect();
            Err(CliError::Invalid {
                what: label,
                problems: if causes.is_empty() {
                    vec![one_line(&s.message)]
                } else {
                    causes
                },
            })
        }
        Err(e) => Err(kube.fail(e, format!("a dry run of {label}"))),
    }
}

/// The dry run of one object: the file's spec over the stored object `name` (its status, its
/// finalizers, its metadata), or a new one.
async fn plan_object(
    ctx: &Ctx,
    notes: &mut Vec<String>,
    kube: &Kube,
    file: &Skyhook,
    name: &str,
    policies: &[DeploymentPolicy],
) -> Result<Rollout, CliError> {
    let stored = match kube.skyhook(name).await {
        Ok(s) => Some(s),
        Err(CliError::SkyhookNotFound(_)) => None,
        Err(e) => return Err(e),
    };
    let mut sk = candidate(file, stored.as_ref(), name);
    crd::normalize(&mut sk);
    let status = stored.and_then(|s| s.status);
    let (snap, read) =
        planner::snapshot(kube, &ctx.global.namespace, &sk, status, policies).await?;
    notes.extend(read);
    let problems = crd::validate::problems(&sk, &snap.policies);
    if !problems.is_empty() {
        return Err(CliError::Invalid {
            what: format!("{} {name:?}", kube.api().kind()),
            problems,
        });
    }
    Ok(dry_run::simulate(&snap, Limits::default()))
}

/// The object as it would be stored: the file's spec, labels and annotations over the stored
/// object's metadata, one generation on when the spec changes.
fn candidate(file: &Skyhook, stored: Option<&Skyhook>, name: &str) -> Skyhook {
    let mut sk = file.clone();
    sk.metadata.name = Some(name.to_string());
    sk.status = None;
    let Some(stored) = stored else {
        sk.metadata.generation = Some(1);
        return sk;
    };
    let mut meta = stored.metadata.clone();
    for (k, v) in file.labels() {
        meta.labels
            .get_or_insert_default()
            .insert(k.clone(), v.clone());
    }
    for (k, v) in file.annotations() {
        meta.annotations
            .get_or_insert_default()
            .insert(k.clone(), v.clone());
    }
    let changed = serde_json::to_value(&stored.spec).ok() != serde_json::to_value(&file.spec).ok();
    meta.generation = Some(meta.generation.unwrap_or(1) + i64::from(changed));
    sk.metadata = meta;
    sk
}

fn human(secs: i64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s:02}s"),
        _ => format!("{h}h{m:02}m"),
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_string()
    } else {
        items.join(", ")
    }
}

/// The plan in words and tables.
fn text(ctx: &Ctx, r: &Rollout) -> String {
    let mut s = format!(
        "{} {:?} (policy {}): {} node(s) selected: {}\n",
        r.kind,
        r.name,
        r.policy,
        r.selected.len(),
        list(&r.selected)
    );
    if r.is_noop() {
        s.push_str("Nothing would run: every selected node already has this spec.\n");
        s.push_str(&ending(r));
        return s;
    }
    let first: Vec<String> = r
        .first_pass
        .jobs
        .iter()
        .map(|j| format!("{} {} {} on {}", j.stage, j.package, j.version, j.node))
        .collect();
    s.push_str(&format!("First Jobs: {}\n", list(&first)));
    let mut before: Vec<String> = r
        .first_pass
        .cordons
        .iter()
        .map(|n| format!("cordon {n}"))
        .collect();
    before.extend(
        r.first_pass
            .evictions
            .iter()
            .map(|e| format!("evict {} from {}", e.pod, e.node)),
    );
    if !before.is_empty() {
        s.push_str(&format!("Before them: {}\n", before.join(", ")));
    }
    if r.first_pass.deferred > 0 {
        s.push_str(&format!(
            "  ({} more due at once, created by the next pass)\n",
            r.first_pass.deferred
        ));
    }
    let headers = ["NODE", "BATCH", "START", "END", "WORK (WHY)", "INTERRUPT"];
    let rows: Vec<Vec<Field>> = r.nodes.iter().map(node_row).collect();
    s.push('\n');
    s.push_str(&ctx.painter.table(&headers, &rows));
    let headers = ["COMPARTMENT", "BATCH", "SIZE", "NODES", "START"];
    let rows: Vec<Vec<Field>> = r
        .batches
        .iter()
        .map(|b| {
            vec![
                b.compartment.as_str().into(),
                b.number.to_string().into(),
                b.nodes.len().to_string().into(),
                b.nodes.join(",").into(),
                format!("+{}", human(b.start_s)).into(),
            ]
        })
        .collect();
    s.push('\n');
    s.push_str(&ctx.painter.table(&headers, &rows));
    s.push('\n');
    s.push_str(&ending(r));
    s
}

/// One node's row: its batch, when it starts and ends, its work and why, its interrupt.
fn node_row(n: &NodeRun) -> Vec<Field> {
    let work: Vec<String> = n
        .packages
        .iter()
        .map(|p| {
            format!(
                "{} {} ({}): {}",
                p.package,
                p.version,
                p.reason,
                p.stages.join(",")
            )
        })
        .collect();
    let interrupt = n.interrupt.as_ref().map_or("-".to_string(), |i| {
        let mut parts = i.kinds.clone();
        if i.cordon {
            parts.push("cordon".to_string());
        }
        if !i.evictions.is_empty() {
            let pods: Vec<String> = i
                .evictions
                .iter()
                .map(|e| match &e.refused_by {
                    Some(b) => {
                        format!("{} (refused now by PodDisruptionBudget {b})", e.pod)
                    }
                    None => e.pod.clone(),
                })
                .collect();
            parts.push(format!("drain {}", pods.join(", ")));
        }
        parts.join("; ")
    });
    let batch = n
        .batch
        .as_ref()
        .map_or("-".to_string(), |(c, b)| format!("{c}/{b}"));
    vec![
        n.node.as_str().into(),
        batch.into(),
        format!("+{}", human(n.start_s)).into(),
        format!("+{}", human(n.end_s)).into(),
        work.join("; ").into(),
        interrupt.into(),
    ]
}

fn ending(r: &Rollout) -> String {
    let e = &r.estimate;
    let history = if e.from_jobs == 0 {
        "no finished Job in the cluster to time the stages by: stages counted as 1s".to_string()
    } else if e.without_history.is_empty() {
        format!("stage durations from {} finished Jobs", e.from_jobs)
    } else {
        format!(
            "stage durations from {} finished Jobs; no history for {} (counted as 1s)",
            e.from_jobs,
            e.without_history.join(", ")
        )
    };
    let end = match &r.end {
        End::Complete => "every selected node complete".to_string(),
        End::Waiting { reasons } => format!("it would wait: {}", reasons.join("; ")),
        End::Limit { passes } => format!("stopped after {passes} passes, not complete"),
    };
    format!(
        "Estimated duration: {} ({history}).\nThe dry run ends with {end} ({} passes of the operator's planner; nothing was written).\n",
        human(e.seconds),
        r.passes
    )
}

#[cfg(test)]
mod tests;
