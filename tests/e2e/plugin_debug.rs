//! `kubectl skyhook debug collect` against a private operator with one failing package.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, NodeState, State};

use crate::support::plugin::{plugin, plugin_with, token_kubeconfig};
use crate::support::{Operator, TestCtx, install_crds};

/// Every file of the archive by its path below the archive's root directory.
fn unpack(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let file = std::fs::File::open(path).expect("open archive");
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut files = BTreeMap::new();
    for entry in tar.entries().expect("tar entries") {
        let mut entry = entry.expect("tar entry");
        let name = entry
            .path()
            .expect("entry path")
            .to_string_lossy()
            .into_owned();
        let (_, rel) = name
            .split_once('/')
            .expect("entries sit under a root directory");
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).expect("read entry");
        files.insert(rel.to_string(), bytes);
    }
    files
}

fn text(files: &BTreeMap<String, Vec<u8>>, path: &str) -> String {
    String::from_utf8_lossy(files.get(path).unwrap_or_else(|| panic!("{path} missing")))
        .into_owned()
}

fn contains(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn debug_collect_archives_a_failing_rollout() {
    install_crds();
    let mut ctx = TestCtx::new("dbg").await;
    let nodes = ctx.add_test_nodes(1);
    let node = nodes[0].clone();
    let _op = Operator::start(&ctx, &[]);
    let sk = ctx.name("sk");
    let ns = ctx.ns.clone();
    ctx.report_on_failure(&["get", "jobs,pods", "-n", &ns, "-o", "wide"]);
    let secret = format!("tok-{}-do-not-leak", ctx.prefix);
    let broken_text = format!("broken-{}", ctx.prefix);
    let (k, v) = ctx.test_label();
    let object: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": sk, "labels": {k.clone(): v.clone()}},
        "spec": {"nodeSelectors": {"matchLabels": {k: v}}, "packages": {
            "broken": {"version": "2.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
                "env": [
                    {"name": "EXIT_CODE", "value": "3"},
                    {"name": "LOG_TEXT", "value": broken_text},
                    {"name": "API_TOKEN", "value": secret},
                ]},
        }},
    }))
    .expect("valid Skyhook");
    Api::<Skyhook>::all(ctx.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create Skyhook");

    // Wait until the package is erroring and its failed pod has terminated containers.
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let key = schema::node_state_annotation(&sk);
    ctx.wait_for(
        "broken erroring with a failed pod",
        Duration::from_secs(180),
        || {
            let (node_api, pods, node, key) =
                (node_api.clone(), pods.clone(), node.clone(), key.clone());
            let sel = format!("{}={}", schema::NAME_LABEL, sk);
            async move {
                let n = node_api.get(&node).await.ok()?;
                let state = NodeState::parse(n.annotations().get(&key)?).ok()?;
                state
                    .get("broken", "2.0.0")
                    .is_some_and(|e| e.state == Some(State::Erroring))
                    .then_some(())?;
                let list = pods.list(&ListParams::default().labels(&sel)).await.ok()?;
                list.items
                    .iter()
                    .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
                    .then_some(())
            }
        },
    )
    .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("x.tar.gz");
    let archive_arg = archive.to_string_lossy().to_string();
    let ran = plugin(
        &ctx,
        &[
            "debug",
            "collect",
            "--skyhook",
            &sk,
            "-n",
            &ns,
            "--output-file",
            &archive_arg,
        ],
    );
    // The operator runs as a local process here, so its piece fails: exit 3, archive written.
    assert_eq!(ran.code, 3, "{ran:?}");
    assert!(
        ran.stdout.starts_with(&format!("Wrote {archive_arg} (")),
        "{ran:?}"
    );
    assert!(ran.stdout.contains("operator-errors.json"), "{ran:?}");
    let files = unpack(&archive);

    let manifest: Value = serde_json::from_slice(&files["manifest.json"]).expect("manifest");
    let pieces: Vec<&str> = manifest["pieces"]
        .as_array()
        .expect("pieces")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    for want in [
        "skyhooks",
        "deploymentpolicies",
        "jobs",
        "pods",
        "nodes",
        "logs",
        "events",
        "operator",
        "versions",
    ] {
        assert!(pieces.contains(&want), "{want} missing from {pieces:?}");
    }
    let listed: BTreeMap<String, u64> = manifest["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("path").to_string(),
                f["size"].as_u64().expect("size"),
            )
        })
        .collect();
    for (path, bytes) in files.iter().filter(|(p, _)| *p != "manifest.json") {
        assert_eq!(
            listed.get(path),
            Some(&(bytes.len() as u64)),
            "{path} in manifest"
        );
    }
    let operator = manifest["pieces"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "operator"))
        .expect("operator piece");
    assert_eq!(operator["failed"], true, "{operator}");
    assert!(
        text(&files, "operator-errors.json").contains(&format!(
            "no operator Deployment found in namespace \\\"{ns}\\\""
        )),
        "{}",
        text(&files, "operator-errors.json")
    );

    // The Skyhook, the node's decoded state, the failing Job's YAML and logs.
    assert!(text(&files, &format!("skyhooks/{sk}.yaml")).contains("REDACTED"));
    let node_state: Value =
        serde_json::from_slice(&files[&format!("nodes/{node}.json")]).expect("node json");
    assert_eq!(
        node_state["skyhooks"][&sk]["nodeState"]["broken|2.0.0"]["state"], "erroring",
        "{node_state}"
    );
    let job_yaml = files
        .iter()
        .find(|(p, b)| {
            p.starts_with("jobs/") && p.ends_with(".yaml") && contains(b, "broken-2.0.0")
        })
        .map(|(p, _)| p.clone())
        .unwrap_or_else(|| panic!("no Job YAML of broken in {:?}", files.keys()));
    assert!(text(&files, &job_yaml).contains("REDACTED"), "{job_yaml}");
    assert!(files.contains_key(&job_yaml.replace(".yaml", ".txt")));
    assert!(
        files
            .iter()
            .any(|(p, b)| p.starts_with("logs/") && contains(b, &broken_text)),
        "no log of broken in {:?}",
        files.keys()
    );
    assert!(
        files
            .keys()
            .any(|p| p.starts_with("pods/") && p.ends_with(".events.yaml"))
    );
    assert!(text(&files, "versions.json").contains("gitVersion"));
    for (path, bytes) in &files {
        assert!(
            !contains(bytes, &secret),
            "{path} leaks the API_TOKEN value"
        );
    }

    // A ServiceAccount that may read everything but pods/log: still an archive, exit 3, and
    // the logs errors name what was forbidden.
    let sa = ctx.name("reader");
    let role = ctx.name("debug-reader");
    let created = [
        ctx.kubectl(&["create", "serviceaccount", &sa, "-n", &ns]),
        ctx.kubectl(&[
            "create",
            "clusterrole",
            &role,
            "--verb=get,list",
            "--resource=skyhooks.skyhook.nvidia.com,deploymentpolicies.skyhook.nvidia.com,nodes,jobs.batch,pods,events,deployments.apps,services,configmaps",
        ]),
        ctx.kubectl(&[
            "create",
            "clusterrolebinding",
            &role,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={ns}:{sa}"),
        ]),
    ];
    for out in &created {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let token = ctx.kubectl(&["create", "token", &sa, "-n", &ns]);
    assert!(
        token.status.success(),
        "{}",
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
    let kubeconfig = dir.path().join("reader");
    token_kubeconfig(&ctx, &kubeconfig, &token);
    let limited = dir.path().join("limited.tar.gz");
    let limited_arg = limited.to_string_lossy().to_string();
    let ran = plugin_with(
        &ctx,
        &[
            "debug",
            "collect",
            "--skyhook",
            &sk,
            "-n",
            &ns,
            "--output-file",
            &limited_arg,
        ],
        &[("KUBECONFIG", &kubeconfig.to_string_lossy())],
        None,
    );
    let _ = ctx.kubectl(&["delete", "clusterrolebinding", &role]);
    let _ = ctx.kubectl(&["delete", "clusterrole", &role]);
    assert_eq!(ran.code, 3, "{ran:?}");
    assert!(ran.stdout.contains("logs-errors.json"), "{ran:?}");
    let files = unpack(&limited);
    let errors: Value = serde_json::from_slice(&files["logs-errors.json"]).expect("errors json");
    let first = &errors[0];
    assert!(
        first["object"]
            .as_str()
            .is_some_and(|o| o.starts_with("logs of pod ")),
        "{errors}"
    );
    let message = first["error"].as_str().expect("error text");
    assert!(
        message.contains("forbidden") && message.contains("pods/log"),
        "{message}"
    );
    assert!(files.contains_key(&job_yaml), "{:?}", files.keys());
    for (path, bytes) in &files {
        assert!(
            !contains(bytes, &secret),
            "{path} leaks the API_TOKEN value"
        );
    }

    // A missing Skyhook: one line, exit 1, no archive (and no temporary file) left behind.
    let missing = dir.path().join("missing.tar.gz");
    plugin(
        &ctx,
        &[
            "debug",
            "collect",
            "--skyhook",
            &ctx.name("nope"),
            "-n",
            &ns,
            "--output-file",
            &missing.to_string_lossy(),
        ],
    )
    .fails(1, "not found");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read tempdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!left.iter().any(|n| n.contains("missing")), "{left:?}");
}
