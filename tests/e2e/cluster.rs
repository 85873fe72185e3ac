//! The local control plane itself: the real Job, TTL and garbage-collector controllers, and the
//! kwok stages that let a pod's spec decide its outcome.

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::private::PrivateCluster;
use crate::support::{TestCtx, cluster_dir, foreground, run};

/// A Job pinned to `node` whose single container carries `env`.
fn job(name: &str, node: &str, env: serde_json::Value, extra_spec: serde_json::Value) -> Job {
    job_with_image(name, node, "example.com/app:1", env, extra_spec)
}

fn job_with_image(
    name: &str,
    node: &str,
    image: &str,
    env: serde_json::Value,
    extra_spec: serde_json::Value,
) -> Job {
    let mut spec = json!({
        "backoffLimit": 0,
        "template": {"spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image, "env": env}],
        }},
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("valid Job")
}

/// The status and reason of a Job condition of `type_`, when present.
fn condition(job: &Job, type_: &str) -> Option<(String, Option<String>, jiff::Timestamp)> {
    let c = job
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")?;
    let at = c.last_transition_time.as_ref()?.0;
    Some((c.status.clone(), c.reason.clone(), at))
}

async fn wait_condition(
    ctx: &TestCtx,
    jobs: &Api<Job>,
    name: &str,
    type_: &str,
    timeout: Duration,
) -> (Option<String>, jiff::Timestamp) {
    ctx.wait_for(&format!("Job {name} {type_}=True"), timeout, || async {
        let j = jobs.get_opt(name).await.ok().flatten()?;
        condition(&j, type_).map(|(_, reason, at)| (reason, at))
    })
    .await
}

async fn job_pod(ctx: &TestCtx, pods: &Api<Pod>, job: &str) -> Pod {
    ctx.wait_for(
        &format!("the pod of Job {job}"),
        Duration::from_secs(30),
        || async {
            let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
            pods.list(&lp).await.ok()?.items.into_iter().next()
        },
    )
    .await
}

#[tokio::test]
async fn job_completes_after_sleep_len() {
    let ctx = TestCtx::new("sleep").await;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let name = ctx.name("job");
    let j = job(
        &name,
        "node-1",
        json!([{"name": "SLEEP_LEN", "value": "3"}]),
        json!({}),
    );
    jobs.create(&PostParams::default(), &j)
        .await
        .expect("create job");

    let (_, complete_at) =
        wait_condition(&ctx, &jobs, &name, "Complete", Duration::from_secs(60)).await;
    let pod = job_pod(&ctx, &pods, &name).await;
    let started = pod
        .status
        .and_then(|s| s.start_time)
        .expect("pod has a startTime")
        .0;
    let ran = complete_at.duration_since(started);
    assert!(
        ran >= jiff::SignedDuration::from_secs(3),
        "Job completed {ran:?} after its pod started; SLEEP_LEN=3 asks for at least 3 s"
    );
}

#[tokio::test]
async fn exit_code_fails_the_job_with_the_right_reason() {
    let ctx = TestCtx::new("exit").await;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let env = json!([{"name": "EXIT_CODE", "value": "3"}]);
    let plain = ctx.name("plain");
    let policy = ctx.name("policy");
    jobs.create(
        &PostParams::default(),
        &job(&plain, "node-2", env.clone(), json!({})),
    )
    .await
    .expect("create job");
    let pfp = json!({"podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}
    ]}});
    jobs.create(&PostParams::default(), &job(&policy, "node-2", env, pfp))
        .await
        .expect("create job");

    let (reason, _) = wait_condition(&ctx, &jobs, &plain, "Failed", Duration::from_secs(60)).await;
    assert_eq!(reason.as_deref(), Some("BackoffLimitExceeded"));
    let (reason, _) = wait_condition(&ctx, &jobs, &policy, "Failed", Duration::from_secs(60)).await;
    assert_eq!(reason.as_deref(), Some("PodFailurePolicy"));

    // The exit code is reported on the container that carries EXIT_CODE.
    let pod = job_pod(&ctx, &pods, &plain).await;
    let code = pod
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().find(|c| c.name == "main"))
        .and_then(|c| c.state)
        .and_then(|s| s.terminated)
        .map(|t| t.exit_code);
    assert_eq!(code, Some(3));
}

fn waiting_reason(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
}

