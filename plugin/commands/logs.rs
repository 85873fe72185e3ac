//! `logs` / `package logs`: the logs of a package's stage Jobs on a node, init containers
//! included (the stages run there), in stage order, each line prefixed `[stage/container]`.
//! `-f` follows the running stage and moves on to the next stage's Job as it appears, until the
//! package completes (exit 0) or errors (exit 1).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, LogParams};
use skyhook::interned::Shared;
use skyhook::jobs::{JobView, Outcome, STUCK_WAITING_REASONS};
use skyhook::schema::{self, NodePattern, NodeState, Stage, State};

use crate::app::Ctx;
use crate::app::error::CliError;
use crate::app::jobs::{Found, container_statuses, find};
use crate::app::kube::Kube;
use crate::app::nodes::select_nodes;
use crate::app::packages::spec_version;
use crate::cli::LogsArgs;

/// How often `-f` looks for new Jobs and container states.
const POLL: Duration = Duration::from_secs(1);
/// Rounds a follower retries a container whose log cannot be read yet.
const QUIET_RETRIES: u32 = 10;
/// After a followed container terminated, how long its stream may still deliver lines.
const DRAIN: Duration = Duration::from_secs(2);

/// The Jobs `args` asks for, in stage order; only the newest attempt of each stage unless
/// `--all-attempts`.
pub fn select(found: Vec<Found>, args: &LogsArgs, node: Option<&NodePattern>) -> Vec<Found> {
    let mut picked: Vec<Found> = found
        .into_iter()
        .filter(|f| {
            f.view.package == args.package
                && node.is_none_or(|p| p.matches(&f.view.node))
                && args.stage.is_none_or(|s| s == f.view.stage)
        })
        .collect();
    if !args.all_attempts {
        let key = |v: &JobView| -> (Shared, Shared, Shared, Stage) {
            (
                v.node.clone(),
                v.skyhook.clone(),
                v.version.clone(),
                v.stage,
            )
        };
        let mut newest: HashMap<_, u32> = HashMap::new();
        for f in &picked {
            let e = newest.entry(key(&f.view)).or_insert(f.view.attempt);
            *e = (*e).max(f.view.attempt);
        }
        picked.retain(|f| newest.get(&key(&f.view)) == Some(&f.view.attempt));
    }
    picked
}

/// What happened to one Job's containers in this round.
#[derive(Debug, PartialEq, Eq)]
enum Progress {
    /// Everything the Job will ever log has been printed.
    Done,
    /// A container has not started yet: later containers and Jobs must wait (`-f` only).
    Waiting,
}

struct Printer<'a> {
    ctx: &'a Ctx,
    kube: &'a Kube,
    args: &'a LogsArgs,
    follow: bool,
    /// (Job, container) pairs already printed.
    printed: HashSet<(String, String)>,
    /// Failed reads per (Job, container) while following.
    failures: HashMap<(String, String), u32>,
}

fn stage_slot(stage: Stage) -> usize {
    Stage::ALL.iter().position(|s| *s == stage).unwrap_or(0)
}

fn container_status<'p>(pod: &'p Pod, name: &str) -> Option<&'p ContainerStatus> {
    container_statuses(pod).find(|c| c.name == name)
}

/// Container names in the order they run: init containers, then the others.
fn container_names(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.name.clone())
        .collect()
}

fn pod_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

