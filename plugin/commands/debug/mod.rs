//! `debug collect`: a support archive (`.tar.gz`) of everything needed to diagnose a rollout.
//!
//! Every part ("piece") is collected independently: a failure (RBAC, timeout, missing object)
//! is recorded in `<piece>-errors.json` and the rest is still written, so the archive is
//! useful precisely when the cluster is misbehaving. Only a named Skyhook that does not exist
//! and an unwritable output path stop the command.

mod archive;
mod describe;
mod logs;
mod operator;
mod redact;
mod scrub;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, NodePattern};

use self::archive::{Archive, Piece, human_size};
use crate::app::Ctx;
use crate::app::error::CliError;
use crate::app::global::{GlobalArgs, Timeout};
use crate::app::kube::{Kind, Kube};
use crate::app::lens::node_in_api;
use crate::app::operator::PLUGIN_VERSION;
use crate::cli::CollectArgs;

/// Per-request limit when `--request-timeout` is not given: a hung API server must not hang
/// the command people run because something is wrong.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The metrics Service of `deploy/metrics-service.yaml` and its port name.
const METRICS_SERVICE: &str = "skyhook-operator-metrics:metrics";

/// Namespace of the Events of cluster-scoped objects (Skyhooks, Nodes).
const CLUSTER_EVENTS_NAMESPACE: &str = "default";

/// Pieces besides the per-container logs, for the progress bar's length.
const PIECES: u64 = 9;

/// Returns the exit code: 0, or 3 when some pieces failed but the archive was written.
/// A client (with the collection's own request timeout) in the API of the object named, if any.
async fn connect_in_api(global: &GlobalArgs, named: Option<&str>) -> Result<Kube, CliError> {
    let kube = Kube::connect(global).await?;
    let api = match named {
        Some(name) => kube.api_of(name, global.api).await,
        None => global.api,
    };
    Ok(kube.in_api(api))
}

pub async fn collect(ctx: &Ctx, out: &mut dyn Write, args: &CollectArgs) -> Result<u8, CliError> {
    let chosen = chosen_archive(args, ctx.global.output_arg.as_deref());
    let mut global = ctx.global.clone();
    if global.request_timeout.0.is_none() {
        global.request_timeout = Timeout(Some(DEFAULT_REQUEST_TIMEOUT));
    }
    let patterns = args
        .nodes
        .iter()
        .map(|p| NodePattern::new(p))
        .collect::<Result<Vec<_>, _>>()?;
    if args.no_redact {
        eprintln!(
            "Warning: --no-redact: the archive will include secrets (env values, package configMap contents, logs, messages) unredacted; share it only as you would the secrets themselves"
        );
    }
    let kube = connect_in_api(&global, args.skyhook.as_deref()).await?;
    // Checked before anything else so a typo fails fast and leaves no archive behind.
    let named = match &args.skyhook {
        Some(name) => Some(kube.skyhook(name).await?),
        None => None,
    };
    let path = archive_path(chosen.as_deref());
    let root = archive_root(&path);
    let bar = progress_bar();
    let mut c = Collector {
        kube,
        ns: global.namespace.clone(),
        args,
        patterns,
        redact: !args.no_redact,
        timeout: global.request_timeout.0.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
        archive: Archive::new(!args.no_redact),
        bar: bar.clone(),
    };
    let skyhooks = c.skyhooks(named).await;
    c.policies(&skyhooks).await;
    let names: Vec<String> = skyhooks.iter().map(|s| s.name_any()).collect();
    let jobs = c.jobs(&names).await;
    let pods = c.pods(&names).await;
    let nodes = c.nodes(&names, &jobs, &pods).await;
    c.logs(&pods).await;
    c.events(&names, &nodes, &jobs, &pods).await;
    c.operator().await;
    c.versions().await;
    bar.finish_and_clear();

    let about = json!({
        "createdAt": jiff::Timestamp::now().to_string(),
        "pluginVersion": PLUGIN_VERSION,
        "server": c.kube.server(),
        "namespace": c.ns,
        "skyhook": args.skyhook,
        "nodePatterns": args.nodes,
        "since": args.since.map(|d| format!("{}s", d.as_secs())),
        "maxLogBytes": args.max_log_bytes,
        "redacted": c.redact,
    });
    let error_files = c.archive.error_files().to_vec();
    let size = c
        .archive
        .write(&path, &root, about)
        .map_err(|e| CliError::Api {
            action: format!("writing {}", path.display()),
            message: e.to_string(),
        })?;
    writeln!(out, "Wrote {} ({})", path.display(), human_size(size))?;
    if error_files.is_empty() {
        return Ok(0);
    }
    writeln!(
        out,
        "Some pieces could not be collected; see {} in the archive",
        error_files.join(", ")
    )?;
    Ok(3)
}

