//! Reference scenarios: see mod.rs.
//!
//! Rollouts: interrupts and their grouping, the runtime-required taint and auto-tainting, taint
//! eligibility, and a failing package. The reference's package pods are read as our Jobs (their
//! pod template carries the same containers and the `skyhook.nvidia.com/package` annotation; the
//! check container is the Job's main container).

use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, NodeState, Stage, State};

use crate::support::expect::{COMPLETE, ERRORING, INCOMPLETE, NOT_ERRORING};
use crate::support::{
    Complete, Env, NodeExpect, PackageExpect, label, setup, skyhook, wait_complete, wait_metric,
    wait_node,
};

/// The package image every reference scenario uses.
const IMAGE: &str = "ghcr.io/nvidia/skyhook/agentless";
/// The runtime-required taint (`RUNTIME_REQUIRED_TAINT`'s default) in kubectl syntax.
const RUNTIME_TAINT: &str = "skyhook.nvidia.com=runtime-required:NoSchedule";

fn package(version: &str, sleep_len: &str) -> Value {
    json!({"version": version, "image": IMAGE,
           "env": [{"name": "SLEEP_LEN", "value": sleep_len}]})
}

/// A Skyhook of this test restricted to extra node labels besides the test's own.
fn skyhook_on(env: &Env, name: &str, extra: Value, spec: Value) -> Skyhook {
    let mut sk = skyhook(&env.ctx, name, spec);
    let (k, v) = env.ctx.test_label();
    let mut labels = extra.as_object().expect("labels").clone();
    labels.insert(k, json!(v));
    sk.spec.node_selectors =
        serde_json::from_value(json!({"matchLabels": labels})).expect("selector");
    sk
}

fn kubectl_ok(env: &Env, args: &[&str]) {
    let out = env.ctx.kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ----- nodes -----

async fn get_node(env: &Env, node: &str) -> Option<Node> {
    env.node_api.get(node).await.ok()
}

fn state_of(n: &Node, sk: &str) -> Option<NodeState> {
    NodeState::parse(n.annotations().get(&schema::node_state_annotation(sk))?).ok()
}

/// A node-state entry of the scenario image.
fn entry(
    name: &'static str,
    version: &'static str,
    stage: Stage,
    state: State,
) -> PackageExpect<'static> {
    PackageExpect::new(name, stage, state)
        .version(version)
        .image(IMAGE)
}

/// The node at `status` for the Skyhook, with these entries, not erroring, and NotReady saying
/// whether it is done.
fn node_at(status: &'static str, packages: Vec<PackageExpect<'static>>) -> NodeExpect<'static> {
    let not_ready = if status == "complete" {
        COMPLETE
    } else {
        INCOMPLETE
    };
    NodeExpect {
        status: Some(status),
        packages,
        not_ready: Some(not_ready),
        erroring: Some(NOT_ERRORING),
        ..Default::default()
    }
}

/// The reason a probe gives for a check the node expectation does not cover.
fn ensure(ok: bool, what: &str) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what.to_string()) }
}

fn has_taint(n: &Node, key: &str, value: Option<&str>, effect: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter().any(|t| {
                t.key == key
                    && t.effect == effect
                    && t.value.as_deref().filter(|v| !v.is_empty()) == value
            })
        })
}

fn has_runtime_taint(n: &Node) -> bool {
    has_taint(
        n,
        "skyhook.nvidia.com",
        Some("runtime-required"),
        "NoSchedule",
    )
}

fn is_cordon_tainted(n: &Node) -> bool {
    has_taint(n, schema::UNSCHEDULABLE_TAINT_KEY, None, "NoSchedule")
}

// ----- Jobs -----

/// The pod's `skyhook.nvidia.com/package` annotation, as the reference's pod carried it.
fn package_annotation(j: &Job) -> String {
    j.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(schema::PACKAGE_ANNOTATION))
        .cloned()
        .unwrap_or_default()
}

fn pod_spec(j: &Job) -> &k8s_openapi::api::core::v1::PodSpec {
    j.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

fn container<'a>(j: &'a Job, name: &str) -> Option<&'a Container> {
    let pod = pod_spec(j);
    pod.init_containers
        .iter()
        .flatten()
        .chain(pod.containers.iter())
        .find(|c| c.name == name)
}

/// A Job of `sk` for package `<pkg>-<ver>` at `stage`, on `node` when given.
async fn find_job(env: &Env, sk: &str, pkg: &str, stage: &str, node: Option<&str>) -> Option<Job> {
    env.jobs_of(sk).await.into_iter().find(|j| {
        label(j, schema::PACKAGE_LABEL) == pkg
            && label(j, schema::STAGE_LABEL) == stage
            && node.is_none_or(|n| pod_spec(j).node_name.as_deref() == Some(n))
    })
}

async fn wait_job(
    env: &Env,
    step: &str,
    sk: &str,
    pkg: &str,
    stage: &str,
    node: Option<&str>,
) -> Job {
    env.ctx
        .wait_for(
            &format!("{step}: a {stage} Job of {pkg}"),
            Duration::from_secs(90),
            || find_job(env, sk, pkg, stage, node),
        )
        .await
}

