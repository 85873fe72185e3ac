//! What the release pipeline and the manifests pull is pinned: every action of every workflow by
//! commit (a tag can be moved to other code), the Rust toolchain by version, the images the
//! installs run by digest, and the RustSec snapshot CI checks against covers every locked crate.

use std::path::Path;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// `uses:` references that are not `owner/repo@<40 hex>`.
fn unpinned(workflow: &str) -> Vec<String> {
    workflow
        .lines()
        .filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix("uses:"))
        .map(|u| u.split('#').next().unwrap_or_default().trim().to_string())
        .filter(|u| {
            let sha = u.rsplit_once('@').map_or("", |(_, r)| r);
            !(sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .collect()
}

#[test]
fn workflow_actions_and_toolchain_are_pinned() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(".github/workflows");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("workflows") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("workflow");
        let loose = unpinned(&text);
        assert!(
            loose.is_empty(),
            "{}: actions not pinned by commit: {loose:?}",
            path.display()
        );
        assert!(
            !text.contains("toolchain install stable"),
            "{}: an unpinned toolchain",
            path.display()
        );
        checked += 1;
    }
    assert!(checked > 0, "no workflow found");
    assert!(read(".github/workflows/release.yml").contains("cosign sign"));
}

#[test]
fn an_unpinned_action_is_found() {
    let text = "steps:\n  - uses: actions/checkout@v4\n  - uses: a/b@0123456789abcdef0123456789abcdef01234567 # v1\n";
    assert_eq!(unpinned(text), vec!["actions/checkout@v4".to_string()]);
}

/// `image` ends in `@sha256:` and 64 hex digits.
fn by_digest(image: &str) -> bool {
    image
        .rsplit_once("@sha256:")
        .is_some_and(|(_, hex)| hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The value of the env entry `name` in a manifest (the line after `- name: <name>`).
fn env_value(manifest: &str, name: &str) -> String {
    let line = manifest
        .lines()
        .skip_while(|l| l.trim() != format!("- name: {name}"))
        .nth(1)
        .unwrap_or_else(|| panic!("no value for {name}"));
    line.trim()
        .strip_prefix("value:")
        .unwrap_or_else(|| panic!("{name}: {line}"))
        .trim()
        .to_string()
}

/// Every image the installs run that this project does not build is named by digest: the agent
/// (privileged on every node), the pause image, the chart hook's kubectl, and the build base of
/// the operator image. The operator's own image gets its digest at release (next test).
#[test]
fn third_party_images_are_pinned_by_digest() {
    let deploy = read("deploy/operator.yaml");
    for name in ["AGENT_IMAGE", "PAUSE_IMAGE"] {
        let image = env_value(&deploy, name);
        assert!(by_digest(&image), "deploy/operator.yaml {name}: {image}");
    }
    for file in [
        "deploy/helm/skyhook-operator/values.yaml",
        "deploy/helm/skyhook-operator/ci/kustomize-values.yaml",
    ] {
        let values = read(file);
        let mut repository = "";
        let mut checked = 0;
        for line in values.lines().map(str::trim) {
            if let Some(r) = line.strip_prefix("repository:") {
                repository = r.trim();
            }
            if let Some(d) = line.strip_prefix("digest:") {
                let d = d.trim().trim_matches('"');
                if repository != "ghcr.io/skyhook-rs/skyhook-operator" {
                    assert!(
                        by_digest(&format!("x@{d}")),
                        "{file}: {repository} digest {d:?}"
                    );
                    checked += 1;
                }
            }
            if let Some(p) = line.strip_prefix("pauseImage:") {
                assert!(by_digest(p.trim()), "{file}: pauseImage {p}");
            }
        }
        assert!(checked > 0, "{file}: no digest checked");
    }
    let dockerfile = read("Dockerfile");
    let base = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_IMAGE="))
        .expect("Dockerfile: ARG RUST_IMAGE");
    assert!(by_digest(base), "Dockerfile build base: {base}");
    assert!(
        dockerfile
            .lines()
            .any(|l| l.starts_with("FROM ${RUST_IMAGE}")),
        "the Dockerfile does not build FROM ${{RUST_IMAGE}}"
    );
    let toolchain = read(".github/workflows/release.yml")
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("RUST_TOOLCHAIN:")
                .map(|v| v.trim().to_string())
        })
        .expect("RUST_TOOLCHAIN");
    assert!(
        base.contains(&format!("/rust:{toolchain}-")),
        "the Dockerfile's base {base} is not the workflow's toolchain {toolchain}"
    );
}