/// The archive named by `--output-file`, or by the deprecated `-o` (with a warning).
fn chosen_archive(args: &CollectArgs, output_arg: Option<&str>) -> Option<String> {
    match (&args.output_file, output_arg) {
        (Some(file), _) => Some(file.to_string_lossy().into_owned()),
        (None, Some(old)) => {
            eprintln!(
                "Warning: -o/--output naming the archive is deprecated (-o is the output format everywhere else); use --output-file {old}"
            );
            Some(old.to_string())
        }
        (None, None) => None,
    }
}

/// `-o`, else `skyhook-debug-<UTC timestamp>.tar.gz` in the current directory.
fn archive_path(output: Option<&str>) -> PathBuf {
    match output {
        Some(p) => PathBuf::from(p),
        None => {
            let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ");
            PathBuf::from(format!("skyhook-debug-{stamp}.tar.gz"))
        }
    }
}

/// The directory every entry sits under, so unpacking never spills files into the cwd.
fn archive_root(path: &std::path::Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = [".tar.gz", ".tgz", ".gz", ".tar"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
        .unwrap_or(&name);
    if stem.is_empty() {
        "skyhook-debug".into()
    } else {
        stem.to_string()
    }
}

fn progress_bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(PIECES);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

struct Collector<'a> {
    kube: Kube,
    ns: String,
    args: &'a CollectArgs,
    patterns: Vec<NodePattern>,
    redact: bool,
    /// Bound on single calls whose server side may outlast the client's read timeout.
    timeout: Duration,
    archive: Archive,
    bar: ProgressBar,
}

