//! `deploy/policies/image-registries.yaml` (optional; issue 35): Skyhooks and NodeWrights whose
//! package images, `agentImageOverride` or `healthGate.check.image` come from other registries
//! are refused, and with `requireDigest` so are packages without a `containerSHA` and check
//! images without a digest. The shipped objects are applied under the test's own names
//! and lists, their binding narrowed to the test's Skyhooks, so other tests are not affected.

use serde_json::{Value, json};

use crate::support::deploy::{repo, text};
use crate::support::{TestCtx, pkg, skyhook};

/// The shipped documents, renamed for this test, with the two variables set to `allowed` and
/// `require_digest`, the binding limited to Skyhooks with the test's label.
fn policy_for(ctx: &TestCtx, allowed: &[&str], require_digest: bool) -> Vec<Value> {
    let path = repo().join("deploy/policies/image-registries.yaml");
    let raw = std::fs::read_to_string(&path).expect("read the policy file");
    let name = ctx.name("images");
    let (k, v) = ctx.test_label();
    raw.split("\n---\n")
        .map(|doc| serde_saphyr::from_str::<Value>(doc).expect("yaml"))
        .map(|mut o| {
            o["metadata"]["name"] = json!(name);
            match o["kind"].as_str() {
                Some("ValidatingAdmissionPolicy") => {
                    for var in o["spec"]["variables"].as_array_mut().expect("variables") {
                        match var["name"].as_str() {
                            Some("allowed") => var["expression"] = json!(format!("{allowed:?}")),
                            Some("requireDigest") => {
                                var["expression"] = json!(require_digest.to_string())
                            }
                            _ => {}
                        }
                    }
                }
                Some("ValidatingAdmissionPolicyBinding") => {
                    o["spec"]["policyName"] = json!(name);
                    o["spec"]["matchResources"] =
                        json!({"objectSelector": {"matchLabels": {k.clone(): v.clone()}}});
                }
                _ => {}
            }
            o
        })
        .collect()
}

fn apply(ctx: &TestCtx, objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let out = ctx.kubectl_stdin(&["apply", "-f", "-"], list.to_string().as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A server-side dry run of the Skyhook: `Err(stderr)` when refused.
fn admitted(ctx: &TestCtx, spec: Value) -> Result<(), String> {
    admitted_as(ctx, spec, "skyhook.nvidia.com/v1alpha1", "Skyhook")
}

/// The same object under either API.
fn admitted_as(ctx: &TestCtx, spec: Value, api_version: &str, kind: &str) -> Result<(), String> {
    let sk = skyhook(ctx, &ctx.name("sk"), spec);
    let mut object = serde_json::to_value(&sk).expect("json");
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    let body = serde_json::to_vec(&object).expect("json");
    let out = ctx.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &body);
    if out.status.success() {
        Ok(())
    } else {
        Err(text(&out.stderr))
    }
}

/// Until the policy refuses `spec` saying `why`. The policy and its binding reach the API
/// server's admission through informers: meanwhile a request may be judged by the policy's
/// previous version, or by none.
async fn until_refused(ctx: &TestCtx, spec: &Value, why: &str) -> String {
    ctx.wait_for(
        &format!("the image policy to refuse with {why:?}"),
        std::time::Duration::from_secs(30),
        || async {
            admitted(ctx, spec.clone())
                .err()
                .filter(|e| e.contains(why))
        },
    )
    .await
}

#[tokio::test]
async fn images_from_other_registries_and_undigested_packages_are_refused() {
    crate::support::install_nodewright_crds();
    let ctx = TestCtx::new("imgpolicy").await;
    let objects = policy_for(&ctx, &["ghcr.io/nvidia/", "registry.example.com/"], false);
    apply(&ctx, &objects);
    let from = |image: &str| {
        let mut p = pkg("1.0.0", json!([]));
        p["image"] = json!(image);
        p
    };
    let elsewhere = json!({"packages": {"evil": from("evil.example.org/tools")}});
    let refused = until_refused(&ctx, &elsewhere, "must start with one of").await;
    assert!(refused.contains("skyhook-image-policy"), "{refused}");
    admitted(
        &ctx,
        json!({"packages": {"tools": pkg("1.0.0", json!([]))}}),
    )
    .expect("an allowed registry");
    let mut agent = pkg("1.0.0", json!([]));
    agent["agentImageOverride"] = json!("evil.example.org/agent:1");
    let err = admitted(&ctx, json!({"packages": {"tools": agent}})).expect_err("agent override");
    assert!(err.contains("skyhook-image-policy"), "{err}");
    // Issue 50, item 6: the health gate's check image, and NodeWrights, are covered too.
    let gate = |image: &str| {
        json!({"healthGate": {"check": {"image": image}},
            "packages": {"tools": pkg("1.0.0", json!([]))}})
    };
    let err = admitted(&ctx, gate("evil.example.org/check:1")).expect_err("check image");
    assert!(err.contains("skyhook-image-policy"), "{err}");
    admitted(&ctx, gate("registry.example.com/check:1")).expect("an allowed check image");
    let nodewright =
        |spec: Value| admitted_as(&ctx, spec, "nodewright.nvidia.com/v1alpha1", "NodeWright");
    let err = nodewright(elsewhere.clone()).expect_err("a NodeWright's package image");
    assert!(err.contains("skyhook-image-policy"), "{err}");
    let err = nodewright(gate("evil.example.org/check:1")).expect_err("a NodeWright's check");
    assert!(err.contains("skyhook-image-policy"), "{err}");
    nodewright(json!({"packages": {"tools": pkg("1.0.0", json!([]))}}))
        .expect("a NodeWright from an allowed registry");

    // requireDigest: a package without containerSHA is refused, one with it admitted.
    let objects = policy_for(&ctx, &["ghcr.io/nvidia/"], true);
    apply(&ctx, &objects);
    let bare = json!({"packages": {"tools": pkg("1.0.0", json!([]))}});
    let refused = until_refused(&ctx, &bare, "containerSHA").await;
    assert!(refused.contains("skyhook-image-policy"), "{refused}");
    let mut pinned = pkg("1.0.0", json!([]));
    pinned["containerSHA"] = json!(format!("sha256:{}", "ab".repeat(32)));
    admitted(&ctx, json!({"packages": {"tools": pinned.clone()}})).expect("a pinned package");
    let check = |image: &str| json!({"healthGate": {"check": {"image": image}}, "packages": {"tools": pinned.clone()}});
    let err = admitted(&ctx, check("ghcr.io/nvidia/check:1")).expect_err("an undigested check");
    assert!(err.contains("healthGate.check.image"), "{err}");
    let digest = format!("ghcr.io/nvidia/check@sha256:{}", "cd".repeat(32));
    admitted(&ctx, check(&digest)).expect("a pinned check image");

    let names: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default().to_lowercase(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    let mut args = vec!["delete", "--ignore-not-found"];
    args.extend(names.iter().map(String::as_str));
    let _ = ctx.kubectl(&args);
}
