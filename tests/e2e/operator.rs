//! The operator rolling packages out through Jobs, on the real control plane.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use skyhook::schema::{self, NodeState, Stage, State};

use crate::support::{Env, TestCtx, label, pkg, setup, skyhook, sleep};

/// Waits up to 30 s for Events on `object`, one for each group of phrases saying all of them.
async fn events_say(ctx: &TestCtx, object: &str, wanted: &[[&str; 2]]) {
    let events: Api<Event> = Api::all(ctx.client.clone());
    let lp = ListParams::default().fields(&format!("involvedObject.name={object}"));
    ctx.wait_for(
        &format!("Events on {object} saying {wanted:?}"),
        Duration::from_secs(30),
        || async {
            let list = events.list(&lp).await.ok()?;
            let texts: Vec<String> = list.items.into_iter().filter_map(|e| e.message).collect();
            wanted
                .iter()
                .all(|w| texts.iter().any(|t| w.iter().all(|p| t.contains(p))))
                .then_some(())
        },
    )
    .await
}

#[tokio::test]
async fn rollout_three_packages_on_three_nodes() {
    let env = setup("rollout", 3, &[]).await;
    let name = env.ctx.name("sk");
    let mut c = pkg("1.0.0", sleep("1"));
    c["containerSHA"] =
        json!("sha256:0f0e0d0c0b0a09080706050403020100f0e0d0c0b0a090807060504030201001");
    c["resources"] = json!({"cpuRequest": "50m", "cpuLimit": "100m", "memoryRequest": "32Mi", "memoryLimit": "64Mi"});
    let mut a = pkg("1.2.3", sleep("1"));
    a["configMap"] = json!({"config.sh": "echo hi"});
    let mut b = pkg("2.0.0", sleep("1"));
    b["dependsOn"] = json!({"alpha": "1.2.3"});
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"alpha": a, "bravo": b, "charlie": c}}),
    ))
    .await;

    let sk = env
        .wait_status(&name, schema::Status::Complete, Duration::from_secs(180))
        .await;
    let st = sk.status.clone().expect("status");
    assert_eq!(st.complete_nodes, "3/3");
    assert_eq!(st.nodes_in_progress, 0);
    assert_eq!(st.package_list, "alpha:1.2.3,bravo:2.0.0,charlie:1.0.0");
    assert_eq!(st.observed_generation, sk.metadata.generation.unwrap_or(0));
    assert_eq!(st.node_status.len(), 3);
    // The reference's plugin gates pause/disable on this annotation (§11.4).
    let version = sk.annotations().get(schema::VERSION_ANNOTATION).cloned();
    assert_eq!(
        version,
        Some(schema::skyhook_version_value(&format!(
            "v{}",
            env!("CARGO_PKG_VERSION")
        )))
    );
    assert!(version.is_some_and(|v| v.starts_with("v0.13.0+")));

    for node in &env.nodes {
        let (raw, state) = env.node_state(node, &name).await.expect("node state");
        // Byte-compatible with the reference's encoding.
        assert_eq!(
            raw,
            state.to_annotation(),
            "node state of {node} is not in the Go encoding"
        );
        assert_eq!(state.len(), 3);
        for (_, e) in state.iter() {
            assert_eq!(
                (e.stage, e.state),
                (Stage::Config, Some(State::Complete)),
                "{e:?}"
            );
        }
        assert_eq!(
            state
                .get("charlie", "1.0.0")
                .and_then(|e| e.container_sha.clone())
                .as_deref(),
            Some("sha256:0f0e0d0c0b0a09080706050403020100f0e0d0c0b0a090807060504030201001")
        );
        let n = env.node_api.get(node).await.expect("node");
        assert_eq!(
            n.labels()
                .get(&schema::status_label(&name))
                .map(String::as_str),
            Some("complete")
        );
        let conds = n.status.and_then(|s| s.conditions).unwrap_or_default();
        let cond = |t: String| {
            conds
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| (c.status.clone(), c.reason.clone()))
        };
        assert_eq!(
            cond(schema::node_not_ready_condition(&name)),
            Some(("False".into(), Some("Complete".into())))
        );
        assert_eq!(
            cond(schema::node_erroring_condition(&name)),
            Some(("False".into(), Some("Not Erroring".into())))
        );
    }

    // Every start and completion is told by an Event saying what happened (a pass's completions
    // and starts on one node share one): Events of one object with one reason used to be one
    // series that kept the first message and only counted up.
    for node in &env.nodes {
        let wanted = vec![
            ["alpha:1.2.3", "stage [apply]"],
            ["bravo:2.0.0", "stage [apply]"],
            ["bravo:2.0.0", "stage [config]"],
            ["bravo:2.0.0", "state complete on"],
        ];
        events_say(&env.ctx, node, &wanted).await;
    }
    let wanted = vec![
        ["[alpha:1.2.3]", "stage [apply]"],
        ["[bravo:2.0.0]", "stage [apply]"],
        ["[charlie:1.0.0]", "stage [config]"],
    ];
    events_say(&env.ctx, &name, &wanted).await;

    // Exactly one Job per (package, stage, node), each labelled and owned by the Skyhook.
    let jobs = env.jobs_of(&name).await;
    let mut seen: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for j in &jobs {
        for k in [
            schema::NAME_LABEL,
            schema::PACKAGE_LABEL,
            schema::NODE_LABEL,
            schema::STAGE_LABEL,
            schema::RESOURCE_ID_LABEL,
        ] {
            assert!(
                !label(j, k).is_empty(),
                "Job {} lacks label {k}",
                j.name_any()
            );
        }
        let owner = j.owner_references().first().expect("ownerReference");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("Skyhook", name.as_str(), Some(true))
        );
        let spec = j.spec.as_ref().expect("spec");
        assert_eq!(
            (spec.backoff_limit, spec.parallelism, spec.completions),
            (Some(0), Some(1), Some(1))
        );
        let pod = spec.template.spec.as_ref().expect("pod spec");
        assert!(pod.host_pid == Some(true) && pod.host_network == Some(true));
        assert_eq!(pod.automount_service_account_token, Some(false));
        // The node version that stored the stage, stamped into the planned Job's JSON after
        // the node patch: a real version of that node, never newer than its current one.
        let stamped: Option<u64> = j
            .annotations()
            .get(schema::NODE_VERSION_ANNOTATION)
            .and_then(|v| v.parse().ok());
        let node = env
            .node_api
            .get(label(j, schema::NODE_LABEL))
            .await
            .expect("node");
        let current: Option<u64> = node.resource_version().and_then(|v| v.parse().ok());
        assert!(
            stamped.is_some_and(|s| current.is_some_and(|c| s > 0 && s <= c)),
            "Job {}: node version {stamped:?}, node now at {current:?}",
            j.name_any()
        );
        *seen
            .entry((
                label(j, schema::PACKAGE_LABEL).into(),
                label(j, schema::STAGE_LABEL).into(),
                label(j, schema::NODE_LABEL).into(),
            ))
            .or_default() += 1;
    }
    assert_eq!(seen.len(), 3 * 2 * 3, "jobs: {seen:?}");

    // The API server's ServiceAccount admission mounts a token into every pod that does not opt
    // out; package code must not get one.
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let lp = ListParams::default().labels(&format!("{}={name}", schema::NAME_LABEL));
    let pods = pods.list(&lp).await.expect("list stage pods").items;
    assert!(!pods.is_empty(), "no stage pods of {name}");
    for p in &pods {
        let spec = p.spec.as_ref().expect("pod spec");
        let mounts = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .flat_map(|c| c.volume_mounts.iter().flatten())
            .map(|m| m.mount_path.as_str())
            .collect::<Vec<_>>();
        assert!(
            !mounts.iter().any(|m| m.contains("serviceaccount")),
            "pod {} mounts a ServiceAccount token: {mounts:?}",
            p.name_any()
        );
    }
    assert!(seen.values().all(|n| *n == 1), "duplicate Jobs: {seen:?}");

    // The resource-id label (a SKYHOOK_RESOURCE_ID is per generation and package) finds that
    // package's Jobs, and with the node label those on one node.
    let j = jobs
        .iter()
        .find(|j| {
            label(j, schema::PACKAGE_LABEL) == "bravo-2.0.0"
                && label(j, schema::NODE_LABEL) == env.nodes[1]
        })
        .expect("a bravo Job on the second node");
    let full = j
        .annotations()
        .get(schema::RESOURCE_ID_ANNOTATION)
        .expect("full resource id");
    let by_id = format!(
        "{}={}",
        schema::RESOURCE_ID_LABEL,
        schema::resource_id_label(full)
    );
    let out = env
        .ctx
        .kubectl(&["get", "jobs", "-n", &env.ctx.ns, "-o", "name", "-l", &by_id]);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        listed.lines().count(),
        6,
        "kubectl get jobs -l {by_id} printed:\n{listed}"
    );
    assert!(
        listed.lines().all(|l| l.contains("-bravo-2-0-0-")),
        "{listed}"
    );
    let on_node = format!(
        "{by_id},{}={}",
        schema::NODE_LABEL,
        schema::label_value(&env.nodes[1])
    );
    let out = env.ctx.kubectl(&[
        "get",
        "jobs",
        "-n",
        &env.ctx.ns,
        "-o",
        "name",
        "-l",
        &on_node,
    ]);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        listed.lines().count(),
        2,
        "kubectl get jobs -l {on_node} printed:\n{listed}"
    );

    // No dependent Job before its dependency completed on that node.
    for node in &env.nodes {
        let on = |p: &str, s: &str| {
            jobs.iter()
                .find(|j| {
                    label(j, schema::PACKAGE_LABEL).starts_with(p)
                        && label(j, schema::STAGE_LABEL) == s
                        && label(j, schema::NODE_LABEL) == node
                })
                .cloned()
                .expect("job")
        };
        let dep_done = on("alpha", "config")
            .status
            .and_then(|s| s.completion_time)
            .expect("completed")
            .0;
        let child_created = on("bravo", "apply")
            .metadata
            .creation_timestamp
            .expect("created")
            .0;
        assert!(
            child_created >= dep_done,
            "bravo started on {node} before alpha completed"
        );
    }

    // Probes and metrics, with the reference's names and labels.
    let get = |port: u16, path: &str| -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").expect("request");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("response");
        out
    };
    assert!(get(env.op.probe_port, "/healthz").starts_with("HTTP/1.0 200"));
    assert!(get(env.op.probe_port, "/readyz").starts_with("HTTP/1.0 200"));
    let metrics = get(env.op.metrics_port, "/metrics");
    for want in [
        format!("skyhook_status{{skyhook_name=\"{name}\",status=\"complete\"}} 1"),
        format!("skyhook_node_status_count{{skyhook_name=\"{name}\",status=\"complete\"}} 3"),
        format!("skyhook_node_target_count{{skyhook_name=\"{name}\"}} 3"),
        format!(
            "skyhook_package_state_count{{skyhook_name=\"{name}\",package_name=\"bravo\",package_version=\"2.0.0\",state=\"complete\"}} 3"
        ),
        format!(
            "skyhook_rollout_progress_percent{{skyhook_name=\"{name}\",policy_name=\"legacy\",compartment_name=\"__default__\",strategy=\"fixed\"}} 100"
        ),
        format!(
            "skyhook_rollout_ceiling{{skyhook_name=\"{name}\",policy_name=\"legacy\",compartment_name=\"__default__\",strategy=\"fixed\"}} 3"
        ),
    ] {
        assert!(metrics.contains(&want), "metrics lack {want}:\n{metrics}");
    }

    // Once complete, the operator's own writes stop: status changes would re-trigger it.
    let rv = env
        .skyhooks
        .get(&name)
        .await
        .expect("get")
        .resource_version();
    env.ctx
        .holds_for(
            "a complete Skyhook stays unwritten",
            Duration::from_secs(6),
            || async {
                let now = env
                    .skyhooks
                    .get(&name)
                    .await
                    .map_err(|e| e.to_string())?
                    .resource_version();
                if now == rv {
                    Ok(())
                } else {
                    Err(format!("resourceVersion moved {rv:?} -> {now:?}"))
                }
            },
        )
        .await;
    drop(env.op);
}