/// The reference's package pod assertions on a stage Job: its labels, owner, the package
/// annotation, and the agent containers `<pkg>-init`, `<pkg>-<stage>`, `<pkg>-<stage>check`
/// with their images and `<mode> /root <copy-dir>` arguments.
fn check_stage_job(
    j: &Job,
    sk: &str,
    (pkg, version): (&str, &str),
    stage: &str,
    agent_image: Option<&str>,
    step: &str,
) {
    let job = j.name_any();
    assert_eq!(label(j, schema::NAME_LABEL), sk, "{step}: {job} name label");
    assert_eq!(
        label(j, schema::PACKAGE_LABEL),
        format!("{pkg}-{version}"),
        "{step}: {job} package label"
    );
    let owner = j.owner_references().first().expect("owner");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Skyhook", sk),
        "{step}: {job} owner"
    );
    let annotation: Value =
        serde_json::from_str(&package_annotation(j)).expect("package annotation is JSON");
    assert_eq!(
        annotation,
        json!({"name": pkg, "version": version, "skyhook": sk, "stage": stage, "image": IMAGE}),
        "{step}: {job} package annotation"
    );
    let init = container(j, &format!("{pkg}-init"))
        .unwrap_or_else(|| panic!("{step}: {job} has no {pkg}-init container"));
    assert_eq!(
        init.image.as_deref(),
        Some(format!("{IMAGE}:{version}").as_str()),
        "{step}: {job} init image"
    );
    for (cname, mode) in [
        (format!("{pkg}-{stage}"), stage.to_string()),
        (format!("{pkg}-{stage}check"), format!("{stage}-check")),
    ] {
        let c = container(j, &cname)
            .unwrap_or_else(|| panic!("{step}: {job} has no {cname} container"));
        let args = c.args.clone().unwrap_or_default();
        assert_eq!(args.len(), 3, "{step}: {job} {cname} args {args:?}");
        assert_eq!(
            (args[0].as_str(), args[1].as_str()),
            (mode.as_str(), "/root"),
            "{step}: {job} {cname} args"
        );
        if let Some(image) = agent_image {
            assert_eq!(
                c.image.as_deref(),
                Some(image),
                "{step}: {job} {cname} image"
            );
        }
    }
}

/// The decoded interrupt argument of an interrupt Job (`interrupt /root <dir> <base64 JSON>`).
fn interrupt_argument(j: &Job, step: &str) -> Value {
    let c = container(j, schema::INTERRUPT_CONTAINER)
        .unwrap_or_else(|| panic!("{step}: {} has no interrupt container", j.name_any()));
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args.len(), 4, "{step}: interrupt args {args:?}");
    assert_eq!(
        (args[0].as_str(), args[1].as_str()),
        ("interrupt", "/root"),
        "{step}: interrupt args"
    );
    let raw = base64::engine::general_purpose::STANDARD
        .decode(&args[3])
        .expect("base64 interrupt argument");
    serde_json::from_slice(&raw).expect("interrupt argument is JSON")
}

fn tolerates_gpu(j: &Job) -> bool {
    pod_spec(j).tolerations.iter().flatten().any(|t| {
        t.key.as_deref() == Some("nvidia.com/gpu") && t.operator.as_deref() == Some("Exists")
    })
}

// ----- Skyhook, ConfigMaps, metrics -----

/// The node metadata ConfigMap of `sk` (§2.7): owned by the Skyhook, exactly the three keys,
/// holding the node's labels, annotations and the packages.
async fn check_node_metadata(env: &Env, sk: &str, pkg: &str, step: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let (test_key, _) = env.ctx.test_label();
    let lp = ListParams::default().labels(&format!("{}={sk}", schema::NODE_META_LABEL));
    env.ctx
        .wait_for(
            &format!("{step}: the node metadata ConfigMap of {sk}"),
            Duration::from_secs(30),
            || async {
                cms.list(&lp).await.ok()?.items.into_iter().find(|cm| {
                    let owned = cm.owner_references().iter().any(|o| {
                        o.kind == "Skyhook"
                            && o.name == sk
                            && o.controller == Some(true)
                            && o.block_owner_deletion == Some(true)
                    });
                    let data = cm.data.clone().unwrap_or_default();
                    let has = |key: &str, needles: &[&str]| {
                        data.get(key)
                            .is_some_and(|v| needles.iter().all(|n| v.contains(n)))
                    };
                    owned
                        && data.len() == 3
                        && has("labels.json", &[&test_key, &schema::status_label(sk)])
                        && has(
                            "annotations.json",
                            &[
                                &schema::status_annotation(sk),
                                &schema::node_state_annotation(sk),
                            ],
                        )
                        && has(
                            "packages.json",
                            &["\"agentVersion\"", &format!("\"{pkg}\"")],
                        )
                })
            },
        )
        .await;
}

