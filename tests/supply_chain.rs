//! What the release pipeline and the manifests pull is pinned: every action of every workflow by
//! commit (a tag can be moved to other code), the Rust toolchain by version, and the images that
//! run privileged on every node by a released tag, never a mutable one.

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

#[test]
fn the_agent_image_is_never_a_mutable_tag() {
    let deploy = read("deploy/operator.yaml");
    let agent = deploy
        .lines()
        .skip_while(|l| !l.contains("name: AGENT_IMAGE"))
        .nth(1)
        .expect("AGENT_IMAGE value");
    assert!(!agent.contains(":latest"), "deploy/operator.yaml: {agent}");
    let values = read("deploy/helm/skyhook-operator/values.yaml");
    assert!(
        !values.contains("tag: latest"),
        "the chart defaults a tag to latest"
    );
}