#[tokio::test]
async fn failing_package_errors_then_recovers() {
    let env = setup("fail", 1, &[]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    let failing = pkg("1.0.0", json!([{"name": "EXIT_CODE", "value": "1"}]));
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"broken": failing}}),
    ))
    .await;

    let state = env
        .ctx
        .wait_for(
            "the package to be erroring with restarts",
            Duration::from_secs(90),
            || async {
                let (_, s) = env.node_state(&node, &name).await?;
                let e = s.get("broken", "1.0.0")?.clone();
                (e.state == Some(State::Erroring) && e.restarts >= 1).then_some(e)
            },
        )
        .await;
    assert_eq!(state.stage, Stage::Apply);
    let sk = env
        .wait_status(&name, schema::Status::Erroring, Duration::from_secs(30))
        .await;
    let cond = sk
        .status
        .expect("status")
        .conditions
        .into_iter()
        .find(|c| c.type_ == schema::PACKAGE_ERRORING_CONDITION)
        .expect("PackageErroring condition");
    assert_eq!(cond.status, "True");
    assert!(
        cond.message.contains("broken") && cond.message.contains(&node),
        "{}",
        cond.message
    );
    let events: Api<Event> = Api::all(env.ctx.client.clone());
    let warned = env
        .ctx
        .wait_for(
            "a Warning event naming the package and node",
            Duration::from_secs(20),
            || async {
                let evs = events
                    .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                    .await
                    .ok()?;
                evs.items.into_iter().find(|e| {
                    let msg = e.message.clone().unwrap_or_default();
                    e.type_.as_deref() == Some("Warning")
                        && msg.contains("broken")
                        && msg.contains(&node)
                })
            },
        )
        .await;
    assert!(warned.message.is_some());

    // Fixing the package brings it to complete with no manual action.
    let fix = json!({"spec": {"packages": {"broken": pkg("1.0.0", sleep("1"))}}});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .expect("patch");
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    let (_, s) = env.node_state(&node, &name).await.expect("state");
    assert_eq!(
        s.get("broken", "1.0.0").and_then(|e| e.state),
        Some(State::Complete)
    );
    // Failed attempts were counted and lost their TTL (kept for `kubectl logs` until pruned);
    // the successful one was never written to after its creation: the node's record says it
    // was folded, and it keeps the TTL it was created with.
    let folded = env.folded(&node, &name).await;
    for j in env.jobs_of(&name).await {
        let spec = j.spec.as_ref().expect("spec");
        let failed = j
            .status
            .as_ref()
            .and_then(|s| s.failed)
            .is_some_and(|f| f > 0);
        let apply = label(&j, schema::STAGE_LABEL) == "apply";
        let attempt: u32 = j.annotations()[schema::ATTEMPT_ANNOTATION]
            .parse()
            .expect("attempt");
        if failed {
            assert!(
                j.annotations().contains_key(schema::COUNTED_ANNOTATION),
                "{}",
                j.name_any()
            );
            assert_eq!(spec.ttl_seconds_after_finished, None, "{}", j.name_any());
        } else {
            assert_eq!(
                j.metadata.generation,
                Some(1),
                "{} written after creation",
                j.name_any()
            );
            assert_eq!(
                spec.ttl_seconds_after_finished,
                Some(86_400),
                "{}",
                j.name_any()
            );
            assert!(!j.annotations().contains_key(schema::RECORDED_ANNOTATION));
        }
        if apply {
            assert!(
                folded
                    .get("broken|1.0.0|apply")
                    .is_some_and(|&a| attempt <= a),
                "{} not in the node's folded record {folded:?}",
                j.name_any()
            );
        }
    }
}

#[tokio::test]
async fn unpullable_image_and_hung_stage_become_erroring() {
    let env = setup("stuck", 1, &[("STAGE_DEADLINE", "20s")]).await;
    let node = env.nodes[0].clone();
    let pull = env.ctx.name("pull");
    let hang = env.ctx.name("hang");
    let mut bad = pkg("1.0.0", json!([]));
    bad["image"] = json!("registry.invalid/skyhook/missing");
    env.create(&skyhook(
        &env.ctx,
        &pull,
        json!({"packages": {"missing": bad}}),
    ))
    .await;
    env.create(&skyhook(&env.ctx, &hang, json!({"priority": 300, "packages": {"hangs": pkg("1.0.0", json!([{"name": "HANG", "value": "true"}]))}}))).await;

    let started = std::time::Instant::now();
    env.wait_status(&pull, schema::Status::Erroring, Duration::from_secs(60))
        .await;
    assert!(started.elapsed() < Duration::from_secs(60));
    let sk = env.skyhooks.get(&pull).await.expect("get");
    let cond = sk
        .status
        .expect("status")
        .conditions
        .into_iter()
        .find(|c| c.type_ == schema::PACKAGE_ERRORING_CONDITION)
        .expect("condition");
    assert!(
        cond.message.contains("ErrImagePull") || cond.message.contains("ImagePullBackOff"),
        "{}",
        cond.message
    );

    // The hung stage runs on the same node once the first Skyhook no longer gates it? No: the
    // first Skyhook is erroring, so lower-priority work waits (§3.14). Remove the first one.
    env.skyhooks
        .delete(&pull, &Default::default())
        .await
        .expect("delete");
    let sk = env
        .wait_status(&hang, schema::Status::Erroring, Duration::from_secs(120))
        .await;
    let cond = sk
        .status
        .expect("status")
        .conditions
        .into_iter()
        .find(|c| c.type_ == schema::PACKAGE_ERRORING_CONDITION)
        .expect("condition");
    assert!(
        cond.message.contains("DeadlineExceeded"),
        "{}",
        cond.message
    );
    let (_, s) = env.node_state(&node, &hang).await.expect("state");
    assert_eq!(
        s.get("hangs", "1.0.0").and_then(|e| e.state),
        Some(State::Erroring)
    );
}

#[tokio::test]
async fn budget_of_one_limits_nodes_in_progress() {
    let env = setup("budget", 3, &[]).await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"interruptionBudget": {"count": 1}, "packages": {"tune": pkg("1.0.0", sleep("2"))}}),
    ))
    .await;
    let mut max_busy = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let jobs = env.jobs_of(&name).await;
        let busy: std::collections::BTreeSet<String> = jobs
            .iter()
            .filter(|j| {
                j.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_none_or(|c| {
                        !c.iter().any(|c| {
                            c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed")
                        })
                    })
            })
            .map(|j| label(j, schema::NODE_LABEL).to_string())
            .collect();
        max_busy = max_busy.max(busy.len());
        assert!(busy.len() <= 1, "nodes with running Jobs at once: {busy:?}");
        let sk = env.skyhooks.get(&name).await.expect("get");
        if sk.status.and_then(|s| s.status) == Some(schema::Status::Complete) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rollout did not complete"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(max_busy, 1);
}

