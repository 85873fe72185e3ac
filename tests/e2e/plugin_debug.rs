//! `kubectl skyhook debug collect` against a private operator with one failing package.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, NodeState, State};

use crate::support::bundle::unpack;
use crate::support::plugin::{Ran, plugin, plugin_with, plugin_with_async, token_kubeconfig};
use crate::support::{Operator, TestCtx, install_crds};

/// Every file of the archive by its path below the archive's root directory.
const SHELLSCRIPT: &str = "ghcr.io/nvidia/skyhook-packages/shellscript";

/// A Skyhook named `sk` with these packages, on the test's nodes.
async fn create_skyhook(ctx: &TestCtx, sk: &str, packages: Value) {
    let (k, v) = ctx.test_label();
    let object: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": sk, "labels": {k.clone(): v.clone()}},
        "spec": {"nodeSelectors": {"matchLabels": {k: v}}, "packages": packages},
    }))
    .expect("valid Skyhook");
    Api::<Skyhook>::all(ctx.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create Skyhook");
}

/// Until `package` is erroring on `node` and one of the Skyhook's pods has failed, so its
/// containers have terminated and have logs.
async fn wait_erroring_with_failed_pod(
    ctx: &TestCtx,
    sk: &str,
    node: &str,
    (package, version): (&str, &str),
) {
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let key = schema::node_state_annotation(sk);
    let sel = format!("{}={}", schema::NAME_LABEL, sk);
    ctx.wait_for(
        &format!("{package} erroring with a failed pod"),
        Duration::from_secs(180),
        || {
            let (node_api, pods, key, sel) =
                (node_api.clone(), pods.clone(), key.clone(), sel.clone());
            async move {
                let n = node_api.get(node).await.ok()?;
                let state = NodeState::parse(n.annotations().get(&key)?).ok()?;
                state
                    .get(package, version)
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
}

/// `debug collect --skyhook <sk> -n <ns> --output-file <archive> <extra>`.
fn collect_args(ctx: &TestCtx, sk: &str, archive: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["debug", "collect", "--skyhook", sk, "-n", &ctx.ns]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend([
        "--output-file".into(),
        archive.to_string_lossy().into_owned(),
    ]);
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn collect(ctx: &TestCtx, sk: &str, archive: &Path, extra: &[&str]) -> Ran {
    let args = collect_args(ctx, sk, archive, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    plugin(ctx, &args)
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
    let package = json!({"broken": {"version": "2.0.0", "image": SHELLSCRIPT, "env": [
        {"name": "EXIT_CODE", "value": "3"},
        {"name": "LOG_TEXT", "value": broken_text},
        {"name": "API_TOKEN", "value": secret},
    ]}});
    create_skyhook(&ctx, &sk, package).await;
    wait_erroring_with_failed_pod(&ctx, &sk, &node, ("broken", "2.0.0")).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("x.tar.gz");
    let archive_arg = archive.to_string_lossy().to_string();
    let ran = collect(&ctx, &sk, &archive, &[]);
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
        "no log of broken in {:?}; logs-errors.json: {}",
        files.keys(),
        files
            .get("logs-errors.json")
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
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

    // A busy cluster: the first request for the stage log answers 500. The log is retried,
    // archived, and the manifest says it took two requests.
    let proxy = crate::support::proxy::start(ctx.client.clone(), 0, 0, dir.path()).await;
    proxy.refuse_next(http::Method::GET, "/log", 500, 1);
    let retried = dir.path().join("retried.tar.gz");
    let proxied = proxy.kubeconfig.to_string_lossy().to_string();
    let args = collect_args(&ctx, &sk, &retried, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = plugin_with_async(&ctx, &args, &[("KUBECONFIG", &proxied)]).await;
    assert_eq!(ran.code, 3, "only the operator piece fails: {ran:?}");
    assert_eq!(proxy.refusals_left(), 0, "the log request met its 500");
    let files = unpack(&retried);
    assert!(
        !files.contains_key("logs-errors.json"),
        "{}",
        text(&files, "logs-errors.json")
    );
    assert!(
        files
            .iter()
            .any(|(p, b)| p.starts_with("logs/") && contains(b, &broken_text)),
        "no log of broken in {:?}",
        files.keys()
    );
    let manifest: Value = serde_json::from_slice(&files["manifest.json"]).expect("manifest");
    let logs = manifest["pieces"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "logs"))
        .expect("logs piece");
    assert_eq!(logs["retried"][0]["attempts"], 2, "{logs}");

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

/// The secrets the redaction test plants, each unique to the run, and the strings that must
/// not appear in a redacted archive.
struct Planted {
    db_pass: String,
    dsn: String,
    jwt: String,
    pem: String,
    /// A Slack incoming webhook URL: a credential whatever name it is stored under.
    webhook: String,
    /// What gives each secret away, by name.
    needles: Vec<(&'static str, String)>,
}

fn planted(ctx: &TestCtx) -> Planted {
    use base64::Engine as _;
    let tag: String = ctx
        .prefix
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let db_pass = format!("pw-{tag}-do-not-leak");
    let dsn_pass = format!("p4ss{tag}");
    let dsn = format!("postgres://u:{dsn_pass}@h/db");
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let payload = b64.encode(format!(r#"{{"sub":"{tag}"}}"#));
    let signature = format!("sig{tag}Zm9vYmFy");
    let jwt = format!("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.{payload}.{signature}");
    let body = format!("MIIEpAIBAAKCAQEA{tag}");
    let pem = format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{body}\nQWxhZGRpbjpvcGVuIHNlc2FtZQ==\n-----END RSA PRIVATE KEY-----\n"
    );
    let hook_token = format!("hook{tag}Q0xJRU5U");
    let webhook = format!("https://hooks.slack.com/services/T0{tag}/B0{tag}/{hook_token}");
    let needles = vec![
        ("Slack webhook token", hook_token),
        ("DB_PASS value", db_pass.clone()),
        ("postgres password", format!("u:{dsn_pass}@")),
        ("JWT", jwt.clone()),
        ("JWT signature", signature),
        ("PEM body", body),
        ("PEM header", "-----BEGIN RSA PRIVATE KEY-----".into()),
    ];
    Planted {
        db_pass,
        dsn,
        jwt,
        pem,
        webhook,
        needles,
    }
}

/// Every needle found in some file of the archive, as `<needle> in <path>`.
fn leaks(files: &BTreeMap<String, Vec<u8>>, planted: &Planted) -> Vec<String> {
    let mut found = Vec::new();
    for (what, needle) in &planted.needles {
        for (path, bytes) in files {
            if contains(bytes, needle) {
                found.push(format!("{what} in {path}"));
            }
        }
    }
    found
}

/// The archive file's mode and every entry header's mode.
fn modes(path: &Path) -> (u32, Vec<(String, u32)>) {
    use std::os::unix::fs::PermissionsExt;
    let file_mode = std::fs::metadata(path)
        .expect("archive metadata")
        .permissions()
        .mode()
        & 0o777;
    let file = std::fs::File::open(path).expect("open archive");
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let entries = tar
        .entries()
        .expect("tar entries")
        .map(|e| {
            let e = e.expect("tar entry");
            let name = e.path().expect("entry path").to_string_lossy().into_owned();
            (name, e.header().mode().expect("entry mode"))
        })
        .collect();
    (file_mode, entries)
}

/// Acceptance 7 of issue 35: secrets planted in a package's env, its configMap and its stage
/// logs (kwok's log agent prints `LOG_TEXT`, on one line) are in no file of the archive, which
/// is mode 0600; with `--no-redact` they are, so the scan can see them.
#[tokio::test]
async fn debug_collect_scrubs_planted_secrets_from_every_file() {
    install_crds();
    let mut ctx = TestCtx::new("dbgred").await;
    let node = ctx.add_test_nodes(1)[0].clone();
    let _op = Operator::start(&ctx, &[]);
    let sk = ctx.name("sk");
    let p = planted(&ctx);
    let one_line_pem = p.pem.replace('\n', " ");
    let log_text = format!(
        "starting DB_PASS={} DSN {} bearer {} key {one_line_pem} posting to {}",
        p.db_pass, p.dsn, p.jwt, p.webhook
    );
    let package = json!({"leaky": {"version": "1.0.0", "image": SHELLSCRIPT,
        "env": [
            {"name": "EXIT_CODE", "value": "3"},
            {"name": "DB_PASS", "value": p.db_pass},
            {"name": "DSN", "value": p.dsn},
            {"name": "CHAT_URL", "value": p.webhook},
            {"name": "LOG_TEXT", "value": log_text},
        ],
        "configMap": {
            "notify.yaml": format!("- name: chat\n  url: {}\n", p.webhook),
            "server.pem": p.pem,
            "token.jwt": p.jwt,
            "db.env": format!("DB_PASS={}\nDSN={}\n", p.db_pass, p.dsn),
        },
    }});
    create_skyhook(&ctx, &sk, package).await;
    wait_erroring_with_failed_pod(&ctx, &sk, &node, ("leaky", "1.0.0")).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("redacted.tar.gz");
    let ran = collect(&ctx, &sk, &archive, &[]);
    // The operator runs as a local process here, so its piece fails: exit 3, archive written.
    assert_eq!(ran.code, 3, "{ran:?}");
    assert!(!ran.stderr.contains("--no-redact"), "{ran:?}");
    let files = unpack(&archive);
    let found = leaks(&files, &p);
    assert!(found.is_empty(), "secrets in the archive: {found:?}");
    // The data is there, scrubbed: the stage log, the configMap's file names with hashes.
    assert!(
        files.iter().any(|(path, b)| path.starts_with("logs/")
            && contains(b, "starting DB_PASS=[REDACTED] DSN postgres://[REDACTED]@h/db bearer [REDACTED sha256:")),
        "no scrubbed stage log in {:?}",
        files.keys()
    );
    let sk_yaml = text(&files, &format!("skyhooks/{sk}.yaml"));
    assert!(
        sk_yaml.contains("server.pem: '[REDACTED sha256:")
            || sk_yaml.contains("server.pem: \"[REDACTED sha256:"),
        "{sk_yaml}"
    );
    assert!(text(&files, "redaction.txt").contains("best effort"));
    let (file_mode, entries) = modes(&archive);
    assert_eq!(file_mode, 0o600, "archive file mode {file_mode:o}");
    for (name, mode) in entries {
        assert_eq!(mode, 0o600, "{name} has mode {mode:o}");
    }

    // --no-redact: a warning, and every planted secret is in the archive (the scan works).
    let raw = dir.path().join("raw.tar.gz");
    let ran = collect(&ctx, &sk, &raw, &["--no-redact"]);
    assert_eq!(ran.code, 3, "{ran:?}");
    assert!(
        ran.stderr.starts_with("Warning: --no-redact") && ran.stderr.contains("secrets"),
        "{ran:?}"
    );
    let files = unpack(&raw);
    let found = leaks(&files, &p);
    for (what, _) in &p.needles {
        assert!(
            found.iter().any(|f| f.starts_with(&format!("{what} in "))),
            "{what} not found without redaction: {found:?}"
        );
    }
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("DB_PASS value in logs/")),
        "the stage log carries the secrets: {found:?}"
    );
    assert!(text(&files, "redaction.txt").contains("NOTHING was redacted"));
    assert_eq!(modes(&raw).0, 0o600);
}
