//! kubectl's conventions in the plugin, against the local cluster: the connection flags
//! (`--context`, `--cluster`, `--user`, `--server`, `--token`, `--as`, `--as-group`,
//! `--certificate-authority`, `--insecure-skip-tls-verify`), `-o name`, `--no-headers`,
//! `--sort-by`, and `debug collect --output-file`.

use std::path::Path;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use skyhook::crd::Skyhook;
use skyhook::schema;

use crate::support::plugin::{Ran, plugin, plugin_with};
use crate::support::{TestCtx, free_port, install_crds, service_account_token};

/// The admin kubeconfig's server and CA (PEM).
fn server_and_ca(ctx: &TestCtx) -> (String, String) {
    let kc = kube::config::Kubeconfig::read_from(&ctx.cluster.kubeconfig).expect("kubeconfig");
    let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
    let server = cluster.server.clone().expect("server");
    let ca = cluster
        .certificate_authority_data
        .as_deref()
        .expect("certificate-authority-data");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .expect("base64 CA");
    (server, String::from_utf8(pem).expect("PEM CA"))
}

/// The admin kubeconfig's client certificate and key (base64, as in the file).
fn admin_credentials(ctx: &TestCtx) -> (String, String) {
    let text = std::fs::read_to_string(&ctx.cluster.kubeconfig).expect("kubeconfig");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("{name} in the admin kubeconfig"))
            .to_string()
    };
    (field("client-certificate-data"), field("client-key-data"))
}

/// The plugin with the admin kubeconfig and colours off.
fn skyhook(ctx: &TestCtx, args: &[&str]) -> Ran {
    plugin_with(ctx, args, &[("NO_COLOR", "1")], None)
}

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).expect("write file");
    path.to_string_lossy().into_owned()
}

