//! `deploy/crds` must be exactly what the code generates.

use super::manifest_dir;
use crate::crd::{REGENERATE_COMMAND, crd_files};

#[test]
fn deploy_crds_match_the_code() {
    let dir = manifest_dir().join("deploy/crds");
    let mut stale = Vec::new();
    for (name, generated) in crd_files().unwrap() {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(on_disk) if on_disk == generated => {}
            Ok(_) => stale.push(format!("{} differs from the generated CRD", path.display())),
            Err(e) => stale.push(format!("{} cannot be read: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "deploy/crds is out of date:\n  {}\nRegenerate it with: {REGENERATE_COMMAND}",
        stale.join("\n  ")
    );
}

#[test]
fn multi_document_output_holds_the_crds_of_both_groups() {
    let yaml = crate::crd::crds_yaml().unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let names: Vec<&str> = docs
        .iter()
        .filter_map(|d| d.pointer("/metadata/name").and_then(|n| n.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            "skyhooks.skyhook.nvidia.com",
            "deploymentpolicies.skyhook.nvidia.com",
            "nodewrights.nodewright.nvidia.com",
            "deploymentpolicies.nodewright.nvidia.com"
        ]
    );
}

#[test]
fn yaml_files_parse_back_to_the_generated_crds() {
    // Guards against lossy quoting of patterns and CEL rules by the YAML serialiser.
    for (crd, (name, yaml)) in crate::crd::all_crds()
        .unwrap()
        .into_iter()
        .zip(crd_files().unwrap())
    {
        let parsed: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        let expected = serde_json::to_value(&crd).unwrap();
        assert_eq!(
            parsed, expected,
            "{name} does not parse back to the generated CRD"
        );
    }
}