impl Printer<'_> {
    fn prefix(&self, stage: Stage, container: &str) -> String {
        self.ctx
            .painter
            .paint_slot(&format!("[{stage}/{container}]"), stage_slot(stage))
    }

    fn params(&self, container: &str, follow: bool) -> LogParams {
        LogParams {
            container: Some(container.to_string()),
            follow,
            previous: self.args.previous,
            since_seconds: self
                .args
                .since
                .map(|d| i64::try_from(d.as_secs().max(1)).unwrap_or(i64::MAX)),
            tail_lines: (self.args.tail >= 0).then_some(self.args.tail),
            timestamps: self.args.timestamps,
            ..LogParams::default()
        }
    }

    fn line(&self, out: &mut dyn Write, prefix: &str, text: &str) -> Result<(), CliError> {
        writeln!(out, "{prefix} {text}")?;
        if self.follow {
            out.flush()?;
        }
        Ok(())
    }

    async fn print_job(&mut self, out: &mut dyn Write, f: &Found) -> Result<Progress, CliError> {
        let stage = f.view.stage;
        let job = f.view.name.to_string();
        let Some(pod) = &f.pod else {
            if f.view.finished() && self.printed.insert((job.clone(), String::new())) {
                let prefix = self.prefix(stage, "-");
                let text =
                    format!("(no logs: the pod of Job {job} is gone; its logs went with it)");
                self.line(out, &prefix, &text)?;
            }
            return Ok(if f.view.finished() {
                Progress::Done
            } else {
                Progress::Waiting
            });
        };
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        for container in container_names(pod) {
            if self.printed.contains(&(job.clone(), container.clone())) {
                continue;
            }
            let prefix = self.prefix(stage, &container);
            let state = container_status(pod, &container).and_then(|c| c.state.clone());
            let running = state.as_ref().is_some_and(|s| s.running.is_some());
            let terminated = state.as_ref().is_some_and(|s| s.terminated.is_some());
            let waiting = state.as_ref().and_then(|s| s.waiting.clone());
            if running || terminated {
                // A container that just started may not have a log yet: while following, try
                // again in the next rounds before showing the error.
                let key = (job.clone(), container.clone());
                let tries = self.failures.get(&key).copied().unwrap_or(0);
                let quiet = self.follow && tries < QUIET_RETRIES;
                let follow = running && self.follow;
                let read = self
                    .print_log(out, &pod_name, &container, &prefix, quiet, follow)
                    .await?;
                if !read {
                    self.failures.insert(key, tries + 1);
                    return Ok(Progress::Waiting);
                }
            } else if let Some(reason) = waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .filter(|r| STUCK_WAITING_REASONS.contains(&r.as_str()) || r == "CrashLoopBackOff")
            {
                let message = waiting.and_then(|w| w.message).unwrap_or_default();
                self.line(out, &prefix, &format!("(no logs: {reason}: {message})"))?;
            } else if !(pod_finished(pod) || f.view.finished()) {
                // Not started yet: it and everything after it come in a later round.
                return Ok(Progress::Waiting);
            }
            self.printed.insert((job.clone(), container));
        }
        Ok(if f.view.finished() || pod_finished(pod) {
            Progress::Done
        } else {
            Progress::Waiting
        })
    }

    /// Prints a container's log, following it when `follow` (it is running);
    /// `Ok(false)` when it could not be read and `quiet` asked to keep the error for a later
    /// attempt.
    async fn print_log(
        &self,
        out: &mut dyn Write,
        pod: &str,
        container: &str,
        prefix: &str,
        quiet: bool,
        follow: bool,
    ) -> Result<bool, CliError> {
        let pods: Api<Pod> = Api::namespaced(self.kube.client(), &self.ctx.global.namespace);
        let params = self.params(container, follow);
        let (verb, err) = if follow {
            match pods.log_stream(pod, &params).await {
                Ok(stream) => {
                    self.stream(out, &pods, stream, pod, container, prefix)
                        .await?;
                    return Ok(true);
                }
                Err(e) => ("following", e),
            }
        } else {
            match pods.logs(pod, &params).await {
                Ok(text) => {
                    for l in text.lines() {
                        self.line(out, prefix, l)?;
                    }
                    return Ok(true);
                }
                Err(e) => ("getting", e),
            }
        };
        if quiet {
            return Ok(false);
        }
        let e = self
            .kube
            .fail(err, format!("{verb} logs of {pod}/{container}"));
        self.line(out, prefix, &format!("(error: {e})"))?;
        Ok(true)
    }

    /// Prints a running container's log stream until the container terminates. The stream is
    /// not trusted to end on its own (a fake kubelet may keep it open), so the container's
    /// state is polled too.
    async fn stream(
        &self,
        out: &mut dyn Write,
        pods: &Api<Pod>,
        stream: impl futures::AsyncBufRead,
        pod: &str,
        container: &str,
        prefix: &str,
    ) -> Result<(), CliError> {
        let mut lines = Box::pin(stream.lines());
        let mut tick = tokio::time::interval(POLL);
        let mut ended: Option<Instant> = None;
        loop {
            tokio::select! {
                next = lines.next() => match next {
                    Some(Ok(l)) => self.line(out, prefix, &l)?,
                    Some(Err(e)) => {
                        self.line(out, prefix, &format!("(error reading the log stream: {e})"))?;
                        break;
                    }
                    None => break,
                },
                _ = tick.tick() => match ended {
                    Some(at) if at.elapsed() >= DRAIN => break,
                    Some(_) => {}
                    None => {
                        let gone = match pods.get_opt(pod).await {
                            Ok(Some(p)) => container_status(&p, container)
                                .and_then(|c| c.state.as_ref())
                                .is_none_or(|s| s.running.is_none()),
                            Ok(None) => true,
                            Err(_) => false,
                        };
                        if gone {
                            ended = Some(Instant::now());
                        }
                    }
                },
            }
        }
        Ok(())
    }
}