#[tokio::test]
async fn pause_and_disable() {
    let env = setup("pause", 2, &[]).await;
    let name = env.ctx.name("sk");
    let mut sk = skyhook(
        &env.ctx,
        &name,
        json!({"interruptionBudget": {"count": 1}, "packages": {"slow": pkg("1.0.0", sleep("4"))}}),
    );
    env.create(&sk).await;
    // Pause while the first node's Job runs: it finishes, nothing new starts.
    env.ctx
        .wait_for("a running Job", Duration::from_secs(60), || async {
            (!env.jobs_of(&name).await.is_empty()).then_some(())
        })
        .await;
    let pause = json!({"metadata": {"annotations": {schema::PAUSE_ANNOTATION: "true"}}});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&pause))
        .await
        .expect("pause");
    env.wait_status(&name, schema::Status::Paused, Duration::from_secs(30))
        .await;
    let count = env.jobs_of(&name).await.len();
    env.ctx
        .holds_for(
            "no new Job while paused",
            Duration::from_secs(10),
            || async {
                let n = env.jobs_of(&name).await.len();
                if n == count {
                    Ok(())
                } else {
                    Err(format!("{n} Jobs, had {count}"))
                }
            },
        )
        .await;
    // The stage that was running when the pause came has finished meanwhile.
    let finished = |j: &Job| j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0;
    let jobs = env.jobs_of(&name).await;
    assert!(
        jobs.iter().all(finished),
        "an in-flight Job did not finish while paused: {:?}",
        jobs.iter()
            .map(|j| (j.name_any(), j.status.clone()))
            .collect::<Vec<_>>()
    );
    let resume = json!({"metadata": {"annotations": {schema::PAUSE_ANNOTATION: null}}});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .expect("resume");
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(120))
        .await;

    // Disable in the middle of a rollout: status disabled, no new Job.
    let mid = env.ctx.name("mid");
    sk.metadata.name = Some(mid.clone());
    env.create(&sk).await;
    env.ctx
        .wait_for(
            "a Job of the second Skyhook",
            Duration::from_secs(60),
            || async { (!env.jobs_of(&mid).await.is_empty()).then_some(()) },
        )
        .await;
    let disable = json!({"metadata": {"annotations": {schema::DISABLE_ANNOTATION: "true"}}});
    env.skyhooks
        .patch(&mid, &PatchParams::default(), &Patch::Merge(&disable))
        .await
        .expect("disable");
    env.wait_status(&mid, schema::Status::Disabled, Duration::from_secs(30))
        .await;
    let count = env.jobs_of(&mid).await.len();
    env.ctx
        .holds_for(
            "no new Job once disabled",
            Duration::from_secs(8),
            || async {
                let n = env.jobs_of(&mid).await.len();
                if n == count {
                    Ok(())
                } else {
                    Err(format!("{n} Jobs, had {count}"))
                }
            },
        )
        .await;

    // Created disabled: status disabled, nothing runs.
    sk.metadata.name = Some(env.ctx.name("off"));
    sk.metadata.annotations =
        Some([(schema::DISABLE_ANNOTATION.to_string(), "true".to_string())].into());
    let off = sk.name_any();
    env.create(&sk).await;
    env.wait_status(&off, schema::Status::Disabled, Duration::from_secs(30))
        .await;
    env.ctx
        .holds_for(
            "no Job for a disabled Skyhook",
            Duration::from_secs(5),
            || async {
                let n = env.jobs_of(&off).await.len();
                if n == 0 {
                    Ok(())
                } else {
                    Err(format!("{n} Jobs"))
                }
            },
        )
        .await;
}

#[tokio::test]
async fn deleting_a_skyhook_cleans_up() {
    let env = setup("delete", 2, &[]).await;
    let name = env.ctx.name("sk");
    let mut p = pkg("1.0.0", sleep("1"));
    p["configMap"] = json!({"a": "b"});
    env.create(&skyhook(&env.ctx, &name, json!({"packages": {"pkg": p}})))
        .await;
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    assert!(!env.jobs_of(&name).await.is_empty());
    env.skyhooks
        .delete(&name, &Default::default())
        .await
        .expect("delete");
    env.ctx
        .wait_for(
            "the Skyhook to be gone",
            Duration::from_secs(60),
            || async {
                env.skyhooks
                    .get_opt(&name)
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    env.ctx
        .wait_for(
            "Jobs and ConfigMaps to be gone",
            Duration::from_secs(60),
            || async {
                let jobs = env.jobs_of(&name).await;
                let left = cms
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .filter(|c| c.name_any().starts_with(&name))
                    .count();
                (jobs.is_empty() && left == 0).then_some(())
            },
        )
        .await;
    for node in &env.nodes {
        let n = env.node_api.get(node).await.expect("node");
        let keys: Vec<&String> = n
            .annotations()
            .keys()
            .chain(n.labels().keys())
            .filter(|k| k.contains(&name))
            .collect();
        assert!(keys.is_empty(), "{node} still carries {keys:?}");
        let conds: Vec<String> = n
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.type_)
            .filter(|t| t.contains(&name))
            .collect();
        assert!(conds.is_empty(), "{node} still has conditions {conds:?}");
    }
}

#[tokio::test]
async fn version_bump_upgrades_within_the_budget() {
    let env = setup("upgrade", 3, &[]).await;
    let name = env.ctx.name("sk");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"interruptionBudget": {"count": 1}, "packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(180))
        .await;

    let bump = json!({"spec": {"packages": {"tool": pkg("1.1.0", sleep("1"))}}});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&bump))
        .await
        .expect("bump");
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    let (key, value) = env.ctx.test_label();
    let of_test = ListParams::default().labels(&format!("{key}={value}"));
    let state_key = schema::node_state_annotation(&name);
    loop {
        // One list, one instant: nodes read one after another could show a node that has since
        // finished beside the next one, which started after it.
        let listed = env.node_api.list(&of_test).await.expect("list nodes");
        let busy: Vec<String> = listed
            .items
            .iter()
            .filter(|n| {
                n.annotations()
                    .get(&state_key)
                    .and_then(|a| NodeState::parse(a).ok())
                    .is_some_and(|s| s.iter().any(|(_, e)| e.state == Some(State::InProgress)))
            })
            .map(|n| n.name_any())
            .collect();
        assert_eq!(listed.items.len(), env.nodes.len());
        assert!(
            busy.len() <= 1,
            "nodes in progress at once during the upgrade: {busy:?}"
        );
        // The same, from one snapshot of the Jobs: unfinished Jobs sit on one node at most.
        let running: std::collections::BTreeSet<String> = env
            .jobs_of(&name)
            .await
            .iter()
            .filter(|j| {
                let st = j.status.as_ref();
                st.and_then(|s| s.succeeded).unwrap_or(0) == 0
                    && st.and_then(|s| s.failed).unwrap_or(0) == 0
            })
            .map(|j| label(j, schema::NODE_LABEL).to_string())
            .collect();
        assert!(
            running.len() <= 1,
            "unfinished Jobs on several nodes at once: {running:?}"
        );
        let sk = env.skyhooks.get(&name).await.expect("get");
        let st = sk.status.clone().unwrap_or_default();
        if st.status == Some(schema::Status::Complete)
            && st.observed_generation == sk.metadata.generation.unwrap_or(0)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "upgrade did not complete"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let jobs = env.jobs_of(&name).await;
    for node in &env.nodes {
        let (_, s) = env.node_state(node, &name).await.expect("state");
        assert_eq!(s.len(), 1, "old version left on {node}: {s:?}");
        let e = s.get("tool", "1.1.0").expect("new version");
        assert_eq!((e.stage, e.state), (Stage::Config, Some(State::Complete)));
        let stages: Vec<&str> = jobs
            .iter()
            .filter(|j| {
                label(j, schema::NODE_LABEL) == node
                    && label(j, schema::PACKAGE_LABEL) == "tool-1.1.0"
            })
            .map(|j| label(j, schema::STAGE_LABEL))
            .collect();
        let mut sorted = stages.clone();
        sorted.sort();
        assert_eq!(sorted, vec!["config", "upgrade"], "stages on {node}");
        // upgrade, then config: config created only once upgrade had completed.
        let job = |stage: &str| {
            jobs.iter()
                .find(|j| {
                    label(j, schema::NODE_LABEL) == node
                        && label(j, schema::PACKAGE_LABEL) == "tool-1.1.0"
                        && label(j, schema::STAGE_LABEL) == stage
                })
                .expect("Job")
        };
        let upgraded = job("upgrade")
            .status
            .as_ref()
            .and_then(|s| s.completion_time.clone())
            .expect("upgrade completed")
            .0;
        let configured = job("config")
            .metadata
            .creation_timestamp
            .clone()
            .expect("created")
            .0;
        assert!(
            configured >= upgraded,
            "config created at {configured} before upgrade completed at {upgraded} on {node}"
        );
    }
}