// ----- plain pods on a node -----

/// A workload pod bound to `node` (no scheduler here) that runs until deleted.
fn workload_pod(name: &str, labels: Value, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 5, "restartPolicy": "OnFailure",
            "containers": [{"name": "workload", "image": "busybox:latest",
                            "env": [{"name": "HANG", "value": "true"}]}],
        },
    }))
    .expect("pod")
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Reference: `k8s-tests/chainsaw/skyhook/interrupt`. A reboot and a service interrupt on one
/// cordoned node: the node waits (still `in_progress`) while a `podNonInterruptLabels` pod runs,
/// drains the other pod once it is gone, merges the interrupts into one reboot owned by dexter,
/// and ends complete and uncordoned, with the package ConfigMap and node metadata in place.
#[tokio::test]
async fn interrupt() {
    scenario_interrupt().await;
}

pub(crate) async fn scenario_interrupt() {
    let env = setup("sc-interrupt", 1, &[]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);

    // Step 1: the protected pod, the pod to drain, and a leftover package pod of a version the
    // spec no longer has (an older operator's bare pod, crash-looping).
    let important = "important-stuff";
    let drain = "drain-on";
    for (pname, labels) in [
        (important, json!({"dontmess": "withme"})),
        (drain, json!({"drain": "me"})),
    ] {
        pods.create(&PostParams::default(), &workload_pod(pname, labels, &node))
            .await
            .expect("create workload pod");
    }
    let leftover: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "invalid-package",
            "labels": {schema::PACKAGE_LABEL: "invalid-1.2.3", schema::NAME_LABEL: name},
            "annotations": {schema::PACKAGE_ANNOTATION: format!(
                r#"{{"name":"invalid","version":"1.2.3","stage":"apply","skyhook":"{name}","image":"{IMAGE}"}}"#)},
        },
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 5, "restartPolicy": "OnFailure",
            "initContainers": [{"name": "workload", "image": "busybox:latest",
                "env": [{"name": "SLEEP_LEN", "value": "2"}, {"name": "EXIT_CODE", "value": "2"}]}],
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
        },
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &leftover)
        .await
        .expect("create leftover package pod");
    for pname in [important, drain] {
        env.ctx
            .wait_for(
                &format!("step 1: pod {pname} Ready"),
                Duration::from_secs(30),
                || async { pod_ready(&pods.get(pname).await.ok()?).then_some(()) },
            )
            .await;
    }

    // Step 2: the Skyhook.
    let mut jason = package("1.3.2", "2");
    jason["agentImageOverride"] = json!(format!("{IMAGE}:3.2.3"));
    let mut spencer = package("3.2.3", "1");
    spencer["dependsOn"] = json!({"dexter": "1.2.3"});
    let foobar = json!({"version": "1.2", "image": IMAGE,
                        "dependsOn": {"dexter": "1.2.3", "baxter": "3.3"}});
    let mut baxter = package("3.3", "1");
    baxter["interrupt"] = json!({"type": "service", "services": ["rsyslog"]});
    baxter["dependsOn"] = json!({"spencer": "3.2.3"});
    let mut dexter = package("1.2.3", "3");
    dexter["interrupt"] = json!({"type": "reboot"});
    let game = "enemies=aliens\nlives=3\nenemies.cheat=true\nenemies.cheat.level=noGoodRotten\n";
    let ui =
        "color.good=purple\ncolor.bad=yellow\nallow.textmode=true\nhow.nice.to.look=fairlyNice\n";
    dexter["configMap"] = json!({"game.properties": game, "ui.properties": ui});
    let mut john = package("1.2.3", "3");
    john["interrupt"] = json!({"type": "service", "services": ["rsyslog"]});
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({
            "podNonInterruptLabels": {"matchLabels": {"dontmess": "withme"}},
            "interruptionBudget": {"count": 1},
            "packages": {"jason": jason, "spencer": spencer, "foobar": foobar,
                         "baxter": baxter, "dexter": dexter, "john": john},
        }),
    ))
    .await;

    // Step 3 (assert-a): jason, which has no interrupt, completes; the node is cordoned and
    // stays in_progress while the protected pod holds the interrupt packages back.
    let want = node_at(
        "in_progress",
        vec![entry("jason", "1.3.2", Stage::Config, State::Complete)],
    );
    env.ctx
        .eventually(
            "step 3 (assert-a): jason config/complete, node in_progress, cordoned, Incomplete",
            Duration::from_secs(60),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                want.check(&n, &name)?;
                ensure(is_cordon_tainted(&n), "not tainted unschedulable")
            },
        )
        .await;
    let apply = find_job(&env, &name, "jason-1.3.2", "apply", Some(&node))
        .await
        .expect("step 3 (assert-a): jason's apply Job");
    check_stage_job(
        &apply,
        &name,
        ("jason", "1.3.2"),
        "apply",
        Some(&format!("{IMAGE}:3.2.3")),
        "step 3 (assert-a)",
    );

    // Step 4: both workload pods are still there.
    for pname in [important, drain] {
        assert!(
            pods.get_opt(pname).await.expect("get pod").is_some(),
            "step 4: pod {pname} is gone while the protected pod still runs"
        );
    }

    // Step 5: the protected pod goes; the other one is drained.
    pods.delete(important, &Default::default())
        .await
        .expect("delete important-stuff");
    env.ctx
        .wait_for(
            "step 5: drain-on evicted",
            Duration::from_secs(60),
            || async { pods.get_opt(drain).await.ok()?.is_none().then_some(()) },
        )
        .await;

    // Step 6 (assert-b): dexter and john apply side by side on the cordoned node.
    let want = node_at(
        "in_progress",
        vec![
            entry("jason", "1.3.2", Stage::Config, State::Complete),
            entry("dexter", "1.2.3", Stage::Apply, State::InProgress),
            entry("john", "1.2.3", Stage::Apply, State::InProgress),
        ],
    );
    env.ctx
        .eventually(
            "step 6 (assert-b): dexter and john apply/in_progress on the cordoned node",
            Duration::from_secs(60),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                want.check(&n, &name)?;
                let cordon = n.annotations().get(&schema::cordon_annotation(&name));
                ensure(
                    cordon.is_some_and(|v| v == "true"),
                    &format!("cordon annotation {cordon:?}"),
                )?;
                ensure(is_cordon_tainted(&n), "not tainted unschedulable")
            },
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let cm_name = schema::package_configmap_name(&name, "dexter", "1.2.3");
    let cm = cms
        .get(&cm_name)
        .await
        .unwrap_or_else(|e| panic!("step 6 (assert-b): ConfigMap {cm_name}: {e}"));
    assert_eq!(
        cm.labels().get(schema::NAME_LABEL).map(String::as_str),
        Some(name.as_str()),
        "step 6 (assert-b): ConfigMap name label"
    );
    let owner = cm.owner_references().first().expect("ConfigMap owner");
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Skyhook", name.as_str(), Some(true), Some(true)),
        "step 6 (assert-b): ConfigMap owner"
    );
    let data = cm.data.clone().unwrap_or_default();
    assert_eq!(
        (
            data.get("game.properties").map(String::as_str),
            data.get("ui.properties").map(String::as_str)
        ),
        (Some(game), Some(ui)),
        "step 6 (assert-b): ConfigMap data"
    );
    // The merged interrupt is the reboot, owned by dexter.
    let intr = wait_job(
        &env,
        "step 6 (assert-b)",
        &name,
        "dexter-1.2.3",
        "interrupt",
        Some(&node),
    )
    .await;
    assert_eq!(
        label(&intr, schema::NAME_LABEL),
        name,
        "step 6 (assert-b): interrupt Job name label"
    );
    let annotation: Value =
        serde_json::from_str(&package_annotation(&intr)).expect("package annotation");
    assert_eq!(
        annotation,
        json!({"name": "dexter", "version": "1.2.3", "skyhook": name, "stage": "interrupt", "image": IMAGE}),
        "step 6 (assert-b): interrupt Job package annotation"
    );
    assert_eq!(
        interrupt_argument(&intr, "step 6 (assert-b)"),
        json!({"type": "node_restart"}),
        "step 6 (assert-b): the merged interrupt"
    );

    // The end of assert-b: everything complete, the node uncordoned.
    let done = [
        ("baxter", "3.3", Stage::PostInterrupt),
        ("dexter", "1.2.3", Stage::PostInterrupt),
        ("foobar", "1.2", Stage::Config),
        ("jason", "1.3.2", Stage::Config),
        ("spencer", "3.2.3", Stage::Config),
    ];
    let want = NodeExpect {
        cordoned: Some(false),
        ..node_at(
            "complete",
            done.iter()
                .map(|&(p, v, stage)| entry(p, v, stage, State::Complete))
                .collect(),
        )
    };
    let step = "step 6 (assert-b): node complete and uncordoned";
    wait_node(&env, step, &node, &name, &want, Duration::from_secs(120)).await;
    let within = Complete::any_generation(Duration::from_secs(30));
    let sk = wait_complete(&env.skyhooks, "step 6 (assert-b)", &name, within).await;
    let st = sk.status.clone().expect("status");
    // The reference asserts observedGeneration 2: its own full Update of the object bumps the
    // generation once. Ours writes no spec, so the complete generation is the object's.
    assert_eq!(
        st.observed_generation,
        sk.metadata.generation.unwrap_or(0),
        "step 6 (assert-b): observedGeneration"
    );
    let states: Vec<&NodeState> = st.node_state.values().collect();
    assert_eq!(states.len(), 1, "step 6 (assert-b): status.nodeState");
    for (pkg, version, stage) in [
        ("baxter", "3.3", Stage::PostInterrupt),
        ("dexter", "1.2.3", Stage::PostInterrupt),
        ("foobar", "1.2", Stage::Config),
        ("spencer", "3.2.3", Stage::Config),
    ] {
        if let Err(diff) = entry(pkg, version, stage, State::Complete).check_in(states[0]) {
            panic!("step 6 (assert-b): status.nodeState {pkg}: {diff}");
        }
    }
    let statuses: Vec<&schema::Status> = st.node_status.values().collect();
    assert_eq!(
        statuses,
        vec![&schema::Status::Complete],
        "step 6 (assert-b): status.nodeStatus"
    );
    check_node_metadata(&env, &name, "dexter", "step 6 (assert-b)").await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/interrupt-grouping`. Two service interrupts on one
/// node run as one `service_restart` of the united services, owned by dax; every stage Job
/// carries the Skyhook's extra toleration, and the node ends complete and untainted.
#[tokio::test]
async fn interrupt_grouping() {
    scenario_interrupt_grouping().await;
}

pub(crate) async fn scenario_interrupt_grouping() {
    let agent = format!("{IMAGE}:6.2.0");
    let env = setup("sc-intgroup", 1, &[("AGENT_IMAGE", agent.as_str())]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    let mut zeb = package("2.1.4", "2");
    zeb["interrupt"] = json!({"type": "service", "services": ["cron"]});
    let mut dax = package("1.2.3", "2");
    dax["interrupt"] = json!({"type": "service", "services": ["containerd", "foobar"]});
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({
            "additionalTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "packages": {"zeb": zeb, "dax": dax},
        }),
    ))
    .await;

    let want = node_at("in_progress", Vec::new());
    env.ctx
        .eventually(
            "assert 1: node in_progress and cordoned",
            Duration::from_secs(60),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                want.check(&n, &name)?;
                ensure(is_cordon_tainted(&n), "not tainted unschedulable")
            },
        )
        .await;

    for stage in ["apply", "config", "post-interrupt"] {
        let step = format!("assert 2: dax {stage} Job");
        let j = wait_job(&env, &step, &name, "dax-1.2.3", stage, Some(&node)).await;
        // The reference compares this annotation as a string: byte for byte.
        assert_eq!(
            package_annotation(&j),
            format!(
                r#"{{"name":"dax","version":"1.2.3","skyhook":"{name}","stage":"{stage}","image":"{IMAGE}"}}"#
            ),
            "{step}: package annotation"
        );
        let image = (stage == "apply").then_some(agent.as_str());
        check_stage_job(&j, &name, ("dax", "1.2.3"), stage, image, &step);
        assert!(tolerates_gpu(&j), "{step}: no nvidia.com/gpu toleration");
    }
    let step = "assert 2: the interrupt Job";
    let interrupts: Vec<Job> = env
        .jobs_of(&name)
        .await
        .into_iter()
        .filter(|j| label(j, schema::STAGE_LABEL) == "interrupt")
        .collect();
    assert_eq!(interrupts.len(), 1, "{step}: one interrupt for the group");
    let intr = &interrupts[0];
    assert_eq!(
        label(intr, schema::PACKAGE_LABEL),
        "dax-1.2.3",
        "{step}: owner"
    );
    let annotation: Value =
        serde_json::from_str(&package_annotation(intr)).expect("package annotation");
    assert_eq!(
        annotation,
        json!({"name": "dax", "version": "1.2.3", "skyhook": name, "stage": "interrupt", "image": IMAGE}),
        "{step}: package annotation"
    );
    assert_eq!(
        interrupt_argument(intr, step),
        json!({"type": "service_restart", "services": ["containerd", "cron", "foobar"]}),
        "{step}: the grouped interrupt"
    );
    assert!(tolerates_gpu(intr), "{step}: no nvidia.com/gpu toleration");

    let want_state = format!(
        r#"{{"dax|1.2.3":{{"name":"dax","version":"1.2.3","image":"{IMAGE}","stage":"post-interrupt","state":"complete"}},"zeb|2.1.4":{{"name":"zeb","version":"2.1.4","image":"{IMAGE}","stage":"post-interrupt","state":"complete"}}}}"#
    );
    let want = NodeExpect {
        raw_state: Some(&want_state),
        cordoned: Some(false),
        ..node_at("complete", Vec::new())
    };
    env.ctx
        .eventually(
            "assert 3: node complete, untainted, with the exact node state",
            Duration::from_secs(90),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                want.check(&n, &name)?;
                let version = n.annotations().get(&schema::node_version_annotation(&name));
                ensure(
                    version.is_some_and(|v| v.len() >= 6),
                    &format!("node version annotation {version:?}"),
                )
            },
        )
        .await;
    let within = Complete::any_generation(Duration::from_secs(30));
    let sk = wait_complete(&env.skyhooks, "assert 4", &name, within).await;
    assert!(
        sk.annotations()
            .get(schema::VERSION_ANNOTATION)
            .is_some_and(|v| v.len() >= 6),
        "assert 4: Skyhook version annotation"
    );
    let st = sk.status.clone().expect("status");
    // The reference accepts 2 or 3 (its migration writes bump the generation); ours stamps
    // the generation it completed.
    assert_eq!(
        st.observed_generation,
        sk.metadata.generation.unwrap_or(0),
        "assert 4: observedGeneration"
    );
    let states: Vec<&NodeState> = st.node_state.values().collect();
    assert_eq!(states.len(), 1, "assert 4: status.nodeState");
    for (pkg, version) in [("dax", "1.2.3"), ("zeb", "2.1.4")] {
        let want = entry(pkg, version, Stage::PostInterrupt, State::Complete);
        if let Err(diff) = want.check_in(states[0]) {
            panic!("assert 4: status.nodeState {pkg}: {diff}");
        }
    }
    let statuses: Vec<&schema::Status> = st.node_status.values().collect();
    assert_eq!(
        statuses,
        vec![&schema::Status::Complete],
        "assert 4: status.nodeStatus"
    );
    check_node_metadata(&env, &name, "dax", "assert 4").await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/runtime-required`. Two runtime-required-tainted