#[tokio::test]
async fn unpullable_image_stays_pending_until_the_deadline() {
    let ctx = TestCtx::new("pull").await;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let stuck = ctx.name("stuck");
    let deadline = ctx.name("deadline");
    for (name, extra) in [
        (&stuck, json!({})),
        (&deadline, json!({"activeDeadlineSeconds": 10})),
    ] {
        let j = job_with_image(name, "node-3", "registry.invalid/x:1", json!([]), extra);
        jobs.create(&PostParams::default(), &j)
            .await
            .expect("create job");
    }

    let (reason, _) =
        wait_condition(&ctx, &jobs, &deadline, "Failed", Duration::from_secs(60)).await;
    assert_eq!(reason.as_deref(), Some("DeadlineExceeded"));

    // The other one must still be waiting on its image 20 s after its pod was created.
    let pod = job_pod(&ctx, &pods, &stuck).await;
    let created = pod.metadata.creation_timestamp.clone().expect("created").0;
    let mut seen_backoff = false;
    loop {
        let pod = pods
            .get(pod.metadata.name.as_deref().expect("named"))
            .await
            .expect("pod");
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        let reason = waiting_reason(&pod);
        assert_eq!(phase.as_deref(), Some("Pending"), "pod left Pending");
        if let Some(r) = reason.as_deref() {
            assert!(
                r == "ErrImagePull" || r == "ImagePullBackOff",
                "unexpected waiting reason {r}"
            );
            seen_backoff |= r == "ImagePullBackOff";
        }
        let j = jobs.get(&stuck).await.expect("job");
        assert!(condition(&j, "Complete").is_none(), "the Job completed");
        assert!(condition(&j, "Failed").is_none(), "the Job failed");
        if jiff::Timestamp::now().duration_since(created) >= jiff::SignedDuration::from_secs(21) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        seen_backoff,
        "ErrImagePull never turned into ImagePullBackOff"
    );
}

