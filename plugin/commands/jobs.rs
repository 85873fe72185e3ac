//! `jobs`: the Jobs of one rollout, in stage order, with outcomes from their conditions. Also
//! the Job and pod lookup `logs` shares: identity from labels and annotations
//! (`skyhook::jobs::JobView`), never from names.

use std::io::Write;

use jiff::Timestamp;
use serde::Serialize;
use skyhook::jobs::Outcome;
use skyhook::schema;

use crate::app::Ctx;
use crate::app::error::CliError;
use crate::app::jobs::{Found, find, waiting_reason};
use crate::app::output::{Field, OutputFormat, Painter, Tone, untabled};
use crate::app::sort::{Sortable, sort_by_key};
use crate::cli::JobsArgs;

/// One row of `jobs`, as scripts see it in `-o json|yaml`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobRow {
    pub node_name: String,
    pub skyhook_name: String,
    pub package: String,
    pub version: String,
    pub stage: String,
    pub attempt: u32,
    /// `Running`, `Complete` or `Failed`.
    pub status: String,
    /// Why it failed (`DeadlineExceeded`, `BackoffLimitExceeded`, `PodFailurePolicy`, ...) or
    /// why its pod waits (`ImagePullBackOff`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i64>,
    pub job_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    pub resource_id: String,
}

impl JobRow {
    /// What `jobs --sort-by` accepts: these rows' JSON keys (not `message`); `-o name` prints
    /// `jobName`.
    pub const SORTABLE: Sortable = Sortable {
        fields: &[
            "nodeName",
            "skyhookName",
            "package",
            "version",
            "stage",
            "attempt",
            "status",
            "reason",
            "startTime",
            "durationSeconds",
            "jobName",
            "podName",
            "resourceId",
        ],
        name_field: "jobName",
    };
}

/// The row of one Job; `now` measures running Jobs.
pub fn row(found: &Found, now: Timestamp) -> JobRow {
    let v = &found.view;
    let status = found.job.status.as_ref();
    let start = status
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0)
        .or(v.created);
    let (word, reason, message, end) = match &v.outcome {
        Outcome::Running => {
            let waiting = found.pod.as_ref().and_then(waiting_reason);
            let (reason, message) = match waiting {
                Some((container, reason, message)) => (
                    Some(reason),
                    Some(format!("container {container}: {message}")),
                ),
                None => (None, None),
            };
            ("Running", reason, message, now)
        }
        Outcome::Complete { at } => ("Complete", None, None, *at),
        Outcome::Failed {
            at,
            reason,
            message,
        } => (
            "Failed",
            Some(reason.clone()),
            (!message.is_empty()).then(|| message.clone()),
            *at,
        ),
    };
    let resource_id = found
        .job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(schema::RESOURCE_ID_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    JobRow {
        node_name: v.node.to_string(),
        skyhook_name: v.skyhook.to_string(),
        package: v.package.to_string(),
        version: v.version.to_string(),
        stage: v.stage.as_str().to_string(),
        attempt: v.attempt,
        status: word.to_string(),
        reason: reason.filter(|r| !r.is_empty()),
        message: message.filter(|m| !m.is_empty()),
        start_time: start.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        duration_seconds: start.map(|s| end.as_second().saturating_sub(s.as_second()).max(0)),
        job_name: v.name.to_string(),
        pod_name: found.pod.as_ref().and_then(|p| p.metadata.name.clone()),
        resource_id,
    }
}

/// `95` → `1m35s`, as kubectl prints ages.
pub fn human_duration(secs: i64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m"),
    }
}

fn status_field(row: &JobRow) -> Field {
    let tone = match (row.status.as_str(), &row.reason) {
        ("Complete", _) => Tone::Good,
        ("Failed", _) | ("Running", Some(_)) => Tone::Bad,
        _ => Tone::Busy,
    };
    Field::toned(row.status.as_str(), tone)
}