/// nodes, one also carrying a taint the Skyhook does not tolerate: the free node completes and
/// loses its taint while the other stays blocked and tainted, then follows once unblocked.
#[tokio::test]
async fn runtime_required() {
    scenario_runtime_required().await;
}

pub(crate) async fn scenario_runtime_required() {
    let env = setup("sc-rtreq", 2, &[]).await;
    let name = env.ctx.name("sk");
    let (one, two) = (env.nodes[0].clone(), env.nodes[1].clone());

    // Phase 1: label both nodes, taint both, and block the second one.
    for n in [&one, &two] {
        kubectl_ok(
            &env,
            &[
                "label",
                "node",
                n,
                "skyhook.nvidia.com/runtime-required-test=true",
                "--overwrite",
            ],
        );
        kubectl_ok(&env, &["taint", "node", n, RUNTIME_TAINT, "--overwrite"]);
    }
    kubectl_ok(
        &env,
        &[
            "taint",
            "node",
            &two,
            "test-block=true:NoSchedule",
            "--overwrite",
        ],
    );

    // Phase 2: the Skyhook.
    env.create(&skyhook_on(
        &env,
        &name,
        json!({"skyhook.nvidia.com/runtime-required-test": "true"}),
        json!({"runtimeRequired": true, "packages": {"spencer": package("3.2.3", "2")}}),
    ))
    .await;

    // Phase 3: the first node runs apply and config and loses the taint; the second is blocked.
    let step = "phase 3";
    for stage in ["apply", "config"] {
        wait_job(&env, step, &name, "spencer-3.2.3", stage, Some(&one)).await;
    }
    env.ctx
        .wait_for(
            "phase 3: the first node complete without the runtime-required taint",
            Duration::from_secs(60),
            || async {
                let n = get_node(&env, &one).await?;
                (NodeExpect::at("complete").check(&n, &name).is_ok() && !has_runtime_taint(&n))
                    .then_some(())
            },
        )
        .await;
    env.ctx
        .wait_for(
            "phase 3: the second node blocked and still tainted",
            Duration::from_secs(30),
            || async {
                let n = get_node(&env, &two).await?;
                (NodeExpect::at("blocked").check(&n, &name).is_ok()
                    && has_taint(&n, "test-block", Some("true"), "NoSchedule")
                    && has_runtime_taint(&n))
                .then_some(())
            },
        )
        .await;

    // Phase 4: unblock the second node.
    kubectl_ok(&env, &["taint", "node", &two, "test-block-"]);

    // Phase 5: the second node runs and loses its taint.
    let step = "phase 5";
    for stage in ["apply", "config"] {
        wait_job(&env, step, &name, "spencer-3.2.3", stage, Some(&two)).await;
    }
    env.ctx
        .wait_for(
            "phase 5: the second node complete without the runtime-required taint",
            Duration::from_secs(60),
            || async {
                let n = get_node(&env, &two).await?;
                (NodeExpect::at("complete").check(&n, &name).is_ok() && !has_runtime_taint(&n))
                    .then_some(())
            },
        )
        .await;

    // Phase 6: both nodes complete and untainted.
    for n in [&one, &two] {
        let node = env.node_api.get(n).await.expect("node");
        assert!(
            node.labels()
                .get("skyhook.nvidia.com/runtime-required-test")
                .is_some_and(|v| v == "true")
                && NodeExpect::at("complete").check(&node, &name).is_ok()
                && !has_runtime_taint(&node),
            "phase 6: {n} is not complete and untainted"
        );
    }
}

