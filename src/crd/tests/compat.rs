//! The generated CRDs against the upstream (controller-gen) CRDs in `../shared/reference`.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use super::{manifest_dir, yaml_docs};
use crate::crd::admission::{self, SchemaPatch};
use crate::crd::{deployment_policy_crd, skyhook_crd, upstream_fields};

fn upstream(file: &str) -> Value {
    let path = manifest_dir()
        .join("../shared/reference/upstream-crds")
        .join(file);
    assert!(
        path.exists(),
        "upstream CRD {} not found; the compatibility tests need ../shared/reference next to the project",
        path.display()
    );
    yaml_docs(&path)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{} has no document", path.display()))
}

fn ours(crd: &CustomResourceDefinition) -> Value {
    serde_json::to_value(crd).unwrap()
}

fn schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

/// Children of a schema node as (path segment, child).
fn children(node: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        out.extend(props.iter().map(|(k, v)| (k.clone(), v)));
    }
    if let Some(ap) = node.get("additionalProperties").filter(|v| v.is_object()) {
        out.push(("*".to_owned(), ap));
    }
    if let Some(items) = node.get("items") {
        out.push(("[]".to_owned(), items));
    }
    out
}

fn child<'a>(node: &'a Value, seg: &str) -> Option<&'a Value> {
    match seg {
        "*" => node.get("additionalProperties"),
        "[]" => node.get("items"),
        name => node.get("properties")?.get(name),
    }
}

fn join(path: &str, seg: &str) -> String {
    if path.is_empty() {
        seg.to_owned()
    } else {
        format!("{path}.{seg}")
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() { "<root>" } else { path }
}

/// The compatibility contract of the task: every upstream path exists in ours with the same
/// `type`, `x-kubernetes-int-or-string` and `format`, and our `enum` is a superset.
fn contract_mismatches(up: &Value, ours: &Value, path: &str, out: &mut Vec<String>) {
    for key in ["type", "x-kubernetes-int-or-string", "format"] {
        if up.get(key) != ours.get(key) {
            out.push(format!(
                "{}: {key} upstream {:?}, ours {:?}",
                display(path),
                up.get(key),
                ours.get(key)
            ));
        }
    }
    if let Some(up_enum) = up.get("enum").and_then(Value::as_array) {
        let ours_enum = ours.get("enum").and_then(Value::as_array);
        let missing: Vec<&Value> = up_enum
            .iter()
            .filter(|v| !ours_enum.is_some_and(|o| o.contains(v)))
            .collect();
        if !missing.is_empty() {
            out.push(format!(
                "{}: enum lacks upstream values {missing:?}",
                display(path)
            ));
        }
    }
    for (seg, up_child) in children(up) {
        let p = join(path, &seg);
        match child(ours, &seg) {
            Some(our_child) => contract_mismatches(up_child, our_child, &p, out),
            None => out.push(format!("{p}: missing in the generated schema")),
        }
    }
}

fn check_contract(file: &str, generated: &CustomResourceDefinition) {
    let up = upstream(file);
    let ours = ours(generated);
    let mut out = Vec::new();
    contract_mismatches(schema(&up), schema(&ours), "", &mut out);
    assert!(
        out.is_empty(),
        "generated CRD differs from upstream {file}:\n  {}",
        out.join("\n  ")
    );
}

#[test]
fn skyhook_schema_has_every_upstream_path_and_type() {
    check_contract("skyhook.nvidia.com_skyhooks.yaml", &skyhook_crd().unwrap());
}

#[test]
fn policy_schema_has_every_upstream_path_and_type() {
    check_contract(
        "skyhook.nvidia.com_deploymentpolicies.yaml",
        &deployment_policy_crd().unwrap(),
    );
}

/// Validation-relevant keywords compared exactly (descriptions and examples are not).
const KEYWORDS: &[&str] = &[
    "type",
    "format",
    "enum",
    "default",
    "nullable",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "pattern",
    "required",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
];

fn same(a: Option<&Value>, b: Option<&Value>, keyword: &str) -> bool {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        (Some(Value::Array(x)), Some(Value::Array(y)))
            if matches!(keyword, "enum" | "required") =>
        {
            x.len() == y.len() && x.iter().all(|v| y.contains(v))
        }
        (a, b) => a == b,
    }
}