#[tokio::test]
async fn operator_survives_sigkill_without_duplicate_jobs() {
    let mut env = setup("crash", 3, &[]).await;
    let name = env.ctx.name("sk");
    let mut b = pkg("1.0.0", sleep("2"));
    b["dependsOn"] = json!({"alpha": "1.0.0"});
    // One node at a time, so the rollout lasts long enough for every kill to land in it.
    env.create(&skyhook(&env.ctx, &name, json!({"interruptionBudget": {"count": 1}, "packages": {"alpha": pkg("1.0.0", sleep("2")), "bravo": b, "charlie": pkg("1.0.0", sleep("1"))}}))).await;
    // Kill at random moments of the rollout, restarting each time. The seed is printed so a
    // failure can be replayed with SKYHOOK_KILL_SEED.
    let mut seed: u64 = std::env::var("SKYHOOK_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    eprintln!("SKYHOOK_KILL_SEED={seed}");
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut mid_rollout = 0;
    for _ in 0..14 {
        if mid_rollout == 12 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300 + next() % 2200)).await;
        let status = env
            .skyhooks
            .get(&name)
            .await
            .ok()
            .and_then(|s| s.status)
            .and_then(|s| s.status);
        if status != Some(schema::Status::Complete) {
            mid_rollout += 1;
        }
        env.op.kill();
        if next() % 3 == 0 {
            tokio::time::sleep(Duration::from_millis(next() % 1000)).await;
        }
        env.op.restart(&env.ctx);
    }
    assert!(
        mid_rollout >= 10,
        "only {mid_rollout} kills landed before the rollout completed"
    );
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(240))
        .await;
    let jobs = env.jobs_of(&name).await;
    let seen = crate::support::jobs_per_attempt(&jobs);
    assert!(seen.values().all(|n| *n == 1), "duplicate Jobs: {seen:?}");
    let per_stage: std::collections::BTreeSet<(String, String, String)> = seen
        .keys()
        .map(|(p, s, n, _)| (p.clone(), s.clone(), n.clone()))
        .collect();
    assert_eq!(per_stage.len(), 3 * 2 * 3, "{seen:?}");
    // Nothing failed, so every (package, stage, node) ran exactly once.
    assert_eq!(seen.len(), per_stage.len(), "extra attempts: {seen:?}");
}

/// A node annotated by the Go operator in mid-rollout (spec §2.9 shapes) is continued.
#[tokio::test]
async fn continues_a_rollout_started_by_the_go_operator() {
    let env = setup("gostate", 1, &[]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    let image = "ghcr.io/nvidia/skyhook/agentless";
    // dexter done, spencer's apply done (config next), foobar never started.
    let go_state = format!(
        r#"{{"dexter|1.2.3":{{"name":"dexter","version":"1.2.3","image":"{image}","stage":"config","state":"complete"}},"spencer|3.2.3":{{"name":"spencer","version":"3.2.3","image":"{image}","stage":"apply","state":"complete"}}}}"#
    );
    let patch = json!({"metadata": {
        "annotations": {
            schema::node_state_annotation(&name): go_state,
            schema::status_annotation(&name): "in_progress",
            schema::node_version_annotation(&name): "v0.13.0",
        },
        "labels": {schema::status_label(&name): "in_progress"},
    }});
    env.node_api
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
    let p = |v: &str, deps: Value| json!({"version": v, "image": image, "dependsOn": deps, "env": sleep("1")});
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {
            "dexter": p("1.2.3", json!({})),
            "spencer": p("3.2.3", json!({"dexter": "1.2.3"})),
            "foobar": p("1.2", json!({"dexter": "1.2.3"})),
        }}),
    ))
    .await;
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    let jobs = env.jobs_of(&name).await;
    let mut ran: Vec<String> = jobs
        .iter()
        .map(|j| {
            format!(
                "{}/{}",
                label(j, schema::PACKAGE_LABEL),
                label(j, schema::STAGE_LABEL)
            )
        })
        .collect();
    ran.sort();
    // dexter is not re-run, spencer continues at config, foobar runs from the start.
    assert_eq!(
        ran,
        vec![
            "foobar-1.2/apply",
            "foobar-1.2/config",
            "spencer-3.2.3/config"
        ]
    );
}

#[tokio::test]
async fn config_change_reruns_only_config_and_env_change_reruns_apply() {
    let env = setup("config", 3, &[]).await;
    let name = env.ctx.name("sk");
    let with = |cm: Value, extra_env: Value| {
        let mut p = pkg("1.0.0", sleep("1"));
        p["configMap"] = cm;
        if let Some(e) = extra_env.as_object() {
            p["env"].as_array_mut().expect("env").push(json!(e));
        }
        json!({"packages": {"tuned": p}})
    };
    env.create(&skyhook(
        &env.ctx,
        &name,
        with(json!({"a.conf": "1", "b.conf": "2"}), json!(null)),
    ))
    .await;
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    let before: std::collections::BTreeSet<String> = env
        .jobs_of(&name)
        .await
        .iter()
        .map(|j| j.name_any())
        .collect();
    assert_eq!(before.len(), 6);

    let wait_new_generation = || async {
        env.ctx
            .wait_for(
                "the Skyhook to complete its new generation",
                Duration::from_secs(180),
                || async {
                    let sk = env.skyhooks.get(&name).await.ok()?;
                    let st = sk.status.clone()?;
                    (st.status == Some(schema::Status::Complete)
                        && st.observed_generation == sk.metadata.generation.unwrap_or(0))
                    .then_some(sk)
                },
            )
            .await
    };
    let change = json!({"spec": with(json!({"a.conf": "changed", "b.conf": "2"}), json!(null))});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect("patch");
    // The status goes through in_progress before completing again.
    env.wait_status(&name, schema::Status::InProgress, Duration::from_secs(60))
        .await;
    let sk = wait_new_generation().await;
    assert_eq!(
        sk.status.expect("status").config_updates.get("tuned"),
        Some(&vec!["a.conf".to_string()])
    );
    let jobs = env.jobs_of(&name).await;
    let fresh: Vec<&Job> = jobs
        .iter()
        .filter(|j| !before.contains(&j.name_any()))
        .collect();
    let mut where_: Vec<(String, String)> = fresh
        .iter()
        .map(|j| {
            (
                label(j, schema::STAGE_LABEL).to_string(),
                label(j, schema::NODE_LABEL).to_string(),
            )
        })
        .collect();
    where_.sort();
    let mut want: Vec<(String, String)> = env
        .nodes
        .iter()
        .map(|n| ("config".to_string(), n.clone()))
        .collect();
    want.sort();
    assert_eq!(
        where_, want,
        "a configMap change must run exactly one config Job per node"
    );

    // An env change re-runs the package from apply on every node.
    let seen: std::collections::BTreeSet<String> = jobs.iter().map(|j| j.name_any()).collect();
    let change = json!({"spec": with(json!({"a.conf": "changed", "b.conf": "2"}), json!({"name": "MODE", "value": "fast"}))});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect("patch");
    env.wait_status(&name, schema::Status::InProgress, Duration::from_secs(60))
        .await;
    wait_new_generation().await;
    let jobs = env.jobs_of(&name).await;
    let mut stages: Vec<String> = jobs
        .iter()
        .filter(|j| !seen.contains(&j.name_any()))
        .map(|j| label(j, schema::STAGE_LABEL).to_string())
        .collect();
    stages.sort();
    assert_eq!(
        stages,
        vec!["apply", "apply", "apply", "config", "config", "config"]
    );
}

/// Fields that change what a Job runs or where it may run re-run a complete package from
/// apply: the agent image override, then an additional toleration.
#[tokio::test]
async fn agent_image_override_and_toleration_changes_rerun_stages() {
    let env = setup("rerun-fields", 2, &[]).await;
    let name = env.ctx.name("sk");
    let spec = |agent: Option<&str>, tolerations: Value| {
        let mut p = pkg("1.0.0", sleep("1"));
        if let Some(a) = agent {
            p["agentImageOverride"] = json!(a);
        }
        json!({"packages": {"tuned": p}, "additionalTolerations": tolerations})
    };
    env.create(&skyhook(&env.ctx, &name, spec(None, json!([]))))
        .await;
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    let override_image = "ghcr.io/nvidia/skyhook/agent:v6.9.9";
    let toleration =
        json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    let changes = [
        ("agentImageOverride", spec(Some(override_image), json!([]))),
        (
            "additionalTolerations",
            spec(Some(override_image), toleration),
        ),
    ];
    for (field, change) in changes {
        let seen: std::collections::BTreeSet<String> = env
            .jobs_of(&name)
            .await
            .iter()
            .map(|j| j.name_any())
            .collect();
        env.skyhooks
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": change})),
            )
            .await
            .expect("patch");
        env.ctx
            .wait_for(
                &format!("the Skyhook to complete again after changing {field}"),
                Duration::from_secs(180),
                || async {
                    let sk = env.skyhooks.get(&name).await.ok()?;
                    let st = sk.status.clone()?;
                    (st.status == Some(schema::Status::Complete)
                        && st.observed_generation == sk.metadata.generation.unwrap_or(0))
                    .then_some(())
                },
            )
            .await;
        let jobs = env.jobs_of(&name).await;
        let fresh: Vec<&Job> = jobs
            .iter()
            .filter(|j| !seen.contains(&j.name_any()))
            .collect();
        let mut runs: Vec<(String, String)> = fresh
            .iter()
            .map(|j| {
                let stage = label(j, schema::STAGE_LABEL).to_string();
                (stage, label(j, schema::NODE_LABEL).to_string())
            })
            .collect();
        runs.sort();
        let mut want: Vec<(String, String)> = env
            .nodes
            .iter()
            .flat_map(|n| {
                [
                    ("apply".to_string(), n.clone()),
                    ("config".to_string(), n.clone()),
                ]
            })
            .collect();
        want.sort();
        assert_eq!(
            runs, want,
            "changing {field} re-runs apply and config on every node"
        );
        for j in &fresh {
            let pod = j
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .expect("pod spec");
            let images: Vec<&str> = pod
                .containers
                .iter()
                .chain(pod.init_containers.iter().flatten())
                .filter(|c| {
                    c.name
                        .contains(&format!("-{}", label(j, schema::STAGE_LABEL)))
                })
                .filter_map(|c| c.image.as_deref())
                .collect();
            assert!(
                !images.is_empty() && images.iter().all(|i| *i == override_image),
                "{field}: the re-run uses the override agent image, got {images:?}"
            );
            if field == "additionalTolerations" {
                let tolerated = pod
                    .tolerations
                    .iter()
                    .flatten()
                    .any(|t| t.key.as_deref() == Some("dedicated"));
                assert!(tolerated, "the re-run carries the new toleration");
            }
        }
    }
}