/// Reference: `k8s-tests/chainsaw/skyhook/auto-taint-new-nodes`. A node with no Skyhook
/// annotations gets the runtime-required taint from an auto-tainting Skyhook, loses it on
/// completion, and is not tainted again by a second auto-tainting Skyhook.
#[tokio::test]
async fn auto_taint_new_nodes() {
    scenario_auto_taint_new_nodes().await;
}

pub(crate) async fn scenario_auto_taint_new_nodes() {
    let env = setup("sc-autotaint", 1, &[]).await;
    let node = env.nodes[0].clone();
    // Names in priority order (same priority: by name), as in the reference.
    let first = env.ctx.name("auto-taint-new-nodes");
    let second = env.ctx.name("auto-taint-second");

    // Phase 1: the node is new: no skyhook.nvidia.com/ annotation, no runtime-required taint.
    let n = env.node_api.get(&node).await.expect("node");
    let ours: Vec<&String> = n
        .annotations()
        .keys()
        .filter(|k| k.starts_with("skyhook.nvidia.com/"))
        .collect();
    assert!(ours.is_empty(), "phase 1: the node is not new: {ours:?}");
    assert!(
        !has_runtime_taint(&n),
        "phase 1: the node is already tainted"
    );

    let spec = |sleep_len: &str| {
        json!({"runtimeRequired": true, "autoTaintNewNodes": true,
               "packages": {"spencer": package("3.2.3", sleep_len)}})
    };
    let hostname = json!({"kubernetes.io/hostname": node});

    // Phase 2-3: the first Skyhook taints the new node.
    env.create(&skyhook_on(&env, &first, hostname.clone(), spec("2")))
        .await;
    env.ctx
        .wait_for(
            "phase 3: the runtime-required taint auto-applied",
            Duration::from_secs(30),
            || async { has_runtime_taint(&get_node(&env, &node).await?).then_some(()) },
        )
        .await;

    // Phase 4: the first Skyhook completes and the taint goes.
    env.ctx
        .wait_for(
            "phase 4: the first Skyhook complete on the node, taint removed",
            Duration::from_secs(60),
            || async {
                let n = get_node(&env, &node).await?;
                (NodeExpect::at("complete").check(&n, &first).is_ok() && !has_runtime_taint(&n))
                    .then_some(())
            },
        )
        .await;

    // Phase 5-6: the second Skyhook finds the node known: it never taints it.
    env.create(&skyhook_on(&env, &second, hostname, spec("1")))
        .await;
    env.ctx
        .eventually(
            "phase 6: the second Skyhook complete",
            Duration::from_secs(60),
            || async {
                let n = env.node_api.get(&node).await.expect("node");
                // On every sample: a taint put on and taken off again is a failure too.
                assert!(
                    !has_runtime_taint(&n),
                    "phase 6: the second Skyhook tainted a node that is not new"
                );
                NodeExpect::at("complete").check(&n, &second)
            },
        )
        .await;
    env.ctx
        .holds_for(
            "phase 6: no runtime-required taint",
            Duration::from_secs(3),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                if has_runtime_taint(&n) {
                    Err("the node was tainted again".into())
                } else {
                    Ok(())
                }
            },
        )
        .await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/taint-scheduling`. A node with an untolerated
/// `nvidia.com/gpu` taint is `blocked` (condition TaintNotTolerable, metrics), and completes
/// once the Skyhook tolerates the taint.
#[tokio::test]
async fn taint_scheduling() {
    scenario_taint_scheduling().await;
}

pub(crate) async fn scenario_taint_scheduling() {
    let env = setup("sc-taintsched", 1, &[]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    kubectl_ok(
        &env,
        &[
            "taint",
            "node",
            &node,
            "nvidia.com/gpu:NoSchedule",
            "--overwrite",
        ],
    );
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"spencer": package("3.2.3", "1")}}),
    ))
    .await;

    let taint_condition = |sk: &Skyhook| {
        sk.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.reason == schema::TAINT_NOT_TOLERABLE_REASON)
            .map(|c| (c.type_.clone(), c.status.clone()))
    };
    let node_statuses = |sk: &Skyhook| -> Vec<schema::Status> {
        sk.status
            .as_ref()
            .map(|s| s.node_status.values().copied().collect())
            .unwrap_or_default()
    };

    // Blocked.
    env.ctx
        .wait_for(
            "assert: node blocked, still tainted",
            Duration::from_secs(30),
            || async {
                let n = get_node(&env, &node).await?;
                (NodeExpect::at("blocked").check(&n, &name).is_ok()
                    && has_taint(&n, "nvidia.com/gpu", None, "NoSchedule"))
                .then_some(())
            },
        )
        .await;
    env.ctx
        .wait_for(
            "assert: Skyhook blocked with TaintNotTolerable True",
            Duration::from_secs(30),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                (sk.status.as_ref()?.status == Some(schema::Status::Blocked)
                    && node_statuses(&sk) == vec![schema::Status::Blocked]
                    && taint_condition(&sk)
                        == Some((schema::TAINT_NOT_TOLERABLE_CONDITION.into(), "True".into())))
                .then_some(())
            },
        )
        .await;
    let target = [("skyhook_name", name.as_str())];
    wait_metric(
        &env,
        "metrics while blocked",
        "skyhook_node_target_count",
        &target,
        "1",
    )
    .await;
    let blocked = [("skyhook_name", name.as_str()), ("status", "blocked")];
    wait_metric(
        &env,
        "metrics while blocked",
        "skyhook_node_status_count",
        &blocked,
        "1",
    )
    .await;

    // Tolerate the taint.
    let patch = json!({"spec": {"additionalTolerations": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}});
    env.skyhooks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the toleration in");

    let want = node_at(
        "complete",
        vec![entry("spencer", "3.2.3", Stage::Config, State::Complete)],
    );
    env.ctx
        .eventually(
            "assert-update: node complete, taint kept",
            Duration::from_secs(60),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                want.check(&n, &name)?;
                ensure(
                    has_taint(&n, "nvidia.com/gpu", None, "NoSchedule"),
                    "the nvidia.com/gpu taint is gone",
                )
            },
        )
        .await;
    env.ctx
        .wait_for(
            "assert-update: Skyhook complete with TaintNotTolerable False",
            Duration::from_secs(30),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                (sk.status.as_ref()?.status == Some(schema::Status::Complete)
                    && node_statuses(&sk) == vec![schema::Status::Complete]
                    && taint_condition(&sk)
                        == Some((schema::TAINT_NOT_TOLERABLE_CONDITION.into(), "False".into())))
                .then_some(())
            },
        )
        .await;
    let step = "metrics once complete";
    wait_metric(&env, step, "skyhook_node_target_count", &target, "1").await;
    let complete = [("skyhook_name", name.as_str()), ("status", "complete")];
    wait_metric(&env, step, "skyhook_node_status_count", &complete, "1").await;
    wait_metric(&env, step, "skyhook_node_status_count", &blocked, "0").await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/failure-skyhook`. A package exiting 2 after its
