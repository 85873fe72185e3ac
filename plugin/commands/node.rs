//! `node list`, `node status`, `node ignore` and `node unignore`: everything is read from node
//! annotations and labels (one list call); the Skyhook object is only consulted to tell a
//! missing Skyhook from one without activity.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::ListParams;

use serde::Serialize;
use skyhook::plan::compartments;
use skyhook::schema::{self, NodeState, PackageStatus, Stage, State};

use crate::app::Ctx;
use crate::app::access::{Change, Need, proceed};
use crate::app::error::CliError;
use crate::app::kube::{Kube, Labels, NodeMeta, single_key_patch};
use crate::app::nodes::{
    check_patterns, health_gate, list_selected, parse_state, protected_wait, select_named,
    skyhook_rows,
};
use crate::app::output::{Field, OutputFormat, Painter, tone, untabled_or};
use crate::app::sort::{Sortable, sort_by_key};

/// Per-(node, Skyhook) roll-up of the package entries (§8.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub status: State,
    pub complete: usize,
    pub total: usize,
    pub restarts: i64,
}

/// The reference rule, from package *states*: `erroring` if any entry is erroring; else
/// `complete` if every entry (at least one) is complete; else `in_progress` if any entry is in
/// progress or complete; else `unknown`.
pub fn summarize(state: &NodeState) -> Summary {
    let (mut complete, mut erroring, mut in_progress, mut restarts) = (0, false, false, 0i64);
    for (_, entry) in state.iter() {
        restarts += i64::from(entry.restarts);
        match entry.state {
            Some(State::Complete) => complete += 1,
            Some(State::Erroring) => erroring = true,
            Some(State::InProgress) => in_progress = true,
            _ => {}
        }
    }
    let total = state.len();
    let status = if erroring {
        State::Erroring
    } else if total > 0 && complete == total {
        State::Complete
    } else if in_progress || complete > 0 {
        State::InProgress
    } else {
        State::Unknown
    };
    Summary {
        status,
        complete,
        total,
        restarts,
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeListEntry {
    pub node_name: String,
    pub status: State,
    pub packages_complete: usize,
    pub packages_total: usize,
    pub restarts: i64,
}

impl NodeListEntry {
    /// What `node list --sort-by` accepts: these rows' JSON keys; `-o name` prints `nodeName`.
    pub const SORTABLE: Sortable = Sortable {
        fields: &[
            "nodeName",
            "status",
            "packagesComplete",
            "packagesTotal",
            "restarts",
        ],
        name_field: "nodeName",
    };
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeListOutput<'a> {
    pub skyhook_name: &'a str,
    pub nodes: &'a [NodeListEntry],
}

pub fn list_entries(ctx: &Ctx, nodes: &[NodeMeta], skyhook: &str) -> Vec<NodeListEntry> {
    let key = schema::node_state_annotation(skyhook);
    nodes
        .iter()
        .filter_map(|n| {
            let raw = n.annotations.get(&key)?;
            let state = parse_state(ctx, &n.name, None, raw)?;
            let s = summarize(&state);
            // A node held by the health gate is not complete.
            let (status, _) = health_gate(n, skyhook, s.status);
            Some(NodeListEntry {
                node_name: n.name.clone(),
                status,
                packages_complete: s.complete,
                packages_total: s.total,
                restarts: s.restarts,
            })
        })
        .collect()
}

pub fn render_list(
    painter: &Painter,
    format: OutputFormat,
    skyhook: &str,
    entries: &[NodeListEntry],
) -> Result<String, CliError> {
    let output = NodeListOutput {
        skyhook_name: skyhook,
        nodes: entries,
    };
    let node_names = entries.iter().map(|e| e.node_name.as_str());
    let empty = || format!("No nodes found for Skyhook {skyhook:?}\n");
    let names = ("node", node_names);
    if let Some(text) = untabled_or(format, names, &output, entries.len(), empty)? {
        return Ok(text);
    }
    let total = entries.len();
    let complete = entries
        .iter()
        .filter(|e| e.status == State::Complete)
        .count();
    let erroring = entries
        .iter()
        .filter(|e| e.status == State::Erroring)
        .count();
    let wide = format == OutputFormat::Wide;
    let mut headers = vec!["NODE", "STATUS", "PACKAGES"];
    if wide {
        headers.push("RESTARTS");
    }
    let rows: Vec<Vec<Field>> = entries
        .iter()
        .map(|e| {
            let word = if e.status == State::Erroring {
                e.status.as_str().to_uppercase()
            } else {
                e.status.as_str().to_string()
            };
            let mut row = vec![
                Field::from(e.node_name.as_str()),
                Field::toned(word, tone(e.status)),
                Field::from(format!("{}/{}", e.packages_complete, e.packages_total)),
            ];
            if wide {
                row.push(Field::from(e.restarts.to_string()));
            }
            row
        })
        .collect();
    let title = format!(
        "Skyhook: {skyhook}\n\nSummary: {total} nodes ({} complete, {} erroring, {} in progress)",
        count(painter, complete, State::Complete),
        count(painter, erroring, State::Erroring),
        total - complete - erroring,
    );
    Ok(painter.titled_table(&title, &headers, &rows))
}

/// A summary count, coloured like its state when it is not zero.
fn count(painter: &Painter, n: usize, state: State) -> String {
    if n == 0 {
        n.to_string()
    } else {
        painter.paint(&n.to_string(), tone(state))
    }
}

pub async fn list(ctx: &Ctx, out: &mut dyn Write, skyhook: &str) -> Result<(), CliError> {
    let kube = ctx.kube().await?;
    let nodes = kube.nodes().await?;
    let mut entries = list_entries(ctx, &nodes, skyhook);
    if let Some(key) = &ctx.global.sort_key {
        sort_by_key(&mut entries, key);
    }
    if entries.is_empty() {
        ensure_skyhook_exists(&kube, skyhook).await?;
    }
    out.write_all(render_list(&ctx.painter, ctx.global.output, skyhook, &entries)?.as_bytes())?;
    Ok(())
}

/// With nothing on the nodes, a Skyhook that does not exist is an error, not an empty list.
async fn ensure_skyhook_exists(kube: &Kube, skyhook: &str) -> Result<(), CliError> {
    match kube.skyhook_exists(skyhook).await {
        Some(false) => Err(CliError::SkyhookNotFound(skyhook.to_string())),
        _ => Ok(()),
    }
}

// ----- node status -----

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSkyhookSummary {
    pub node_name: String,
    pub skyhook_name: String,
    pub status: State,
    pub packages_complete: usize,
    pub packages_total: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<NodePackage>,
    /// The node's DeploymentPolicy compartment for this Skyhook (`-o wide` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compartment: Option<String>,
    /// The node is cordoned (`spec.unschedulable`), by whomever (upstream CLI v0.4).
    pub cordoned: bool,
    /// The node carries `nodewright.nvidia.com/runtimeRequiredCordon`: its cordon stays until
    /// an administrator lifts it and the mark together (upstream CLI v0.4).
    pub runtime_required_cordon: bool,
    /// Held by the Skyhook's health gate after its last stage (this project's extension):
    /// `waiting since <time>`, or `failed` past the gate's timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_gate: Option<String>,
    /// The interrupt waits for pods matching `podNonInterruptLabels` (this project's
    /// extension): `<ns/pod, ...> since <time> (<age>)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protected_pods: Option<String>,
}

impl NodeSkyhookSummary {
    /// What `node status --sort-by` accepts: these rows' JSON keys (not `packages`, a list);
    /// `-o name` prints `nodeName`.
    pub const SORTABLE: Sortable = Sortable {
        fields: &[
            "nodeName",
            "skyhookName",
            "status",
            "packagesComplete",
            "packagesTotal",
            "compartment",
            "cordoned",
            "runtimeRequiredCordon",
            "healthGate",
            "protectedPods",
        ],
        name_field: "nodeName",
    };
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodePackage {
    pub name: String,
    pub version: String,
    pub stage: Stage,
    /// `""` when the entry has no state yet (the reference prints the empty string).
    pub state: &'static str,
    pub restarts: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image: String,
}

impl From<&PackageStatus> for NodePackage {
    fn from(p: &PackageStatus) -> NodePackage {
        NodePackage {
            name: p.name.to_string(),
            version: p.version.to_string(),
            stage: p.stage,
            state: p.state.map_or("", State::as_str),
            restarts: p.restarts,
            image: p.image.to_string(),
        }
    }
}

/// Summaries for the selected nodes (all when `selected` is `None`), sorted by node then
/// Skyhook; with `packages`, each package too, sorted by name (then version).
pub fn status_summaries(
    ctx: &Ctx,
    nodes: &[NodeMeta],
    cordoned: &BTreeSet<String>,
    selected: Option<&BTreeSet<String>>,
    skyhook: Option<&str>,
    packages: bool,
) -> Vec<NodeSkyhookSummary> {
    let mut out = Vec::new();
    for node in nodes {
        if selected.is_some_and(|s| !s.contains(&node.name)) {
            continue;
        }
        for (sh, raw) in skyhook_rows(node) {
            if skyhook.is_some_and(|want| want != sh) {
                continue;
            }
            let state = match raw {
                Some(raw) => match parse_state(ctx, &node.name, Some(sh), raw) {
                    Some(state) => state,
                    None => continue,
                },
                None => NodeState::default(),
            };
            let s = summarize(&state);
            let (status, health_gate) = health_gate(node, sh, s.status);
            let status = match (raw, status) {
                (None, _) => State::InProgress,
                (_, status) => status,
            };
            let mut packages: Vec<NodePackage> = match packages {
                true => state.iter().map(|(_, p)| NodePackage::from(p)).collect(),
                false => Vec::new(),
            };
            packages.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
            out.push(NodeSkyhookSummary {
                node_name: node.name.clone(),
                skyhook_name: sh.to_string(),
                status,
                packages_complete: s.complete,
                packages_total: s.total,
                packages,
                compartment: None,
                cordoned: cordoned.contains(&node.name),
                runtime_required_cordon: node
                    .annotations
                    .contains_key(schema::RUNTIME_REQUIRED_CORDON_ANNOTATION),
                health_gate,
                protected_pods: protected_wait(node, sh),
            });
        }
    }
    out.sort_by(|a, b| (&a.node_name, &a.skyhook_name).cmp(&(&b.node_name, &b.skyhook_name)));
    out
}

/// `-o wide`: a row per package.
fn wide_table(painter: &Painter, summaries: &[NodeSkyhookSummary]) -> String {
    let headers = [
        "NODE",
        "SKYHOOK",
        "COMPARTMENT",
        "PACKAGE",
        "VERSION",
        "STAGE",
        "STATE",
        "RESTARTS",
        "IMAGE",
        "CORDONED",
        "RUNTIME-REQUIRED-CORDON",
    ];
    let rows: Vec<Vec<Field>> = summaries
        .iter()
        .flat_map(|s| {
            s.packages.iter().map(|p| {
                let state = match p.state.parse::<State>() {
                    Ok(st) => Field::toned(p.state, tone(st)),
                    Err(_) => Field::from(p.state),
                };
                vec![
                    Field::from(s.node_name.as_str()),
                    Field::from(s.skyhook_name.as_str()),
                    Field::from(s.compartment.as_deref().unwrap_or("-")),
                    Field::from(p.name.as_str()),
                    Field::from(p.version.as_str()),
                    Field::from(p.stage.as_str()),
                    state,
                    Field::from(p.restarts.to_string()),
                    Field::from(p.image.as_str()),
                    yes_no(s.cordoned),
                    yes_no(s.runtime_required_cordon),
                ]
            })
        })
        .collect();
    painter.table(&headers, &rows)
}

pub fn render_status(
    painter: &Painter,
    format: OutputFormat,
    summaries: &[NodeSkyhookSummary],
) -> Result<String, CliError> {
    let node_names = summaries.iter().map(|s| s.node_name.as_str());
    let empty = || "No Skyhook activity found on specified nodes\n".to_string();
    let names = ("node", node_names);
    if let Some(text) = untabled_or(format, names, summaries, summaries.len(), empty)? {
        return Ok(text);
    }
    if format == OutputFormat::Wide {
        return Ok(wide_table(painter, summaries));
    }
    // The health gate's column shows only when a node is held by one (this project's
    // extension): the table is otherwise upstream CLI's.
    let gated = summaries.iter().any(|s| s.health_gate.is_some());
    let protected = summaries.iter().any(|s| s.protected_pods.is_some());
    let rows: Vec<Vec<Field>> = summaries
        .iter()
        .map(|s| {
            let mut row = vec![
                Field::from(s.node_name.as_str()),
                Field::from(s.skyhook_name.as_str()),
                Field::toned(s.status.as_str(), tone(s.status)),
                Field::from(format!("{}/{}", s.packages_complete, s.packages_total)),
                yes_no(s.cordoned),
                yes_no(s.runtime_required_cordon),
            ];
            if gated {
                row.push(Field::from(s.health_gate.as_deref().unwrap_or("-")));
            }
            if protected {
                row.push(Field::from(s.protected_pods.as_deref().unwrap_or("-")));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "NODE",
        "SKYHOOK",
        "STATUS",
        "PACKAGES",
        "CORDONED",
        "RUNTIME-REQUIRED-CORDON",
    ];
    if gated {
        headers.push("HEALTH-GATE");
    }
    if protected {
        headers.push("WAITING-FOR-PROTECTED-PODS");
    }
    Ok(painter.table(&headers, &rows))
}

fn yes_no(b: bool) -> Field {
    Field::from(if b { "true" } else { "false" })
}

pub async fn status(
    ctx: &Ctx,
    out: &mut dyn Write,
    patterns: &[String],
    skyhook: Option<&str>,
) -> Result<(), CliError> {
    check_patterns(patterns)?;
    let by_compartment = ctx
        .global
        .sort_key
        .as_ref()
        .is_some_and(|k| k.0 == ["compartment"]);
    let compartments = ctx.global.output == OutputFormat::Wide || by_compartment;
    let kube = ctx.kube().await?;
    // Compartment selectors may name any label; otherwise Skyhook's own are enough.
    let labels = if compartments {
        Labels::All
    } else {
        Labels::Skyhook
    };
    let nodes = kube.nodes_with(labels).await?;
    let selected = select_named(patterns, &nodes)?;
    // The plain table shows no package; a sort key may name one.
    let packages = ctx.global.output != OutputFormat::Table || ctx.global.sort_key.is_some();
    let cordoned = kube.cordoned_nodes().await?;
    let mut summaries =
        status_summaries(ctx, &nodes, &cordoned, selected.as_ref(), skyhook, packages);
    if compartments && !summaries.is_empty() {
        add_compartments(ctx, &kube, &nodes, &mut summaries).await;
    }
    if let Some(key) = &ctx.global.sort_key {
        sort_by_key(&mut summaries, key);
    }
    if let (true, Some(sh)) = (summaries.is_empty(), skyhook) {
        ensure_skyhook_exists(&kube, sh).await?;
    }
    out.write_all(render_status(&ctx.painter, ctx.global.output, &summaries)?.as_bytes())?;
    Ok(())
}

/// Each summary's compartment, from the Skyhooks and DeploymentPolicies as they are now. Who may
/// not read them still gets the table, with `-` and a warning under `-v`.
async fn add_compartments(
    ctx: &Ctx,
    kube: &Kube,
    nodes: &[NodeMeta],
    summaries: &mut [NodeSkyhookSummary],
) {
    let lp = ListParams::default();
    let skyhooks = kube.skyhooks(&lp).await;
    let policies = kube.policies().await;
    let (skyhooks, policies) = match (skyhooks, policies) {
        (Ok(s), Ok(p)) => (s, p.into_iter().map(Arc::new).collect::<Vec<_>>()),
        (Err(e), _) | (_, Err(e)) => {
            ctx.warn(&format!("cannot show compartments: {e}"));
            return;
        }
    };
    let labels = || nodes.iter().map(|n| (n.name.as_str(), &n.labels));
    let by_skyhook: BTreeMap<String, BTreeMap<String, String>> = skyhooks
        .iter()
        .map(|sk| {
            (
                sk.name_any(),
                compartments::membership(sk, &policies, labels()),
            )
        })
        .collect();
    for s in summaries {
        s.compartment = by_skyhook
            .get(&s.skyhook_name)
            .and_then(|m| m.get(&s.node_name))
            .cloned();
    }
}

// ----- node ignore / unignore -----

pub async fn ignore(
    ctx: &Ctx,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    patterns: &[String],
    ignore: bool,
    confirm: bool,
) -> Result<(), CliError> {
    let (kube, nodes, selected) = list_selected(ctx, patterns).await?;
    let (action, verb, skip_note) = if ignore {
        ("Ignoring", "ignored", "already ignored")
    } else {
        ("Unignoring", "unignored", "not ignored")
    };
    writeln!(out, "{action} {} node(s):", selected.len())?;
    for name in &selected {
        writeln!(out, "  - {name}")?;
    }
    let (why, action) = if ignore {
        (
            "\nIgnored nodes get no new work from any Skyhook (work already running finishes).",
            "ignoring nodes",
        )
    } else {
        (
            "\nUnignored nodes are eligible again for every Skyhook that selects them: their \
             packages may run, and interrupts reboot them.",
            "unignoring nodes",
        )
    };
    let prompt = [why.to_string()];
    let change = Change::new(action.to_string(), &[Need::PATCH_NODES], confirm, &prompt);
    if !proceed(ctx, &kube, &change, out, input).await? {
        return Ok(());
    }
    let mut errors = Vec::new();
    let mut done = 0;
    for node in nodes.iter().filter(|n| selected.contains(&n.name)) {
        let ignored =
            node.labels.get(schema::IGNORE_LABEL).map(String::as_str) == Some(schema::TRUE_VALUE);
        if ignored == ignore {
            writeln!(out, "  {}: {skip_note}", node.name)?;
            continue;
        }
        let value = ignore.then_some(schema::TRUE_VALUE);
        let patch = single_key_patch("labels", schema::IGNORE_LABEL, value);
        match kube.merge_patch_node(&node.name, &patch).await {
            Ok(()) => done += 1,
            Err(e) => errors.push(format!("{}: {e}", node.name)),
        }
    }
    if !errors.is_empty() {
        writeln!(out, "\nErrors updating some nodes:")?;
        for e in &errors {
            writeln!(out, "  - {e}")?;
        }
    }
    if done > 0 {
        writeln!(out, "\nSuccessfully {verb} {done} node(s)")?;
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CliError::PartialFailure {
            failed: errors.len(),
            total: selected.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::output::Painter;

    fn entry(name: &str, state: Option<State>, restarts: i32) -> PackageStatus {
        PackageStatus {
            name: name.into(),
            version: "1.0.0".into(),
            image: format!("ghcr.io/x/{name}").into(),
            container_sha: None,
            stage: Stage::Config,
            state,
            restarts,
        }
    }

    fn state(entries: &[PackageStatus]) -> NodeState {
        let mut s = NodeState::default();
        for e in entries {
            s.upsert(e.clone());
        }
        s
    }

    #[test]
    fn status_rule() {
        use State::*;
        let cases: &[(&[Option<State>], State, usize)] = &[
            (&[], Unknown, 0),
            (&[Some(Complete), Some(Complete)], Complete, 2),
            (&[Some(Complete), Some(Erroring)], Erroring, 1),
            (&[Some(InProgress), Some(Erroring)], Erroring, 0),
            (&[Some(Complete), Some(InProgress)], InProgress, 1),
            (&[Some(Complete), None], InProgress, 1),
            (&[Some(Complete), Some(Skipped)], InProgress, 1),
            (&[Some(InProgress)], InProgress, 0),
            (&[None, Some(Skipped)], Unknown, 0),
            (&[Some(Unknown)], Unknown, 0),
        ];
        for (states, want, complete) in cases {
            let entries: Vec<PackageStatus> = states
                .iter()
                .enumerate()
                .map(|(i, s)| entry(&format!("p{i}"), *s, i as i32))
                .collect();
            let s = summarize(&state(&entries));
            assert_eq!(s.status, *want, "{states:?}");
            assert_eq!(s.complete, *complete, "{states:?}");
            assert_eq!(s.total, states.len());
            assert_eq!(
                s.restarts,
                (0..states.len() as i64).sum::<i64>(),
                "{states:?}"
            );
        }
    }

    fn node(name: &str, annotations: &[(String, String)]) -> NodeMeta {
        NodeMeta {
            name: name.into(),
            labels: Default::default(),
            annotations: annotations.iter().cloned().collect(),
        }
    }

    fn fixture() -> Vec<NodeMeta> {
        let a = state(&[
            entry("alpha", Some(State::Complete), 0),
            entry("broken", Some(State::Erroring), 3),
        ]);
        let b = state(&[
            entry("alpha", Some(State::Complete), 0),
            entry("broken", Some(State::Complete), 1),
        ]);
        let other = state(&[entry("zed", Some(State::InProgress), 0)]);
        vec![
            node(
                "worker-1",
                &[
                    (schema::node_state_annotation("sh"), a.to_annotation()),
                    (
                        schema::node_state_annotation("other"),
                        other.to_annotation(),
                    ),
                    ("unrelated/key".into(), "x".into()),
                ],
            ),
            node(
                "worker-2",
                &[
                    (schema::node_state_annotation("sh"), b.to_annotation()),
                    (
                        schema::RUNTIME_REQUIRED_CORDON_ANNOTATION.into(),
                        "true".into(),
                    ),
                ],
            ),
            node(
                "worker-3",
                &[(schema::node_state_annotation("sh"), "not json".into())],
            ),
            node("worker-4", &[]),
        ]
    }

    fn ctx() -> Ctx {
        Ctx::for_tests()
    }

    #[test]
    fn list_table_and_json() {
        let nodes = fixture();
        let entries = list_entries(&ctx(), &nodes, "sh");
        assert_eq!(entries.len(), 2, "the unparsable node is skipped");
        let p = Painter::new(false);
        insta::with_settings!({snapshot_path => "../../tests/snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!("node_list_table", render_list(&p, OutputFormat::Table, "sh", &entries).unwrap());
            insta::assert_snapshot!("node_list_wide", render_list(&p, OutputFormat::Wide, "sh", &entries).unwrap());
            insta::assert_snapshot!("node_list_json", render_list(&p, OutputFormat::Json, "sh", &entries).unwrap());
        });
        assert_eq!(
            render_list(&p, OutputFormat::Table, "sh", &[]).unwrap(),
            "No nodes found for Skyhook \"sh\"\n"
        );
        assert_eq!(
            render_list(&p, OutputFormat::Json, "sh", &[]).unwrap(),
            "{\n  \"skyhookName\": \"sh\",\n  \"nodes\": []\n}\n"
        );
    }

    #[test]
    fn list_names_no_headers_and_sort_by() {
        let mut entries = list_entries(&ctx(), &fixture(), "sh");
        let p = Painter::new(false);
        assert_eq!(
            render_list(&p, OutputFormat::Name, "sh", &entries).unwrap(),
            "node/worker-1\nnode/worker-2\n"
        );
        assert_eq!(render_list(&p, OutputFormat::Name, "sh", &[]).unwrap(), "");
        // --no-headers: only the rows, without the summary above the table.
        let bare = p.without_headers(true);
        assert_eq!(
            render_list(&bare, OutputFormat::Table, "sh", &entries).unwrap(),
            "worker-1   ERRORING   1/2\nworker-2   complete   2/2\n"
        );
        // --sort-by .status: complete before erroring.
        let key = crate::app::sort::SortKey(vec!["status".into()]);
        sort_by_key(&mut entries, &key);
        assert_eq!(
            render_list(&bare, OutputFormat::Table, "sh", &entries).unwrap(),
            "worker-2   complete   2/2\nworker-1   ERRORING   1/2\n"
        );
        assert_eq!(
            render_list(&p, OutputFormat::Name, "sh", &entries).unwrap(),
            "node/worker-2\nnode/worker-1\n"
        );
    }

    /// worker-1 is cordoned by someone; worker-2 carries the runtimeRequiredCordon mark.
    fn cordoned() -> BTreeSet<String> {
        BTreeSet::from(["worker-1".to_string()])
    }

    #[test]
    fn status_names_each_node_once() {
        let all = status_summaries(&ctx(), &fixture(), &cordoned(), None, None, true);
        let p = Painter::new(false);
        assert_eq!(
            render_status(&p, OutputFormat::Name, &all).unwrap(),
            "node/worker-1\nnode/worker-2\n"
        );
        let text = render_status(&p.without_headers(true), OutputFormat::Table, &all).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.starts_with("worker-1   other"), "{text}");
    }

    #[test]
    fn status_table_wide_and_json() {
        let nodes = fixture();
        let all = status_summaries(&ctx(), &nodes, &cordoned(), None, None, true);
        assert_eq!(
            all.iter()
                .map(|s| (s.node_name.as_str(), s.skyhook_name.as_str()))
                .collect::<Vec<_>>(),
            [
                ("worker-1", "other"),
                ("worker-1", "sh"),
                ("worker-2", "sh")
            ]
        );
        let only_sh = status_summaries(&ctx(), &nodes, &cordoned(), None, Some("sh"), true);
        assert_eq!(only_sh.len(), 2);
        let p = Painter::new(false);
        insta::with_settings!({snapshot_path => "../../tests/snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!("node_status_table", render_status(&p, OutputFormat::Table, &all).unwrap());
            insta::assert_snapshot!("node_status_wide", render_status(&p, OutputFormat::Wide, &all).unwrap());
            insta::assert_snapshot!("node_status_json", render_status(&p, OutputFormat::Json, &only_sh).unwrap());
            insta::assert_snapshot!("node_status_yaml", render_status(&p, OutputFormat::Yaml, &only_sh).unwrap());
        });
        // The plain table is the same without the packages (they are not read for it).
        let bare = status_summaries(&ctx(), &nodes, &cordoned(), None, None, false);
        assert!(bare.iter().all(|s| s.packages.is_empty()));
        assert_eq!(
            render_status(&p, OutputFormat::Table, &bare).unwrap(),
            render_status(&p, OutputFormat::Table, &all).unwrap()
        );
        assert_eq!(
            render_status(&p, OutputFormat::Table, &[]).unwrap(),
            "No Skyhook activity found on specified nodes\n"
        );
        assert_eq!(render_status(&p, OutputFormat::Json, &[]).unwrap(), "[]\n");
    }

    /// `--sort-by` and `-o name` name JSON keys; a renamed field must take its name along.
    #[test]
    fn sortable_fields_are_keys_of_the_rows() {
        let p = Painter::new(false);
        let entries = list_entries(&ctx(), &fixture(), "sh");
        let sortable = NodeListEntry::SORTABLE;
        assert_eq!(sortable.absent_from(&entries[0]), Vec::<&str>::new());
        let json = serde_json::to_value(&entries[0]).unwrap();
        assert_eq!(
            render_list(&p, OutputFormat::Name, "sh", &entries[..1]).unwrap(),
            format!("node/{}\n", json[sortable.name_field].as_str().unwrap())
        );

        let mut summary =
            status_summaries(&ctx(), &fixture(), &cordoned(), None, Some("sh"), true).remove(0);
        // Only read for -o wide or a sort by it, so the fixture has none.
        summary.compartment = Some("rack-1".into());
        summary.health_gate = Some("waiting since 2026-11-28T10:00:00Z".into());
        summary.protected_pods = Some("apps/train since 2026-11-28T10:00:00Z (5s)".into());
        let sortable = NodeSkyhookSummary::SORTABLE;
        assert_eq!(sortable.absent_from(&summary), Vec::<&str>::new());
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            render_status(&p, OutputFormat::Name, std::slice::from_ref(&summary)).unwrap(),
            format!("node/{}\n", json[sortable.name_field].as_str().unwrap())
        );
    }

    /// Complete packages held by the health gate read in progress (erroring once it failed),
    /// with the gate's column.
    #[test]
    fn a_node_held_by_its_health_gate_is_not_complete() {
        let mut node = NodeMeta {
            name: "n1".into(),
            ..Default::default()
        };
        assert_eq!(
            health_gate(&node, "sh", State::Complete),
            (State::Complete, None)
        );
        let clock = schema::health_gate_annotation("sh");
        node.annotations
            .insert(clock, "2026-11-28T10:00:00Z".into());
        let (status, words) = health_gate(&node, "sh", State::Complete);
        assert_eq!(status, State::InProgress);
        assert_eq!(words.as_deref(), Some("waiting since 2026-11-28T10:00:00Z"));
        node.annotations
            .insert(schema::status_annotation("sh"), "erroring".into());
        let (status, words) = health_gate(&node, "sh", State::Complete);
        assert_eq!(status, State::Erroring);
        assert!(words.is_some_and(|w| w.starts_with("failed")));
    }

    /// A node whose interrupt waits for protected pods shows them, and since when, in a column
    /// of its own that only then appears.
    #[test]
    fn a_node_waiting_for_protected_pods_names_them() {
        let p = Painter::new(false);
        let plain = status_summaries(&ctx(), &fixture(), &cordoned(), None, Some("sh"), false);
        let text = render_status(&p, OutputFormat::Table, &plain).unwrap();
        assert!(!text.contains("WAITING-FOR-PROTECTED-PODS"), "{text}");
        let mut nodes = fixture();
        let wait = schema::ProtectedWait {
            since: "2026-11-28T10:00:00Z".parse().unwrap(),
            pods: vec!["apps/train".into()],
        };
        nodes[0]
            .annotations
            .insert(schema::protected_wait_annotation("sh"), wait.to_json());
        let rows = status_summaries(&ctx(), &nodes, &cordoned(), None, Some("sh"), false);
        let text = render_status(&p, OutputFormat::Table, &rows).unwrap();
        assert!(text.contains("WAITING-FOR-PROTECTED-PODS"), "{text}");
        assert!(
            text.contains("apps/train since 2026-11-28T10:00:00Z"),
            "{text}"
        );
    }

    #[test]
    fn node_selection() {
        let names = ["node-1", "node-10", "node-2", "worker.a"];
        let sel = |p: &[&str]| {
            let p: Vec<String> = p.iter().map(|s| s.to_string()).collect();
            crate::app::nodes::select_nodes(&p, names.iter().copied())
        };
        assert_eq!(
            sel(&["node-1"]).unwrap().into_iter().collect::<Vec<_>>(),
            ["node-1"]
        );
        assert_eq!(
            sel(&["node-1.*", "node-2"])
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            ["node-1", "node-10", "node-2"]
        );
        assert!(matches!(sel(&["node-3"]), Err(CliError::NodeNotFound(n)) if n == "node-3"));
        assert!(matches!(sel(&["gpu-.*"]), Err(CliError::NoNodeMatches(n)) if n == "gpu-.*"));
        let err = sel(&["node-["]).unwrap_err().to_string();
        assert!(
            err.starts_with("matching nodes: invalid regex pattern \"node-[\": "),
            "{err}"
        );
    }
}
