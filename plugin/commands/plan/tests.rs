use serde_json::json;

use super::*;

const FILE: &str = "apiVersion: skyhook.nvidia.com/v1alpha1
kind: Skyhook
metadata:
  name: gpu-init
spec:
  packages:
    driver:
      version: 1.2.0
      image: ghcr.io/nvidia/driver
---
apiVersion: skyhook.nvidia.com/v1alpha1
kind: DeploymentPolicy
metadata:
  name: canary
spec:
  default:
    budget: {count: 1}
    strategy: {fixed: {}}
";

#[test]
fn a_file_holds_objects_and_policies_of_either_api() {
    let docs = parse(FILE, "f.yaml").expect("parsed");
    assert_eq!(docs.len(), 2);
    assert!(
        matches!(&docs[0], Doc::Object { api: ApiKind::Skyhook, sk, .. } if sk.name_any() == "gpu-init")
    );
    assert!(
        matches!(&docs[1], Doc::Policy { api: ApiKind::Skyhook, policy, .. } if policy.name_any() == "canary")
    );
    let nw = FILE.replace(
        "skyhook.nvidia.com/v1alpha1\nkind: Skyhook",
        "nodewright.nvidia.com/v1alpha1\nkind: NodeWright",
    );
    let docs = parse(&nw, "f.yaml").expect("parsed");
    assert!(matches!(
        &docs[0],
        Doc::Object {
            api: ApiKind::NodeWright,
            ..
        }
    ));
}

#[test]
fn what_cannot_be_planned_is_named_with_its_document() {
    let cases = [
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "f.yaml (document 1): apiVersion \"v1\"",
        ),
        (
            "apiVersion: skyhook.nvidia.com/v1alpha1\nkind: Skyhook\nmetadata: {name: a}\nspec: {}\n---\napiVersion: skyhook.nvidia.com/v1alpha1\nkind: Widget\n",
            "f.yaml (document 2): kind \"Widget\" cannot be planned",
        ),
        ("", "holds no object"),
        ("a: [", "is not YAML"),
    ];
    for (text, want) in cases {
        let err = parse(text, "f.yaml").err().expect(want).to_string();
        assert!(err.contains(want), "{err:?} should contain {want:?}");
        assert!(err.contains("f.yaml"), "{err}");
    }
}

fn skyhook_of(v: serde_json::Value) -> Skyhook {
    serde_json::from_value(v).expect("skyhook")
}

#[test]
fn the_candidate_keeps_what_is_stored_and_moves_the_generation_only_for_a_new_spec() {
    let file = skyhook_of(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": "next", "annotations": {"a": "file"}},
        "spec": {"packages": {"p": {"version": "1.1.0", "image": "ghcr.io/x/p"}}},
    }));
    let new = candidate(&file, None, "next");
    assert_eq!(new.metadata.generation, Some(1));
    assert!(new.status.is_none());
    let stored = skyhook_of(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": "live", "generation": 4, "uid": "u-1",
            "finalizers": ["skyhook.nvidia.com/skyhook"], "annotations": {"b": "stored"}},
        "spec": {"packages": {"p": {"version": "1.0.0", "image": "ghcr.io/x/p"}}},
    }));
    let next = candidate(&file, Some(&stored), "live");
    assert_eq!(next.name_any(), "live");
    assert_eq!(next.metadata.generation, Some(5));
    assert_eq!(next.metadata.uid.as_deref(), Some("u-1"));
    assert_eq!(next.finalizers(), ["skyhook.nvidia.com/skyhook"]);
    assert_eq!(
        next.annotations().get("a").map(String::as_str),
        Some("file")
    );
    assert_eq!(
        next.annotations().get("b").map(String::as_str),
        Some("stored")
    );
    assert_eq!(next.spec.packages["p"].version, "1.1.0");
    let same = candidate(&stored, Some(&stored), "live");
    assert_eq!(same.metadata.generation, Some(4));
}

/// The plugin decides nothing: it reads the world, hands it to the library's dry run, which
/// runs the operator's `plan::plan` pass after pass, and prints what comes back.
#[test]
fn the_command_has_no_rule_of_its_own() {
    let command = include_str!("../plan.rs");
    let reading = include_str!("../../app/planner.rs");
    let dry_run = include_str!("../../../src/plan/dry_run/mod.rs");
    assert!(command.contains("dry_run::simulate(&snap"));
    assert!(dry_run.contains("super::plan(&inputs(snap, &sim, now))"));
    for source in [command, reading] {
        for internal in [
            "plan::stage",
            "plan::select",
            "plan::batch",
            "plan::strategy",
            "plan::compartments",
            "plan::drain",
            "plan::interrupt",
            "plan::metadata",
            "targeted(",
            "semver",
        ] {
            assert!(!source.contains(internal), "the plugin uses {internal}");
        }
    }
}

#[test]
fn durations_read_as_people_write_them() {
    assert_eq!(human(0), "0s");
    assert_eq!(human(59), "59s");
    assert_eq!(human(61), "1m01s");
    assert_eq!(human(3 * 3600 + 5 * 60 + 7), "3h05m");
}