/// Issue 5 core: cordon first, wait for protected pods, drain by eviction, then
/// apply → config → interrupt → post-interrupt, and uncordon at the end.
#[tokio::test]
async fn interrupt_packages_cordon_wait_drain_then_interrupt() {
    let env = setup("intr", 1, &[]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let pod = |pname: &str, labels: Value| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({"metadata": {"name": pname, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "example.com/app:1"}]}}))
        .expect("pod")
    };
    let protected = env.ctx.name("important");
    let ordinary = env.ctx.name("ordinary");
    pods.create(
        &PostParams::default(),
        &pod(&protected, json!({"dontmess": "withme"})),
    )
    .await
    .expect("pod");
    pods.create(
        &PostParams::default(),
        &pod(&ordinary, json!({"app": "web"})),
    )
    .await
    .expect("pod");
    env.ctx
        .wait_for("both pods Running", Duration::from_secs(30), || async {
            let ok = |p: k8s_openapi::api::core::v1::Pod| {
                p.status.and_then(|s| s.phase).as_deref() == Some("Running")
            };
            (ok(pods.get(&protected).await.ok()?) && ok(pods.get(&ordinary).await.ok()?))
                .then_some(())
        })
        .await;

    let mut dexter = pkg("1.2.3", sleep("1"));
    dexter["interrupt"] = json!({"type": "reboot"});
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({
            "podNonInterruptLabels": {"matchLabels": {"dontmess": "withme"}},
            "packages": {"jason": pkg("1.0.0", sleep("1")), "dexter": dexter},
        }),
    ))
    .await;

    // Cordoned, held by the protected pod; the non-interrupt package completes meanwhile.
    env.ctx
        .wait_for(
            "jason complete while dexter is held",
            Duration::from_secs(90),
            || async {
                let (_, s) = env.node_state(&node, &name).await?;
                (s.get("jason", "1.0.0")?.state == Some(State::Complete)
                    && s.get("jason", "1.0.0")?.stage == Stage::Config)
                    .then_some(())
            },
        )
        .await;
    let n = env.node_api.get(&node).await.expect("node");
    assert_eq!(
        n.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "node not cordoned"
    );
    assert_eq!(
        n.annotations()
            .get(&schema::cordon_annotation(&name))
            .map(String::as_str),
        Some("true")
    );
    let dexter_jobs = |jobs: &[Job]| {
        jobs.iter()
            .filter(|j| label(j, schema::PACKAGE_LABEL) == "dexter-1.2.3")
            .count()
    };
    assert_eq!(
        dexter_jobs(&env.jobs_of(&name).await),
        0,
        "dexter ran while a protected pod exists"
    );
    assert!(
        pods.get_opt(&ordinary).await.expect("get").is_some(),
        "ordinary pod evicted too early"
    );
    let sk = env.skyhooks.get(&name).await.expect("get");
    let held = sk
        .status
        .expect("status")
        .conditions
        .into_iter()
        .find(|c| c.type_ == schema::NODE_BLOCKED_CONDITION)
        .expect("NodeBlocked");
    assert_eq!(held.status, "True");
    assert!(held.message.contains(&protected), "{}", held.message);
    // Upstream's bare condition and Event for the same wait (delta D42).
    let blocked = sk_blocked_condition(&env, &name).await.expect("Blocked");
    assert_eq!(
        (
            blocked.status.as_str(),
            blocked.reason.as_str(),
            blocked.message.as_str()
        ),
        (
            "True",
            schema::NON_INTERRUPT_PODS_RUNNING_REASON,
            format!("1 node(s) blocked by non-interrupt pods ({node}). Waiting.").as_str()
        )
    );
    env.wait_event("a Drain Warning event", &name, |e| {
        e.reason.as_deref() == Some(schema::DRAIN_REASON) && e.type_.as_deref() == Some("Warning")
    })
    .await;
    // The held node stays in_progress, as the reference's interrupt scenario asserts: the reason
    // is in the condition above, and `blocked` would tell the rollout it cannot take work.
    env.ctx
        .holds_for(
            "the held node to stay in_progress",
            Duration::from_secs(3),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                let status = n
                    .annotations()
                    .get(&schema::status_annotation(&name))
                    .cloned();
                match status.as_deref() {
                    Some("in_progress") => Ok(()),
                    other => Err(format!("node status {other:?}")),
                }
            },
        )
        .await;

    // A PodDisruptionBudget that forbids the eviction is honoured and reported.
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let pdb_name = env.ctx.name("pdb");
    let pdb = serde_json::from_value(json!({"metadata": {"name": pdb_name},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}}))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
    // (A bare pod gives the disruption controller no scale to compute from: it allows 0
    // disruptions, which is exactly the block under test.)

    // The protected pod goes: the ordinary one is held by the PDB and the block is reported.
    pods.delete(&protected, &Default::default())
        .await
        .expect("delete");
    env.ctx
        .wait_for(
            "the drain block to be reported",
            Duration::from_secs(60),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                let c = sk
                    .status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == schema::NODE_BLOCKED_CONDITION)?;
                (c.status == "True" && c.message.contains(&ordinary) && c.message.contains("evict"))
                    .then_some(())
            },
        )
        .await;
    assert!(
        sk_blocked_condition(&env, &name).await.is_none(),
        "Blocked stays after the protected pod is gone"
    );
    let events: Api<Event> = Api::all(env.ctx.client.clone());
    env.ctx
        .wait_for(
            "a DrainBlocked Warning event",
            Duration::from_secs(30),
            || async {
                let evs = events
                    .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                    .await
                    .ok()?;
                // Not any DrainBlocked (one was already sent while the protected pod held the
                // drain): the one naming the budget and the pod it blocks.
                evs.items.into_iter().find(|e| {
                    let message = e.message.as_deref().unwrap_or_default();
                    e.reason.as_deref() == Some(schema::DRAIN_BLOCKED_REASON)
                        && e.type_.as_deref() == Some("Warning")
                        && message.contains("PodDisruptionBudget")
                        && message.contains(&ordinary)
                })
            },
        )
        .await;
    env.ctx
        .holds_for(
            "the PDB-protected pod stays and the block stays reported while the budget exists",
            Duration::from_secs(8),
            || async {
                match pods.get_opt(&ordinary).await {
                    Ok(Some(_)) => {}
                    other => return Err(format!("pod gone: {other:?}")),
                }
                let sk = env.skyhooks.get(&name).await.map_err(|e| e.to_string())?;
                let blocked = sk
                    .status
                    .into_iter()
                    .flat_map(|s| s.conditions)
                    .find(|c| c.type_ == schema::NODE_BLOCKED_CONDITION)
                    .is_some_and(|c| c.status == "True" && c.message.contains(&ordinary));
                if blocked {
                    Ok(())
                } else {
                    Err("the NodeBlocked condition stopped reporting the blocked eviction".into())
                }
            },
        )
        .await;
    assert_eq!(
        dexter_jobs(&env.jobs_of(&name).await),
        0,
        "dexter ran before the drain finished"
    );

    // Upstream's bare condition for the same wait (delta D41), naming the node and the pod.
    let drain_blocked = env
        .ctx
        .wait_for("DrainBlocked", Duration::from_secs(30), || async {
            let sk = env.skyhooks.get(&name).await.ok()?;
            sk.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == schema::DRAIN_BLOCKED_CONDITION)
        })
        .await;
    assert_eq!(
        (drain_blocked.status.as_str(), drain_blocked.reason.as_str()),
        ("True", schema::PDB_REASON)
    );
    assert!(
        drain_blocked
            .message
            .starts_with(&format!("1/1 nodes blocked draining ({node}); "))
            && drain_blocked.message.contains(&ordinary)
            && drain_blocked.message.contains(&pdb_name),
        "{}",
        drain_blocked.message
    );

    // Removing the budget lets the eviction through; then the stages run in order.
    pdbs.delete(&pdb_name, &Default::default())
        .await
        .expect("delete pdb");
    env.ctx
        .wait_for(
            "the ordinary pod to be evicted",
            Duration::from_secs(60),
            || async { pods.get_opt(&ordinary).await.ok()?.is_none().then_some(()) },
        )
        .await;
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(120))
        .await;
    env.ctx
        .wait_for(
            "the NodeBlocked condition to clear",
            Duration::from_secs(30),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                sk.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == schema::NODE_BLOCKED_CONDITION)
                    .is_some_and(|c| c.status == "False")
                    .then_some(())
            },
        )
        .await;
    let sk = env.skyhooks.get(&name).await.expect("get");
    assert!(
        sk.status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .all(|c| c.type_ != schema::DRAIN_BLOCKED_CONDITION),
        "DrainBlocked stays after the budget is gone"
    );
    let jobs = env.jobs_of(&name).await;
    let mut dexter_runs: Vec<(jiff::Timestamp, String)> = jobs
        .iter()
        .filter(|j| label(j, schema::PACKAGE_LABEL) == "dexter-1.2.3")
        .map(|j| {
            (
                j.metadata.creation_timestamp.clone().expect("created").0,
                label(j, schema::STAGE_LABEL).to_string(),
            )
        })
        .collect();
    dexter_runs.sort();
    let order: Vec<&str> = dexter_runs.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(
        order,
        vec!["apply", "config", "interrupt", "post-interrupt"]
    );
    // Each stage's Job was created only once the previous one had completed (timestamps have
    // second precision, so equal seconds pass; a stage created early would show as earlier).
    let job_of = |stage: &str| {
        jobs.iter()
            .find(|j| {
                label(j, schema::STAGE_LABEL) == stage
                    && (stage == "interrupt" || label(j, schema::PACKAGE_LABEL) == "dexter-1.2.3")
            })
            .unwrap_or_else(|| panic!("no {stage} Job"))
    };
    for pair in ["apply", "config", "interrupt", "post-interrupt"].windows(2) {
        let done = job_of(pair[0])
            .status
            .as_ref()
            .and_then(|s| s.completion_time.clone())
            .unwrap_or_else(|| panic!("{} Job not complete", pair[0]))
            .0;
        let next = job_of(pair[1])
            .metadata
            .creation_timestamp
            .clone()
            .expect("created")
            .0;
        assert!(
            next >= done,
            "{} Job created at {next} before {} completed at {done}",
            pair[1],
            pair[0]
        );
    }
    let intr = jobs
        .iter()
        .find(|j| label(j, schema::STAGE_LABEL) == "interrupt")
        .expect("interrupt Job");
    assert_eq!(label(intr, schema::INTERRUPT_LABEL), "True");
    let (_, s) = env.node_state(&node, &name).await.expect("state");
    assert_eq!(
        s.get("dexter", "1.2.3").map(|e| (e.stage, e.state)),
        Some((Stage::PostInterrupt, Some(State::Complete)))
    );
    let n = env.node_api.get(&node).await.expect("node");
    assert_ne!(
        n.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "node left cordoned"
    );
    assert!(
        !n.annotations()
            .contains_key(&schema::cordon_annotation(&name))
    );
}

