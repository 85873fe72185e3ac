//! The fixture corpora: `tests/fixtures/valid` (upstream samples and objects as the Go operator
//! stored them) and `tests/fixtures/invalid` (one manifest per validation rule).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::{fixtures_dir, yaml_docs, yaml_files};
use crate::crd::{
    DeploymentPolicy, Skyhook, ValidationError, deployment_policy_crd, skyhook_crd,
    validate_deployment_policy, validate_skyhook,
};

/// Fragments of messages the API server produces itself (schema keywords, not our CEL rules).
const NATIVE_MESSAGES: &[&str] = &[
    "Unsupported value",
    "should be less than or equal to",
    "should be greater than or equal to",
    "should be at least",
    "should match",
    "Required value",
    "Too long",
];

#[derive(Debug, PartialEq)]
enum RejectedBy {
    Admission,
    Operator,
}

struct Invalid {
    expect: String,
    by: RejectedBy,
    doc: Value,
}

fn read_invalid(path: &Path) -> Invalid {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let expect = lines
        .next()
        .and_then(|l| l.strip_prefix("# expect: "))
        .unwrap_or_else(|| panic!("{}: first line must be `# expect: <text>`", path.display()));
    let by = match lines.next().and_then(|l| l.strip_prefix("# rejected-by: ")) {
        Some("admission") => RejectedBy::Admission,
        Some("operator") => RejectedBy::Operator,
        other => panic!(
            "{}: second line must be `# rejected-by: admission|operator`, got {other:?}",
            path.display()
        ),
    };
    let mut docs = yaml_docs(path);
    assert_eq!(docs.len(), 1, "{}: one manifest per file", path.display());
    Invalid {
        expect: expect.to_owned(),
        by,
        doc: docs.remove(0),
    }
}

/// Operator-side validation of a manifest: `Err(None)` when it does not even deserialise.
fn operator_validate(doc: &Value) -> Result<(), Option<Vec<ValidationError>>> {
    match doc["kind"].as_str() {
        Some("Skyhook") => {
            let sh: Skyhook = serde_json::from_value(doc.clone()).map_err(|_| None)?;
            validate_skyhook(&sh).map_err(Some)
        }
        Some("DeploymentPolicy") => {
            let dp: DeploymentPolicy = serde_json::from_value(doc.clone()).map_err(|_| None)?;
            validate_deployment_policy(&dp).map_err(Some)
        }
        other => panic!("unexpected kind {other:?}"),
    }
}

/// Every CEL message (static and message expressions) of both CRDs.
fn cel_messages() -> String {
    let mut all = String::new();
    for crd in [skyhook_crd().unwrap(), deployment_policy_crd().unwrap()] {
        let v = serde_json::to_value(crd).unwrap();
        collect_messages(&v, &mut all);
    }
    all
}

fn collect_messages(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            if let Some(rules) = m.get("x-kubernetes-validations").and_then(Value::as_array) {
                for r in rules {
                    for key in ["message", "messageExpression"] {
                        if let Some(s) = r.get(key).and_then(Value::as_str) {
                            out.push_str(s);
                            out.push('\n');
                        }
                    }
                }
            }
            m.values().for_each(|c| collect_messages(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| collect_messages(c, out)),
        _ => {}
    }
}

#[test]
fn invalid_corpus_is_rejected_with_the_expected_message() {
    let files = yaml_files(&fixtures_dir("invalid"));
    assert!(
        files.len() >= 30,
        "expected at least 30 invalid fixtures, found {}",
        files.len()
    );
    let cel = cel_messages();
    let mut failures = Vec::new();
    let (mut admission, mut operator) = (0, 0);
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fx = read_invalid(path);
        let native = NATIVE_MESSAGES.iter().any(|n| fx.expect.contains(n));
        match fx.by {
            RejectedBy::Admission => {
                admission += 1;
                if !native && !cel.contains(&fx.expect) {
                    failures.push(format!(
                        "{name}: no CEL message of the generated CRDs contains {:?}",
                        fx.expect
                    ));
                }
            }
            RejectedBy::Operator => operator += 1,
        }
        // The operator re-checks everything admission checks (objects may predate the rules),
        // so every invalid manifest is rejected here too, with the same words unless the API
        // server's own schema message is expected.
        match operator_validate(&fx.doc) {
            Ok(()) => failures.push(format!("{name}: accepted by the operator-side validation")),
            Err(None) => {
                if fx.by == RejectedBy::Operator || !native {
                    failures.push(format!(
                        "{name}: does not deserialise, but only schema-level rejections may fail that early"
                    ));
                }
            }
            Err(Some(errors)) => {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                if !native && !text.iter().any(|t| t.contains(&fx.expect)) {
                    failures.push(format!(
                        "{name}: no error contains {:?}; got:\n      {}",
                        fx.expect,
                        text.join("\n      ")
                    ));
                }
            }
        }
    }
    assert!(admission > 0 && operator > 0);
    assert!(
        failures.is_empty(),
        "invalid fixtures:\n  {}",
        failures.join("\n  ")
    );
}

