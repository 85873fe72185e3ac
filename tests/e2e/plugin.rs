//! The `kubectl-skyhook` plugin against the real control plane and a private operator.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, NodeState, Stage, State, Status};

use crate::support::plugin::{plugin, plugin_with, token_kubeconfig};
use crate::support::{Operator, TestCtx, free_port, install_crds, pkg, run, skyhook};

/// Node annotations of the given nodes.
async fn annotations(
    nodes: &Api<Node>,
    names: &[String],
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for n in names {
        let node = nodes.get(n).await.expect("get node");
        out.insert(n.clone(), node.annotations().clone());
    }
    out
}

fn state_of(annotations: &BTreeMap<String, String>, sk: &str) -> NodeState {
    NodeState::parse(
        annotations
            .get(&schema::node_state_annotation(sk))
            .expect("node state annotation"),
    )
    .expect("parsable node state")
}

/// Runs the plugin until the node annotations are the same before and after the run (the
/// operator keeps retrying the failing package), then returns the output and those annotations.
async fn stable_run(
    ctx: &TestCtx,
    nodes: &Api<Node>,
    names: &[String],
    args: &[&str],
) -> (String, BTreeMap<String, BTreeMap<String, String>>) {
    for _ in 0..40 {
        let before = annotations(nodes, names).await;
        let out = plugin_with(ctx, args, &[("NO_COLOR", "1")], None);
        let after = annotations(nodes, names).await;
        if before == after {
            return (out.ok().to_string(), before);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!(
        "node annotations never held still for `kubectl skyhook {}`",
        args.join(" ")
    );
}

fn rows(table: &str) -> Vec<Vec<&str>> {
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[tokio::test]
async fn plugin_inspects_and_controls_a_rollout() {
    install_crds();
    let mut ctx = TestCtx::new("plugin").await;
    let nodes = ctx.add_test_nodes(3);
    let _op = Operator::start(&ctx, &[]);
    ctx.report_on_failure(&["get", "skyhooks", "-o", "yaml"]);
    let name = ctx.name("sk");
    let skyhooks: Api<Skyhook> = Api::all(ctx.client.clone());
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    let sleep = json!([{"name": "SLEEP_LEN", "value": "1"}]);
    let fail = json!([{"name": "EXIT_CODE", "value": "1"}]);
    skyhooks
        .create(
            &PostParams::default(),
            &skyhook(
                &ctx,
                &name,
                json!({"packages": {"alpha": pkg("1.0.0", sleep.clone()), "bravo": pkg("1.0.0", sleep), "broken": pkg("1.0.0", fail)}}),
            ),
        )
        .await
        .expect("create Skyhook");

    // Everywhere: alpha and bravo complete, broken failing at apply and retried.
    ctx.wait_for(
        "alpha and bravo complete and broken erroring with restarts on every node",
        Duration::from_secs(180),
        || async {
            let all = annotations(&node_api, &nodes).await;
            all.values()
                .all(|a| {
                    let Some(raw) = a.get(&schema::node_state_annotation(&name)) else {
                        return false;
                    };
                    let Ok(s) = NodeState::parse(raw) else {
                        return false;
                    };
                    let done = |p: &str| {
                        s.get(p, "1.0.0").is_some_and(|e| {
                            (e.stage, e.state) == (Stage::Config, Some(State::Complete))
                        })
                    };
                    done("alpha")
                        && done("bravo")
                        && s.get("broken", "1.0.0")
                            .is_some_and(|e| e.state == Some(State::Erroring) && e.restarts >= 1)
                })
                .then_some(())
        },
    )
    .await;
    let mut sorted = nodes.clone();
    sorted.sort();
    let node_args: Vec<&str> = sorted.iter().map(String::as_str).collect();

    // ----- node status -o wide: one row per package with stage, state and restarts -----
    let mut args = vec!["node", "status", "-o", "wide"];
    args.extend(&node_args);
    let (wide, seen) = stable_run(&ctx, &node_api, &nodes, &args).await;
    let lines: Vec<&str> = wide.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "NODE",
            "SKYHOOK",
            "COMPARTMENT",
            "PACKAGE",
            "VERSION",
            "STAGE",
            "STATE",
            "RESTARTS",
            "IMAGE",
            "CORDONED",
            "RUNTIME-REQUIRED-CORDON"
        ],
        "{wide}"
    );
    let mut want = Vec::new();
    for n in &sorted {
        for (_, e) in state_of(&seen[n], &name).iter() {
            want.push(vec![
                n.clone(),
                name.clone(),
                "__default__".to_string(),
                e.name.to_string(),
                e.version.to_string(),
                e.stage.as_str().to_string(),
                e.state.expect("state").as_str().to_string(),
                e.restarts.to_string(),
                e.image.to_string(),
                "false".to_string(),
                "false".to_string(),
            ]);
        }
    }
    let got: Vec<Vec<String>> = rows(&wide)
        .into_iter()
        .map(|r| r.into_iter().map(String::from).collect())
        .collect();
    assert_eq!(got, want, "node status -o wide:\n{wide}");
    assert_eq!(got.len(), 9);

    // ----- node status -o json (regex pattern) agrees with the annotations -----
    let pattern = format!("({})", node_args.join("|"));
    let (text, seen) = stable_run(
        &ctx,
        &node_api,
        &nodes,
        &["node", "status", &pattern, "--skyhook", &name, "-o", "json"],
    )
    .await;
    let parsed: Vec<Value> = serde_json::from_str(&text).expect("node status JSON");
    assert_eq!(parsed.len(), 3, "{text}");
    for (entry, n) in parsed.iter().zip(&sorted) {
        assert_eq!(entry["nodeName"], json!(n));
        assert_eq!(entry["skyhookName"], json!(name));
        assert_eq!(entry["status"], json!("erroring"));
        assert_eq!(entry["packagesComplete"], json!(2));
        assert_eq!(entry["packagesTotal"], json!(3));
        let want: Vec<Value> = state_of(&seen[n], &name)
            .iter()
            .map(|(_, e)| {
                json!({
                    "name": e.name, "version": e.version, "stage": e.stage,
                    "state": e.state, "restarts": e.restarts, "image": e.image,
                })
            })
            .collect();
        assert_eq!(entry["packages"], json!(want), "{text}");
    }

    // ----- node list -----
    let list = plugin(&ctx, &["node", "list", "--skyhook", &name]);
    let text = list.ok();
    assert!(text.starts_with(&format!("Skyhook: {name}\n\n")), "{text}");
    assert!(
        text.contains("Summary: 3 nodes (0 complete, 3 erroring, 0 in progress)"),
        "{text}"
    );
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("NODE"))
        .collect();
    assert_eq!(table.len(), 4, "{text}");
    for (line, n) in table[1..].iter().zip(&sorted) {
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>(),
            [n.as_str(), "ERRORING", "2/3"]
        );
    }
    let list: Value = serde_json::from_str(
        plugin(&ctx, &["node", "list", "--skyhook", &name, "-o", "json"]).ok(),
    )
    .expect("node list JSON");
    assert_eq!(list["skyhookName"], json!(name));
    let listed: Vec<&str> = list["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|e| e["nodeName"].as_str().expect("nodeName"))
        .collect();
    assert_eq!(listed, node_args);
    for e in list["nodes"].as_array().expect("nodes") {
        assert_eq!(e["status"], json!("erroring"));
        assert_eq!(
            (e["packagesComplete"].as_i64(), e["packagesTotal"].as_i64()),
            (Some(2), Some(3))
        );
        assert!(e["restarts"].as_i64().unwrap_or(0) >= 1, "{e}");
    }

    // ----- package status -----
    let out = plugin(&ctx, &["package", "status", "broken", "--skyhook", &name]);
    let text = out.ok();
    assert!(
        text.starts_with(&format!(
            "Skyhook: {name}\nPackages: alpha:1.0.0, bravo:1.0.0, broken:1.0.0\n\n"
        )),
        "{text}"
    );
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("NODE"))
        .collect();
    assert_eq!(
        table[0].split_whitespace().collect::<Vec<_>>(),
        ["NODE", "PACKAGE", "VERSION", "STAGE", "STATE"]
    );
    for (line, n) in table[1..].iter().zip(&sorted) {
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>(),
            [n.as_str(), "broken", "1.0.0", "apply", "erroring"]
        );
    }
    assert_eq!(table.len(), 4, "{text}");
    let yaml = plugin(
        &ctx,
        &[
            "package",
            "status",
            "alpha",
            "--skyhook",
            &name,
            "-o",
            "yaml",
        ],
    );
    let parsed: Vec<Value> = serde_saphyr::from_str(yaml.ok()).expect("package status YAML");
    assert_eq!(parsed.len(), 3);
    for (e, n) in parsed.iter().zip(&sorted) {
        assert_eq!(e["nodeName"], json!(n));
        assert_eq!(
            (&e["name"], &e["stage"], &e["state"]),
            (&json!("alpha"), &json!("config"), &json!("complete"))
        );
    }
    let one = plugin(
        &ctx,
        &[
            "package",
            "status",
            "broken",
            "--skyhook",
            &name,
            "--node",
            &sorted[1],
            "-o",
            "json",
        ],
    );
    let parsed: Vec<Value> = serde_json::from_str(one.ok()).expect("JSON");
    assert_eq!(parsed.len(), 1);
    assert_eq!(parsed[0]["nodeName"], json!(sorted[1]));
    assert!(parsed[0]["restarts"].as_i64().unwrap_or(0) >= 1);

    // ----- colours: forced on, then switched off by NO_COLOR and --no-color -----
    for args in [
        vec!["node", "status", node_args[0]],
        vec!["node", "list", "--skyhook", &name],
        vec![
            "package",
            "status",
            "broken",
            "--skyhook",
            &name,
            "-o",
            "wide",
        ],
    ] {
        let coloured = plugin_with(&ctx, &args, &[("CLICOLOR_FORCE", "1")], None);
        assert!(coloured.ok().contains('\u{1b}'), "{coloured:?}");
        let plain = plugin_with(
            &ctx,
            &args,
            &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")],
            None,
        );
        assert!(!plain.ok().contains('\u{1b}'), "{plain:?}");
        let mut flagged = args.clone();
        flagged.push("--no-color");
        let plain = plugin_with(&ctx, &flagged, &[("CLICOLOR_FORCE", "1")], None);
        assert!(!plain.ok().contains('\u{1b}'), "{plain:?}");
        // Not a terminal: no colour by default.
        assert!(!plugin(&ctx, &args).ok().contains('\u{1b}'));
    }

    // ----- missing objects: one line on stderr, exit 1 -----
    let missing = ctx.name("missing");
    plugin(&ctx, &["node", "status", "node-does-not-exist"]).fails(
        1,
        "node \"node-does-not-exist\" not found; list nodes with: kubectl get nodes",
    );
    plugin(&ctx, &["node", "status", "no-such-.*"]).fails(1, "no node matches \"no-such-.*\"");
    plugin(&ctx, &["node", "status", "bad[", "-o", "json"])
        .fails(1, "matching nodes: invalid regex pattern \"bad[\"");
    plugin(&ctx, &["node", "list", "--skyhook", &missing]).fails(
        1,
        &format!("skyhook {missing:?} not found; list them with: kubectl get skyhooks"),
    );
    plugin(&ctx, &["node", "status", "--skyhook", &missing]).fails(1, "not found");
    plugin(&ctx, &["package", "status", "nope", "--skyhook", &name]).fails(
        1,
        &format!(
            "package \"nope\" not found in skyhook {name:?} (its packages: alpha, bravo, broken)"
        ),
    );
    plugin(&ctx, &["package", "status", "alpha", "--skyhook", &missing])
        .fails(1, &format!("skyhook {missing:?} not found"));
    plugin(
        &ctx,
        &[
            "package",
            "status",
            "alpha",
            "--skyhook",
            &name,
            "--node",
            "node-does-not-exist",
        ],
    )
    .fails(1, "node \"node-does-not-exist\" not found");
    for verb in ["pause", "resume", "disable", "enable"] {
        plugin(&ctx, &[verb, &missing, "-y"]).fails(1, &format!("skyhook {missing:?} not found"));
        plugin(&ctx, &[verb, &missing, "--dry-run"]).fails(1, "not found");
    }
    plugin(&ctx, &["node", "ignore", "node-does-not-exist"]).fails(1, "not found");
    plugin(&ctx, &["node", "unignore", node_args[0], "gpu-.*"])
        .fails(1, "no node matches \"gpu-.*\"");

    // ----- usage errors: one line on stderr, exit 2 -----
    for args in [
        &["node", "status", "--bogus"][..],
        &["-o", "xml", "node", "status"],
        &["node", "list"],
        &["package", "status", "broken"],
        &["package", "status", "--skyhook", "x"],
        &["pause"],
        &["pause", "a", "b"],
        &["node", "ignore"],
        &["frobnicate"],
        &["--request-timeout", "soon", "node", "status"],
        &["version", "--timeout", "x"],
    ] {
        let ran = plugin(&ctx, args);
        ran.fails(2, "--help'");
    }

    // ----- version -----
    assert_eq!(
        plugin(&ctx, &["--version"]).ok(),
        format!("Skyhook plugin: {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        plugin(&ctx, &["version", "--client-only"]).ok(),
        format!("Skyhook plugin:\t{}\n", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        plugin(&ctx, &["version", "-n", &ctx.ns]).ok(),
        format!(
            "Skyhook plugin:\t{}\nSkyhook operator:\tunknown (unable to determine operator version; no skyhook operator deployment found in namespace {:?})\n",
            env!("CARGO_PKG_VERSION"),
            ctx.ns
        )
    );

    // ----- node ignore / unignore -----
    let target = sorted[0].clone();
    let ignore_label = |n: &Node| n.labels().get(schema::IGNORE_LABEL).cloned();
    assert_eq!(
        plugin(&ctx, &["node", "ignore", &target, "--dry-run"]).ok(),
        format!("Ignoring 1 node(s):\n  - {target}\n\n[dry-run] No changes applied\n")
    );
    assert_eq!(
        ignore_label(&node_api.get(&target).await.expect("node")),
        None
    );
    assert_eq!(
        plugin(&ctx, &["node", "ignore", &target, "-y"]).ok(),
        format!("Ignoring 1 node(s):\n  - {target}\n\nSuccessfully ignored 1 node(s)\n")
    );
    assert_eq!(
        ignore_label(&node_api.get(&target).await.expect("node")).as_deref(),
        Some("true")
    );
    assert_eq!(
        plugin(&ctx, &["node", "ignore", &target, "-y"]).ok(),
        format!("Ignoring 1 node(s):\n  - {target}\n  {target}: already ignored\n")
    );
    // `unignore` asks like the other node writes: no answer, nothing changes.
    let asked = plugin(&ctx, &["node", "unignore", &target]);
    assert_eq!(asked.code, 1, "{asked:?}");
    assert!(asked.stdout.ends_with("Continue? [y/N]: "), "{asked:?}");
    assert!(asked.stderr.contains("no answer"), "{asked:?}");
    assert_eq!(
        ignore_label(&node_api.get(&target).await.expect("node")).as_deref(),
        Some("true")
    );
    assert_eq!(
        plugin(&ctx, &["node", "unignore", &target, "--confirm"]).ok(),
        format!("Unignoring 1 node(s):\n  - {target}\n\nSuccessfully unignored 1 node(s)\n")
    );
    assert_eq!(
        ignore_label(&node_api.get(&target).await.expect("node")),
        None
    );
    assert_eq!(
        plugin(&ctx, &["node", "unignore", &target, "--confirm"]).ok(),
        format!("Unignoring 1 node(s):\n  - {target}\n  {target}: not ignored\n")
    );

    // ----- pause / resume / disable / enable -----
    let annotation = |key: &'static str| {
        let skyhooks = skyhooks.clone();
        let name = name.clone();
        async move {
            skyhooks
                .get(&name)
                .await
                .expect("get Skyhook")
                .annotations()
                .get(key)
                .cloned()
        }
    };
    let ns = ctx.ns.clone();
    // The operator wrote its version annotation on its first pass, so the reference's version
    // gate passes without a warning.
    let version = annotation(schema::VERSION_ANNOTATION)
        .await
        .unwrap_or_default();
    assert!(version.starts_with("v0.13.0+skyhook-rs."), "{version:?}");
    // Dry-run changes nothing and needs no confirmation.
    let dry = plugin(&ctx, &["pause", &name, "--dry-run", "-n", &ns]);
    assert_eq!(
        dry.ok(),
        format!("[dry-run] Would pause Skyhook {name:?}\n")
    );
    assert_eq!(dry.stderr, "");
    assert_eq!(annotation(schema::PAUSE_ANNOTATION).await, None);
    // No input, or a decline, fails (exit 1) and changes nothing: a brake that did nothing
    // must not look applied.
    let prompt = format!("This will pause Skyhook {name:?}. Continue? [y/N]: ");
    for (input, stdout, err) in [
        (None, prompt.clone(), "no answer to the confirmation prompt"),
        (Some("n\n"), format!("{prompt}Aborted.\n"), "not confirmed"),
    ] {
        let aborted = plugin_with(&ctx, &["pause", &name, "-n", &ns], &[], input);
        assert_eq!(aborted.code, 1, "{aborted:?}");
        assert_eq!(aborted.stdout, stdout, "{aborted:?}");
        assert!(aborted.stderr.contains(err), "{aborted:?}");
    }
    assert_eq!(annotation(schema::PAUSE_ANNOTATION).await, None);

    let paused = plugin(&ctx, &["pause", &name, "-y", "-n", &ns]);
    assert_eq!(paused.ok(), format!("Skyhook {name:?} paused\n"));
    assert_eq!(
        annotation(schema::PAUSE_ANNOTATION).await.as_deref(),
        Some("true")
    );
    let status_of = |want: Status| {
        let skyhooks = skyhooks.clone();
        let name = name.clone();
        async move {
            let s = skyhooks.get(&name).await.ok()?;
            (s.status.as_ref()?.status == Some(want)).then_some(())
        }
    };
    ctx.wait_for(
        "the operator to report paused",
        Duration::from_secs(30),
        || status_of(Status::Paused),
    )
    .await;
    let resumed = plugin_with(&ctx, &["resume", &name, "-n", &ns], &[], Some("y\n"));
    assert_eq!(
        resumed.ok(),
        format!("This will resume Skyhook {name:?}. Continue? [y/N]: Skyhook {name:?} resumed\n")
    );
    assert_eq!(annotation(schema::PAUSE_ANNOTATION).await, None);
    ctx.wait_for(
        "the operator to leave paused",
        Duration::from_secs(30),
        || {
            let skyhooks = skyhooks.clone();
            let name = name.clone();
            async move {
                let s = skyhooks.get(&name).await.ok()?;
                let st = s.status.as_ref()?.status?;
                (st != Status::Paused).then_some(())
            }
        },
    )
    .await;

    assert_eq!(
        plugin(&ctx, &["disable", &name, "--confirm", "-n", &ns]).ok(),
        format!("Skyhook {name:?} disabled\n")
    );
    assert_eq!(
        annotation(schema::DISABLE_ANNOTATION).await.as_deref(),
        Some("true")
    );
    ctx.wait_for(
        "the operator to report disabled",
        Duration::from_secs(30),
        || status_of(Status::Disabled),
    )
    .await;
    assert_eq!(
        plugin(&ctx, &["enable", &name, "-y", "-n", &ns]).ok(),
        format!("Skyhook {name:?} enabled\n")
    );
    assert_eq!(annotation(schema::DISABLE_ANNOTATION).await, None);
}

