//! `package status`: one package's entries across the nodes a Skyhook has state on.

use std::io::Write;

use serde::Serialize;
use skyhook::crd::Skyhook;
use skyhook::schema::{self, PackageStatus};

use crate::app::Ctx;
use crate::app::error::CliError;
use crate::app::kube::NodeMeta;
use crate::app::nodes::{check_patterns, parse_state, select_named};
use crate::app::output::{Field, OutputFormat, Painter, tone, untabled_or};
use crate::app::sort::{Sortable, sort_by_key};

/// A node-state entry with its node: the `PackageStatus` fields inlined, then `nodeName`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodePackageStatus {
    #[serde(flatten)]
    pub status: PackageStatus,
    #[serde(rename = "nodeName")]
    pub node_name: String,
}

impl NodePackageStatus {
    /// What `package status --sort-by` accepts: these rows' JSON keys, the inlined
    /// `PackageStatus` ones among them; `-o name` prints `nodeName`.
    pub const SORTABLE: Sortable = Sortable {
        fields: &[
            "nodeName", "name", "version", "image", "stage", "state", "restarts",
        ],
        name_field: "nodeName",
    };
}

/// `name:version` of every spec package, sorted, `, `-separated.
pub fn package_list(sk: &Skyhook) -> String {
    let mut list: Vec<String> = sk
        .spec
        .packages
        .iter()
        .map(|(name, p)| format!("{name}:{}", p.version))
        .collect();
    list.sort();
    list.join(", ")
}

/// Entries named `package` (any version) on the selected nodes, sorted by node then package.
pub fn collect(
    ctx: &Ctx,
    nodes: &[NodeMeta],
    skyhook: &str,
    package: &str,
    selected: Option<&std::collections::BTreeSet<String>>,
) -> Vec<NodePackageStatus> {
    let key = schema::node_state_annotation(skyhook);
    let mut out = Vec::new();
    for node in nodes {
        if selected.is_some_and(|s| !s.contains(&node.name)) {
            continue;
        }
        let Some(raw) = node.annotations.get(&key) else {
            continue;
        };
        let Some(state) = parse_state(ctx, &node.name, None, raw) else {
            continue;
        };
        out.extend(
            state
                .iter()
                .filter(|(_, p)| p.name == package)
                .map(|(_, p)| NodePackageStatus {
                    status: p.clone(),
                    node_name: node.name.clone(),
                }),
        );
    }
    out.sort_by(|a, b| {
        (&a.node_name, &a.status.name, &a.status.version).cmp(&(
            &b.node_name,
            &b.status.name,
            &b.status.version,
        ))
    });
    out
}

pub fn render(
    painter: &Painter,
    format: OutputFormat,
    skyhook: &str,
    packages: &str,
    statuses: &[NodePackageStatus],
) -> Result<String, CliError> {
    let node_names = statuses.iter().map(|s| s.node_name.as_str());
    let empty = || format!("No package status found for skyhook {skyhook:?}\n");
    let names = ("node", node_names);
    if let Some(text) = untabled_or(format, names, statuses, statuses.len(), empty)? {
        return Ok(text);
    }
    let wide = format == OutputFormat::Wide;
    let mut headers = vec!["NODE", "PACKAGE", "VERSION", "STAGE", "STATE"];
    if wide {
        headers.extend(["RESTARTS", "IMAGE"]);
    }
    let rows: Vec<Vec<Field>> = statuses
        .iter()
        .map(|s| {
            let p = &s.status;
            let state = match p.state {
                Some(st) => Field::toned(st.as_str(), tone(st)),
                None => Field::from(""),
            };
            let mut row = vec![
                Field::from(s.node_name.as_str()),
                Field::from(p.name.as_str()),
                Field::from(p.version.as_str()),
                Field::from(p.stage.as_str()),
                state,
            ];
            if wide {
                row.push(Field::from(p.restarts.to_string()));
                row.push(Field::from(p.image.as_str()));
            }
            row
        })
        .collect();
    let title = format!("Skyhook: {skyhook}\nPackages: {packages}");
    Ok(painter.titled_table(&title, &headers, &rows))
}