/// Paths a re-serialisation may add: schema defaults the API server (or Go's zero values) would
/// add anyway.
const MAY_ADD: &[&str] = &[
    "spec.serial",
    "spec.pause",
    "spec.runtimeRequired",
    "spec.autoTaintNewNodes",
    "spec.priority",
    "spec.interruptionBudget",
    "spec.nodeSelectors",
    "spec.podNonInterruptLabels",
    "spec.default.budget",
];

fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        // Quantities given as YAML numbers come back as strings.
        (Value::Number(n), Value::String(s)) => n.to_string() == *s,
        _ => a == b,
    }
}

fn lost(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    match input {
        Value::Object(m) => {
            for (k, v) in m {
                if v.is_null() {
                    continue;
                }
                let p = format!("{path}.{k}");
                match output.get(k) {
                    Some(o) => lost(v, o, &p, out),
                    None => out.push(format!("{p}: dropped")),
                }
            }
        }
        Value::Array(a) => match output.as_array() {
            Some(o) if o.len() == a.len() => {
                for (i, (x, y)) in a.iter().zip(o).enumerate() {
                    lost(x, y, &format!("{path}[{i}]"), out);
                }
            }
            _ => out.push(format!("{path}: list changed to {output}")),
        },
        _ if !same_scalar(input, output) => out.push(format!("{path}: {input} became {output}")),
        _ => {}
    }
}

fn added(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    match output {
        Value::Object(m) => {
            for (k, v) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match input.get(k).filter(|i| !i.is_null()) {
                    Some(i) => added(i, v, &p, out),
                    None => out.push(p),
                }
            }
        }
        Value::Array(o) => {
            if let Some(a) = input.as_array() {
                for (i, (x, y)) in a.iter().zip(o).enumerate() {
                    added(x, y, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn round_trip<T>(doc: &Value) -> Value
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let typed: T = serde_json::from_value(doc.clone()).unwrap();
    serde_json::to_value(&typed).unwrap()
}

#[test]
fn valid_fixtures_deserialise_validate_and_round_trip() {
    let files = yaml_files(&fixtures_dir("valid"));
    assert!(files.len() >= 3);
    let may_add: BTreeSet<&str> = MAY_ADD.iter().copied().collect();
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for doc in yaml_docs(path) {
            let output = match doc["kind"].as_str() {
                Some("Skyhook") => {
                    let sh: Skyhook = serde_json::from_value(doc.clone()).unwrap();
                    if let Err(e) = validate_skyhook(&sh) {
                        failures.push(format!("{name}: rejected: {e:?}"));
                    }
                    round_trip::<Skyhook>(&doc)
                }
                Some("DeploymentPolicy") => {
                    let dp: DeploymentPolicy = serde_json::from_value(doc.clone()).unwrap();
                    if let Err(e) = validate_deployment_policy(&dp) {
                        failures.push(format!("{name}: rejected: {e:?}"));
                    }
                    round_trip::<DeploymentPolicy>(&doc)
                }
                other => panic!("{name}: unexpected kind {other:?}"),
            };
            let mut out = Vec::new();
            lost(&doc, &output, "", &mut out);
            let mut extra = Vec::new();
            added(&doc, &output, "", &mut extra);
            out.extend(
                extra
                    .into_iter()
                    .filter(|p| !may_add.contains(p.as_str()))
                    .map(|p| format!("{p}: added")),
            );
            if !out.is_empty() {
                failures.push(format!("{name}:\n      {}", out.join("\n      ")));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "valid fixtures:\n  {}",
        failures.join("\n  ")
    );
}

#[test]
fn go_stored_status_reserialises_byte_for_byte_in_go_field_order() {
    let doc = &yaml_docs(&fixtures_dir("valid").join("go-stored-skyhook.yaml"))[0];
    let sh: Skyhook = serde_json::from_value(doc.clone()).unwrap();
    let status = sh.status.unwrap();
    let node2 = serde_json::to_string(&status.node_state["node-2"]).unwrap();
    assert_eq!(
        node2,
        r#"{"dexter|1.2.3":{"name":"dexter","version":"1.2.3","image":"","stage":"apply","state":"erroring","restarts":3}}"#
    );
    let batch = serde_json::to_string(&status.compartment_statuses["__default__"]).unwrap();
    assert_eq!(
        batch,
        r#"{"matched":2,"ceiling":1,"inProgress":1,"completed":1,"progressPercent":50,"batchState":{"currentBatch":2,"completedNodes":1,"lastBatchSize":1}}"#
    );
}