/// A kubeconfig for the test cluster that authenticates with `token`.
#[tokio::test]
async fn plugin_reports_cluster_errors_in_one_line() {
    install_crds();
    let ctx = TestCtx::new("plugin-err").await;
    let dir = tempfile::tempdir().expect("tempdir");

    // Nobody listens on the port: the cluster is unreachable.
    let down = dir.path().join("down");
    let url = format!("https://127.0.0.1:{}", free_port());
    std::fs::write(
        &down,
        std::fs::read_to_string(&ctx.cluster.kubeconfig)
            .expect("kubeconfig")
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("server:") {
                    format!("    server: {url}")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .expect("write kubeconfig");
    let down = down.to_string_lossy().to_string();
    for args in [
        &["node", "status"][..],
        &["node", "list", "--skyhook", "x"],
        &["package", "status", "p", "--skyhook", "x"],
        &["pause", "x", "-y"],
        &["node", "ignore", "n"],
    ] {
        let mut full = vec!["--kubeconfig", down.as_str()];
        full.extend(args);
        plugin(&ctx, &full).fails(1, &format!("cannot reach the Kubernetes API at {url}"));
    }
    // `version` still answers, naming what went wrong.
    let v = plugin(&ctx, &["version", "--kubeconfig", &down]);
    assert!(
        v.ok().contains(&format!(
            "Skyhook operator:\tunknown (cannot reach the Kubernetes API at {url}"
        )),
        "{v:?}"
    );

    // Missing kubeconfig file and unknown context.
    plugin(
        &ctx,
        &["node", "status", "--kubeconfig", "/nonexistent/kubeconfig"],
    )
    .fails(
        1,
        "cannot load the kubeconfig: cannot read /nonexistent/kubeconfig",
    );
    plugin(&ctx, &["node", "status", "--context", "nope"])
        .fails(1, "context \"nope\" not found in the kubeconfig");

    // A service account with no permissions: forbidden, with the RBAC hint.
    let token = run(ctx
        .cluster
        .kubectl()
        .args(["create", "token", "default", "-n", &ctx.ns]));
    let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
    let nobody = dir.path().join("nobody");
    token_kubeconfig(&ctx, &nobody, &token);
    let nobody = nobody.to_string_lossy().to_string();
    for (args, needle) in [
        (&["node", "status"][..], "listing nodes: nodes is forbidden"),
        (
            &["node", "list", "--skyhook", "x"],
            "listing nodes: nodes is forbidden",
        ),
        (
            &["pause", "x", "-y"],
            "getting skyhook \"x\": skyhooks.skyhook.nvidia.com \"x\" is forbidden",
        ),
        (
            &["package", "status", "p", "--skyhook", "x"],
            "is forbidden",
        ),
    ] {
        let mut full = vec!["--kubeconfig", nobody.as_str()];
        full.extend(args);
        let ran = plugin(&ctx, &full);
        ran.fails(1, needle);
        assert!(ran.stderr.contains("skyhook-viewer"), "{ran:?}");
    }
}