#[tokio::test]
async fn runtime_required_taint_leaves_only_complete_nodes() {
    let mut env = setup("rtreq", 2, &[]).await;
    let name = env.ctx.name("sk");
    let taint_of = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .any(|t| {
                t.key == "skyhook.nvidia.com"
                    && t.value.as_deref() == Some("runtime-required")
                    && t.effect == "NoSchedule"
            })
    };
    for n in &env.nodes {
        let out = env.ctx.kubectl(&[
            "taint",
            "node",
            n,
            "skyhook.nvidia.com=runtime-required:NoSchedule",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({
            "runtimeRequired": true, "autoTaintNewNodes": true, "interruptionBudget": {"count": 1},
            "packages": {"driver": pkg("1.0.0", sleep("2"))},
        }),
    ))
    .await;
    // A node added during the rollout gets the taint.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let added = env.ctx.add_test_nodes(1);
    env.nodes.extend(added.clone());
    env.ctx
        .wait_for(
            "the new node to be auto-tainted",
            Duration::from_secs(30),
            || async { taint_of(&env.node_api.get(&added[0]).await.ok()?).then_some(()) },
        )
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        for n in &env.nodes {
            let node = env.node_api.get(n).await.expect("node");
            let status = node
                .annotations()
                .get(&schema::status_annotation(&name))
                .cloned();
            assert!(
                taint_of(&node) || status.as_deref() == Some("complete"),
                "{n} lost the runtime-required taint while {status:?}"
            );
        }
        let sk = env.skyhooks.get(&name).await.expect("get");
        if sk.status.and_then(|s| s.status) == Some(schema::Status::Complete) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rollout did not complete"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    env.ctx
        .wait_for(
            "every node to lose the taint",
            Duration::from_secs(30),
            || async {
                for n in &env.nodes {
                    if taint_of(&env.node_api.get(n).await.ok()?) {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    let n = env.node_api.get(&added[0]).await.expect("node");
    assert_eq!(
        n.annotations()
            .get(&schema::auto_taint_annotation("skyhook.nvidia.com"))
            .map(String::as_str),
        Some("true")
    );
}

fn interrupt_arg(job: &Job) -> Value {
    use base64::Engine as _;
    let c = &job
        .spec
        .as_ref()
        .expect("spec")
        .template
        .spec
        .as_ref()
        .expect("pod")
        .containers[0];
    assert_eq!(c.name, "interrupt");
    let arg = c
        .args
        .as_ref()
        .and_then(|a| a.get(3))
        .expect("interrupt argument");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(arg)
        .expect("base64");
    serde_json::from_slice(&raw).expect("json")
}

#[tokio::test]
async fn interrupts_merge_into_one_job_per_node() {
    let env = setup("merge", 2, &[]).await;
    let svc = |services: Value| {
        let mut p = pkg("1.0.0", sleep("1"));
        p["interrupt"] = json!({"type": "service", "services": services});
        p
    };
    let services = env.ctx.name("svc");
    let reboot = env.ctx.name("rbt");
    let (k, v) = env.ctx.test_label();
    // Two Skyhooks, one node each, so they run side by side.
    let mut a = skyhook(
        &env.ctx,
        &services,
        json!({"packages": {"alpha": svc(json!(["foo", "log"])), "bravo": svc(json!(["bar"]))}}),
    );
    a.spec.node_selectors = serde_json::from_value(
        json!({"matchLabels": {k.clone(): v.clone(), "kubernetes.io/hostname": env.nodes[0]}}),
    )
    .expect("sel");
    let mut c = pkg("1.0.0", sleep("1"));
    c["interrupt"] = json!({"type": "reboot"});
    let mut b = skyhook(
        &env.ctx,
        &reboot,
        json!({"packages": {"alpha": svc(json!(["foo"])), "charlie": c}}),
    );
    b.spec.node_selectors = serde_json::from_value(
        json!({"matchLabels": {k: v, "kubernetes.io/hostname": env.nodes[1]}}),
    )
    .expect("sel");
    env.create(&a).await;
    env.create(&b).await;
    env.wait_status(
        &services,
        schema::Status::Complete,
        Duration::from_secs(120),
    )
    .await;
    env.wait_status(&reboot, schema::Status::Complete, Duration::from_secs(120))
        .await;

    let interrupts = |jobs: Vec<Job>| -> Vec<Job> {
        jobs.into_iter()
            .filter(|j| label(j, schema::STAGE_LABEL) == "interrupt")
            .collect()
    };
    let one = interrupts(env.jobs_of(&services).await);
    assert_eq!(one.len(), 1, "one interrupt Job for two service packages");
    assert_eq!(
        interrupt_arg(&one[0]),
        json!({"type": "service_restart", "services": ["bar", "foo", "log"]})
    );
    let two = interrupts(env.jobs_of(&reboot).await);
    assert_eq!(two.len(), 1, "the reboot absorbs the service restart");
    assert_eq!(interrupt_arg(&two[0]), json!({"type": "node_restart"}));
    for (sk, node) in [(&services, &env.nodes[0]), (&reboot, &env.nodes[1])] {
        let (_, s) = env.node_state(node, sk).await.expect("state");
        assert!(
            s.iter()
                .all(|(_, e)| e.stage == Stage::PostInterrupt && e.state == Some(State::Complete)),
            "{s:?}"
        );
    }
}

#[tokio::test]
async fn reboots_cordon_one_node_at_a_time_and_keep_an_admin_cordon() {
    let env = setup("rboot", 3, &[]).await;
    let name = env.ctx.name("sk");
    let admin = env.nodes[2].clone();
    let out = env.ctx.kubectl(&["cordon", &admin]);
    assert!(out.status.success());
    let mut p = pkg("1.0.0", sleep("1"));
    p["interrupt"] = json!({"type": "reboot"});
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"interruptionBudget": {"count": 1}, "packages": {"kernel": p}}),
    ))
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        let mut cordoned = Vec::new();
        for n in &env.nodes {
            let node = env.node_api.get(n).await.expect("node");
            if node
                .annotations()
                .contains_key(&schema::cordon_annotation(&name))
            {
                cordoned.push(n.clone());
            }
        }
        assert!(cordoned.len() <= 1, "nodes cordoned at once: {cordoned:?}");
        let sk = env.skyhooks.get(&name).await.expect("get");
        if sk.status.and_then(|s| s.status) == Some(schema::Status::Complete) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rollout did not complete"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for n in &env.nodes {
        let node = env.node_api.get(n).await.expect("node");
        let unschedulable = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        assert_eq!(
            unschedulable,
            *n == admin,
            "{n}: unschedulable={unschedulable}"
        );
        let (_, s) = env.node_state(n, &name).await.expect("state");
        assert_eq!(
            s.get("kernel", "1.0.0").map(|e| (e.stage, e.state)),
            Some((Stage::PostInterrupt, Some(State::Complete)))
        );
    }
}

