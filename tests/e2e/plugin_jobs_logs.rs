//! `kubectl skyhook jobs` and `kubectl skyhook logs` against a private operator running a
//! three-node rollout in which one package fails through `EXIT_CODE`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema;

use crate::support::plugin::{PLUGIN, plugin, plugin_with};
use crate::support::{Operator, TestCtx, install_crds};

const TUNING_TEXT: &str = "tuning-says-hello";

/// Waits for a child process for at most `limit`; kills it and fails the test after that.
fn wait_with_timeout(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("poll child").is_some() {
            return child.wait_with_output().expect("child output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("child output");
            panic!(
                "logs -f still running after {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Positions of the `[stage/container] text` lines, asserting they come in stage order.
fn assert_stage_order(out: &str, package: &str, text: &str) {
    let at = |stage: &str| {
        let needle = format!("[{stage}/{package}-{stage}] {text}");
        out.find(&needle)
            .unwrap_or_else(|| panic!("{needle:?} missing from:\n{out}"))
    };
    assert!(at("apply") < at("config"), "apply after config:\n{out}");
    // Every line carries a prefix.
    for line in out.lines().filter(|l| !l.is_empty()) {
        assert!(line.starts_with('['), "unprefixed line {line:?} in:\n{out}");
    }
}

#[tokio::test]
async fn jobs_and_logs_follow_a_rollout() {
    install_crds();
    let mut ctx = TestCtx::new("plugin-jobs").await;
    let nodes = ctx.add_test_nodes(3);
    let _op = Operator::start(&ctx, &[]);
    let sk = ctx.name("sk");
    let ns = ctx.ns.clone();
    ctx.report_on_failure(&["get", "jobs", "-n", &ns, "-o", "wide"]);
    let (k, v) = ctx.test_label();
    let object: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": sk, "labels": {k.clone(): v.clone()}},
        "spec": {"nodeSelectors": {"matchLabels": {k: v}}, "packages": {
            "tuning": {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
                "env": [{"name": "SLEEP_LEN", "value": "2"}, {"name": "LOG_TEXT", "value": TUNING_TEXT}]},
            "broken": {"version": "2.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
                "env": [{"name": "EXIT_CODE", "value": "3"}, {"name": "LOG_TEXT", "value": "broken-text"}]},
        }},
    }))
    .expect("valid Skyhook");
    // Follow from before the first Job exists: it must wait for apply, move on to config,
    // and exit 0 once the package is complete on the node.
    let follower = Command::new(PLUGIN)
        .args([
            "logs",
            "tuning",
            "--node",
            &nodes[0],
            "--skyhook",
            &sk,
            "-n",
            &ns,
            "-f",
        ])
        .env("KUBECONFIG", &ctx.cluster.kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start logs -f");
    Api::<Skyhook>::all(ctx.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create Skyhook");
    let followed =
        tokio::task::spawn_blocking(move || wait_with_timeout(follower, Duration::from_secs(180)))
            .await
            .expect("join follower");
    let text = String::from_utf8_lossy(&followed.stdout).into_owned();
    assert_eq!(
        followed.status.code(),
        Some(0),
        "logs -f: {text}\n{}",
        String::from_utf8_lossy(&followed.stderr)
    );
    assert_stage_order(&text, "tuning", TUNING_TEXT);

    // Once tuning is done on node 3: its logs, in stage order, without -f.
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let node3 = nodes[2].clone();
    ctx.wait_for(
        "tuning config Job complete on the third node",
        Duration::from_secs(180),
        || {
            let jobs_api = jobs_api.clone();
            let node3 = node3.clone();
            async move {
                let sel = format!(
                    "{}=config,{}={}",
                    schema::STAGE_LABEL,
                    schema::NODE_LABEL,
                    node3
                );
                let list = jobs_api
                    .list(&ListParams::default().labels(&sel))
                    .await
                    .ok()?;
                list.items
                    .iter()
                    .any(|j| {
                        j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0
                            && j.metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get(schema::PACKAGE_LABEL))
                                == Some(&"tuning-1.0.0".to_string())
                    })
                    .then_some(())
            }
        },
    )
    .await;
    let out = plugin(&ctx, &["logs", "tuning", "--node", &node3, "-n", &ns]);
    assert_stage_order(out.ok(), "tuning", TUNING_TEXT);
    // Plain kubectl reads the stage's own container (kubectl.kubernetes.io/default-container).
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let lp = ListParams::default().labels(&format!("{}={sk}", schema::NAME_LABEL));
    let apply = jobs
        .list(&lp)
        .await
        .expect("jobs")
        .items
        .into_iter()
        .find(|j| {
            let l = j.labels();
            l.get(schema::NODE_LABEL) == Some(&node3)
                && l.get(schema::STAGE_LABEL).map(String::as_str) == Some("apply")
                && l.get(schema::PACKAGE_LABEL)
                    .is_some_and(|p| p.starts_with("tuning"))
        })
        .expect("the tuning apply Job on the third node");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let by_job = ListParams::default().labels(&format!("job-name={}", apply.name_any()));
    let pod = pods.list(&by_job).await.expect("pods").items.remove(0);
    assert_eq!(
        pod.annotations().get(schema::DEFAULT_CONTAINER_ANNOTATION),
        Some(&schema::stage_container_name(
            "tuning",
            skyhook::schema::Stage::Apply
        )),
        "the pod names the stage's own container for kubectl"
    );
    let target = format!("job/{}", apply.name_any());
    let logs = ctx.kubectl(&["logs", "-n", &ns, &target]);
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.status.success() && text.contains(TUNING_TEXT),
        "kubectl logs {target}: {text} {}",
        String::from_utf8_lossy(&logs.stderr)
    );
    assert!(!out.stdout.contains('\u{1b}'), "colour on a pipe: {out:?}");
    let coloured = plugin_with(
        &ctx,
        &["logs", "tuning", "--node", &node3, "-n", &ns],
        &[("CLICOLOR_FORCE", "1")],
        None,
    );
    assert!(
        coloured
            .ok()
            .lines()
            .any(|l| l.starts_with("\u{1b}[") && l.contains("[apply/tuning-apply]")),
        "{coloured:?}"
    );
    let out = plugin(
        &ctx,
        &[
            "package",
            "logs",
            "tuning",
            "--skyhook",
            &sk,
            "--node",
            &node3,
            "--stage",
            "config",
            "-n",
            &ns,
        ],
    );
    let text = out.ok();
    assert!(
        text.contains(&format!("[config/tuning-config] {TUNING_TEXT}")),
        "{text}"
    );
    assert!(!text.contains("[apply/"), "{text}");

    // broken: fails, is retried; wait for two failed attempts on node 2.
    let node2 = nodes[1].clone();
    let failed_broken = |min: usize| {
        let jobs_api = jobs_api.clone();
        let node2 = node2.clone();
        move || {
            let jobs_api = jobs_api.clone();
            let node2 = node2.clone();
            async move {
                let sel = format!(
                    "{}=broken-2.0.0,{}={}",
                    schema::PACKAGE_LABEL,
                    schema::NODE_LABEL,
                    node2
                );
                let list = jobs_api
                    .list(&ListParams::default().labels(&sel))
                    .await
                    .ok()?;
                let failed: Vec<Job> = list
                    .items
                    .into_iter()
                    .filter(|j| j.status.as_ref().and_then(|s| s.failed).unwrap_or(0) > 0)
                    .collect();
                (failed.len() >= min).then_some(failed)
            }
        }
    };
    let failed = ctx
        .wait_for(
            "two failed attempts of broken",
            Duration::from_secs(180),
            failed_broken(2),
        )
        .await;
    // The id as the agent sees it: SKYHOOK_RESOURCE_ID in the pod's environment.
    let job_name = failed[0].metadata.name.clone().expect("job name");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job_name}")))
        .await
        .expect("list pods")
        .items
        .pop()
        .expect("the failed Job's pod");
    let resource_id = pod
        .spec
        .expect("pod spec")
        .init_containers
        .expect("init containers")
        .iter()
        .flat_map(|c| c.env.clone().unwrap_or_default())
        .find(|e| e.name == "SKYHOOK_RESOURCE_ID")
        .and_then(|e| e.value)
        .expect("SKYHOOK_RESOURCE_ID");

    let out = plugin(
        &ctx,
        &[
            "jobs",
            "--resource-id",
            &resource_id,
            "-n",
            &ns,
            "-o",
            "json",
        ],
    );
    let rows: Vec<Value> = serde_json::from_str(out.ok()).expect("jobs -o json parses");
    // Exactly that rollout's Jobs: compare with the Jobs whose annotation carries the id.
    let all = jobs_api
        .list(&ListParams::default())
        .await
        .expect("list jobs")
        .items;
    let mut want: Vec<String> = all
        .iter()
        .filter(|j| {
            j.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(schema::RESOURCE_ID_ANNOTATION))
                == Some(&resource_id)
        })
        .filter_map(|j| j.metadata.name.clone())
        .collect();
    let mut got: Vec<String> = rows
        .iter()
        .map(|r| r["jobName"].as_str().unwrap_or_default().to_string())
        .collect();
    let listed_order = got.clone();
    got.sort();
    want.sort();
    // Jobs created between the two lists are allowed to differ only by newer attempts.
    assert!(
        want.iter().all(|w| got.contains(w)) || got.iter().all(|g| want.contains(g)),
        "got {got:?}, want {want:?}"
    );
    assert!(rows.iter().all(|r| r["package"] == "broken"), "{rows:?}");
    // In order: by node, then stage, then attempt; failed attempts with their reason.
    let keys: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["nodeName"].as_str().unwrap_or_default().to_string(),
                r["attempt"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "not in order: {listed_order:?}");
    let node2_failed: Vec<&Value> = rows
        .iter()
        .filter(|r| r["nodeName"] == node2.as_str() && r["status"] == "Failed")
        .collect();
    assert!(node2_failed.len() >= 2, "{rows:#?}");
    for r in &node2_failed {
        assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        assert_eq!(r["stage"], "apply", "{r}");
    }
    let table = plugin(
        &ctx,
        &[
            "jobs",
            "--resource-id",
            &resource_id,
            "-n",
            &ns,
            "--node",
            &node2,
        ],
    );
    let table = table.ok();
    assert!(table.starts_with("NODE "), "{table}");
    assert!(table.contains("Failed"), "{table}");
    assert!(
        table.lines().skip(1).all(|l| l.starts_with(node2.as_str())),
        "{table}"
    );
    // The failing stage's logs, every attempt.
    let out = plugin(
        &ctx,
        &[
            "logs",
            "broken",
            "--node",
            &node2,
            "--skyhook",
            &sk,
            "-n",
            &ns,
            "--all-attempts",
        ],
    );
    let text = out.ok();
    assert!(
        text.matches("[apply/broken-apply] broken-text").count() >= 2,
        "{text}"
    );

    // Missing objects and bad flags: one line on stderr, non-zero.
    plugin(
        &ctx,
        &[
            "logs",
            "nope",
            "--node",
            &nodes[0],
            "--skyhook",
            &sk,
            "-n",
            &ns,
        ],
    )
    .fails(1, "package \"nope\" not found in skyhook");
    plugin(
        &ctx,
        &[
            "logs",
            "tuning",
            "--node",
            "no-such-node-xyz",
            "--skyhook",
            &sk,
            "-n",
            &ns,
        ],
    )
    .fails(1, "node \"no-such-node-xyz\" not found");
    plugin(
        &ctx,
        &["jobs", "--skyhook", "no-such-skyhook-xyz", "-n", &ns],
    )
    .fails(1, "skyhook \"no-such-skyhook-xyz\" not found");
    plugin(
        &ctx,
        &["jobs", "--resource-id", "nothing-here_x_1", "-n", &ns],
    )
    .fails(1, "no Jobs found for resource id \"nothing-here_x_1\"");
    plugin(&ctx, &["jobs", "-n", &ns]).fails(2, "--resource-id <ID>");
    plugin(&ctx, &["logs", "tuning", "--stage", "reboot"]).fails(2, "invalid stage \"reboot\"");
    plugin(&ctx, &["logs", "tuning", "--skyhook", &sk, "-n", &ns, "-f"])
        .fails(1, "-f follows one node of one Skyhook");
}