#[tokio::test]
async fn ttl_controller_deletes_finished_jobs_and_pods() {
    let ctx = TestCtx::new("ttl").await;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let name = ctx.name("job");
    let j = job(
        &name,
        "node-1",
        json!([]),
        json!({"ttlSecondsAfterFinished": 5}),
    );
    jobs.create(&PostParams::default(), &j)
        .await
        .expect("create job");
    wait_condition(&ctx, &jobs, &name, "Complete", Duration::from_secs(60)).await;
    job_pod(&ctx, &pods, &name).await;

    ctx.wait_for(
        "the TTL controller to delete the Job and its pod",
        Duration::from_secs(30),
        || async {
            let job_gone = jobs.get_opt(&name).await.ok()?.is_none();
            let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
            let pods_gone = pods.list(&lp).await.ok()?.items.is_empty();
            (job_gone && pods_gone).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_dependents() {
    let ctx = TestCtx::new("gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let owner = ctx.name("owner");
    let dependent = ctx.name("dependent");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": owner}})).expect("cm");
    let cm = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create cm");
    let mut j = job(
        &dependent,
        "node-1",
        json!([{"name": "HANG", "value": "true"}]),
        json!({}),
    );
    // Our own finalizer keeps the Job (and so its owner) around until the test lets go.
    j.metadata.finalizers = Some(vec!["e2e.skyhook.nvidia.com/hold".into()]);
    j.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner,
            "uid": cm.metadata.uid, "blockOwnerDeletion": true,
        }))
        .expect("ownerReference"),
    ]);
    jobs.create(&PostParams::default(), &j)
        .await
        .expect("create job");
    // The garbage collector must know the dependent before the owner goes: with no dependent in
    // its graph yet it deletes the owner at once (seen under a loaded run). The controller
    // manager's Job controller having started the Job is the sign its informers have it.
    ctx.wait_for("the Job started", Duration::from_secs(30), || async {
        let j = jobs.get_opt(&dependent).await.ok()??;
        j.status?.start_time.map(|_| ())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    cms.delete(&owner, &foreground())
        .await
        .expect("delete owner");
    ctx.wait_for(
        "the Job to be marked for deletion",
        Duration::from_secs(30),
        || async {
            let j = jobs.get_opt(&dependent).await.ok()??;
            j.metadata.deletion_timestamp.map(|_| ())
        },
    )
    .await;
    let cm = cms
        .get(&owner)
        .await
        .expect("owner still visible while its dependent exists");
    assert!(
        cm.metadata.deletion_timestamp.is_some(),
        "owner has no deletionTimestamp"
    );
    let finalizers = cm.metadata.finalizers.unwrap_or_default();
    assert!(
        finalizers.iter().any(|f| f == "foregroundDeletion"),
        "owner finalizers {finalizers:?} lack foregroundDeletion"
    );

    // It stays, marked, for as long as the dependent is there.
    ctx.holds_for(
        "the owner stays visible while the Job exists",
        Duration::from_secs(4),
        || async {
            let cm = cms.get_opt(&owner).await.map_err(|e| e.to_string())?;
            let job = jobs.get_opt(&dependent).await.map_err(|e| e.to_string())?;
            match (cm, job) {
                (Some(cm), Some(_)) if cm.metadata.deletion_timestamp.is_some() => Ok(()),
                (cm, job) => Err(format!(
                    "owner present: {}, Job present: {}",
                    cm.is_some(),
                    job.is_some()
                )),
            }
        },
    )
    .await;

    let release = json!({"metadata": {"finalizers": null}});
    jobs.patch(&dependent, &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("release the Job");
    ctx.wait_for(
        "the Job and then its owner to disappear",
        Duration::from_secs(60),
        || async {
            let job_gone = jobs.get_opt(&dependent).await.ok()?.is_none();
            let owner_gone = cms.get_opt(&owner).await.ok()?.is_none();
            (job_gone && owner_gone).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn kubectl_logs_prints_log_text() {
    let ctx = TestCtx::new("logs").await;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let name = ctx.name("job");
    let text = format!("hello from {}", ctx.prefix);
    let env = json!([{"name": "LOG_TEXT", "value": text}, {"name": "SLEEP_LEN", "value": "2"}]);
    jobs.create(
        &PostParams::default(),
        &job(&name, "node-2", env, json!({})),
    )
    .await
    .expect("create job");
    let target = format!("job/{name}");
    let printed = ctx
        .wait_for(
            "kubectl logs to print the LOG_TEXT",
            Duration::from_secs(30),
            || async {
                let out = ctx.kubectl(&["logs", "-n", &ctx.ns, &target]);
                let stdout = String::from_utf8_lossy(&out.stdout).to_string();
                (out.status.success() && stdout.contains(&text)).then_some(stdout)
            },
        )
        .await;
    assert_eq!(
        printed.trim(),
        text,
        "kubectl logs printed more than the LOG_TEXT line"
    );
    // After completion the logs are still served.
    wait_condition(&ctx, &jobs, &name, "Complete", Duration::from_secs(60)).await;
    let out = ctx.kubectl(&["logs", "-n", &ctx.ns, &target]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&text));
}

#[tokio::test]
async fn node_add_and_remove_at_run_time() {
    let mut ctx = TestCtx::new("nodes").await;
    let names = ctx.add_nodes(2);
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ctx.client.clone());
    for n in &names {
        let node = nodes.get(n).await.expect("node exists");
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("kubernetes.io/hostname"), Some(n));
        assert_eq!(
            labels.get("kubernetes.io/os").map(String::as_str),
            Some("linux")
        );
        assert!(labels.contains_key("kubernetes.io/arch"));
        let status = node.status.expect("status");
        let ready = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "{n} is not Ready");
        let boot = status.node_info.map(|i| i.boot_id).unwrap_or_default();
        assert!(!boot.is_empty(), "{n} has no bootID");
        assert!(
            node.spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .is_empty()
        );
    }
    run(Command::new(cluster_dir().join("nodes"))
        .arg("remove")
        .arg(&names[0])
        .env("KUBECONFIG", &ctx.cluster.kubeconfig));
    assert!(nodes.get_opt(&names[0]).await.expect("get").is_none());
}

/// A second, private cluster (own state dir and ports) is brought up and torn down, so the shared
/// one keeps serving the other tests.
#[tokio::test]
async fn down_leaves_nothing_running() {
    let base = 31000 + (std::process::id() % 500) as u16 * 10;
    let pc = PrivateCluster::new(base);
    let state = pc.state.clone();
    let ports = pc.ports;
    run(pc.script("up").args(["--nodes", "1"]));

    let pids: Vec<i32> = std::fs::read_dir(state.join("pids"))
        .expect("pid files")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // etcd, kube-apiserver, kube-controller-manager, kwok, the log agent and kwok-reboots.
    assert_eq!(pids.len(), 6, "expected 6 recorded processes, got {pids:?}");
    for (_, port) in ports.iter().filter(|(k, _)| *k != "ETCD_PEER_PORT") {
        assert!(
            TcpStream::connect(("127.0.0.1", *port)).is_ok(),
            "port {port} not listening while up"
        );
    }

    // Every process that works on this cluster names its state directory in its arguments
    // (data dir, kubeconfig, log files): children such as the log agent's kubectl included.
    let state_text = state.to_string_lossy().into_owned();
    let using_state = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .chars()
                    .all(|c| c.is_ascii_digit())
            })
            .filter_map(|e| {
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                cmd.contains(&state_text)
                    .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
            })
            .collect()
    };
    assert!(
        using_state().len() >= 3,
        "the /proc scan finds no cluster process: {:?}",
        using_state()
    );

    pc.down();
    let left = using_state();
    assert!(left.is_empty(), "processes left after down: {left:#?}");
    for pid in &pids {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "process {pid} still runs after down");
    }
    for (_, port) in ports {
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} still listens after down"
        );
    }
    assert!(
        !state.exists(),
        "state directory {} left behind",
        state.display()
    );
}