/// Why nothing matched, as the most specific error available.
async fn nothing_found(kube: &Kube, args: &LogsArgs, namespace: &str) -> CliError {
    if let Some(sk) = &args.skyhook {
        match kube.skyhook(sk).await {
            Ok(obj) => {
                if let Err(e) = spec_version(&obj, sk, &args.package) {
                    return e;
                }
            }
            Err(e) => return e,
        }
    }
    if let Some(node) = &args.node {
        match kube.nodes().await {
            Ok(nodes) => {
                if let Err(e) = select_nodes(
                    std::slice::from_ref(node),
                    nodes.iter().map(|n| n.name.as_str()),
                ) {
                    return e;
                }
            }
            Err(e) => return e,
        }
    }
    let mut what = format!("package {:?}", args.package);
    if let Some(sk) = &args.skyhook {
        what.push_str(&format!(" of skyhook {sk:?}"));
    }
    if let Some(n) = &args.node {
        what.push_str(&format!(" on node {n:?}"));
    }
    if let Some(s) = args.stage {
        what.push_str(&format!(" at stage {s}"));
    }
    CliError::NoJobs {
        what,
        namespace: namespace.to_string(),
    }
}

fn selector(args: &LogsArgs) -> String {
    match &args.skyhook {
        Some(sk) => format!("{}={sk}", schema::NAME_LABEL),
        None => schema::NAME_LABEL.to_string(),
    }
}

pub async fn run(ctx: &Ctx, out: &mut dyn Write, args: &LogsArgs) -> Result<(), CliError> {
    let pattern = args.node.as_deref().map(NodePattern::new).transpose()?;
    let kube = ctx.kube().await?;
    let ns = &ctx.global.namespace;
    let found = select(
        find(&kube, ns, &selector(args)).await?,
        args,
        pattern.as_ref(),
    );
    let mut printer = Printer {
        ctx,
        kube: &kube,
        args,
        follow: args.follow,
        printed: HashSet::new(),
        failures: HashMap::new(),
    };
    if args.follow {
        return follow(&mut printer, out, found, pattern.as_ref()).await;
    }
    if found.is_empty() {
        return Err(nothing_found(&kube, args, ns).await);
    }
    let groups: BTreeSet<(&str, &str)> = found
        .iter()
        .map(|f| (f.view.node.as_str(), f.view.skyhook.as_str()))
        .collect();
    let mut current = None;
    for f in &found {
        let group = (f.view.node.as_str(), f.view.skyhook.as_str());
        if groups.len() > 1 && current != Some(group) {
            if current.is_some() {
                writeln!(out)?;
            }
            writeln!(out, "==> node {} (skyhook {}) <==", group.0, group.1)?;
            current = Some(group);
        }
        printer.print_job(out, f).await?;
    }
    Ok(())
}