#[test]
fn an_image_without_a_digest_is_found() {
    assert!(by_digest(&format!("a/b:v1@sha256:{}", "0".repeat(64))));
    assert!(!by_digest("nvcr.io/nvidia/skyhook/agent:v6.4.1"));
    assert!(!by_digest("a/b@sha256:abc"));
}

/// The release pins the operator image it pushed in both installs: the workflow passes the
/// pushed digest to release/pin-operator-image, which (run here on a copy) writes it into the
/// kustomize `images:` entry and the chart's default values.
#[test]
fn the_release_pins_the_operator_image_by_digest() {
    let workflow = read(".github/workflows/release.yml");
    assert!(
        workflow.contains(r#"release/pin-operator-image "${{ needs.image.outputs.digest }}""#),
        "the release workflow does not pin the operator image"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = std::env::temp_dir().join(format!("skyhook-pin-{}", std::process::id()));
    let chart = copy.join("deploy/helm/skyhook-operator");
    std::fs::create_dir_all(&chart).expect("temp dir");
    for rel in [
        "deploy/kustomization.yaml",
        "deploy/helm/skyhook-operator/values.yaml",
    ] {
        std::fs::copy(root.join(rel), copy.join(rel)).expect("copy");
    }
    let digest = format!("sha256:{}", "ab".repeat(32));
    for _ in 0..2 {
        let out = std::process::Command::new(root.join("release/pin-operator-image"))
            .arg(&digest)
            .arg(&copy)
            .output()
            .expect("run release/pin-operator-image");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let kustomization =
        std::fs::read_to_string(copy.join("deploy/kustomization.yaml")).expect("read");
    assert_eq!(
        kustomization.matches(&format!("digest: {digest}")).count(),
        1,
        "{kustomization}"
    );
    let values = std::fs::read_to_string(chart.join("values.yaml")).expect("read");
    let operator = values
        .split("repository: ghcr.io/skyhook-rs/skyhook-operator")
        .nth(1)
        .expect("operator image");
    let first = operator
        .lines()
        .find(|l| l.trim().starts_with("digest:"))
        .expect("digest");
    assert_eq!(first.trim(), format!("digest: \"{digest}\""));
    let refused = std::process::Command::new(root.join("release/pin-operator-image"))
        .args(["v0.1.0"])
        .arg(&copy)
        .output()
        .expect("run");
    assert!(!refused.status.success(), "a tag was taken for a digest");
    let _ = std::fs::remove_dir_all(&copy);
}

/// .ci/rustsec-check checks advisories against the snapshot in .ci/rustsec/: it must hold the
/// advisories of every locked crate the database knows (a new dependency with advisories fails
/// here until `.ci/rustsec-sync` is run again), and nothing for crates no longer locked.
#[test]
fn the_rustsec_snapshot_covers_every_locked_crate() {
    let locked: std::collections::BTreeSet<String> = read("Cargo.lock")
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .map(|n| n.trim_end_matches('"').to_string())
        .collect();
    let snapshot = read(".ci/rustsec/SNAPSHOT");
    let known: Vec<&str> = snapshot
        .lines()
        .filter_map(|l| l.strip_prefix("crate "))
        .collect();
    assert!(
        known.len() > 500,
        "SNAPSHOT lists only {} crates",
        known.len()
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/rustsec/crates");
    let missing: Vec<&&str> = known
        .iter()
        .filter(|n| locked.contains(**n) && !dir.join(n).is_dir())
        .collect();
    assert!(
        missing.is_empty(),
        "locked crates with advisories not in .ci/rustsec (run .ci/rustsec-sync): {missing:?}"
    );
    let stale: Vec<String> = std::fs::read_dir(&dir)
        .expect("crates")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !locked.contains(n))
        .collect();
    assert!(
        stale.is_empty(),
        "advisories of crates no longer locked: {stale:?}"
    );
}
