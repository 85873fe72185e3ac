//! The observer: one rollout's delays, seen from outside the operator (see the crate docs).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use futures::{StreamExt, stream};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::jobs::{JobView, Outcome};
use skyhook::schema::{self, NodeState, Stage, State};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    skyhook: String,
    /// Namespace of the package Jobs or pods.
    #[arg(long)]
    namespace: String,
    /// What runs a stage: `jobs` (this operator, the floor) or `pods` (the reference).
    #[arg(long, value_parser = ["jobs", "pods"])]
    kind: String,
    /// The rollout's nodes (a label selector).
    #[arg(long)]
    selector: String,
    /// Stop when the Skyhook's status is `complete` (else only on SIGTERM or the timeout).
    #[arg(long)]
    until_complete: bool,
    #[arg(long, default_value_t = 7200)]
    timeout_seconds: u64,
    /// Where to write the JSON result.
    #[arg(long)]
    out: std::path::PathBuf,
    /// A file created the moment the Skyhook's status says `complete`, for bench/run to wait on
    /// (polling the status with kubectl fetched the whole Skyhook, a MiB at 1,000 nodes, every
    /// second: load the floor never had).
    #[arg(long)]
    complete_file: Option<std::path::PathBuf>,
}

/// One stage run on one node, by the clock of this process (seconds since it started).
#[derive(Debug, Clone)]
struct Run {
    node: String,
    package: String,
    stage: Stage,
    created: f64,
    /// Its pod was made (a Job with a pod, a reference pod no longer pending).
    started: Option<f64>,
    finished: Option<f64>,
}

type PackageStages = BTreeMap<String, (Stage, Option<State>)>;

#[derive(Default)]
struct Seen {
    runs: HashMap<String, Run>,
    /// node -> every distinct state observed, in order
    states: HashMap<String, Vec<(f64, PackageStages)>>,
    /// (time, completeNodes) whenever it changed
    complete: Vec<(f64, u64)>,
    done_at: Option<f64>,
}

enum Event {
    Job(Box<Job>),
    Pod(Box<Pod>),
    Node(Box<Node>),
    Skyhook(Box<DynamicObject>),
}