/// The package's entry in the node state, and whether it has reached its end.
enum Verdict {
    Running,
    Complete,
    Erroring { stage: Stage },
}

fn verdict(state: Option<&NodeState>, package: &str, version: &str, terminal: Stage) -> Verdict {
    match state.and_then(|s| s.get(package, version)) {
        Some(e) if e.state == Some(State::Erroring) => Verdict::Erroring { stage: e.stage },
        Some(e) if e.state == Some(State::Complete) && e.stage == terminal => Verdict::Complete,
        _ => Verdict::Running,
    }
}

async fn follow(
    printer: &mut Printer<'_>,
    out: &mut dyn Write,
    first: Vec<Found>,
    pattern: Option<&NodePattern>,
) -> Result<(), CliError> {
    let args = printer.args;
    let kube = printer.kube;
    let ns = printer.ctx.global.namespace.clone();
    let pairs: BTreeSet<(String, String)> = first
        .iter()
        .map(|f| (f.view.node.to_string(), f.view.skyhook.to_string()))
        .collect();
    let (node, skyhook) = match (pairs.len(), pattern, &args.skyhook) {
        (1, _, _) => pairs.into_iter().next().unwrap_or_default(),
        // Nothing ran yet: wait for it, if the target is named exactly.
        (0, Some(p), Some(sk)) if !p.is_regex() => {
            let node = args.node.clone().unwrap_or_default();
            kube.node_annotations(&node).await?;
            (node, sk.clone())
        }
        (0, _, _) => return Err(nothing_found(kube, args, &ns).await),
        _ => {
            let list: Vec<String> = pairs
                .iter()
                .map(|(n, s)| format!("{n} (skyhook {s})"))
                .collect();
            return Err(CliError::Follow(format!(
                "-f follows one node of one Skyhook, and package {:?} ran on {}; narrow with --node and --skyhook",
                args.package,
                list.join(", ")
            )));
        }
    };
    let sk = kube.skyhook(&skyhook).await?;
    let version = spec_version(&sk, &skyhook, &args.package)?;
    let has_interrupt = sk
        .spec
        .packages
        .get(&args.package)
        .is_some_and(|p| p.interrupt.is_some());
    let terminal = Stage::terminal(has_interrupt);
    let state_key = schema::node_state_annotation(&skyhook);
    let exact = NodePattern::new(&regex_escape_anchor(&node))?;
    let mut found = first;
    loop {
        let mut settled = true;
        for f in &found {
            if printer.print_job(out, f).await? == Progress::Waiting {
                settled = false;
                break;
            }
        }
        let busy = found
            .iter()
            .any(|f| matches!(f.view.outcome, Outcome::Running));
        if settled && !busy {
            let (annotations, _) = kube.node_annotations(&node).await?;
            let state = annotations
                .get(&state_key)
                .and_then(|raw| NodeState::parse(raw).ok());
            match verdict(state.as_ref(), &args.package, &version, terminal) {
                Verdict::Complete => return Ok(()),
                Verdict::Erroring { stage } => {
                    return Err(CliError::Follow(format!(
                        "package {:?} is erroring on node {node:?} at stage {stage}; see its attempts with: kubectl skyhook jobs --skyhook {skyhook} --node {node} --package {}",
                        args.package, args.package
                    )));
                }
                Verdict::Running => {}
            }
        }
        tokio::time::sleep(POLL).await;
        let selector = format!("{}={skyhook}", schema::NAME_LABEL);
        found = select(find(kube, &ns, &selector).await?, args, Some(&exact));
    }
}

