//! Every image this project ships or defaults to names its registry host (upstream #481: CRI-O
//! refuses a short name such as `skyhook/agent` unless the node's registries.conf says where to
//! look, and Docker's implicit docker.io is a supply-chain guess). Scanned: every manifest under
//! `deploy/` (the CRDs aside), the chart's default values, and the operator's own defaults.

use std::path::{Path, PathBuf};

use clap::Parser;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A reference names its registry when its first path component is a host: it has a dot or a
/// port, or is `localhost`.
fn names_registry(image: &str) -> bool {
    let Some((first, _)) = image.split_once('/') else {
        return false;
    };
    first.contains('.') || first.contains(':') || first == "localhost"
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            if !name.contains("crds") {
                yaml_files(&path, out);
            }
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            out.push(path);
        }
    }
}

fn unquoted(v: &str) -> &str {
    v.trim().trim_matches(|c| c == '"' || c == '\'')
}

/// Image references in a manifest or values file: `image:` values, `*_IMAGE` environment values
/// and the chart's `repository:` / `*Image:` keys. Template expressions are skipped (they render
/// the values checked here).
fn references(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim().trim_start_matches("- ").trim();
        if t.starts_with('#') {
            continue;
        }
        let value = if let Some(v) = t.strip_prefix("image:") {
            Some(v)
        } else if let Some(v) = t.strip_prefix("repository:") {
            Some(v)
        } else if let Some((key, v)) = t.split_once(':')
            && key.ends_with("Image")
            && !key.contains(' ')
        {
            Some(v)
        } else if t.starts_with("name:") && t.trim_end().ends_with("_IMAGE") {
            lines
                .get(i + 1)
                .and_then(|l| l.trim().strip_prefix("value:"))
        } else {
            None
        };
        let Some(v) = value.map(unquoted) else {
            continue;
        };
        if v.is_empty() || v.contains("{{") || v == "|" || v == ">" {
            continue;
        }
        out.push((i + 1, v.to_string()));
    }
    out
}

#[test]
fn a_short_name_is_told_from_a_qualified_one() {
    for ok in [
        "ghcr.io/nvidia/skyhook/agent:v1",
        "registry.k8s.io/pause:3.10",
        "localhost:5000/pkg",
        "localhost/pkg",
    ] {
        assert!(names_registry(ok), "{ok}");
    }
    for short in [
        "busybox",
        "busybox:1.36",
        "nvidia/agent:v6",
        "library/alpine",
    ] {
        assert!(!names_registry(short), "{short}");
    }
    let found = references(
        "      image: busybox\n      - name: AGENT_IMAGE\n        value: x/y\n  repository: {{ .x }}\n  pauseImage: reg.io/p\n",
    );
    assert_eq!(
        found,
        [
            (1, "busybox".to_string()),
            (2, "x/y".to_string()),
            (5, "reg.io/p".to_string())
        ]
    );
}

#[test]
fn every_image_shipped_in_deploy_and_the_chart_names_its_registry() {
    let mut files = Vec::new();
    yaml_files(&repo().join("deploy"), &mut files);
    let mut seen = 0;
    let mut short = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        for (line, image) in references(&text) {
            seen += 1;
            if !names_registry(&image) {
                short.push(format!("{}:{line}: {image}", f.display()));
            }
        }
    }
    assert!(seen >= 5, "the scan found {seen} images: it reads nothing");
    assert!(short.is_empty(), "short image names: {short:#?}");
}

#[test]
fn every_image_the_operator_defaults_to_names_its_registry() {
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        settings: skyhook::settings::Settings,
    }
    let d = Defaults::try_parse_from(["skyhook-operator"]).expect("defaults");
    for image in [&d.settings.agent_image, &d.settings.pause_image] {
        assert!(names_registry(image), "{image}");
    }
}