pub async fn run(client: Client, args: Args) -> anyhow::Result<()> {
    let start = Instant::now();
    let started_unix = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let label = format!("{}={}", schema::NAME_LABEL, args.skyhook);
    let by_label = watcher::Config::default().labels(&label);
    let work = if args.kind == "jobs" {
        watcher(
            Api::<Job>::namespaced(client.clone(), &args.namespace),
            by_label,
        )
        .default_backoff()
        .applied_objects()
        .map(|r| r.map(|o| Event::Job(Box::new(o))))
        .boxed()
    } else {
        watcher(
            Api::<Pod>::namespaced(client.clone(), &args.namespace),
            by_label,
        )
        .default_backoff()
        .applied_objects()
        .map(|r| r.map(|o| Event::Pod(Box::new(o))))
        .boxed()
    };
    let nodes = watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default().labels(&args.selector),
    )
    .default_backoff()
    .applied_objects()
    .map(|r| r.map(|o| Event::Node(Box::new(o))));
    let resource = ApiResource::erase::<Skyhook>(&());
    let skyhooks = watcher(
        Api::<DynamicObject>::all_with(client, &resource),
        watcher::Config::default().fields(&format!("metadata.name={}", args.skyhook)),
    )
    .default_backoff()
    .applied_objects()
    .map(|r| r.map(|o| Event::Skyhook(Box::new(o))));
    let mut events = stream::select(stream::select(work, nodes.boxed()), skyhooks.boxed());

    let annotation = schema::node_state_annotation(&args.skyhook);
    let mut seen = Seen::default();
    let deadline = tokio::time::sleep(Duration::from_secs(args.timeout_seconds));
    tokio::pin!(deadline);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut marked = false;
    loop {
        let now = || start.elapsed().as_secs_f64();
        if let (Some(_), Some(file), false) = (seen.done_at, &args.complete_file, marked) {
            std::fs::write(file, b"complete\n")
                .with_context(|| format!("writing {}", file.display()))?;
            marked = true;
        }
        if let Some(done) = seen.done_at {
            // trailing events (the last node patches) settle within a couple of seconds
            if now() - done > 3.0 {
                break;
            }
        }
        tokio::select! {
            ev = events.next() => {
                let Some(ev) = ev else { break };
                match ev {
                    Ok(Event::Job(j)) => seen.job(&j, now()),
                    Ok(Event::Pod(p)) => seen.pod(&p, now()),
                    Ok(Event::Node(n)) => seen.node(&n, &annotation, now()),
                    Ok(Event::Skyhook(s)) => seen.skyhook(&s, args.until_complete, now()),
                    Err(e) => tracing::warn!(error = %e, "watch error"),
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = &mut deadline => break,
            _ = term.recv() => break,
        }
    }
    let mut result = seen.summary();
    result["started_unix"] = json!(started_unix);
    result["observed_s"] = json!(start.elapsed().as_secs_f64());
    std::fs::write(&args.out, serde_json::to_vec_pretty(&result)?)
        .with_context(|| format!("writing {}", args.out.display()))?;
    Ok(())
}

impl Seen {
    fn job(&mut self, job: &Job, now: f64) {
        let Some(v) = JobView::from_job(job, None) else {
            return;
        };
        let finished = matches!(v.outcome, Outcome::Complete { .. });
        let started = job.status.as_ref().is_some_and(|s| {
            s.active.unwrap_or(0) + s.succeeded.unwrap_or(0) + s.failed.unwrap_or(0) > 0
        });
        let (node, package, stage) = (v.node.to_string(), v.package.to_string(), v.stage);
        self.saw(
            job.name_any(),
            (&node, &package, stage),
            started,
            finished,
            now,
        );
    }

    /// A reference package pod: `<pkg>-init`, then the stage container whose first argument is
    /// the stage; done when every init container exited 0.
    fn pod(&mut self, pod: &Pod, now: f64) {
        let Some(spec) = &pod.spec else { return };
        let inits = spec.init_containers.as_deref().unwrap_or_default();
        let (Some(first), Some(second)) = (inits.first(), inits.get(1)) else {
            return;
        };
        let package = first.name.trim_end_matches("-init").to_string();
        let Some(stage) = second
            .args
            .as_ref()
            .and_then(|a| a.first())
            .and_then(|s| s.parse::<Stage>().ok())
        else {
            return;
        };
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_deref())
            .unwrap_or_default();
        let finished = statuses.len() == inits.len()
            && statuses.iter().all(|c| {
                c.state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == 0)
            });
        let node = spec.node_name.clone().unwrap_or_default();
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p != "Pending")
            || !statuses.is_empty();
        self.saw(
            pod.uid().unwrap_or_default(),
            (&node, &package, stage),
            started,
            finished,
            now,
        );
    }

    fn saw(
        &mut self,
        key: String,
        (node, package, stage): (&str, &str, Stage),
        started: bool,
        finished: bool,
        now: f64,
    ) {
        let run = self.runs.entry(key).or_insert_with(|| Run {
            node: node.to_string(),
            package: package.to_string(),
            stage,
            created: now,
            started: None,
            finished: None,
        });
        if (started || finished) && run.started.is_none() {
            run.started = Some(now);
        }
        if finished && run.finished.is_none() {
            run.finished = Some(now);
        }
    }

    fn node(&mut self, node: &Node, annotation: &str, now: f64) {
        let Some(raw) = node.annotations().get(annotation) else {
            return;
        };
        let Ok(state) = NodeState::parse(raw) else {
            return;
        };
        let stages: PackageStages = state
            .iter()
            .map(|(_, s)| (s.name.to_string(), (s.stage, s.state)))
            .collect();
        let history = self.states.entry(node.name_any()).or_default();
        if history.last().map(|(_, s)| s) != Some(&stages) {
            history.push((now, stages));
        }
    }

    fn skyhook(&mut self, sk: &DynamicObject, until_complete: bool, now: f64) {
        let status = sk.data.get("status");
        let complete = status
            .and_then(|s| s.get("completeNodes"))
            .and_then(|c| match c {
                Value::String(s) => s.split('/').next()?.trim().parse().ok(),
                Value::Number(n) => n.as_u64(),
                _ => None,
            });
        if let Some(c) = complete
            && self.complete.last().map(|(_, v)| *v) != Some(c)
        {
            self.complete.push((now, c));
        }
        let state = status.and_then(|s| s.get("status")).and_then(Value::as_str);
        if until_complete && state == Some("complete") && self.done_at.is_none() {
            self.done_at = Some(now);
        }
    }

    fn summary(&self) -> Value {
        let finished: Vec<&Run> = self
            .runs
            .values()
            .filter(|r| r.finished.is_some())
            .collect();
        json!({
            "stages_created": self.runs.len(),
            "stages_finished": finished.len(),
            "next_stage_delay_s": quantiles(self.next_stage_delays(&finished)),
            "node_state_lag_s": quantiles(self.node_state_lags(&finished)),
            "complete_nodes_lag_s": quantiles(self.complete_nodes_lags(&finished)),
            "start_delay_s": quantiles(
                self.runs.values().filter_map(|r| Some(r.started? - r.created)).collect()
            ),
            "longest_stall": self.longest_stall(),
            "timeline": self.timeline(),
        })
    }

    /// The longest stretch with stages in flight and none finishing: where the rollout stood
    /// still, and who held it (stages waiting for a pod point at the Job controller, stages
    /// running at the nodes, none in flight at the operator).
    fn longest_stall(&self) -> Value {
        let mut ends: Vec<f64> = self.runs.values().filter_map(|r| r.finished).collect();
        ends.sort_by(f64::total_cmp);
        let Some((from, to)) = ends
            .windows(2)
            .map(|w| (w[0], w[1]))
            .max_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
        else {
            return Value::Null;
        };
        let mid = (from + to) / 2.0;
        let (waiting, running) = self.in_flight(mid);
        json!({"from_s": from, "seconds": to - from, "waiting_for_pod": waiting, "running": running})
    }

    /// Stages created but without a pod, and with a pod but not finished, at time `t`.
    fn in_flight(&self, t: f64) -> (usize, usize) {
        let before = |x: Option<f64>| x.is_some_and(|x| x <= t);
        let live = self
            .runs
            .values()
            .filter(|r| r.created <= t && !before(r.finished));
        live.fold((0, 0), |(w, r), run| {
            if before(run.started) {
                (w, r + 1)
            } else {
                (w + 1, r)
            }
        })
    }

    /// Every 30 s: stages created, given a pod and finished in that stretch, those in flight at
    /// its end, and `completeNodes` then.
    fn timeline(&self) -> Value {
        const STEP: f64 = 30.0;
        let end = self
            .runs
            .values()
            .filter_map(|r| r.finished)
            .fold(0.0, f64::max);
        let count = |pick: &dyn Fn(&Run) -> Option<f64>, from: f64, to: f64| {
            self.runs
                .values()
                .filter_map(pick)
                .filter(|t| *t > from && *t <= to)
                .count()
        };
        let mut rows = Vec::new();
        let mut t = STEP;
        while t < end + STEP {
            let (waiting, running) = self.in_flight(t);
            let complete = self
                .complete
                .iter()
                .take_while(|(at, _)| *at <= t)
                .last()
                .map_or(0, |(_, c)| *c);
            rows.push(json!([
                t,
                count(&|r| Some(r.created), t - STEP, t),
                count(&|r| r.started, t - STEP, t),
                count(&|r| r.finished, t - STEP, t),
                waiting,
                running,
                complete
            ]));
            t += STEP;
        }
        json!({
            "columns": ["t_s", "created", "started", "finished", "waiting_for_pod", "running",
                        "complete_nodes"],
            "rows": rows
        })
    }

    /// A stage finishing → the next stage of the same package on the same node created.
    fn next_stage_delays(&self, finished: &[&Run]) -> Vec<f64> {
        finished
            .iter()
            .filter_map(|r| {
                let done = r.finished?;
                self.runs
                    .values()
                    .filter(|n| n.node == r.node && n.package == r.package)
                    .filter(|n| n.stage.run_order() > r.stage.run_order())
                    .map(|n| (n.created - done).max(0.0))
                    .reduce(f64::min)
            })
            .collect()
    }

    /// A stage finishing → the node's state first saying it is done (complete, or past it).
    fn node_state_lags(&self, finished: &[&Run]) -> Vec<f64> {
        finished
            .iter()
            .filter_map(|r| {
                let done = r.finished?;
                let history = self.states.get(&r.node)?;
                history
                    .iter()
                    .find(|(_, s)| {
                        s.get(&r.package).is_some_and(|(stage, state)| {
                            stage.run_order() > r.stage.run_order()
                                || (*stage == r.stage && *state == Some(State::Complete))
                        })
                    })
                    .map(|(t, _)| (t - done).max(0.0))
            })
            .collect()
    }

    /// The k-th node to finish its last stage → `completeNodes` reaching k.
    fn complete_nodes_lags(&self, finished: &[&Run]) -> Vec<f64> {
        let mut last: HashMap<&str, f64> = HashMap::new();
        for r in finished {
            let t = r.finished.unwrap_or_default();
            let e = last.entry(r.node.as_str()).or_insert(t);
            *e = e.max(t);
        }
        let mut ends: Vec<f64> = last.into_values().collect();
        ends.sort_by(f64::total_cmp);
        ends.iter()
            .enumerate()
            .filter_map(|(k, t)| {
                self.complete
                    .iter()
                    .find(|(_, c)| *c as usize > k)
                    .map(|(at, _)| (at - t).max(0.0))
            })
            .collect()
    }
}

fn quantiles(mut v: Vec<f64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    json!({"n": v.len(), "p50": q(0.50), "p99": q(0.99), "max": v[v.len() - 1]})
}