/// A node name as a pattern that matches only itself.
fn regex_escape_anchor(name: &str) -> String {
    if name.chars().any(|c| ".*+?^${}[]|()\\".contains(c)) {
        regex::escape(name)
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    fn args(extra: &[&str]) -> LogsArgs {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            logs: LogsArgs,
        }
        let mut argv = vec!["t", "tuning"];
        argv.extend(extra);
        T::parse_from(argv).logs
    }

    fn found(package: &str, node: &str, stage: &str, attempt: u32) -> Found {
        let pkg = format!(
            r#"{{"name":"{package}","version":"1.0","skyhook":"sh","stage":"{stage}","image":"img"}}"#
        );
        let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
            "metadata": {"name": format!("{package}-{node}-{stage}-{attempt}"), "annotations": {
                schema::PACKAGE_ANNOTATION: pkg,
                schema::NODE_ANNOTATION: node,
                schema::ATTEMPT_ANNOTATION: attempt.to_string(),
            }},
        }))
        .unwrap();
        crate::app::jobs::assemble(vec![job], vec![]).remove(0)
    }

    fn names(v: &[Found]) -> Vec<String> {
        v.iter().map(|f| f.view.name.to_string()).collect()
    }

    #[test]
    fn newest_attempt_of_each_stage_unless_all_attempts() {
        let all = || {
            let mut v = vec![
                found("tuning", "n1", "config", 1),
                found("tuning", "n1", "apply", 2),
                found("tuning", "n1", "apply", 1),
                found("tuning-extra", "n1", "apply", 1),
                found("tuning", "n2", "apply", 1),
            ];
            v.sort_by(|a, b| a.order().cmp(&b.order()));
            v
        };
        let n1 = NodePattern::new("n1").unwrap();
        assert_eq!(
            names(&select(all(), &args(&[]), Some(&n1))),
            ["tuning-n1-apply-2", "tuning-n1-config-1"]
        );
        assert_eq!(
            names(&select(all(), &args(&["--all-attempts"]), Some(&n1))),
            [
                "tuning-n1-apply-1",
                "tuning-n1-apply-2",
                "tuning-n1-config-1"
            ]
        );
        assert_eq!(
            names(&select(all(), &args(&["--stage", "config"]), None)),
            ["tuning-n1-config-1"]
        );
        assert_eq!(select(all(), &args(&[]), None).len(), 3);
    }

    #[test]
    fn follow_ends_at_the_terminal_stage_or_an_error() {
        let state = |stage: &str, st: &str| {
            NodeState::parse(&format!(
                r#"{{"tuning|1.0":{{"name":"tuning","version":"1.0","image":"i","stage":"{stage}","state":"{st}"}}}}"#
            ))
            .unwrap()
        };
        let v = |s: &NodeState| verdict(Some(s), "tuning", "1.0", Stage::Config);
        assert!(matches!(v(&state("config", "complete")), Verdict::Complete));
        assert!(matches!(v(&state("apply", "complete")), Verdict::Running));
        assert!(matches!(
            v(&state("config", "in_progress")),
            Verdict::Running
        ));
        assert!(matches!(
            v(&state("apply", "erroring")),
            Verdict::Erroring {
                stage: Stage::Apply
            }
        ));
        assert!(matches!(
            verdict(None, "tuning", "1.0", Stage::Config),
            Verdict::Running
        ));
        let interrupt = state("config", "complete");
        assert!(matches!(
            verdict(Some(&interrupt), "tuning", "1.0", Stage::PostInterrupt),
            Verdict::Running
        ));
    }

    #[test]
    fn stages_keep_their_colour() {
        assert_ne!(stage_slot(Stage::Apply), stage_slot(Stage::Config));
        assert_eq!(regex_escape_anchor("node-1"), "node-1");
        assert_eq!(regex_escape_anchor("a.b"), "a\\.b");
    }
}