impl Collector<'_> {
    fn start(&self, name: &'static str) -> Piece {
        self.bar.set_message(name);
        Piece::start(name)
    }

    fn finish(&mut self, piece: Piece) {
        self.archive.finish(piece);
        self.bar.inc(1);
    }

    fn error(&self, err: kube::Error, action: &str) -> String {
        self.kube.fail(err, action).to_string()
    }

    fn node_selected(&self, node: &str) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|p| p.matches(node))
    }

    /// YAML of an object, without managedFields and (unless --no-redact) secret env values.
    fn add_yaml<T: Serialize>(&mut self, piece: &mut Piece, path: String, object: &T) {
        let text = serde_json::to_value(object)
            .map_err(|e| CliError::Encode(e.to_string()))
            .and_then(|mut v| {
                redact::strip_noise(&mut v);
                if self.redact {
                    redact::redact(&mut v);
                }
                crate::app::output::yaml(&v)
            });
        match text {
            Ok(text) => self.archive.add(path, text),
            Err(e) => piece.object_failed(path, e),
        }
    }

    async fn skyhooks(&mut self, named: Option<Skyhook>) -> Vec<Skyhook> {
        let mut piece = self.start("skyhooks");
        let skyhooks = match named {
            Some(sk) => vec![sk],
            None => match self.kube.skyhooks(&ListParams::default()).await {
                Ok(list) => list,
                Err(e) => {
                    piece.request_failed("list skyhooks", self.error(e, "listing skyhooks"));
                    Vec::new()
                }
            },
        };
        for sk in &skyhooks {
            self.add_yaml(&mut piece, format!("skyhooks/{}.yaml", sk.name_any()), sk);
        }
        self.finish(piece);
        skyhooks
    }

    /// The policies the Skyhooks name; every policy when no Skyhook was named. Read in the
    /// group of the API the collection is in.
    async fn policies(&mut self, skyhooks: &[Skyhook]) {
        let mut piece = self.start("deploymentpolicies");
        let mut found = match self.kube.policies().await {
            Ok(list) => list,
            Err(e) => {
                let failed = self.error(e, "listing deploymentpolicies");
                piece.request_failed("list deploymentpolicies", failed);
                Vec::new()
            }
        };
        if self.args.skyhook.is_some() {
            let wanted: BTreeSet<&str> = skyhooks
                .iter()
                .filter_map(|s| s.spec.deployment_policy.as_deref())
                .filter(|p| !p.is_empty())
                .collect();
            found.retain(|p| wanted.contains(p.name_any().as_str()));
            for name in wanted {
                if !found.iter().any(|p| p.name_any() == name) {
                    piece.object_failed(format!("deploymentpolicy {name}"), "not found");
                }
            }
        }
        for p in &found {
            self.add_yaml(
                &mut piece,
                format!("deploymentpolicies/{}.yaml", p.name_any()),
                p,
            );
        }
        self.finish(piece);
    }

    /// Lists the namespaced objects of each Skyhook by their name label.
    async fn list_labelled<K>(&self, piece: &mut Piece, kind: &str, skyhooks: &[String]) -> Vec<K>
    where
        K: Kind + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        let api: Api<K> = Api::namespaced(self.kube.client(), &self.ns);
        let mut items = Vec::new();
        for sk in skyhooks {
            let selector = self.kube.selector(&format!("{}={sk}", schema::NAME_LABEL));
            let params = ListParams::default().labels(&selector);
            match api.list(&params).await {
                Ok(list) => items.extend(list.items),
                Err(e) => piece.request_failed(
                    format!("list {kind} -n {} -l {}={sk}", self.ns, schema::NAME_LABEL),
                    self.error(e, &format!("listing {kind} in namespace {:?}", self.ns)),
                ),
            }
        }
        items
    }

    async fn jobs(&mut self, skyhooks: &[String]) -> Vec<Job> {
        self.labelled_piece("jobs", skyhooks, job_node, describe::job)
            .await
    }

    async fn pods(&mut self, skyhooks: &[String]) -> Vec<Pod> {
        self.labelled_piece("pods", skyhooks, pod_node, describe::pod)
            .await
    }

    /// The piece `kind`: the Skyhooks' objects on the selected nodes, each described and as
    /// YAML under `<kind>/`.
    async fn labelled_piece<K>(
        &mut self,
        kind: &'static str,
        skyhooks: &[String],
        node: fn(&K) -> String,
        describe: fn(&K) -> String,
    ) -> Vec<K>
    where
        K: Kind + Resource<Scope = k8s_openapi::NamespaceResourceScope> + Serialize,
    {
        let mut piece = self.start(kind);
        let items: Vec<K> = self
            .list_labelled::<K>(&mut piece, kind, skyhooks)
            .await
            .into_iter()
            .filter(|o| self.node_selected(&node(o)))
            .collect();
        for item in &items {
            let name = item.name_any();
            self.archive
                .add(format!("{kind}/{name}.txt"), describe(item));
            self.add_yaml(&mut piece, format!("{kind}/{name}.yaml"), item);
        }
        self.finish(piece);
        items
    }

    /// Nodes a Skyhook has state, Jobs or pods on (and that match `--node`).
    async fn nodes(&mut self, skyhooks: &[String], jobs: &[Job], pods: &[Pod]) -> Vec<String> {
        let mut piece = self.start("nodes");
        let mut involved: BTreeSet<String> = jobs
            .iter()
            .map(job_node)
            .filter(|n| !n.is_empty())
            .collect();
        involved.extend(pods.iter().map(pod_node).filter(|n| !n.is_empty()));
        let state_keys: Vec<String> = skyhooks
            .iter()
            .map(|s| schema::node_state_annotation(s))
            .collect();
        let mut written = Vec::new();
        match Api::<Node>::all(self.kube.client())
            .list(&ListParams::default())
            .await
        {
            Ok(list) => {
                // A NodeWright's keys read as the canonical ones the description names.
                let api = self.kube.api();
                for node in list.items.into_iter().map(|n| node_in_api(n, api)) {
                    let node = &node;
                    let name = node.name_any();
                    let has_state = state_keys
                        .iter()
                        .any(|k| node.annotations().contains_key(k));
                    if !self.node_selected(&name) || !(has_state || involved.contains(&name)) {
                        continue;
                    }
                    let state = describe::node_state(node, skyhooks);
                    match crate::app::output::json(&state) {
                        Ok(text) => self.archive.add(format!("nodes/{name}.json"), text),
                        Err(e) => piece.object_failed(format!("node {name}"), e),
                    }
                    written.push(name);
                }
            }
            Err(e) => {
                piece.request_failed("list nodes", self.error(e, "listing nodes"));
                // Without the list, the Events of the nodes the Jobs ran on are still useful.
                written.extend(involved.into_iter().filter(|n| self.node_selected(n)));
            }
        }
        self.finish(piece);
        written
    }

    async fn logs(&mut self, pods: &[Pod]) {
        let mut piece = self.start("logs");
        self.archive_logs(&mut piece, pods, "logs", true).await;
        self.finish(piece);
    }

    /// The logs of the pods' containers under `dir`, a failure per container; `progress`
    /// counts each container on the progress bar.
    async fn archive_logs(&mut self, piece: &mut Piece, pods: &[Pod], dir: &str, progress: bool) {
        let targets: Vec<logs::Target> = pods.iter().flat_map(|p| logs::targets(p, dir)).collect();
        let bar = progress.then(|| self.bar.clone());
        if let Some(bar) = &bar {
            bar.inc_length(targets.len() as u64);
        }
        let results = logs::fetch(
            self.kube.client(),
            targets,
            self.args.since,
            self.args.max_log_bytes,
            self.timeout,
            self.redact,
            move || {
                if let Some(bar) = &bar {
                    bar.inc(1);
                }
            },
        )
        .await;
        for logs::Fetched {
            target,
            result,
            attempts,
        } in results
        {
            let what = target.describe();
            match result {
                Ok(bytes) => {
                    if attempts > 1 {
                        piece.retried(what, attempts);
                    }
                    self.archive.add(target.path, bytes);
                }
                Err(e) => {
                    let why = self.error(e, &format!("getting {what}"));
                    piece.object_failed(what, format!("{why} (after {attempts} attempt(s))"));
                }
            }
        }
    }

    /// The Events of every collected object, beside it as `<object>.events.yaml`.
    async fn events(&mut self, skyhooks: &[String], nodes: &[String], jobs: &[Job], pods: &[Pod]) {
        let mut piece = self.start("events");
        let mut wanted: BTreeMap<(String, String, String), String> = BTreeMap::new();
        let cluster_ns = CLUSTER_EVENTS_NAMESPACE.to_string();
        for sk in skyhooks {
            wanted.insert(
                (cluster_ns.clone(), "Skyhook".into(), sk.clone()),
                format!("skyhooks/{sk}"),
            );
        }
        for n in nodes {
            wanted.insert(
                (cluster_ns.clone(), "Node".into(), n.clone()),
                format!("nodes/{n}"),
            );
        }
        for j in jobs {
            let name = j.name_any();
            wanted.insert(
                (self.ns.clone(), "Job".into(), name.clone()),
                format!("jobs/{name}"),
            );
        }
        for p in pods {
            let name = p.name_any();
            wanted.insert(
                (self.ns.clone(), "Pod".into(), name.clone()),
                format!("pods/{name}"),
            );
        }
        let namespaces: BTreeSet<String> = wanted.keys().map(|(ns, _, _)| ns.clone()).collect();
        let cutoff = self.args.since.and_then(|d| {
            jiff::Timestamp::now()
                .checked_sub(jiff::SignedDuration::try_from(d).ok()?)
                .ok()
        });
        let mut found: BTreeMap<String, Vec<Event>> = BTreeMap::new();
        for ns in namespaces {
            let api: Api<Event> = Api::namespaced(self.kube.client(), &ns);
            let list = match api.list(&ListParams::default()).await {
                Ok(list) => list.items,
                Err(e) => {
                    piece.request_failed(
                        format!("list events -n {ns}"),
                        self.error(e, &format!("listing events in namespace {ns:?}")),
                    );
                    continue;
                }
            };
            for ev in list {
                let o = &ev.involved_object;
                let key = (
                    ns.clone(),
                    o.kind.clone().unwrap_or_default(),
                    o.name.clone().unwrap_or_default(),
                );
                let recent = cutoff.is_none_or(|c| event_time(&ev).is_none_or(|t| t >= c));
                if let (Some(path), true) = (wanted.get(&key), recent) {
                    found.entry(path.clone()).or_default().push(ev);
                }
            }
        }
        for (path, mut events) in found {
            events.sort_by_key(event_time);
            self.add_yaml(&mut piece, format!("{path}.events.yaml"), &events);
        }
        self.finish(piece);
    }

    async fn versions(&mut self) {
        let mut piece = self.start("versions");
        let server = match self.kube.client().apiserver_version().await {
            Ok(info) => serde_json::to_value(info).unwrap_or(Value::Null),
            Err(e) => {
                let message = self.error(e, "getting the server version");
                piece.request_failed("GET /version", &message);
                json!({"error": message})
            }
        };
        // Not a failure of this piece: the operator piece records why it is unknown.
        let operator = match crate::app::operator::discover(&self.kube, &self.ns).await {
            Ok(info) => {
                json!({"version": info.version, "thisImplementation": info.this_implementation})
            }
            Err(e) => json!({"error": e}),
        };
        let versions = json!({"plugin": PLUGIN_VERSION, "server": server, "operator": operator});
        match crate::app::output::json(&versions) {
            Ok(text) => self.archive.add("versions.json", text),
            Err(e) => piece.object_failed("versions.json", e),
        }
        self.finish(piece);
    }
}