/// Skyhook runs its stages in init containers: their outcome is decided by their own env.
#[tokio::test]
async fn init_container_outcomes() {
    let ctx = TestCtx::new("init").await;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let make = |name: &str, init: serde_json::Value| -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "nodeName": "node-1", "restartPolicy": "Never",
                "initContainers": init,
                "containers": [{"name": "main", "image": "example.com/agent:1"}],
            }}},
        }))
        .expect("valid Job")
    };
    let fails = ctx.name("fails");
    let pull = ctx.name("pull");
    let ok = ctx.name("ok");
    let stage = |name: &str, env: serde_json::Value| json!({"name": name, "image": "example.com/agent:1", "env": env});
    for job in [
        make(
            &fails,
            json!([
                stage("a-init", json!([])),
                stage("a-apply", json!([{"name": "EXIT_CODE", "value": "5"}])),
                stage("a-applycheck", json!([]))
            ]),
        ),
        make(
            &pull,
            json!([{"name": "a-init", "image": "registry.invalid/pkg:1"},
            stage("a-apply", json!([]))]),
        ),
        make(
            &ok,
            json!([
                stage("a-init", json!([])),
                stage("a-apply", json!([{"name": "SLEEP_LEN", "value": "1"}]))
            ]),
        ),
    ] {
        jobs.create(&PostParams::default(), &job)
            .await
            .expect("create job");
    }
    wait_condition(&ctx, &jobs, &ok, "Complete", Duration::from_secs(60)).await;
    let (reason, _) = wait_condition(&ctx, &jobs, &fails, "Failed", Duration::from_secs(60)).await;
    assert_eq!(reason.as_deref(), Some("BackoffLimitExceeded"));
    let pod = job_pod(&ctx, &pods, &fails).await;
    let inits = pod
        .status
        .and_then(|s| s.init_container_statuses)
        .unwrap_or_default();
    let codes: Vec<(String, Option<i32>)> = inits
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| t.exit_code),
            )
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            ("a-init".into(), Some(0)),
            ("a-apply".into(), Some(5)),
            ("a-applycheck".into(), None)
        ]
    );
    let pod = job_pod(&ctx, &pods, &pull).await;
    let reason = ctx
        .wait_for(
            "the init container to report an image pull failure",
            Duration::from_secs(20),
            || async {
                let p = pods.get(pod.metadata.name.as_deref()?).await.ok()?;
                p.status?
                    .init_container_statuses?
                    .first()?
                    .state
                    .clone()?
                    .waiting?
                    .reason
            },
        )
        .await;
    assert!(
        reason == "ErrImagePull" || reason == "ImagePullBackOff",
        "got {reason}"
    );
}