fn exact_mismatches(
    up: Option<&Value>,
    ours: &Value,
    path: &str,
    allowed: &BTreeSet<(String, String)>,
    out: &mut Vec<String>,
) {
    let Some(up) = up else {
        // A field of this project's own: nothing upstream to compare with.
        if upstream_fields::extensions()
            .iter()
            .any(|(root, _)| path == *root)
        {
            return;
        }
        // A field of a later upstream release: compared with that release's schema.
        match upstream_fields::skyhook_fields()
            .into_iter()
            .find(|f| f.path == path)
        {
            Some(f) => exact_mismatches(Some(&f.schema), ours, path, allowed, out),
            None => out.push(format!("{}: not in upstream", display(path))),
        }
        return;
    };
    // Values a later release added to an enum of the v0.13 CRD.
    let mut widened = up.clone();
    for (at, _, values) in upstream_fields::skyhook_enum_additions() {
        if at == path
            && let Some(Value::Array(e)) = widened.get_mut("enum")
        {
            e.extend(values);
        }
    }
    let up = &widened;
    for kw in KEYWORDS {
        if !same(up.get(*kw), ours.get(*kw), kw)
            && !allowed.contains(&(path.to_owned(), (*kw).to_owned()))
        {
            out.push(format!(
                "{}: {kw} upstream {:?}, ours {:?}",
                display(path),
                up.get(*kw),
                ours.get(*kw)
            ));
        }
    }
    for (seg, our_child) in children(ours) {
        exact_mismatches(child(up, &seg), our_child, &join(path, &seg), allowed, out);
    }
    for (seg, _) in children(up) {
        if child(ours, &seg).is_none() {
            out.push(format!("{}: missing", join(path, &seg)));
        }
    }
}

/// Beyond the contract: every validation keyword equals upstream, except the documented
/// tightenings of `admission` (and the root `required: [spec]`, which keeps objects without a
/// spec, unreadable for the typed controller, out).
fn check_exact(file: &str, generated: &CustomResourceDefinition, tightenings: Vec<SchemaPatch>) {
    let up = upstream(file);
    let ours = ours(generated);
    let mut allowed: BTreeSet<(String, String)> = tightenings
        .into_iter()
        .map(|p| (p.path, p.keyword.to_owned()))
        .collect();
    allowed.insert((String::new(), "required".to_owned()));
    let mut out = Vec::new();
    exact_mismatches(Some(schema(&up)), schema(&ours), "", &allowed, &mut out);
    assert!(
        out.is_empty(),
        "generated CRD differs from upstream {file} beyond the documented tightenings:\n  {}",
        out.join("\n  ")
    );

    // Everything outside the schema (names, scope, printer columns, subresources).
    for pointer in [
        "/spec/group",
        "/spec/names",
        "/spec/scope",
        "/spec/versions/0/name",
        "/spec/versions/0/served",
        "/spec/versions/0/storage",
        "/spec/versions/0/additionalPrinterColumns",
        "/spec/versions/0/subresources",
        "/metadata/name",
    ] {
        assert_eq!(
            up.pointer(pointer),
            ours.pointer(pointer),
            "{file}: {pointer} differs from upstream"
        );
    }
}

#[test]
fn skyhook_schema_equals_upstream_except_tightenings() {
    check_exact(
        "skyhook.nvidia.com_skyhooks.yaml",
        &skyhook_crd().unwrap(),
        admission::skyhook_tightenings(),
    );
}

#[test]
fn policy_schema_equals_upstream_except_tightenings() {
    check_exact(
        "skyhook.nvidia.com_deploymentpolicies.yaml",
        &deployment_policy_crd().unwrap(),
        admission::deployment_policy_tightenings(),
    );
}

/// Structural-schema hygiene the API server would otherwise reject at install time.
#[test]
fn generated_schemas_are_structural() {
    fn walk(node: &Value, path: &str, out: &mut Vec<String>) {
        let Some(obj) = node.as_object() else { return };
        for bad in ["$ref", "definitions", "$schema", "oneOf", "allOf", "title"] {
            if obj.contains_key(bad) {
                out.push(format!("{}: has {bad}", display(path)));
            }
        }
        let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        if obj.contains_key("anyOf") && !int_or_string {
            out.push(format!("{}: anyOf outside int-or-string", display(path)));
        }
        if !int_or_string && !obj.contains_key("type") {
            out.push(format!("{}: no type", display(path)));
        }
        for (seg, c) in children(node) {
            walk(c, &join(path, &seg), out);
        }
    }
    for crd in [skyhook_crd().unwrap(), deployment_policy_crd().unwrap()] {
        let v = ours(&crd);
        let mut out = Vec::new();
        walk(schema(&v), "", &mut out);
        assert!(
            out.is_empty(),
            "{}:\n  {}",
            crd.metadata.name.unwrap_or_default(),
            out.join("\n  ")
        );
    }
}