#[tokio::test]
async fn config_interrupts_fire_only_for_matching_keys() {
    let env = setup("cfgint", 1, &[]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    let with = |grub: &str, limits: &str| {
        let mut p = pkg("1.0.0", sleep("1"));
        p["configMap"] = json!({"grub.conf": grub, "ulimit.conf": limits});
        p["configInterrupts"] = json!({"grub*": {"type": "reboot"}});
        json!({"packages": {"tuning": p}})
    };
    env.create(&skyhook(&env.ctx, &name, with("a", "1"))).await;
    env.wait_status(&name, schema::Status::Complete, Duration::from_secs(90))
        .await;
    let count = |jobs: &[Job], stage: &str| {
        jobs.iter()
            .filter(|j| label(j, schema::STAGE_LABEL) == stage)
            .count()
    };
    let jobs = env.jobs_of(&name).await;
    assert_eq!((count(&jobs, "config"), count(&jobs, "interrupt")), (1, 0));

    let wait_generation = || async {
        env.ctx
            .wait_for(
                "the new generation to complete",
                Duration::from_secs(120),
                || async {
                    let sk = env.skyhooks.get(&name).await.ok()?;
                    let st = sk.status.clone()?;
                    (st.status == Some(schema::Status::Complete)
                        && st.observed_generation == sk.metadata.generation.unwrap_or(0))
                    .then_some(())
                },
            )
            .await
    };
    // A key that matches nothing: config only, never cordoned.
    let patch = json!({"spec": with("a", "2")});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    let mut cordoned = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while count(&env.jobs_of(&name).await, "config") < 2 && std::time::Instant::now() < deadline {
        let n = env.node_api.get(&node).await.expect("node");
        cordoned |= n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_generation().await;
    let jobs = env.jobs_of(&name).await;
    assert_eq!((count(&jobs, "config"), count(&jobs, "interrupt")), (2, 0));
    assert!(!cordoned, "a non-matching key cordoned the node");

    // A key matching the glob: config, then the interrupt, then post-interrupt.
    let patch = json!({"spec": with("b", "2")});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    env.wait_status(&name, schema::Status::InProgress, Duration::from_secs(60))
        .await;
    wait_generation().await;
    let jobs = env.jobs_of(&name).await;
    assert_eq!(
        (
            count(&jobs, "config"),
            count(&jobs, "interrupt"),
            count(&jobs, "post-interrupt")
        ),
        (3, 1, 1)
    );
    let mut order: Vec<(jiff::Timestamp, String)> = jobs
        .iter()
        .map(|j| {
            (
                j.metadata.creation_timestamp.clone().expect("ts").0,
                label(j, schema::STAGE_LABEL).to_string(),
            )
        })
        .collect();
    order.sort();
    let tail: Vec<&str> = order
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(|(_, s)| s.as_str())
        .collect();
    assert_eq!(tail, vec!["config", "interrupt", "post-interrupt"]);
    let n = env.node_api.get(&node).await.expect("node");
    assert_ne!(
        n.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "left cordoned"
    );
}

#[tokio::test]
async fn a_reboot_reapplies_when_asked_to() {
    let env = setup("reboot", 1, &[("REAPPLY_ON_REBOOT", "true")]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;
    let sk = env
        .wait_status(&name, schema::Status::Complete, Duration::from_secs(90))
        .await;
    let boot = sk
        .status
        .expect("status")
        .node_boot_ids
        .get(&node)
        .cloned()
        .expect("boot id recorded");
    assert_eq!(env.jobs_of(&name).await.len(), 2);

    // The node comes back with a new boot id.
    let patch = json!({"status": {"nodeInfo": {"bootID": format!("{boot}-rebooted")}}});
    env.node_api
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("reboot");
    env.ctx
        .wait_for(
            "the package to run again after the reboot",
            Duration::from_secs(90),
            || async {
                let jobs = env.jobs_of(&name).await;
                let sk = env.skyhooks.get(&name).await.ok()?;
                let st = sk.status?;
                (jobs.len() == 4
                    && st.status == Some(schema::Status::Complete)
                    && st
                        .node_boot_ids
                        .get(&node)
                        .is_some_and(|b| b.ends_with("-rebooted")))
                .then_some(())
            },
        )
        .await;
    let events: Api<Event> = Api::all(env.ctx.client.clone());
    let evs = events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .expect("events");
    assert!(
        evs.items
            .iter()
            .any(|e| e.reason.as_deref() == Some(schema::REBOOT_REASON)),
        "no Reboot event"
    );
}

/// The invalid corpus entries that CEL cannot express are flagged by the operator (condition
/// `Valid=False` naming the field) and left alone: no Job, no node write.
#[tokio::test]
async fn operator_flags_what_admission_cannot_check() {
    let env = setup("flag", 1, &[]).await;
    let (k, v) = env.ctx.test_label();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    let mut cases: Vec<(String, String)> = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    files.sort();
    for (i, path) in files.iter().enumerate() {
        let text = std::fs::read_to_string(path).expect("read");
        if !text.contains("# rejected-by: operator") {
            continue;
        }
        let expect = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect: "))
            .expect("expect line")
            .to_string();
        let mut obj: Value = serde_saphyr::from_str(&text).expect("yaml");
        let sk_name = env.ctx.name(&format!("f{i}"));
        if obj["kind"] == "DeploymentPolicy" {
            obj["metadata"]["name"] = json!(sk_name.clone());
            let out = apply(&env, &obj);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let sk = json!({"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
                "metadata": {"name": sk_name, "labels": {k.clone(): v.clone()}},
                "spec": {"deploymentPolicy": sk_name, "nodeSelectors": {"matchLabels": {k.clone(): v.clone()}},
                         "packages": {"tool": pkg("1.0.0", sleep("1"))}}});
            let out = apply(&env, &sk);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            obj["metadata"]["name"] = json!(sk_name.clone());
            obj["metadata"]["labels"] = json!({k.clone(): v.clone()});
            let out = apply(&env, &obj);
            assert!(
                out.status.success(),
                "{} was rejected at admission: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        cases.push((sk_name, expect));
    }
    assert!(cases.len() >= 10, "only {} operator fixtures", cases.len());
    for (sk_name, expect) in &cases {
        let cond = env
            .ctx
            .wait_for(
                &format!("{sk_name} to be flagged ({expect})"),
                Duration::from_secs(60),
                || async {
                    let sk = env.skyhooks.get(sk_name).await.ok()?;
                    sk.status?
                        .conditions
                        .into_iter()
                        .find(|c| c.type_ == schema::VALID_CONDITION && c.status == "False")
                },
            )
            .await;
        assert!(
            cond.message.contains(expect.as_str()),
            "{sk_name}: {} lacks {expect:?}",
            cond.message
        );
        // And a Warning Event on the Skyhook that says the same.
        let events: Api<Event> = Api::all(env.ctx.client.clone());
        env.ctx
            .wait_for(
                &format!("an InvalidSpec Warning event for {sk_name}"),
                Duration::from_secs(30),
                || async {
                    let list = events
                        .list(
                            &ListParams::default()
                                .fields(&format!("involvedObject.name={sk_name}")),
                        )
                        .await
                        .ok()?;
                    list.items.into_iter().find(|e| {
                        e.reason.as_deref() == Some(schema::INVALID_SPEC_REASON)
                            && e.type_.as_deref() == Some("Warning")
                            && e.message
                                .as_deref()
                                .unwrap_or_default()
                                .contains(expect.as_str())
                    })
                },
            )
            .await;
    }
    // Left alone, not just at first: no Job appears for any of them.
    env.ctx
        .holds_for(
            "no Job for an invalid Skyhook",
            Duration::from_secs(5),
            || async {
                for (sk_name, _) in &cases {
                    if !env.jobs_of(sk_name).await.is_empty() {
                        return Err(format!("{sk_name} ran a Job"));
                    }
                }
                Ok(())
            },
        )
        .await;
    let node = env.node_api.get(&env.nodes[0]).await.expect("node");
    let touched: Vec<&String> = node
        .annotations()
        .keys()
        .filter(|a| cases.iter().any(|(n, _)| a.ends_with(n.as_str())))
        .collect();
    assert!(touched.is_empty(), "invalid Skyhooks wrote {touched:?}");
}

fn apply(env: &Env, obj: &Value) -> std::process::Output {
    use std::io::Write;
    let mut child = env
        .ctx
        .cluster
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(obj.to_string().as_bytes())
        .expect("write");
    child.wait_with_output().expect("kubectl output")
}

/// A Skyhook stored before the CRD bounded `gracefulShutdown` (written straight into etcd, as an
/// older CRD would have let it in): admission refuses it today, and the operator flags it
/// instead of crashing on it.
#[tokio::test]
async fn a_huge_graceful_shutdown_stored_before_the_bound_is_flagged() {
    use base64::Engine as _;
    let env = setup("bound", 1, &[]).await;
    let (k, v) = env.ctx.test_label();
    let name = env.ctx.name("sk");
    let mut spec = json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}});
    spec["packages"]["tool"]["gracefulShutdown"] = json!("1000000000h");
    spec["nodeSelectors"] = json!({"matchLabels": {k.clone(): v.clone()}});
    let mut obj = json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": name, "labels": {k: v}},
        "spec": spec,
    });
    // Admission refuses it, naming the field.
    let refused = apply(&env, &obj);
    assert!(
        !refused.status.success(),
        "admission took a huge gracefulShutdown"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("gracefulShutdown"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    obj["metadata"]["uid"] = json!(format!(
        "00000000-0000-4000-8000-{:012x}",
        std::process::id()
    ));
    obj["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    obj["metadata"]["generation"] = json!(1);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let port = std::env::var("ETCD_PORT").unwrap_or_else(|_| "23790".into());
    let body = json!({
        "key": b64(&format!("/registry/skyhook.nvidia.com/skyhooks/{name}")),
        "value": b64(&obj.to_string()),
    });
    let put = std::process::Command::new("curl")
        .args(["-fsS", "-X", "POST", "--data-binary", &body.to_string()])
        .arg(format!("http://127.0.0.1:{port}/v3/kv/put"))
        .output()
        .expect("curl");
    assert!(
        put.status.success(),
        "etcd put: {}",
        String::from_utf8_lossy(&put.stderr)
    );

    let cond = env
        .ctx
        .wait_for(
            "the stored Skyhook to be flagged invalid",
            Duration::from_secs(60),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                sk.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == schema::VALID_CONDITION && c.status == "False")
            },
        )
        .await;
    assert!(
        cond.message.contains("gracefulShutdown"),
        "{}",
        cond.message
    );
    env.ctx
        .holds_for(
            "no Job for the invalid Skyhook, operator alive",
            Duration::from_secs(5),
            || async {
                if !env.op.running() {
                    return Err(format!("the operator exited:\n{}", env.op.log_tail(40)));
                }
                match env.jobs_of(&name).await.len() {
                    0 => Ok(()),
                    n => Err(format!("{n} Jobs were created")),
                }
            },
        )
        .await;
    // Remove it the way it came, so that nothing needs its finalizer released.
    let del = json!({"key": b64(&format!("/registry/skyhook.nvidia.com/skyhooks/{name}"))});
    let _ = std::process::Command::new("curl")
        .args(["-fsS", "-X", "POST", "--data-binary", &del.to_string()])
        .arg(format!("http://127.0.0.1:{port}/v3/kv/deleterange"))
        .output();
}

/// A node whose stored state cannot be read is left as it is (annotation kept, nothing run) and
/// named by a condition and a Warning Event, while the other nodes go on; once the value is
/// removed the node is rolled out like any other.
#[tokio::test]
async fn unreadable_node_state_is_reported_and_left_alone() {
    let env = setup("corrupt", 2, &[]).await;
    let name = env.ctx.name("sk");
    let (bad, good) = (env.nodes[0].clone(), env.nodes[1].clone());
    let key = schema::node_state_annotation(&name);
    let corrupt = "{\"tool|1.0.0\": {\"stage\": \"bogus\"";
    env.node_api
        .patch(
            &bad,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key.clone(): corrupt}}})),
        )
        .await
        .expect("corrupt the node state");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    ))
    .await;

    let cond = env
        .ctx
        .wait_for(
            "the NodeStateUnreadable condition and the good node complete",
            Duration::from_secs(90),
            || async {
                let st = env.skyhooks.get(&name).await.ok()?.status?;
                if st.node_status.get(&good) != Some(&schema::Status::Complete) {
                    return None;
                }
                st.conditions.into_iter().find(|c| {
                    c.type_ == schema::NODE_STATE_UNREADABLE_CONDITION && c.status == "True"
                })
            },
        )
        .await;
    assert!(
        cond.message.contains(&bad) && cond.message.contains(&key),
        "{}",
        cond.message
    );
    // Upstream's bare condition (delta D16) says the same, in upstream's words.
    let sk = env.skyhooks.get(&name).await.expect("skyhook");
    let malformed = sk
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == schema::NODE_STATE_MALFORMED_CONDITION)
        .expect("NodeStateMalformed");
    assert_eq!(
        (malformed.status.as_str(), malformed.reason.as_str()),
        ("True", "ParseError")
    );
    assert!(
        malformed
            .message
            .starts_with("nodeState annotation cannot be parsed on 1 node(s): "),
        "{}",
        malformed.message
    );
    let raw = env.node_api.get(&bad).await.expect("node");
    assert_eq!(
        raw.annotations().get(&key).map(String::as_str),
        Some(corrupt)
    );
    assert!(
        env.jobs_of(&name)
            .await
            .iter()
            .all(|j| label(j, schema::NODE_LABEL) != bad),
        "a Job ran on the unreadable node"
    );
    env.wait_event("a Warning Event on the node", &bad, |e| {
        e.reason.as_deref() == Some(schema::NODE_STATE_UNREADABLE_REASON)
            && e.type_.as_deref() == Some("Warning")
    })
    .await;

    // Removing the value lets the node proceed.
    env.node_api
        .patch(
            &bad,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key.clone(): null}}})),
        )
        .await
        .expect("remove the node state");
    let sk = env
        .wait_status(&name, schema::Status::Complete, Duration::from_secs(90))
        .await;
    let st = sk.status.expect("status");
    assert!(
        st.conditions
            .iter()
            .any(|c| { c.type_ == schema::NODE_STATE_UNREADABLE_CONDITION && c.status == "False" }),
        "{:?}",
        st.conditions
    );
    assert!(
        st.conditions
            .iter()
            .all(|c| c.type_ != schema::NODE_STATE_MALFORMED_CONDITION),
        "NodeStateMalformed stays after the repair: {:?}",
        st.conditions
    );
}