/// Pods not owned by a Job follow the same conventions, where their work is: a reference-shaped
/// package pod (init containers, then a pause container) spends SLEEP_LEN in the init container
/// that carries it, fails there with EXIT_CODE (crash-looping: `restartPolicy: OnFailure`) and
/// stays there with HANG=true; a pod whose main container carries SLEEP_LEN or EXIT_CODE ends
/// with it; a pod with neither (a service) keeps running.
#[tokio::test]
async fn pods_without_a_job_follow_the_same_conventions() {
    let ctx = TestCtx::new("rawpods").await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let node = "node-1";
    let c = |name: &str, env: serde_json::Value| json!({"name": name, "image": "example.com/agent:1", "env": env});
    let package_pod = |name: &str, env: serde_json::Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "restartPolicy": "OnFailure",
                "initContainers": [c("p-init", json!([])), c("p-apply", env.clone()), c("p-applycheck", env)],
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
        }))
        .expect("pod")
    };
    let plain_pod = |name: &str, env: serde_json::Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [c("app", env)]},
        }))
        .expect("pod")
    };
    let sleeps = ctx.name("sleeps");
    let fails = ctx.name("fails");
    let hangs = ctx.name("hangs");
    let service = ctx.name("service");
    let finishes = ctx.name("finishes");
    for pod in [
        package_pod(&sleeps, json!([{"name": "SLEEP_LEN", "value": "5"}])),
        package_pod(
            &fails,
            json!([{"name": "SLEEP_LEN", "value": "1"}, {"name": "EXIT_CODE", "value": "3"}]),
        ),
        package_pod(&hangs, json!([{"name": "HANG", "value": "true"}])),
        plain_pod(&service, json!([])),
        plain_pod(&finishes, json!([{"name": "SLEEP_LEN", "value": "2"}])),
    ] {
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    // (init container, state) of a pod, and its phase.
    let read = |name: String| {
        let pods = pods.clone();
        async move {
            let p = pods.get(&name).await.ok()?;
            let s = p.status?;
            let inits: Vec<(String, String)> = (s.init_container_statuses.unwrap_or_default())
                .into_iter()
                .map(|c| {
                    let st = c.state.unwrap_or_default();
                    let what = match (st.running, st.terminated, st.waiting) {
                        (Some(_), _, _) => "running".to_string(),
                        (_, Some(t), _) => format!("exit {}", t.exit_code),
                        (_, _, Some(w)) => w.reason.unwrap_or_default(),
                        _ => String::new(),
                    };
                    (c.name, what)
                })
                .collect();
            Some((s.phase.unwrap_or_default(), inits))
        }
    };
    let in_flight = |what: &str| {
        vec![
            ("p-init".to_string(), "exit 0".to_string()),
            ("p-apply".to_string(), what.to_string()),
            ("p-applycheck".to_string(), "PodInitializing".to_string()),
        ]
    };
    let done = vec![
        ("p-init".to_string(), "exit 0".to_string()),
        ("p-apply".to_string(), "exit 0".to_string()),
        ("p-applycheck".to_string(), "exit 0".to_string()),
    ];
    ctx.wait_for(
        "the package pod in flight",
        Duration::from_secs(20),
        || async {
            let (phase, inits) = read(sleeps.clone()).await?;
            (phase == "Pending" && inits == in_flight("running")).then_some(())
        },
    )
    .await;
    ctx.wait_for(
        "the failing pod crash-looping",
        Duration::from_secs(20),
        || async {
            let (phase, inits) = read(fails.clone()).await?;
            (phase == "Pending" && inits == in_flight("CrashLoopBackOff")).then_some(())
        },
    )
    .await;
    ctx.wait_for(
        "the package pod done, pause running",
        Duration::from_secs(20),
        || async {
            let (phase, inits) = read(sleeps.clone()).await?;
            (phase == "Running" && inits == done).then_some(())
        },
    )
    .await;
    ctx.wait_for(
        "the main container's SLEEP_LEN to end its pod",
        Duration::from_secs(20),
        || async {
            let (phase, _) = read(finishes.clone()).await?;
            (phase == "Succeeded").then_some(())
        },
    )
    .await;
    let (phase, inits) = read(hangs.clone()).await.expect("hanging pod");
    let hanging = vec![
        ("p-init".to_string(), "exit 0".to_string()),
        ("p-apply".to_string(), "running".to_string()),
        ("p-applycheck".to_string(), "PodInitializing".to_string()),
    ];
    assert_eq!((phase.as_str(), inits), ("Pending", hanging), "HANG=true");
    let (phase, _) = read(service.clone()).await.expect("service pod");
    assert_eq!(phase, "Running", "a pod with neither keeps running");
}