/// Seeds node-state annotations for `sk` (no operator runs in these tests): the first node
/// complete, the second erroring with restarts, the third in progress.
async fn seed(ctx: &TestCtx, nodes: &[String], sk: &str) {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let entry = |stage: &str, state: &str, restarts: u32| {
        let mut e = json!({"name": "alpha", "version": "1.0.0", "image": "x", "stage": stage, "state": state});
        if restarts > 0 {
            e["restarts"] = json!(restarts);
        }
        json!({ "alpha|1.0.0": e }).to_string()
    };
    for (node, state) in nodes.iter().zip([
        entry("config", "complete", 0),
        entry("apply", "erroring", 4),
        entry("apply", "in_progress", 1),
    ]) {
        let patch =
            json!({"metadata": {"annotations": {schema::node_state_annotation(sk): state}}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("seed node state");
    }
}

/// A Skyhook with package `alpha` that selects no node, so no operator would act on it.
async fn idle_skyhook(ctx: &TestCtx, name: &str) {
    let (k, v) = ctx.test_label();
    let object: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": name, "labels": {k.clone(): v.clone()}},
        "spec": {
            "nodeSelectors": {"matchLabels": {k: format!("{v}-none")}},
            "packages": {"alpha": {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript"}},
        },
    }))
    .expect("valid Skyhook");
    Api::<Skyhook>::all(ctx.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create Skyhook");
}

#[tokio::test]
async fn plugin_takes_kubectl_connection_flags() {
    install_crds();
    let ctx = TestCtx::new("plugin-conn").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, ca_pem) = server_and_ca(&ctx);
    let (cert, key) = admin_credentials(&ctx);
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(&ca_pem);
    let sa = "flags-reader";
    let token = service_account_token(&ctx, sa);
    let sa_user = format!("system:serviceaccount:{}:{sa}", ctx.ns);
    let down = format!("https://127.0.0.1:{}", free_port());

    // Two clusters (one down), two users (admin, the ServiceAccount), and three contexts; the
    // current one points at the cluster that is down.
    let multi = write(
        &dir.path().join("multi"),
        &format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n\
             - name: down\n  cluster:\n    server: {down}\n    certificate-authority-data: {ca_b64}\n\
             - name: real\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca_b64}\n\
             users:\n\
             - name: admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n\
             - name: reader\n  user:\n    token: {token}\n\
             contexts:\n\
             - name: broken\n  context:\n    cluster: down\n    user: admin\n\
             - name: second\n  context:\n    cluster: real\n    user: admin\n\
             - name: limited\n  context:\n    cluster: real\n    user: reader\n\
             current-context: broken\n"
        ),
    );
    let status = |extra: &[&str]| {
        let mut args = vec!["node", "status", "--kubeconfig", multi.as_str()];
        args.extend(extra);
        skyhook(&ctx, &args)
    };

    // The current context's cluster is down; --context, --cluster and --server each pick the
    // real one.
    status(&[]).fails(1, &format!("cannot reach the Kubernetes API at {down}"));
    status(&["--context", "second"]).ok();
    status(&["--cluster", "real"]).ok();
    status(&["--server", &server]).ok();
    status(&["--context", "nope"]).fails(1, "context \"nope\" not found in the kubeconfig");

    // A ServiceAccount without RBAC, by --user, by --context, by --server plus --token, and by
    // --as from the admin: each names the verb, the resource, who, and the fix.
    let forbidden = format!(
        "listing nodes: nodes is forbidden: User \"{sa_user}\" cannot list resource \"nodes\""
    );
    let denied = |ran: Ran| {
        ran.fails(1, &forbidden);
        assert!(
            ran.stderr.contains("bind the skyhook-viewer roles (reads)"),
            "{ran:?}"
        );
    };
    denied(status(&["--context", "second", "--user", "reader"]));
    denied(status(&["--context", "limited"]));
    // --token replaces the admin's client certificate: the request is the ServiceAccount's.
    denied(skyhook(
        &ctx,
        &["node", "status", "--server", &server, "--token", &token],
    ));
    denied(skyhook(&ctx, &["node", "status", "--as", &sa_user]));
    denied(skyhook(
        &ctx,
        &["node", "list", "--skyhook", "x", "--token", &token],
    ));
    // --as-group adds the groups: system:masters may do anything.
    skyhook(
        &ctx,
        &[
            "node",
            "status",
            "--as",
            &sa_user,
            "--as-group",
            "system:masters",
        ],
    )
    .ok();
    skyhook(&ctx, &["node", "status", "--token", "not-a-token"])
        .fails(1, "rejected the credentials (401 Unauthorized)");
    skyhook(&ctx, &["node", "status", "--as-group", "g"]).fails(2, "--as <USER>");

    // Without a CA the server's certificate cannot be verified; --certificate-authority or
    // --insecure-skip-tls-verify fixes that.
    let no_ca = write(
        &dir.path().join("no-ca"),
        &format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: real\n  cluster:\n    server: {server}\n\
             users:\n- name: admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n\
             contexts:\n- name: x\n  context:\n    cluster: real\n    user: admin\n\
             current-context: x\n"
        ),
    );
    let ca_file = write(&dir.path().join("ca.crt"), &ca_pem);
    let not_a_ca = write(&dir.path().join("not-a-ca"), "hello\n");
    let plain = |extra: &[&str]| {
        let mut args = vec!["node", "status", "--kubeconfig", no_ca.as_str()];
        args.extend(extra);
        skyhook(&ctx, &args)
    };
    plain(&[]).fails(
        1,
        &format!("cannot verify the certificate of the Kubernetes API at {server}: "),
    );
    plain(&["--certificate-authority", &ca_file]).ok();
    plain(&["--insecure-skip-tls-verify"]).ok();
    plain(&["--certificate-authority", &not_a_ca]).fails(1, "--certificate-authority: ");
    plain(&[
        "--certificate-authority",
        &ca_file,
        "--insecure-skip-tls-verify",
    ])
    .fails(2, "cannot be used with");
    // --server with a token and a CA needs no kubeconfig at all.
    let empty = write(&dir.path().join("empty"), "");
    let ran = plugin_with(
        &ctx,
        &[
            "node",
            "status",
            "--server",
            &server,
            "--token",
            &token,
            "--certificate-authority",
            &ca_file,
        ],
        &[("KUBECONFIG", empty.as_str())],
        None,
    );
    denied(ran);
}