pub fn render(
    painter: &Painter,
    format: OutputFormat,
    rows: &[JobRow],
) -> Result<String, CliError> {
    let job_names = rows.iter().map(|r| r.job_name.as_str());
    if let Some(text) = untabled(format, "job.batch", job_names, rows)? {
        return Ok(text);
    }
    let wide = format == OutputFormat::Wide;
    let mut headers = vec![
        "NODE", "PACKAGE", "STAGE", "ATTEMPT", "STATUS", "REASON", "STARTED", "DURATION", "POD",
    ];
    if wide {
        headers.extend(["SKYHOOK", "VERSION", "JOB", "MESSAGE"]);
    }
    let table_rows: Vec<Vec<Field>> = rows
        .iter()
        .map(|r| {
            let mut fields = vec![
                Field::from(r.node_name.as_str()),
                Field::from(r.package.as_str()),
                Field::from(r.stage.as_str()),
                Field::from(r.attempt.to_string()),
                status_field(r),
                Field::from(r.reason.as_deref().unwrap_or("")),
                Field::from(r.start_time.as_deref().unwrap_or("")),
                Field::from(r.duration_seconds.map(human_duration).unwrap_or_default()),
                Field::from(r.pod_name.as_deref().unwrap_or("<none>")),
            ];
            if wide {
                fields.extend([
                    Field::from(r.skyhook_name.as_str()),
                    Field::from(r.version.as_str()),
                    Field::from(r.job_name.as_str()),
                    Field::from(r.message.as_deref().unwrap_or("")),
                ]);
            }
            fields
        })
        .collect();
    Ok(painter.table(&headers, &table_rows))
}

/// `SKYHOOK_RESOURCE_ID` is `<sh>-<uid>-<gen>_<pkg>_<ver>`; a bare `<sh>-<uid>-<gen>` names a
/// whole generation (every package).
enum Wanted<'a> {
    Package(&'a str),
    Generation(&'a str),
}

impl Wanted<'_> {
    /// The label selector that narrows the list before the annotations are compared.
    fn selector(&self) -> String {
        match self {
            Wanted::Package(full) => format!(
                "{}={}",
                schema::RESOURCE_ID_LABEL,
                schema::resource_id_label(full)
            ),
            Wanted::Generation(_) => schema::RESOURCE_ID_LABEL.to_string(),
        }
    }

    /// Whether a Job's full resource-id annotation belongs to what was asked for.
    fn matches(&self, annotation: &str) -> bool {
        match self {
            Wanted::Package(full) => annotation == *full,
            Wanted::Generation(generation) => annotation
                .strip_prefix(generation)
                .is_some_and(|rest| rest.starts_with('_')),
        }
    }
}

fn wanted(id: &str) -> Wanted<'_> {
    match schema::parse_agent_resource_id(id) {
        Ok(_) => Wanted::Package(id),
        Err(_) => Wanted::Generation(id),
    }
}

pub async fn run(ctx: &Ctx, out: &mut dyn Write, args: &JobsArgs) -> Result<(), CliError> {
    let kube = ctx.kube().await?;
    let ns = &ctx.global.namespace;
    let mut found = match (&args.resource_id, &args.skyhook) {
        (Some(id), _) => {
            let want = wanted(id);
            let selector = want.selector();
            let all = find(&kube, ns, &selector).await?;
            all.into_iter()
                .filter(|f| {
                    f.job
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(schema::RESOURCE_ID_ANNOTATION))
                        .is_some_and(|a| want.matches(a))
                })
                .filter(|f| args.skyhook.as_ref().is_none_or(|s| *s == f.view.skyhook))
                .collect::<Vec<_>>()
        }
        (None, Some(sk)) => {
            let selector = format!("{}={sk}", schema::NAME_LABEL);
            find(&kube, ns, &selector).await?
        }
        (None, None) => {
            return Err(CliError::Api {
                action: "jobs".to_string(),
                message: "pass --resource-id or --skyhook".to_string(),
            });
        }
    };
    found.retain(|f| {
        args.node.as_ref().is_none_or(|n| *n == f.view.node)
            && args.package.as_ref().is_none_or(|p| *p == f.view.package)
    });
    if found.is_empty() {
        if let Some(sk) = &args.skyhook {
            kube.skyhook(sk).await?;
        }
        return Err(CliError::NoJobs {
            what: describe_filter(args),
            namespace: ns.clone(),
        });
    }
    let now = Timestamp::now();
    let mut rows: Vec<JobRow> = found.iter().map(|f| row(f, now)).collect();
    if let Some(key) = &ctx.global.sort_key {
        sort_by_key(&mut rows, key);
    }
    out.write_all(render(&ctx.painter, ctx.global.output, &rows)?.as_bytes())?;
    Ok(())
}