/// The bare `Blocked` condition of Skyhook `name` (upstream's, delta D42), if present.
async fn sk_blocked_condition(
    env: &Env,
    name: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let sk = env.skyhooks.get(name).await.ok()?;
    sk.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == schema::BLOCKED_CONDITION)
}

/// `restarts` is a persisted count: with one failed Job kept it still grows past one, and the
/// delay between attempts doubles up to RETRY_MAX.
#[tokio::test]
async fn restarts_grow_past_the_failed_jobs_kept_and_backoff_reaches_its_cap() {
    let env = setup(
        "restarts",
        1,
        &[
            ("FAILED_JOBS_KEPT", "1"),
            ("RETRY_BASE", "1s"),
            ("RETRY_MAX", "4s"),
        ],
    )
    .await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    let failing = pkg("1.0.0", json!([{"name": "EXIT_CODE", "value": "1"}]));
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"broken": failing}}),
    ))
    .await;

    // When each attempt's Job was first seen, by attempt.
    let mut created: BTreeMap<u32, std::time::Instant> = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(150);
    let restarts = loop {
        for j in env.jobs_of(&name).await {
            if let Some(a) = j
                .annotations()
                .get(schema::ATTEMPT_ANNOTATION)
                .and_then(|a| a.parse().ok())
            {
                created.entry(a).or_insert_with(std::time::Instant::now);
            }
        }
        let restarts = env
            .node_state(&node, &name)
            .await
            .and_then(|(_, s)| s.get("broken", "1.0.0").map(|e| e.restarts))
            .unwrap_or(0);
        if restarts >= 6 {
            break restarts;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "restarts stuck at {restarts}; attempts seen {:?}",
            created.keys().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Counted once per failed attempt: attempts 0..=5 have failed.
    assert_eq!(
        restarts as usize,
        created.len(),
        "restarts against the attempts seen {:?}",
        created.keys().collect::<Vec<_>>()
    );
    let failed_jobs = env
        .jobs_of(&name)
        .await
        .iter()
        .filter(|j| j.status.as_ref().and_then(|s| s.failed).unwrap_or(0) > 0)
        .count();
    assert!(
        failed_jobs <= 2,
        "{failed_jobs} failed Jobs kept with FAILED_JOBS_KEPT=1"
    );
    // Attempt k starts after the k-th failure's backoff, 1·2^(k−1) s capped at 4 s: the gaps
    // 3→4 and 4→5 hold the 4 s (less the failure time's truncation to whole seconds and the
    // 200 ms polling) and stay under 7 s, where uncapped they would exceed 8 s and 16 s.
    for a in [4u32, 5] {
        let (Some(prev), Some(this)) = (created.get(&(a - 1)), created.get(&a)) else {
            panic!(
                "attempts {} and {a} not both seen: {:?}",
                a - 1,
                created.keys()
            );
        };
        let gap = this.duration_since(*prev);
        assert!(
            gap >= Duration::from_millis(2500) && gap < Duration::from_secs(7),
            "attempt {} → {a}: {gap:?}",
            a - 1
        );
    }
}