/// The node a pod runs on (or was meant for, by the operator's label, while still pending).
fn job_node(job: &Job) -> String {
    owned_node_label(job.labels()).unwrap_or_default()
}

/// The node label of a Job or pod of ours, under the prefix of the API that made it.
fn owned_node_label(labels: &BTreeMap<String, String>) -> Option<String> {
    let api = schema::Api::of_owned(Some(labels));
    labels.get(api.local(schema::NODE_LABEL).as_ref()).cloned()
}

fn pod_node(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .or_else(|| owned_node_label(pod.labels()))
        .unwrap_or_default()
}

fn event_time(ev: &Event) -> Option<jiff::Timestamp> {
    ev.last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| ev.event_time.as_ref().map(|t| t.0))
        .or_else(|| ev.first_timestamp.as_ref().map(|t| t.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names() {
        assert_eq!(archive_path(Some("t.tgz")), PathBuf::from("t.tgz"));
        let default = archive_path(None).to_string_lossy().into_owned();
        assert!(
            default.starts_with("skyhook-debug-") && default.ends_with("Z.tar.gz"),
            "{default}"
        );
        assert_eq!(
            archive_root(std::path::Path::new("/tmp/ticket-1.tar.gz")),
            "ticket-1"
        );
        assert_eq!(archive_root(std::path::Path::new("x.tgz")), "x");
        assert_eq!(archive_root(std::path::Path::new("plain")), "plain");
    }
}
