//! Object builders: a Skyhook bound to the test, and the packages the scenarios put in it.

use serde_json::{Value, json};
use skyhook::crd::Skyhook;

use super::TestCtx;

/// A Skyhook selecting exactly this test's nodes, reconciled only by this test's operator.
pub fn skyhook(ctx: &TestCtx, name: &str, spec: Value) -> Skyhook {
    let (k, v) = ctx.test_label();
    let mut spec = spec;
    spec["nodeSelectors"] = json!({"matchLabels": {k.clone(): v.clone()}});
    serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": name, "labels": {k: v}},
        "spec": spec,
    }))
    .expect("valid Skyhook")
}

/// A shellscript package of `version` with the container environment `env`.
pub fn pkg(version: &str, env: Value) -> Value {
    json!({"version": version, "image": "ghcr.io/nvidia/skyhook-packages/shellscript", "env": env})
}

/// A shellscript package of `version` whose interrupt reboots the node.
pub fn reboot_pkg(version: &str) -> Value {
    let mut p = pkg(version, json!([]));
    p["interrupt"] = json!({"type": "reboot"});
    p
}

/// A package environment whose stages sleep `s` seconds.
pub fn sleep(s: &str) -> Value {
    json!([{"name": "SLEEP_LEN", "value": s}])
}