/// dependency completed leaves the node and the Skyhook `erroring`, with restarts counted, the
/// Erroring node condition, the status counters and the metrics.
#[tokio::test]
async fn failure_skyhook() {
    scenario_failure_skyhook().await;
}

pub(crate) async fn scenario_failure_skyhook() {
    let env = setup("sc-failure", 1, &[]).await;
    let name = env.ctx.name("sk");
    let node = env.nodes[0].clone();
    let failure = json!({"version": "1.2.3", "image": IMAGE,
        "env": [{"name": "EXIT_CODE", "value": "2"}, {"name": "SLEEP_LEN", "value": "1"}],
        "dependsOn": {"dexter": "1.2.3"}});
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"interruptionBudget": {"percent": 20},
               "packages": {"failure": failure, "dexter": package("1.2.3", "1")}}),
    ))
    .await;

    // Only the status annotation: the reference's node assert names no label here.
    let want = NodeExpect {
        packages: vec![
            entry("dexter", "1.2.3", Stage::Config, State::Complete),
            entry("failure", "1.2.3", Stage::Apply, State::Erroring),
        ],
        not_ready: Some(INCOMPLETE),
        erroring: Some(ERRORING),
        ..Default::default()
    };
    env.ctx
        .eventually(
            "node-assert: dexter complete, failure apply/erroring with restarts, node erroring",
            Duration::from_secs(60),
            || async {
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                want.check(&n, &name)?;
                let restarts =
                    state_of(&n, &name).and_then(|s| Some(s.get("failure", "1.2.3")?.restarts));
                ensure(
                    restarts.is_some_and(|r| r > 0),
                    &format!("failure restarts {restarts:?}"),
                )?;
                let status = n.annotations().get(&schema::status_annotation(&name));
                ensure(
                    status.is_some_and(|v| v == "erroring"),
                    &format!("status annotation {status:?}"),
                )
            },
        )
        .await;
    env.ctx
        .wait_for(
            "node-assert: Skyhook erroring, 0/1 complete, 1 in progress",
            Duration::from_secs(30),
            || async {
                let st = env.skyhooks.get(&name).await.ok()?.status?;
                (st.status == Some(schema::Status::Erroring)
                    && st.complete_nodes == "0/1"
                    && st.package_list == "dexter:1.2.3,failure:1.2.3"
                    && st.nodes_in_progress == 1)
                    .then_some(())
            },
        )
        .await;

    let step = "metrics";
    let sk = name.as_str();
    wait_metric(
        &env,
        step,
        "skyhook_node_target_count",
        &[("skyhook_name", sk)],
        "1",
    )
    .await;
    wait_metric(
        &env,
        step,
        "skyhook_node_status_count",
        &[("skyhook_name", sk), ("status", "erroring")],
        "1",
    )
    .await;
    for (metric, pkg, key, value) in [
        ("skyhook_package_state_count", "dexter", "state", "complete"),
        (
            "skyhook_package_state_count",
            "failure",
            "state",
            "erroring",
        ),
        ("skyhook_package_stage_count", "dexter", "stage", "config"),
        ("skyhook_package_stage_count", "failure", "stage", "apply"),
    ] {
        wait_metric(
            &env,
            step,
            metric,
            &[("package_name", pkg), ("skyhook_name", sk), (key, value)],
            "1",
        )
        .await;
    }
}