fn describe_filter(args: &JobsArgs) -> String {
    let mut parts = Vec::new();
    if let Some(id) = &args.resource_id {
        parts.push(format!("resource id {id:?}"));
    }
    if let Some(sk) = &args.skyhook {
        parts.push(format!("skyhook {sk:?}"));
    }
    if let Some(p) = &args.package {
        parts.push(format!("package {p:?}"));
    }
    if let Some(n) = &args.node {
        parts.push(format!("node {n:?}"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::jobs::{JOB_NAME_LABEL, assemble};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn job(
        name: &str,
        stage: &str,
        attempt: u32,
        node: &str,
        conditions: serde_json::Value,
    ) -> Job {
        let pkg = format!(
            r#"{{"name":"tuning","version":"1.0","skyhook":"sh","stage":"{stage}","image":"img"}}"#
        );
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "skyhook",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {
                    schema::PACKAGE_ANNOTATION: pkg,
                    schema::NODE_ANNOTATION: node,
                    schema::ATTEMPT_ANNOTATION: attempt.to_string(),
                    schema::RESOURCE_ID_ANNOTATION: "sh-uid-1_tuning_1.0",
                }},
            "status": {"startTime": "2026-01-01T00:00:01Z", "conditions": conditions},
        }))
        .unwrap()
    }

    fn pod(job: &str, waiting: Option<&str>) -> Pod {
        let statuses = match waiting {
            Some(r) => {
                json!([{"name": "tuning-apply", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                               "state": {"waiting": {"reason": r, "message": "pull failed"}}}])
            }
            None => json!([]),
        };
        serde_json::from_value(json!({
            "metadata": {"name": format!("{job}-abcde"), "labels": {JOB_NAME_LABEL: job},
                         "creationTimestamp": "2026-01-01T00:00:01Z"},
            "status": {"initContainerStatuses": statuses},
        }))
        .unwrap()
    }

    fn done(kind: &str, reason: &str, at: &str) -> serde_json::Value {
        json!([{"type": kind, "status": "True", "reason": reason, "message": format!("{kind} {reason}"), "lastTransitionTime": at}])
    }

    fn sample() -> Vec<JobRow> {
        let jobs = vec![
            job("c1", "config", 1, "node-1", json!([])),
            job(
                "a2",
                "apply",
                2,
                "node-1",
                done("Complete", "CompletionsReached", "2026-01-01T00:01:36Z"),
            ),
            job(
                "a1",
                "apply",
                1,
                "node-1",
                done("Failed", "PodFailurePolicy", "2026-01-01T00:00:04Z"),
            ),
            job("x1", "apply", 1, "node-2", json!([])),
        ];
        let pods = vec![
            pod("c1", None),
            pod("a1", None),
            pod("x1", Some("ImagePullBackOff")),
        ];
        let now = "2026-01-01T00:02:00Z".parse().unwrap();
        assemble(jobs, pods).iter().map(|f| row(f, now)).collect()
    }

    #[test]
    fn rows_follow_stage_order_with_outcomes_from_conditions() {
        let rows = sample();
        let got: Vec<(&str, &str, u32, &str, Option<&str>)> = rows
            .iter()
            .map(|r| {
                (
                    r.node_name.as_str(),
                    r.stage.as_str(),
                    r.attempt,
                    r.status.as_str(),
                    r.reason.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("node-1", "apply", 1, "Failed", Some("PodFailurePolicy")),
                ("node-1", "apply", 2, "Complete", None),
                ("node-1", "config", 1, "Running", None),
                ("node-2", "apply", 1, "Running", Some("ImagePullBackOff")),
            ]
        );
        assert_eq!(rows[0].duration_seconds, Some(3));
        assert_eq!(rows[1].duration_seconds, Some(95));
        assert_eq!(rows[2].duration_seconds, Some(119));
        assert_eq!(rows[1].pod_name, None);
        assert_eq!(rows[0].pod_name.as_deref(), Some("a1-abcde"));
        assert_eq!(human_duration(95), "1m35s");
        assert_eq!(human_duration(3700), "1h1m");
    }

    #[test]
    fn outputs() {
        let rows = sample();
        let p = Painter::new(false);
        insta::with_settings!({snapshot_path => "../../tests/snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!("jobs_table", render(&p, OutputFormat::Table, &rows).unwrap());
            insta::assert_snapshot!("jobs_wide", render(&p, OutputFormat::Wide, &rows).unwrap());
            insta::assert_snapshot!("jobs_json", render(&p, OutputFormat::Json, &rows).unwrap());
        });
    }

    #[test]
    fn names_no_headers_and_sort_by() {
        let mut rows = sample();
        let p = Painter::new(false);
        let names = render(&p, OutputFormat::Name, &rows).unwrap();
        assert_eq!(
            names,
            "job.batch/a1\njob.batch/a2\njob.batch/c1\njob.batch/x1\n"
        );
        let table = render(&p, OutputFormat::Table, &rows).unwrap();
        let bare = render(&p.without_headers(true), OutputFormat::Table, &rows).unwrap();
        assert!(table.starts_with("NODE "), "{table}");
        // The same rows (columns as wide as their widest value, as kubectl's).
        let words = |t: &str| -> Vec<Vec<String>> {
            t.lines()
                .map(|l| l.split_whitespace().map(str::to_string).collect())
                .collect()
        };
        assert_eq!(words(&bare), words(table.split_once('\n').unwrap().1));
        assert!(
            bare.starts_with("node-1   tuning   apply    1   Failed"),
            "{bare}"
        );
        // Shortest first, by number (3 < 95 < 119), not by text; ties keep their order.
        rows.reverse();
        sort_by_key(
            &mut rows,
            &crate::app::sort::SortKey(vec!["durationSeconds".into()]),
        );
        let order: Vec<(&str, Option<i64>)> = rows
            .iter()
            .map(|r| (r.job_name.as_str(), r.duration_seconds))
            .collect();
        assert_eq!(
            order,
            [
                ("a1", Some(3)),
                ("a2", Some(95)),
                ("x1", Some(119)),
                ("c1", Some(119))
            ]
        );
    }

    /// `--sort-by` and `-o name` name JSON keys; a renamed field must take its name along.
    #[test]
    fn sortable_fields_are_keys_of_the_rows() {
        // The failed attempt: it has every optional field (reason, start, duration, pod).
        let failed = sample().remove(0);
        assert_eq!(failed.reason.as_deref(), Some("PodFailurePolicy"));
        let sortable = JobRow::SORTABLE;
        assert_eq!(sortable.absent_from(&failed), Vec::<&str>::new());
        let json = serde_json::to_value(&failed).unwrap();
        assert_eq!(
            render(
                &Painter::new(false),
                OutputFormat::Name,
                std::slice::from_ref(&failed)
            )
            .unwrap(),
            format!(
                "job.batch/{}\n",
                json[sortable.name_field].as_str().unwrap()
            )
        );
    }

    #[test]
    fn resource_ids_of_a_package_or_a_generation() {
        assert!(matches!(wanted("sh-uid-3_tuning_1.0"), Wanted::Package(_)));
        assert!(matches!(wanted("sh-uid-3"), Wanted::Generation(_)));
        assert!(wanted("sh-uid-3").matches("sh-uid-3_tuning_1.0"));
        assert!(!wanted("sh-uid-3").matches("sh-uid-33_tuning_1.0"));
        assert!(wanted("sh-uid-3_tuning_1.0").matches("sh-uid-3_tuning_1.0"));
        assert!(!wanted("sh-uid-3_tuning_1.0").matches("sh-uid-3_tuning_1.1"));
    }
}
