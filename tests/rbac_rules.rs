//! The operator's permissions are pinned: every rule of `deploy/rbac-operator.yaml` is listed
//! below with the reason the operator needs it, and every rule in the file carries a comment
//! saying why. A grant added to the manifest without both fails here, so widening what the
//! operator's ServiceAccount may do is always a reviewed, explained change. (The chart's copy is
//! compared with this file by the e2e test `helm::chart_renders_what_deploy_installs`, and what
//! the API server grants by `deploy::operator_service_account_has_exactly_what_it_needs`.)

use std::collections::BTreeSet;
use std::path::Path;

/// (role, API group, resource, verbs in the file's order, why).
const PINNED: &[(&str, &str, &str, &str, &str)] = &[
    (
        "ClusterRole",
        "",
        "nodes",
        "get list watch patch",
        "node state, cordon, taints",
    ),
    (
        "ClusterRole",
        "",
        "nodes/status",
        "patch",
        "per-Skyhook node conditions",
    ),
    (
        "ClusterRole",
        "",
        "pods",
        "list",
        "drain: the pods of one node, by field selector",
    ),
    (
        "ClusterRole",
        "",
        "pods/eviction",
        "create",
        "drain honouring PodDisruptionBudgets",
    ),
    (
        "ClusterRole",
        "skyhook.nvidia.com",
        "skyhooks",
        "get list watch patch update",
        "finalizer, annotations",
    ),
    (
        "ClusterRole",
        "skyhook.nvidia.com",
        "skyhooks/status",
        "get patch update",
        "status",
    ),
    (
        "ClusterRole",
        "skyhook.nvidia.com",
        "skyhooks/finalizers",
        "update",
        "blockOwnerDeletion",
    ),
    (
        "ClusterRole",
        "skyhook.nvidia.com",
        "deploymentpolicies",
        "get list watch patch",
        "in-use finalizer",
    ),
    (
        "ClusterRole",
        "nodewright.nvidia.com",
        "nodewrights",
        "get list watch create patch update",
        "NodeWrights: finalizer, annotations; create: the mirror (MIGRATE_TO_NODEWRIGHT)",
    ),
    (
        "ClusterRole",
        "nodewright.nvidia.com",
        "deploymentpolicies",
        "get list watch create patch",
        "the new group's policies: in-use finalizer; create: the mirror",
    ),
    (
        "ClusterRole",
        "nodewright.nvidia.com",
        "nodewrights/status",
        "get patch update",
        "NodeWright status",
    ),
    (
        "ClusterRole",
        "nodewright.nvidia.com",
        "nodewrights/finalizers",
        "update",
        "blockOwnerDeletion on a NodeWright",
    ),
    (
        "Role skyhook",
        "batch",
        "jobs",
        "create get list watch delete deletecollection patch",
        "stage Jobs",
    ),
    ("Role skyhook", "", "pods/log", "get", "stage logs"),
    (
        "Role skyhook",
        "",
        "secrets",
        "get",
        "the rollout gates' credentials, two Secrets by name",
    ),
    (
        "Role skyhook",
        "",
        "pods",
        "get list watch delete",
        "pending pods; the Go operator's pods",
    ),
    (
        "Role skyhook",
        "",
        "configmaps",
        "create get list watch update patch delete deletecollection",
        "package and node metadata ConfigMaps",
    ),
    (
        "Role skyhook",
        "coordination.k8s.io",
        "leases",
        "create get list watch update patch",
        "leader election",
    ),
    (
        "Role skyhook",
        "",
        "events",
        "create patch",
        "Events in the operator namespace",
    ),
    (
        "Role skyhook",
        "events.k8s.io",
        "events",
        "create patch",
        "Events in the operator namespace",
    ),
    (
        "Role default",
        "",
        "events",
        "create patch",
        "Events of cluster-scoped objects",
    ),
    (
        "Role default",
        "events.k8s.io",
        "events",
        "create patch",
        "Events of cluster-scoped objects",
    ),
];

/// One grant as the file states it: (role, group, resource, verbs).
type Grant = (String, String, String, String);

/// A `[a, "", b]` flow list.
fn list(value: &str) -> Vec<String> {
    value
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .collect()
}

/// Reads the rules of every ClusterRole and Role, failing on a rule without a comment above it
/// or inside it.
fn rules(text: &str) -> (Vec<Grant>, Vec<String>) {
    let mut grants = Vec::new();
    let mut uncommented = Vec::new();
    for doc in text.split("\n---\n") {
        let lines: Vec<&str> = doc.lines().collect();
        let field = |key: &str, indent: &str| {
            lines
                .iter()
                .find_map(|l| l.strip_prefix(indent)?.strip_prefix(key))
                .map(str::trim)
        };
        let role = match (field("kind:", ""), field("namespace:", "  ")) {
            (Some("ClusterRole"), _) => "ClusterRole".to_string(),
            (Some("Role"), Some(ns)) => format!("Role {ns}"),
            _ => continue,
        };
        let Some(start) = lines.iter().position(|l| l.starts_with("rules:")) else {
            continue;
        };
        let body = &lines[start + 1..];
        let starts: Vec<usize> = (0..body.len())
            .filter(|&i| body[i].starts_with("  - "))
            .collect();
        for (n, &i) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(body.len());
            let item = &body[i..end];
            let value = |key: &str| {
                item.iter()
                    .find_map(|l| l.trim_start_matches([' ', '-']).strip_prefix(key))
                    .map(list)
                    .unwrap_or_default()
            };
            let commented = (i > 0 && body[i - 1].trim_start().starts_with('#'))
                || item.iter().any(|l| l.trim_start().starts_with('#'));
            let verbs = value("verbs:").join(" ");
            for group in value("apiGroups:") {
                for resource in value("resources:") {
                    let grant = (role.clone(), group.clone(), resource, verbs.clone());
                    if !commented {
                        uncommented.push(format!("{grant:?}"));
                    }
                    grants.push(grant);
                }
            }
        }
    }
    (grants, uncommented)
}

#[test]
fn every_operator_grant_is_pinned_and_explained() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/rbac-operator.yaml");
    let text = std::fs::read_to_string(&path).expect("read deploy/rbac-operator.yaml");
    let (grants, uncommented) = rules(&text);
    assert!(
        uncommented.is_empty(),
        "rules without a comment saying why the operator needs them: {uncommented:#?}"
    );
    let found: BTreeSet<Grant> = grants.into_iter().collect();
    let pinned: BTreeSet<Grant> = PINNED
        .iter()
        .map(|(r, g, res, v, _)| (r.to_string(), g.to_string(), res.to_string(), v.to_string()))
        .collect();
    let added: Vec<_> = found.difference(&pinned).collect();
    let removed: Vec<_> = pinned.difference(&found).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "deploy/rbac-operator.yaml differs from the pinned grants; add the reason to PINNED in \
         tests/rbac_rules.rs (and a comment in the manifest) or revert.\n  added: {added:#?}\n  \
         removed: {removed:#?}"
    );
}

#[test]
fn an_unexplained_or_unpinned_grant_is_found() {
    let text = "kind: ClusterRole\nrules:\n  # why\n  - apiGroups: [\"\"]\n    resources: [nodes]\n    verbs: [get]\n  - apiGroups: [\"\"]\n    resources: [secrets]\n    verbs: [list]\n";
    let (grants, uncommented) = rules(text);
    assert_eq!(grants.len(), 2);
    assert_eq!(uncommented.len(), 1);
    assert!(uncommented[0].contains("secrets"));
}