#[tokio::test]
async fn plugin_lists_take_name_no_headers_and_sort_by() {
    install_crds();
    let mut ctx = TestCtx::new("plugin-lists").await;
    let mut nodes = ctx.add_test_nodes(3);
    nodes.sort();
    let sk = ctx.name("sk");
    seed(&ctx, &nodes, &sk).await;
    // The Skyhook exists (package status reads its spec).
    idle_skyhook(&ctx, &sk).await;
    let node_names = |order: &[usize]| -> String {
        order
            .iter()
            .map(|i| format!("node/{}\n", nodes[*i]))
            .collect()
    };
    let first_column = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect()
    };
    let mut pattern_args = vec!["node", "status"];
    pattern_args.extend(nodes.iter().map(String::as_str));

    // -o name: kind/name lines, nothing else.
    assert_eq!(
        skyhook(&ctx, &["node", "list", "--skyhook", &sk, "-o", "name"]).ok(),
        node_names(&[0, 1, 2])
    );
    let mut args = pattern_args.clone();
    args.extend(["--skyhook", sk.as_str(), "-o", "name"]);
    assert_eq!(skyhook(&ctx, &args).ok(), node_names(&[0, 1, 2]));
    assert_eq!(
        skyhook(
            &ctx,
            &["package", "status", "alpha", "--skyhook", &sk, "-o", "name"]
        )
        .ok(),
        node_names(&[0, 1, 2])
    );

    // --no-headers: only the rows.
    let bare = skyhook(&ctx, &["node", "list", "--skyhook", &sk, "--no-headers"]);
    let text = bare.ok();
    assert_eq!(first_column(text), nodes, "{text}");
    assert!(
        !text.contains("NODE") && !text.contains("Summary"),
        "{text}"
    );
    let with_headers = skyhook(&ctx, &["node", "list", "--skyhook", &sk]);
    assert!(with_headers.ok().contains("\nNODE "), "{with_headers:?}");
    let text = skyhook(
        &ctx,
        &[
            "package",
            "status",
            "alpha",
            "--skyhook",
            &sk,
            "--no-headers",
        ],
    );
    assert_eq!(first_column(text.ok()), nodes, "{text:?}");

    // --sort-by: by a field of the JSON output, numbers by value.
    let sorted = skyhook(
        &ctx,
        &[
            "node",
            "list",
            "--skyhook",
            &sk,
            "--sort-by",
            ".restarts",
            "-o",
            "name",
        ],
    );
    assert_eq!(sorted.ok(), node_names(&[0, 2, 1]));
    let sorted = skyhook(
        &ctx,
        &[
            "node",
            "list",
            "--skyhook",
            &sk,
            "--sort-by",
            "{.status}",
            "--no-headers",
        ],
    );
    let text = sorted.ok();
    let statuses: Vec<&str> = text
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["complete", "ERRORING", "in_progress"], "{text}");
    let mut args = pattern_args.clone();
    args.extend([
        "--skyhook",
        sk.as_str(),
        "--sort-by",
        ".status",
        "-o",
        "json",
    ]);
    let json: serde_json::Value =
        serde_json::from_str(skyhook(&ctx, &args).ok()).expect("JSON output");
    let order: Vec<&str> = json
        .as_array()
        .expect("array")
        .iter()
        .map(|s| s["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(order, ["complete", "erroring", "in_progress"]);
    skyhook(
        &ctx,
        &[
            "package",
            "status",
            "alpha",
            "--skyhook",
            &sk,
            "--sort-by",
            ".stage",
            "-o",
            "name",
        ],
    )
    .ok();
    skyhook(
        &ctx,
        &["node", "list", "--skyhook", &sk, "--sort-by", ".bogus"],
    )
    .fails(2, "unknown field \".bogus\"; node list sorts by .nodeName");
    skyhook(&ctx, &["pause", &sk, "--sort-by", ".status"]).fails(2, "--sort-by only applies to");
    skyhook(&ctx, &["version", "--client-only", "-o", "name"]).fails(2, "-o name only applies to");
}

#[tokio::test]
async fn debug_collect_takes_output_file() {
    install_crds();
    let ctx = TestCtx::new("plugin-collect-to").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = ctx.name("none");
    let sk = ctx.name("sk");
    idle_skyhook(&ctx, &sk).await;
    let new = dir.path().join("new.tar.gz");
    let old = dir.path().join("old.tar.gz");
    let new_s = new.to_string_lossy().to_string();
    let old_s = old.to_string_lossy().to_string();
    let base = ["debug", "collect", "-n", ctx.ns.as_str(), "--since", "1m"];
    // A Skyhook that does not exist fails fast, before writing.
    let mut args = base.to_vec();
    args.extend([
        "--skyhook",
        missing.as_str(),
        "--output-file",
        new_s.as_str(),
    ]);
    plugin(&ctx, &args).fails(1, &format!("skyhook {missing:?} not found"));
    assert!(!new.exists());
    let base = [
        "debug",
        "collect",
        "-n",
        ctx.ns.as_str(),
        "--since",
        "1m",
        "--skyhook",
        sk.as_str(),
    ];

    let mut args = base.to_vec();
    args.extend(["--output-file", new_s.as_str()]);
    let ran = plugin(&ctx, &args);
    assert!(matches!(ran.code, 0 | 3), "{ran:?}");
    assert!(!ran.stderr.contains("deprecated"), "{ran:?}");
    assert!(new.exists(), "{ran:?}");

    // The old `-o <path>` still writes the archive, with a deprecation warning.
    let mut args = base.to_vec();
    args.extend(["-o", old_s.as_str()]);
    let ran = plugin(&ctx, &args);
    assert!(matches!(ran.code, 0 | 3), "{ran:?}");
    assert!(
        ran.stderr.contains(&format!(
            "Warning: -o/--output naming the archive is deprecated (-o is the output format everywhere else); use --output-file {old_s}"
        )),
        "{ran:?}"
    );
    assert!(old.exists(), "{ran:?}");

    let mut args = base.to_vec();
    args.extend(["-o", old_s.as_str(), "--output-file", new_s.as_str()]);
    plugin(&ctx, &args).fails(2, "cannot be used with");
}