pub async fn status(
    ctx: &Ctx,
    out: &mut dyn Write,
    package: &str,
    skyhook: &str,
    node_patterns: &[String],
) -> Result<(), CliError> {
    check_patterns(node_patterns)?;
    let kube = ctx.kube().await?;
    let sk = kube.skyhook(skyhook).await?;
    let nodes = kube.nodes().await?;
    let selected = select_named(node_patterns, &nodes)?;
    let mut statuses = collect(ctx, &nodes, skyhook, package, selected.as_ref());
    if let Some(key) = &ctx.global.sort_key {
        sort_by_key(&mut statuses, key);
    }
    // A package that is neither in the spec nor on any node is a typo. (One removed from the
    // spec but still on nodes is shown.)
    if statuses.is_empty() {
        crate::app::packages::spec_version(&sk, skyhook, package)?;
    }
    let text = render(
        &ctx.painter,
        ctx.global.output,
        skyhook,
        &package_list(&sk),
        &statuses,
    )?;
    out.write_all(text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use skyhook::crd::SkyhookSpec;
    use skyhook::schema::{NodeState, Stage, State};

    fn entry(name: &str, version: &str, stage: Stage, state: Option<State>) -> PackageStatus {
        PackageStatus {
            name: name.into(),
            version: version.into(),
            image: "ghcr.io/x/pkg".into(),
            container_sha: None,
            stage,
            state,
            restarts: if state == Some(State::Erroring) { 2 } else { 0 },
        }
    }

    fn node(name: &str, entries: &[PackageStatus]) -> NodeMeta {
        let mut s = NodeState::default();
        for e in entries {
            s.upsert(e.clone());
        }
        NodeMeta {
            name: name.into(),
            labels: Default::default(),
            annotations: [(schema::node_state_annotation("sh"), s.to_annotation())].into(),
        }
    }

    #[test]
    fn collects_renders_and_keeps_the_reference_json_shape() {
        let nodes = vec![
            node(
                "node-b",
                &[
                    entry("pkg", "1.0.0", Stage::Apply, Some(State::Erroring)),
                    entry("other", "1.0.0", Stage::Config, Some(State::Complete)),
                ],
            ),
            node(
                "node-a",
                &[
                    entry("pkg", "1.0.0", Stage::Config, Some(State::Complete)),
                    entry("pkg", "0.9.0", Stage::Uninstall, None),
                ],
            ),
        ];
        let ctx = Ctx::for_tests();
        let all = collect(&ctx, &nodes, "sh", "pkg", None);
        assert_eq!(
            all.iter()
                .map(|s| (s.node_name.as_str(), s.status.version.as_str()))
                .collect::<Vec<_>>(),
            [
                ("node-a", "0.9.0"),
                ("node-a", "1.0.0"),
                ("node-b", "1.0.0")
            ]
        );
        let only_b = collect(
            &ctx,
            &nodes,
            "sh",
            "pkg",
            Some(&["node-b".to_string()].into()),
        );
        assert_eq!(only_b.len(), 1);

        let mut spec = SkyhookSpec::default();
        for (n, v) in [("zebra", "1.0"), ("alpha", "2.0"), ("pkg", "1.0.0")] {
            let p = serde_json::from_value(serde_json::json!({"version": v, "image": "img"}))
                .expect("package");
            spec.packages.insert(n.to_string(), p);
        }
        let sk = Skyhook::new("sh", spec);
        assert_eq!(package_list(&sk), "alpha:2.0, pkg:1.0.0, zebra:1.0");

        let p = Painter::new(false);
        let list = package_list(&sk);
        insta::with_settings!({snapshot_path => "../../tests/snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!("package_status_table", render(&p, OutputFormat::Table, "sh", &list, &all).unwrap());
            insta::assert_snapshot!("package_status_wide", render(&p, OutputFormat::Wide, "sh", &list, &all).unwrap());
            insta::assert_snapshot!("package_status_json", render(&p, OutputFormat::Json, "sh", &list, &all).unwrap());
        });
        assert_eq!(
            render(&p, OutputFormat::Table, "sh", &list, &[]).unwrap(),
            "No package status found for skyhook \"sh\"\n"
        );
    }

    /// `--sort-by` and `-o name` name JSON keys; a renamed field must take its name along.
    #[test]
    fn sortable_fields_are_keys_of_the_rows() {
        // Erroring, so `state` and `restarts` (left out when empty or zero) are in the JSON.
        let nodes = vec![node(
            "node-a",
            &[entry("pkg", "1.0.0", Stage::Apply, Some(State::Erroring))],
        )];
        let rows = collect(&Ctx::for_tests(), &nodes, "sh", "pkg", None);
        let sortable = NodePackageStatus::SORTABLE;
        assert_eq!(sortable.absent_from(&rows[0]), Vec::<&str>::new());
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(
            render(&Painter::new(false), OutputFormat::Name, "sh", "", &rows).unwrap(),
            format!("node/{}\n", json[sortable.name_field].as_str().unwrap())
        );
    }
}
