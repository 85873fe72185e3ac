//! Reference scenarios about a Skyhook's life: create, update, upgrade and downgrade, uninstall,
//! delete, dependencies, node-state migration and the clean-up of work that no longer matches
//! (`k8s-tests/chainsaw/skyhook/` in NVIDIA/skyhook). See mod.rs.
//!
//! The reference runs each scenario on fixed kind nodes after `skyhook reset` of the previous
//! run; here every test has fresh nodes of its own, so that reset step has nothing to do. Its
//! pods are our Jobs (and the Jobs' pods where the reference looks at what the API server put
//! into a pod, such as LimitRange defaults). The reference's stage check container is an init
//! container; ours is the pod's main container (docs/compatibility.md, "Stages run as Jobs"), so
//! containers are looked up by name wherever they are.
//!
//! `observedGeneration`: the reference expects 2 after a create, 4 after one edit, and so on,
//! because its Skyhooks gain one more generation per edit from its own writes. The rule behind
//! those numbers, `observedGeneration == metadata.generation` once complete (§ status), is what
//! is asserted here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, LimitRange, Node, Pod, PodSpec};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use skyhook::schema;

use crate::support::expect::{COMPLETE, ERRORING, INCOMPLETE, NOT_ERRORING, contains};
use crate::support::metrics::{metrics, samples};
use crate::support::{
    Complete, Env, NodeExpect, SkyhookExpect, label, setup, skyhook, sleep, wait_complete,
    wait_metric, wait_node, wait_skyhook,
};

const AGENTLESS: &str = "ghcr.io/nvidia/skyhook/agentless";
const FOOBAR_SHA: &str = "sha256:a9cc86f68d73e874bf2dfbabab5e8a8f710ad78411a03764d1b42aa1b5cda7dd";
const GAME: &str =
    "enemies=aliens\nlives=3\nenemies.cheat=true\nenemies.cheat.level=noGoodRotten\n";
const GAME_5: &str =
    "enemies=aliens\nlives=5\nenemies.cheat=true\nenemies.cheat.level=noGoodRotten\n";
const UI: &str =
    "color.good=purple\ncolor.bad=yellow\nallow.textmode=true\nhow.nice.to.look=fairlyNice\n";

/// How long a node gets to reach an expected state.
const NODE_WAIT: Duration = Duration::from_secs(90);
/// How long a Skyhook gets to reach an expected state.
const SKYHOOK_WAIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// One node-state entry as the reference writes it.
fn entry(name: &str, version: &str, image: &str, stage: &str, state: &str) -> Value {
    json!({"name": name, "version": version, "image": image, "stage": stage, "state": state})
}

/// Replaces the Skyhook's packages as a whole (chainsaw `update`), or removes them (`None`).
async fn set_packages(env: &Env, name: &str, packages: Option<Value>) {
    let op = match packages {
        Some(p) => json!([{"op": "add", "path": "/spec/packages", "value": p}]),
        None => json!([{"op": "remove", "path": "/spec/packages"}]),
    };
    let patch: json_patch::Patch = serde_json::from_value(op).expect("a JSON patch");
    env.skyhooks
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .expect("update the Skyhook's packages");
}

async fn generation(env: &Env, name: &str) -> i64 {
    env.skyhooks
        .get(name)
        .await
        .expect("get Skyhook")
        .metadata
        .generation
        .expect("generation")
}

// --- nodes ---

/// Every version of one node, as a watch delivers it: the reference asserts passing states
/// (e.g. three packages at `apply` at once) that polling could miss.
struct NodeHistory {
    seen: Arc<Mutex<Vec<Node>>>,
    task: tokio::task::JoinHandle<()>,
}

impl NodeHistory {
    fn record(env: &Env, node: &str) -> NodeHistory {
        let api: Api<Node> = Api::all(env.ctx.client.clone());
        let cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, cfg)
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(ev) = stream.next().await {
                if let Ok(n) = ev {
                    sink.lock().expect("history lock").push(n);
                }
            }
        });
        NodeHistory { seen, task }
    }

    /// How many versions were recorded so far: pass it to `wait_seen` to look only at later ones.
    fn mark(&self) -> usize {
        self.seen.lock().expect("history lock").len()
    }

    /// Waits until a version recorded at index `from` or later passes `want`.
    async fn wait_seen(&self, env: &Env, step: &str, from: usize, sk: &str, want: &NodeExpect<'_>) {
        let mut checked = from;
        env.ctx
            .eventually(step, NODE_WAIT, || {
                let seen = self.seen.lock().expect("history lock");
                let mut last = Err(format!("no node version recorded since #{from}"));
                for n in &seen[checked.min(seen.len())..] {
                    last = want.check(n, sk);
                    if last.is_ok() {
                        break;
                    }
                }
                checked = seen.len().max(from);
                std::future::ready(last)
            })
            .await;
    }
}

impl Drop for NodeHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// --- the Skyhook ---

/// The one node and the Skyhook complete with `state`, as the scenarios' final asserts say.
async fn all_complete(env: &Env, step: &str, node: &str, sk: &str, state: &Value) {
    wait_node(
        env,
        &format!("{step}: node complete"),
        node,
        sk,
        &complete_node(state.clone()),
        NODE_WAIT,
    )
    .await;
    let generation = wait_complete(
        &env.skyhooks,
        &format!("{step}: Skyhook complete"),
        sk,
        Complete::current(SKYHOOK_WAIT),
    )
    .await
    .metadata
    .generation
    .unwrap_or(0);
    wait_skyhook(
        env,
        &format!("{step}: Skyhook status"),
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            observed_generation: Some(generation),
            node_state: per_node(env, state),
            node_status: Some(("complete", 1)),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;
}

// --- ConfigMaps ---

fn check_owned_by(meta: &kube::api::ObjectMeta, sk: &str) -> Result<(), String> {
    let owners = meta.owner_references.clone().unwrap_or_default();
    let ok = owners.iter().any(|o| {
        o.api_version == "skyhook.nvidia.com/v1alpha1"
            && o.kind == "Skyhook"
            && o.name == sk
            && o.controller == Some(true)
            && o.block_owner_deletion == Some(true)
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not controlled by Skyhook {sk} (blockOwnerDeletion): {owners:?}",
            meta.name
        ))
    }
}

/// The package ConfigMap `<sh>-<pkg>-<ver>`: labelled, owned, with exactly `data`.
async fn check_package_configmap(
    env: &Env,
    step: &str,
    sk: &str,
    pkg: &str,
    ver: &str,
    data: Value,
) {
    let cms: Api<ConfigMap> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let cm_name = schema::package_configmap_name(sk, pkg, ver);
    env.ctx
        .eventually(step, Duration::from_secs(30), || async {
            let cm = cms
                .get_opt(&cm_name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no ConfigMap {cm_name}"))?;
            if cm.labels().get(schema::NAME_LABEL).map(String::as_str) != Some(sk) {
                return Err(format!("ConfigMap {cm_name} labels {:?}", cm.labels()));
            }
            check_owned_by(&cm.metadata, sk)?;
            let got = json!(cm.data.clone().unwrap_or_default());
            if got != data {
                return Err(format!("ConfigMap {cm_name} data {got}, want {data}"));
            }
            Ok(())
        })
        .await;
}

/// The node metadata ConfigMap of each node: owned, three keys, and the texts the reference
/// looks for in each of them.
async fn check_node_metadata(env: &Env, step: &str, sk: &str, packages_has: &[&str]) {
    let cms: Api<ConfigMap> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let (test_label, _) = env.ctx.test_label();
    env.ctx
        .eventually(step, Duration::from_secs(30), || async {
            let list = cms
                .list(&ListParams::default().labels(&format!("{}={sk}", schema::NODE_META_LABEL)))
                .await
                .map_err(|e| e.to_string())?
                .items;
            if list.len() != env.nodes.len() {
                return Err(format!("{} node metadata ConfigMaps", list.len()));
            }
            for cm in &list {
                check_owned_by(&cm.metadata, sk)?;
                let data = cm.data.clone().unwrap_or_default();
                if data.len() != 3 {
                    return Err(format!("{}: keys {:?}", cm.name_any(), data.keys()));
                }
                let text = |k: &str| data.get(k).cloned().unwrap_or_default();
                // The reference looks for its node-selecting label here; ours is the test label.
                let wants = [
                    (schema::METADATA_LABELS_KEY, test_label.clone()),
                    (schema::METADATA_LABELS_KEY, schema::status_label(sk)),
                    (
                        schema::METADATA_ANNOTATIONS_KEY,
                        schema::status_annotation(sk),
                    ),
                    (
                        schema::METADATA_ANNOTATIONS_KEY,
                        schema::node_state_annotation(sk),
                    ),
                    (
                        schema::METADATA_PACKAGES_KEY,
                        "\"agentVersion\"".to_string(),
                    ),
                ];
                let more = packages_has
                    .iter()
                    .map(|p| (schema::METADATA_PACKAGES_KEY, format!("\"{p}\"")));
                for (key, needle) in wants.into_iter().chain(more) {
                    if !text(key).contains(&needle) {
                        return Err(format!(
                            "{}: {key} lacks {needle}: {}",
                            cm.name_any(),
                            text(key)
                        ));
                    }
                }
            }
            Ok(())
        })
        .await;
}

// --- Jobs (the reference's pods) ---

fn pod_spec(j: &Job) -> &PodSpec {
    j.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("Job pod spec")
}

fn containers(spec: &PodSpec) -> Vec<&Container> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .collect()
}

fn uid(j: &Job) -> String {
    j.metadata.uid.clone().unwrap_or_default()
}

/// Job identities: a replacement Job may reuse a name, never a UID.
fn uids(jobs: &[Job]) -> BTreeSet<String> {
    jobs.iter().map(uid).collect()
}

fn created(j: &Job) -> jiff::Timestamp {
    j.metadata.creation_timestamp.clone().expect("created").0
}

fn completed(j: &Job) -> Option<jiff::Timestamp> {
    j.status.as_ref()?.completion_time.clone().map(|t| t.0)
}

fn running(j: &Job) -> bool {
    let st = j.status.clone().unwrap_or_default();
    st.active.unwrap_or(0) > 0 && st.succeeded.unwrap_or(0) == 0 && st.failed.unwrap_or(0) == 0
}

/// What the reference asserts of a package pod: the `skyhook.nvidia.com/package` annotation, the
/// owner, and the init, stage and check containers with their arguments.
fn check_stage_job(j: &Job, sk: &str, pkg: &str, version: &str, stage: &str) -> Result<(), String> {
    let jname = j.name_any();
    let want =
        json!({"name": pkg, "version": version, "skyhook": sk, "stage": stage, "image": AGENTLESS});
    for (whose, annotations) in [
        ("Job", j.metadata.annotations.clone()),
        (
            "pod template",
            j.spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.annotations.clone()),
        ),
    ] {
        let raw = annotations
            .unwrap_or_default()
            .get(schema::PACKAGE_ANNOTATION)
            .cloned()
            .ok_or_else(|| format!("{whose} of {jname}: no package annotation"))?;
        let got: Value = serde_json::from_str(&raw).map_err(|e| format!("{jname}: {e}"))?;
        if !contains(&got, &want) {
            return Err(format!(
                "{whose} of {jname}: package annotation {got}, want {want}"
            ));
        }
    }
    if !j
        .owner_references()
        .iter()
        .any(|o| o.kind == "Skyhook" && o.name == sk)
    {
        return Err(format!("{jname} is not owned by Skyhook {sk}"));
    }
    let spec = pod_spec(j);
    let init = format!("{pkg}-init");
    let by_name = |n: &str| containers(spec).into_iter().find(|c| c.name == n);
    if by_name(&init).is_none() {
        return Err(format!("{jname}: no container {init}"));
    }
    for (cname, mode) in [
        (format!("{pkg}-{stage}"), stage.to_string()),
        (format!("{pkg}-{stage}check"), format!("{stage}-check")),
    ] {
        let c = by_name(&cname).ok_or_else(|| format!("{jname}: no container {cname}"))?;
        let args = c.args.clone().unwrap_or_default();
        if args.len() != 3 || args[0] != mode || args[1] != "/root" {
            return Err(format!(
                "{jname}: {cname} args {args:?}, want [{mode}, /root, <dir>]"
            ));
        }
    }
    Ok(())
}

/// Waits for a Job of `pkg`-`version` at `stage` (on `node`, if given) that `also` accepts, and
/// checks it as the reference checks the pod.
#[allow(clippy::too_many_arguments)]
async fn wait_stage_job(
    env: &Env,
    step: &str,
    sk: &str,
    pkg: &str,
    version: &str,
    stage: &str,
    node: Option<&str>,
    also: impl Fn(&Job) -> bool,
) -> Job {
    env.ctx
        .eventually(step, Duration::from_secs(90), || async {
            let jobs = env.jobs_of(sk).await;
            let j = jobs
                .into_iter()
                .find(|j| {
                    label(j, schema::PACKAGE_LABEL) == schema::package_label(pkg, version)
                        && label(j, schema::STAGE_LABEL) == stage
                        && node
                            .is_none_or(|n| label(j, schema::NODE_LABEL) == schema::label_value(n))
                        && also(j)
                })
                .ok_or_else(|| format!("no {pkg}-{version} {stage} Job (node {node:?})"))?;
            check_stage_job(&j, sk, pkg, version, stage).map(|_| j)
        })
        .await
}

/// Waits until `job` is gone or being deleted (a Job of the same name with another UID counts as
/// gone).
async fn wait_killed(env: &Env, step: &str, job: &Job, timeout: Duration) {
    let name = job.name_any();
    env.ctx
        .eventually(step, timeout, || async {
            match env.jobs.get_opt(&name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(j) if uid(&j) != uid(job) || j.metadata.deletion_timestamp.is_some() => Ok(()),
                Some(j) => Err(format!("{name} is still there: {:?}", j.status)),
            }
        })
        .await;
}

/// The pods of a Job, found by the Job's own labels.
async fn pods_of(env: &Env, j: &Job) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let sel = format!("job-name={}", j.name_any());
    pods.list(&ListParams::default().labels(&sel))
        .await
        .expect("list pods")
        .items
}

// --- shared Skyhook shapes ---

/// dexter (configMap, an image tag the operator must drop), then spencer and foobar depending on
/// it: the Skyhook of simple-skyhook and delete-skyhook.
fn three_packages(secs: &str, foobar_extra: Value) -> Value {
    let mut foobar = json!({"version": "1.2", "image": AGENTLESS,
        "dependsOn": {"dexter": "1.2.3"}, "env": sleep(secs)});
    if let (Some(f), Some(extra)) = (foobar.as_object_mut(), foobar_extra.as_object()) {
        f.extend(extra.clone());
    }
    json!({
        "interruptionBudget": {"count": 1},
        "additionalTolerations": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        "packages": {
            "spencer": {"version": "3.2.3", "image": AGENTLESS,
                "dependsOn": {"dexter": "1.2.3"}, "env": sleep(secs)},
            "foobar": foobar,
            "dexter": {"version": "1.2.3", "image": format!("{AGENTLESS}:bogus"),
                "configMap": {"game.properties": GAME, "ui.properties": UI},
                "env": sleep(secs)},
        },
    })
}

fn three_complete(foobar_sha: Option<&str>) -> Value {
    let mut foobar = entry("foobar", "1.2", AGENTLESS, "config", "complete");
    if let Some(sha) = foobar_sha {
        foobar["containerSHA"] = json!(sha);
    }
    json!({
        "dexter|1.2.3": entry("dexter", "1.2.3", AGENTLESS, "config", "complete"),
        "foobar|1.2": foobar,
        "spencer|3.2.3": entry("spencer", "3.2.3", AGENTLESS, "config", "complete"),
    })
}

fn complete_node(state: Value) -> NodeExpect<'static> {
    NodeExpect {
        state: Some(state),
        ..NodeExpect::complete()
    }
}

fn per_node(env: &Env, state: &Value) -> BTreeMap<String, Value> {
    env.nodes
        .iter()
        .map(|n| (n.clone(), state.clone()))
        .collect()
}

const ROLLOUT: [(&str, &str); 3] = [
    ("policy_name", "legacy"),
    ("compartment_name", "__default__"),
    ("strategy", "fixed"),
];

fn with_rollout(sk: &str) -> Vec<(&str, &str)> {
    let mut tags = vec![("skyhook_name", sk)];
    tags.extend(ROLLOUT);
    tags
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// Reference: `k8s-tests/chainsaw/skyhook/simple-skyhook`. One node, three packages (spencer and
/// foobar depend on dexter) under a namespace LimitRange: the metrics while it runs, the apply
/// pods (LimitRange defaults, or foobar's own resources), then the complete node, Skyhook,
/// package ConfigMap, node metadata ConfigMap and the final metrics.
#[tokio::test]
async fn simple_skyhook() {
    scenario_simple_skyhook().await;
}

pub(crate) async fn scenario_simple_skyhook() {
    let env = setup("simple-skyhook", 1, &[]).await;
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");

    // A LimitRange whose defaults the API server writes into containers without resources.
    let limits: Api<LimitRange> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let lr: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "skyhook-default-limits"},
        "spec": {"limits": [{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "500m", "memory": "256Mi"}}]},
    }))
    .expect("LimitRange");
    limits
        .create(&PostParams::default(), &lr)
        .await
        .expect("create the LimitRange");

    // SLEEP_LEN 2 (the reference: 1) keeps each package in progress long enough for the
    // metric checks below to see it, as they do on the reference's slower kind nodes.
    let foobar_extra = json!({"containerSHA": FOOBAR_SHA, "resources": {
        "cpuLimit": "50m", "cpuRequest": "50m", "memoryLimit": "32Mi", "memoryRequest": "32Mi"}});
    env.create(&skyhook(&env.ctx, &name, three_packages("2", foobar_extra)))
        .await;

    let sk = name.as_str();
    wait_metric(
        &env,
        "metrics at start: target count",
        "skyhook_node_target_count",
        &[("skyhook_name", sk)],
        "1",
    )
    .await;
    wait_metric(
        &env,
        "metrics at start: dexter in progress",
        "skyhook_package_state_count",
        &[
            ("package_name", "dexter"),
            ("skyhook_name", sk),
            ("state", "in_progress"),
        ],
        "1",
    )
    .await;
    wait_metric(
        &env,
        "metrics at start: dexter at config",
        "skyhook_package_stage_count",
        &[
            ("package_name", "dexter"),
            ("skyhook_name", sk),
            ("stage", "config"),
        ],
        "1",
    )
    .await;

    // assert_pods: the apply pods of spencer and foobar.
    for (pkg, version, cpu, memory) in [
        ("spencer", "3.2.3", "500m", "256Mi"),
        ("foobar", "1.2", "50m", "32Mi"),
    ] {
        let step = format!("assert_pods: {pkg} apply pod");
        let job = wait_stage_job(&env, &step, sk, pkg, version, "apply", Some(&node), |_| {
            true
        })
        .await;
        env.ctx
            .eventually(&step, Duration::from_secs(30), || async {
                let pods = pods_of(&env, &job).await;
                let pod = pods.first().ok_or("no pod yet")?;
                let spec = pod.spec.as_ref().ok_or("pod without spec")?;
                for cname in [
                    format!("{pkg}-init"),
                    format!("{pkg}-apply"),
                    format!("{pkg}-applycheck"),
                ] {
                    let c = containers(spec)
                        .into_iter()
                        .find(|c| c.name == cname)
                        .ok_or_else(|| format!("pod lacks {cname}"))?;
                    let r = c.resources.clone().unwrap_or_default();
                    let q = |m: &Option<
                        BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
                    >,
                             k: &str| {
                        m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone())
                    };
                    let got = [
                        q(&r.limits, "cpu"),
                        q(&r.limits, "memory"),
                        q(&r.requests, "cpu"),
                        q(&r.requests, "memory"),
                    ];
                    let want = [cpu, memory, cpu, memory].map(|s| Some(s.to_string()));
                    if got != want {
                        return Err(format!("{cname}: limits/requests {got:?}, want {want:?}"));
                    }
                }
                Ok(())
            })
            .await;
    }

    for (step, tags, value) in [
        (
            "metrics mid-rollout: dexter complete",
            vec![("package_name", "dexter"), ("state", "complete")],
            "1",
        ),
        (
            "metrics mid-rollout: spencer in progress",
            vec![("package_name", "spencer"), ("state", "in_progress")],
            "1",
        ),
        (
            "metrics mid-rollout: foobar in progress",
            vec![("package_name", "foobar"), ("state", "in_progress")],
            "1",
        ),
    ] {
        let mut tags = tags;
        tags.push(("skyhook_name", sk));
        wait_metric(&env, step, "skyhook_package_state_count", &tags, value).await;
    }
    for pkg in ["dexter", "spencer", "foobar"] {
        wait_metric(
            &env,
            &format!("metrics mid-rollout: {pkg} at config"),
            "skyhook_package_stage_count",
            &[
                ("package_name", pkg),
                ("skyhook_name", sk),
                ("stage", "config"),
            ],
            "1",
        )
        .await;
    }

    // assert.yaml
    let state = three_complete(Some(FOOBAR_SHA));
    wait_node(
        &env,
        "assert: node complete",
        &node,
        sk,
        &complete_node(state.clone()),
        NODE_WAIT,
    )
    .await;
    let generation = generation(&env, sk).await;
    wait_skyhook(
        &env,
        "assert: Skyhook complete",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            observed_generation: Some(generation),
            node_state: per_node(&env, &state),
            node_status: Some(("complete", 1)),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;
    check_package_configmap(
        &env,
        "assert: dexter's ConfigMap",
        sk,
        "dexter",
        "1.2.3",
        json!({"game.properties": GAME, "ui.properties": UI}),
    )
    .await;
    check_node_metadata(&env, "assert: node metadata ConfigMap", sk, &["dexter"]).await;

    wait_metric(
        &env,
        "final metrics: node complete",
        "skyhook_node_status_count",
        &[("skyhook_name", sk), ("status", "complete")],
        "1",
    )
    .await;
    for pkg in ["spencer", "foobar"] {
        wait_metric(
            &env,
            &format!("final metrics: {pkg} complete"),
            "skyhook_package_state_count",
            &[
                ("package_name", pkg),
                ("skyhook_name", sk),
                ("state", "complete"),
            ],
            "1",
        )
        .await;
        wait_metric(
            &env,
            &format!("final metrics: {pkg} at config"),
            "skyhook_package_stage_count",
            &[
                ("package_name", pkg),
                ("skyhook_name", sk),
                ("stage", "config"),
            ],
            "1",
        )
        .await;
    }
    let tags = with_rollout(sk);
    for (metric, value) in [
        ("skyhook_rollout_matched_nodes", "1"),
        ("skyhook_rollout_ceiling", "1"),
        ("skyhook_rollout_completed", "1"),
        ("skyhook_rollout_in_progress", "0"),
        ("skyhook_rollout_progress_percent", "100"),
    ] {
        wait_metric(
            &env,
            &format!("final rollout metrics: {metric}"),
            metric,
            &tags,
            value,
        )
        .await;
    }
}

/// Reference: `k8s-tests/chainsaw/skyhook/simple-update-skyhook`. A three-package Skyhook
/// completes (version annotations written), then a merge patch adds two packages (one with a
/// configMap, one whose name has a dash): all five end complete, with the new ConfigMap.
#[tokio::test]
async fn simple_update_skyhook() {
    scenario_simple_update_skyhook().await;
}

pub(crate) async fn scenario_simple_update_skyhook() {
    let env = setup("simple-update", 1, &[]).await;
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");
    let sk = name.as_str();
    let mut spec = three_packages("1", json!({}));
    spec.as_object_mut()
        .expect("spec")
        .remove("additionalTolerations");
    env.create(&skyhook(&env.ctx, sk, spec)).await;

    // assert.yaml
    let state = three_complete(None);
    let n = wait_node(
        &env,
        "assert: node complete",
        &node,
        sk,
        &complete_node(state.clone()),
        NODE_WAIT,
    )
    .await;
    let node_version = n
        .annotations()
        .get(&schema::node_version_annotation(sk))
        .cloned()
        .unwrap_or_default();
    assert!(
        node_version.len() >= 6,
        "assert: node annotation version_<sh> is {node_version:?}, want a version string"
    );
    let generation = wait_complete(
        &env.skyhooks,
        "assert: Skyhook complete",
        sk,
        Complete::current(SKYHOOK_WAIT),
    )
    .await
    .metadata
    .generation
    .unwrap_or(0);
    let got = wait_skyhook(
        &env,
        "assert: Skyhook status",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            observed_generation: Some(generation),
            node_state: per_node(&env, &state),
            node_status: Some(("complete", 1)),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;
    let version = got
        .annotations()
        .get(schema::VERSION_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    assert!(
        version.len() >= 6,
        "assert: Skyhook annotation {} is {version:?}, want a version string",
        schema::VERSION_ANNOTATION
    );
    check_package_configmap(
        &env,
        "assert: dexter's ConfigMap",
        sk,
        "dexter",
        "1.2.3",
        json!({"game.properties": GAME, "ui.properties": UI}),
    )
    .await;
    check_node_metadata(
        &env,
        "assert: node metadata ConfigMap",
        sk,
        &["dexter", "1.2.3"],
    )
    .await;

    // update.yaml, applied as a merge patch: two packages are added, the others stay.
    let add = json!({"spec": {"packages": {
        "baxter": {"version": "2.3.1-test", "image": AGENTLESS,
            "configMap": {"game.properties": GAME_5, "ui.properties": UI},
            "env": sleep("1")},
        "jackie-chan": {"version": "2024.7.7-test", "image": AGENTLESS, "env": sleep("1")},
    }}});
    env.skyhooks
        .patch(sk, &PatchParams::default(), &Patch::Merge(&add))
        .await
        .expect("update: merge patch");

    // assert-update.yaml
    check_package_configmap(
        &env,
        "assert-update: baxter's ConfigMap",
        sk,
        "baxter",
        "2.3.1-test",
        json!({"game.properties": GAME_5, "ui.properties": UI}),
    )
    .await;
    let mut state = three_complete(None);
    state["baxter|2.3.1-test"] = entry("baxter", "2.3.1-test", AGENTLESS, "config", "complete");
    state["jackie-chan|2024.7.7-test"] = entry(
        "jackie-chan",
        "2024.7.7-test",
        AGENTLESS,
        "config",
        "complete",
    );
    all_complete(&env, "assert-update", &node, sk, &state).await;
    check_node_metadata(
        &env,
        "assert-update: node metadata ConfigMap",
        sk,
        &["baxter", "2.3.1-test"],
    )
    .await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/skyhook-upgrade` (skipped there: it needs a manual
/// operator upgrade). A node carries state as an operator before v0.5 wrote it (an unversioned
/// `foobar` key without image beside `foobar|1.2`, node version v0.5.0); the new Skyhook
/// migrates it: only `foobar|1.2` stays, complete, and nothing runs (no upgrade/config loop).
#[tokio::test]
async fn skyhook_upgrade() {
    scenario_skyhook_upgrade().await;
}

pub(crate) async fn scenario_skyhook_upgrade() {
    let env = setup("skyhook-upgrade", 1, &[]).await;
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");
    let sk = name.as_str();
    let legacy = json!({
        "foobar": {"name": "foobar", "version": "1.1", "stage": "config", "state": "complete"},
        "foobar|1.2": entry("foobar", "1.2", AGENTLESS, "config", "complete"),
    });
    let patch = json!({"metadata": {"annotations": {
        schema::node_state_annotation(sk): legacy.to_string(),
        schema::status_annotation(sk): "complete",
        schema::node_version_annotation(sk): "v0.5.0",
    }}});
    env.node_api
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("set up the pre-v0.5 node state");
    // The bad format is there before the migration.
    let n = env.node_api.get(&node).await.expect("node");
    (NodeExpect {
        state: Some(legacy),
        ..Default::default()
    })
    .check(&n, sk)
    .expect("assert: the old format exists before the migration");
    assert_eq!(
        n.annotations()
            .get(&schema::node_version_annotation(sk))
            .map(String::as_str),
        Some("v0.5.0"),
        "assert: node version before the migration"
    );

    env.create(&skyhook(
        &env.ctx,
        sk,
        json!({
            "additionalTolerations": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            "packages": {"foobar": {"version": "1.2", "image": AGENTLESS, "env": sleep("1")}},
        }),
    ))
    .await;

    let state = json!({"foobar|1.2": entry("foobar", "1.2", AGENTLESS, "config", "complete")});
    let want = NodeExpect {
        keys: Some(vec!["foobar|1.2"]),
        ..complete_node(state.clone())
    };
    wait_node(
        &env,
        "assert: node migrated and complete",
        &node,
        sk,
        &want,
        NODE_WAIT,
    )
    .await;
    wait_skyhook(
        &env,
        "assert: Skyhook complete",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            node_state: per_node(&env, &state),
            node_state_keys: Some(vec!["foobar|1.2"]),
            node_status: Some(("complete", 1)),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;
    // The loop the migration breaks would show as upgrade and config Jobs coming back.
    env.ctx
        .holds_for(
            "assert: nothing runs after the migration",
            Duration::from_secs(5),
            || async {
                let jobs = env.jobs_of(sk).await;
                let n = env.node_api.get(&node).await.map_err(|e| e.to_string())?;
                want.check(&n, sk)?;
                if jobs.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "Jobs: {:?}",
                        jobs.iter().map(|j| j.name_any()).collect::<Vec<_>>()
                    ))
                }
            },
        )
        .await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/uninstall-upgrade-skyhook`. Three packages (dogs with
/// a reboot, nullptr with a service restart, cats) install under a cordon; then dogs is
/// downgraded (old version uninstalled, new one waiting `skipped`), nullptr upgraded (`upgrade`
/// stage) and cats removed (uninstalled), and the downgrade with its reboot completes; then
/// every package is removed and uninstalled without a cordon, leaving an empty node state.
#[tokio::test]
async fn uninstall_upgrade_skyhook() {
    scenario_uninstall_upgrade_skyhook().await;
}

pub(crate) async fn scenario_uninstall_upgrade_skyhook() {
    let env = setup("uninstall-upgrade", 1, &[]).await;
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");
    let sk = name.as_str();
    let history = NodeHistory::record(&env, &node);
    let cm =
        |v: &str| json!({"game.properties": v, "ui.properties": if v == GAME { UI } else { v }});
    let dogs = |version: &str, data: Value, secs: Option<&str>| {
        let mut p = json!({"version": version, "image": AGENTLESS,
            "interrupt": {"type": "reboot"}, "configMap": data});
        if let Some(s) = secs {
            p["env"] = sleep(s);
        }
        p
    };
    let nullptr = |version: &str, data: Value, secs: Option<&str>| {
        let mut p = json!({"version": version, "image": AGENTLESS,
            "interrupt": {"type": "service", "services": ["cron", "containerd"]},
            "configMap": data});
        if let Some(s) = secs {
            p["env"] = sleep(s);
        }
        p
    };
    // SLEEP_LEN 2 (the reference: none) keeps the three apply stages running at the same time,
    // as they do on the reference's nodes, where pods take seconds to start.
    let spec = json!({"interruptionBudget": {"count": 1}, "packages": {
        "dogs": dogs("1.2.6", cm(GAME), Some("2")),
        "nullptr": nullptr("2.0.0", cm(GAME), Some("2")),
        "cats": {"version": "6.2.0", "image": AGENTLESS, "env": sleep("2")},
    }});
    let mark = history.mark();
    env.create(&skyhook(&env.ctx, sk, spec)).await;

    // assert.yaml, first Node: all three at apply, the node cordoned.
    history
        .wait_seen(
            &env,
            "assert: three packages at apply, node cordoned",
            mark,
            sk,
            &NodeExpect {
                status: Some("in_progress"),
                state: Some(json!({
                    "cats|6.2.0": entry("cats", "6.2.0", AGENTLESS, "apply", "in_progress"),
                    "dogs|1.2.6": entry("dogs", "1.2.6", AGENTLESS, "apply", "in_progress"),
                    "nullptr|2.0.0": entry("nullptr", "2.0.0", AGENTLESS, "apply", "in_progress"),
                })),
                not_ready: Some(INCOMPLETE),
                erroring: Some(NOT_ERRORING),
                cordoned: Some(true),
                ..Default::default()
            },
        )
        .await;
    // assert.yaml, the rest: complete.
    let state = json!({
        "cats|6.2.0": entry("cats", "6.2.0", AGENTLESS, "config", "complete"),
        "dogs|1.2.6": entry("dogs", "1.2.6", AGENTLESS, "post-interrupt", "complete"),
        "nullptr|2.0.0": entry("nullptr", "2.0.0", AGENTLESS, "post-interrupt", "complete"),
    });
    wait_node(
        &env,
        "assert: node complete",
        &node,
        sk,
        &complete_node(state.clone()),
        NODE_WAIT,
    )
    .await;
    let generation = wait_complete(
        &env.skyhooks,
        "assert: Skyhook complete",
        sk,
        Complete::current(SKYHOOK_WAIT),
    )
    .await
    .metadata
    .generation
    .unwrap_or(0);
    wait_skyhook(
        &env,
        "assert: Skyhook status",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            observed_generation: Some(generation),
            node_state: per_node(&env, &state),
            node_status: Some(("complete", 1)),
            complete_nodes: Some("1/1"),
            package_list: Some("cats:6.2.0,dogs:1.2.6,nullptr:2.0.0"),
            nodes_in_progress: Some(0),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;
    for (pkg, ver) in [("nullptr", "2.0.0"), ("dogs", "1.2.6")] {
        check_package_configmap(
            &env,
            &format!("assert: {pkg}'s ConfigMap"),
            sk,
            pkg,
            ver,
            cm(GAME),
        )
        .await;
    }

    // update.yaml: dogs down to 1.2.5, nullptr up to 2.0.1 (both with changed configMaps), cats
    // removed.
    let changed = "changed\n";
    let mark = history.mark();
    let before = uids(&env.jobs_of(sk).await);
    set_packages(
        &env,
        sk,
        Some(json!({
            "dogs": dogs("1.2.5", cm(changed), None),
            "nullptr": nullptr("2.0.1", cm(changed), None),
        })),
    )
    .await;
    history
        .wait_seen(
            &env,
            "assert-update: uninstalls, upgrade and the waiting downgrade, node cordoned",
            mark,
            sk,
            &NodeExpect {
                status: Some("in_progress"),
                state: Some(json!({
                    "dogs|1.2.5": entry("dogs", "1.2.5", AGENTLESS, "uninstall", "skipped"),
                    "dogs|1.2.6": entry("dogs", "1.2.6", AGENTLESS, "uninstall", "in_progress"),
                    "nullptr|2.0.1": entry("nullptr", "2.0.1", AGENTLESS, "upgrade", "in_progress"),
                    "cats|6.2.0": entry("cats", "6.2.0", AGENTLESS, "uninstall", "in_progress"),
                })),
                not_ready: Some(INCOMPLETE),
                erroring: Some(NOT_ERRORING),
                cordoned: Some(true),
                ..Default::default()
            },
        )
        .await;
    let fresh = |j: &Job| !before.contains(&uid(j));
    for (pkg, ver, stage) in [
        ("cats", "6.2.0", "uninstall"),
        ("dogs", "1.2.6", "uninstall"),
        ("nullptr", "2.0.1", "upgrade"),
    ] {
        let step = format!("assert-update: {pkg} {stage} pod");
        wait_stage_job(&env, &step, sk, pkg, ver, stage, Some(&node), fresh).await;
    }
    // The downgrade with a reboot interrupt completes (it used to stall on the name of the
    // interrupt Job left by 1.2.6).
    let state = json!({
        "dogs|1.2.5": entry("dogs", "1.2.5", AGENTLESS, "post-interrupt", "complete"),
        "nullptr|2.0.1": entry("nullptr", "2.0.1", AGENTLESS, "post-interrupt", "complete"),
    });
    let keys = vec!["dogs|1.2.5", "nullptr|2.0.1"];
    wait_node(
        &env,
        "assert-update: node complete",
        &node,
        sk,
        &NodeExpect {
            keys: Some(keys.clone()),
            ..complete_node(state.clone())
        },
        NODE_WAIT,
    )
    .await;
    let generation = wait_complete(
        &env.skyhooks,
        "assert-update: Skyhook complete",
        sk,
        Complete::current(SKYHOOK_WAIT),
    )
    .await
    .metadata
    .generation
    .unwrap_or(0);
    wait_skyhook(
        &env,
        "assert-update: Skyhook status",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            observed_generation: Some(generation),
            node_state: per_node(&env, &state),
            node_state_keys: Some(keys),
            node_status: Some(("complete", 1)),
            complete_nodes: Some("1/1"),
            package_list: Some("dogs:1.2.5,nullptr:2.0.1"),
            nodes_in_progress: Some(0),
        },
        SKYHOOK_WAIT,
    )
    .await;
    for (pkg, ver) in [("nullptr", "2.0.1"), ("dogs", "1.2.5")] {
        check_package_configmap(
            &env,
            &format!("assert-update: {pkg}'s ConfigMap"),
            sk,
            pkg,
            ver,
            cm(changed),
        )
        .await;
    }

    // update-no-packages.yaml: every package removed.
    let mark = history.mark();
    let before = uids(&env.jobs_of(sk).await);
    set_packages(&env, sk, None).await;
    history
        .wait_seen(
            &env,
            "assert-update-no-packages: both uninstalling, no taint",
            mark,
            sk,
            &NodeExpect {
                status: Some("in_progress"),
                state: Some(json!({
                    "dogs|1.2.5": entry("dogs", "1.2.5", AGENTLESS, "uninstall", "in_progress"),
                    "nullptr|2.0.1": entry("nullptr", "2.0.1", AGENTLESS, "uninstall", "in_progress"),
                })),
                not_ready: Some(INCOMPLETE),
                erroring: Some(NOT_ERRORING),
                cordoned: Some(false),
                ..Default::default()
            },
        )
        .await;
    let fresh = |j: &Job| !before.contains(&uid(j));
    for (pkg, ver) in [("dogs", "1.2.5"), ("nullptr", "2.0.1")] {
        let step = format!("assert-update-no-packages: {pkg} uninstall pod");
        wait_stage_job(&env, &step, sk, pkg, ver, "uninstall", Some(&node), fresh).await;
    }
    wait_node(
        &env,
        "assert-update-no-packages: node complete with an empty state",
        &node,
        sk,
        &NodeExpect {
            status: Some("complete"),
            raw_state: Some("{}"),
            not_ready: Some(COMPLETE),
            erroring: Some(NOT_ERRORING),
            ..Default::default()
        },
        NODE_WAIT,
    )
    .await;
    let generation = wait_complete(
        &env.skyhooks,
        "assert-update-no-packages: Skyhook complete",
        sk,
        Complete::current(SKYHOOK_WAIT),
    )
    .await
    .metadata
    .generation
    .unwrap_or(0);
    wait_skyhook(
        &env,
        "assert-update-no-packages: Skyhook status",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            observed_generation: Some(generation),
            node_state: per_node(&env, &json!({})),
            node_state_keys: Some(vec![]),
            node_status: Some(("complete", 1)),
            complete_nodes: Some("1/1"),
            package_list: Some(""),
            nodes_in_progress: Some(0),
        },
        SKYHOOK_WAIT,
    )
    .await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/validate-packages`. Three packages whose pods cannot
/// finish (an image that cannot be pulled, resources no node has, a 1000 s step) sit at `apply`;
/// the corrected spec kills those pods, starts new ones from the new spec, and everything
/// completes. Also: package resources that are invalid in themselves are refused at admission.
///
/// On kwok an image fails to pull only from a `.invalid` registry and no kubelet refuses a pod
/// for its resources, so invalid-image uses `registry.invalid/…` (the fix restores the agentless
/// image) and invalid-resources also carries `HANG=true`, which the fix drops.
#[tokio::test]
async fn validate_packages() {
    scenario_validate_packages().await;
}

pub(crate) async fn scenario_validate_packages() {
    let env = setup("validate-packages", 1, &[]).await;
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");
    let sk = name.as_str();
    let bad_image = "registry.invalid/nvidia/skyhook/agentless";
    let huge = json!({"cpuRequest": "10000m", "cpuLimit": "10000m",
        "memoryRequest": "10000Mi", "memoryLimit": "10000Mi"});
    env.create(&skyhook(
        &env.ctx,
        sk,
        json!({"interruptionBudget": {"count": 1}, "packages": {
            "invalid-image": {"version": "3.2.3-bogus", "image": bad_image},
            "invalid-resources": {"version": "1.2.3", "image": AGENTLESS, "resources": huge,
                "env": [{"name": "HANG", "value": "true"}]},
            "invalid-env": {"version": "5.4.3", "image": AGENTLESS, "env": sleep("1000")},
        }}),
    ))
    .await;

    // assert.yaml. Deliberate deviation (docs/compatibility.md, "Failures end erroring"): an
    // image that cannot be pulled makes the package `erroring` at once here, so the node's
    // Erroring condition is True; the reference leaves the package `in_progress` and the
    // condition Not Erroring. The node and the Skyhook stay `in_progress` in both, as the other
    // two packages are still running.
    let state = json!({
        "invalid-env|5.4.3": entry("invalid-env", "5.4.3", AGENTLESS, "apply", "in_progress"),
        "invalid-image|3.2.3-bogus": entry("invalid-image", "3.2.3-bogus", bad_image, "apply", "erroring"),
        "invalid-resources|1.2.3": entry("invalid-resources", "1.2.3", AGENTLESS, "apply", "in_progress"),
    });
    wait_node(&env, "assert: all three stuck at apply (invalid-image erroring: deviation 'Failures end erroring')", &node, sk, &NodeExpect {
            status: Some("in_progress"),
            state: Some(state.clone()),
            not_ready: Some(INCOMPLETE),
            erroring: Some(ERRORING),
            ..Default::default()
        }, NODE_WAIT)
    .await;
    wait_skyhook(
        &env,
        "assert: Skyhook in progress",
        sk,
        &SkyhookExpect {
            status: Some("in_progress"),
            node_state: per_node(&env, &state),
            node_status: Some(("in_progress", 1)),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;
    let stuck: Vec<Job> = env
        .jobs_of(sk)
        .await
        .into_iter()
        .filter(|j| {
            ["invalid-resources-1.2.3", "invalid-env-5.4.3"]
                .contains(&label(j, schema::PACKAGE_LABEL))
        })
        .collect();
    assert_eq!(
        stuck.len(),
        2,
        "assert: one apply Job each for invalid-resources and invalid-env"
    );
    assert!(
        stuck.iter().all(running),
        "assert: the stuck apply Jobs run: {:?}",
        stuck
            .iter()
            .map(|j| (j.name_any(), j.status.clone()))
            .collect::<Vec<_>>()
    );

    // Package resources that are wrong in themselves never get this far: the API server refuses
    // them (CEL rule; the reference's webhook refuses the same), naming the field.
    let bad = skyhook(
        &env.ctx,
        &env.ctx.name("bad"),
        json!({"packages": {"invalid-resources": {"version": "1.2.3", "image": AGENTLESS,
            "resources": {"cpuRequest": "10000m", "cpuLimit": "100m",
                "memoryRequest": "32Mi", "memoryLimit": "32Mi"}}}}),
    );
    match env.skyhooks.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "admission: {e:?}");
            assert!(
                e.message.contains("spec.packages")
                    && e.message.contains("cpuLimit must be >= cpuRequest"),
                "admission: the rejection names the field and the rule: {}",
                e.message
            );
        }
        other => panic!("admission: a cpuLimit below cpuRequest was not refused: {other:?}"),
    }

    // update.yaml: the corrected packages.
    set_packages(
        &env,
        sk,
        Some(json!({
            "invalid-image": {"version": "3.2.3", "image": AGENTLESS},
            "invalid-resources": {"version": "1.2.3", "image": AGENTLESS},
            "invalid-env": {"version": "5.4.3", "image": AGENTLESS, "env": sleep("3")},
        })),
    )
    .await;

    // The pods built from the old spec are killed, the new ones carry the new spec.
    for old in &stuck {
        let step = format!("update: the stale Job {} is killed", old.name_any());
        wait_killed(&env, &step, old, Duration::from_secs(60)).await;
    }
    let old = uids(&stuck);
    let fresh = |j: &Job| !old.contains(&uid(j));
    let resources = wait_stage_job(
        &env,
        "update: a new invalid-resources apply pod",
        sk,
        "invalid-resources",
        "1.2.3",
        "apply",
        Some(&node),
        fresh,
    )
    .await;
    for c in containers(pod_spec(&resources)) {
        let r = c.resources.clone().unwrap_or_default();
        assert!(
            r.limits.unwrap_or_default().is_empty() && r.requests.unwrap_or_default().is_empty(),
            "update: the new invalid-resources pod's {} has no resources: {:?}",
            c.name,
            c.resources
        );
        assert!(
            !c.env.iter().flatten().any(|e| e.name == "HANG"),
            "update: the new invalid-resources pod's {} has no HANG",
            c.name
        );
    }
    let envs = wait_stage_job(
        &env,
        "update: a new invalid-env apply pod",
        sk,
        "invalid-env",
        "5.4.3",
        "apply",
        Some(&node),
        fresh,
    )
    .await;
    let stage_container = containers(pod_spec(&envs))
        .into_iter()
        .find(|c| c.name == "invalid-env-apply")
        .cloned()
        .expect("invalid-env-apply");
    assert!(
        stage_container
            .env
            .iter()
            .flatten()
            .any(|e| e.name == "SLEEP_LEN" && e.value.as_deref() == Some("3")),
        "update: the new invalid-env pod runs with SLEEP_LEN=3: {:?}",
        stage_container.env
    );

    // assert-update.yaml
    let state = json!({
        "invalid-env|5.4.3": entry("invalid-env", "5.4.3", AGENTLESS, "config", "complete"),
        "invalid-image|3.2.3": entry("invalid-image", "3.2.3", AGENTLESS, "config", "complete"),
        "invalid-resources|1.2.3": entry("invalid-resources", "1.2.3", AGENTLESS, "config", "complete"),
    });
    all_complete(&env, "assert-update", &node, sk, &state).await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/delete-skyhook`. The three-package Skyhook completes
/// with its ConfigMaps and metrics; deleting it removes every `skyhook_*` metric series of it
/// and its ConfigMaps.
#[tokio::test]
async fn delete_skyhook() {
    scenario_delete_skyhook().await;
}

pub(crate) async fn scenario_delete_skyhook() {
    let env = setup("delete-skyhook", 1, &[]).await;
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");
    let sk = name.as_str();
    env.create(&skyhook(&env.ctx, sk, three_packages("1", json!({}))))
        .await;

    // assert.yaml
    let state = three_complete(None);
    all_complete(&env, "assert", &node, sk, &state).await;
    check_package_configmap(
        &env,
        "assert: dexter's ConfigMap",
        sk,
        "dexter",
        "1.2.3",
        json!({"game.properties": GAME, "ui.properties": UI}),
    )
    .await;
    check_node_metadata(
        &env,
        "assert: node metadata ConfigMap",
        sk,
        &["dexter", "3.2.3"],
    )
    .await;

    // The metrics before the delete.
    wait_metric(
        &env,
        "metrics before delete: target count",
        "skyhook_node_target_count",
        &[("skyhook_name", sk)],
        "1",
    )
    .await;
    wait_metric(
        &env,
        "metrics before delete: node complete",
        "skyhook_node_status_count",
        &[("skyhook_name", sk), ("status", "complete")],
        "1",
    )
    .await;
    for pkg in ["dexter", "spencer", "foobar"] {
        wait_metric(
            &env,
            &format!("metrics before delete: {pkg} complete"),
            "skyhook_package_state_count",
            &[
                ("package_name", pkg),
                ("skyhook_name", sk),
                ("state", "complete"),
            ],
            "1",
        )
        .await;
        wait_metric(
            &env,
            &format!("metrics before delete: {pkg} at config"),
            "skyhook_package_stage_count",
            &[
                ("package_name", pkg),
                ("skyhook_name", sk),
                ("stage", "config"),
            ],
            "1",
        )
        .await;
    }
    let tags = with_rollout(sk);
    for (metric, value) in [
        ("skyhook_rollout_matched_nodes", "1"),
        ("skyhook_rollout_completed", "1"),
        ("skyhook_rollout_progress_percent", "100"),
    ] {
        wait_metric(
            &env,
            &format!("metrics before delete: {metric}"),
            metric,
            &tags,
            value,
        )
        .await;
    }

    // Delete it.
    env.skyhooks
        .delete(sk, &Default::default())
        .await
        .expect("delete the Skyhook");
    env.ctx
        .eventually(
            "delete: the Skyhook is gone",
            Duration::from_secs(60),
            || async {
                match env.skyhooks.get_opt(sk).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(s) => Err(format!("still there, finalizers {:?}", s.finalizers())),
                }
            },
        )
        .await;

    // Every series of the deleted Skyhook goes (the reference deletes them in its finalizer).
    let port = env.op.metrics_port;
    env.ctx
        .eventually(
            "after delete: no skyhook_* series of the deleted Skyhook",
            Duration::from_secs(30),
            || async {
                let left: Vec<String> = samples(&metrics(port))
                    .into_iter()
                    .filter(|(n, l, _)| {
                        n.starts_with("skyhook_")
                            && l.get("skyhook_name").map(String::as_str) == Some(sk)
                    })
                    .map(|(n, l, v)| format!("{n}{l:?} {v}"))
                    .collect();
                if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("left: {left:#?}"))
                }
            },
        )
        .await;

    // Its ConfigMaps go with it (owner references).
    let cms: Api<ConfigMap> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    env.ctx
        .eventually(
            "after delete: its ConfigMaps are gone",
            Duration::from_secs(60),
            || async {
                let left: Vec<String> = cms
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .into_iter()
                    .filter(|c| {
                        c.labels().get(schema::NAME_LABEL).map(String::as_str) == Some(sk)
                            || c.labels().get(schema::NODE_META_LABEL).map(String::as_str)
                                == Some(sk)
                    })
                    .map(|c| c.name_any())
                    .collect();
                if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("left: {left:?}"))
                }
            },
        )
        .await;
}

/// Reference: `k8s-tests/chainsaw/skyhook/depends-on`. aa-fast and bb-slow run side by side;
/// cc-last, which depends on both, starts only once both completed; all three end complete.
#[tokio::test]
async fn depends_on() {
    scenario_depends_on().await;
}

pub(crate) async fn scenario_depends_on() {
    let env = setup("depends-on", 1, &[]).await;
    let node = env.nodes[0].clone();
    let name = env.ctx.name("sk");
    let sk = name.as_str();
    // bb-slow sleeps 5 s (the reference: 10 s).
    env.create(&skyhook(
        &env.ctx,
        sk,
        json!({"packages": {
            "aa-fast": {"version": "1.2.3", "image": AGENTLESS, "env": sleep("1")},
            "bb-slow": {"version": "1.2", "image": AGENTLESS, "env": sleep("5")},
            "cc-last": {"version": "5.4.3", "image": AGENTLESS,
                "dependsOn": {"aa-fast": "1.2.3", "bb-slow": "1.2"}, "env": sleep("1")},
        }}),
    ))
    .await;

    let mut jobs = BTreeMap::new();
    for (pkg, ver, stage) in [
        ("aa-fast", "1.2.3", "apply"),
        ("bb-slow", "1.2", "apply"),
        ("aa-fast", "1.2.3", "config"),
        ("bb-slow", "1.2", "config"),
        ("cc-last", "5.4.3", "apply"),
        ("cc-last", "5.4.3", "config"),
    ] {
        let step = format!("assert-skyhook: {pkg} {stage} pod");
        let j = wait_stage_job(&env, &step, sk, pkg, ver, stage, Some(&node), |_| true).await;
        jobs.insert((pkg, stage), j);
    }
    let state = json!({
        "aa-fast|1.2.3": entry("aa-fast", "1.2.3", AGENTLESS, "config", "complete"),
        "bb-slow|1.2": entry("bb-slow", "1.2", AGENTLESS, "config", "complete"),
        "cc-last|5.4.3": entry("cc-last", "5.4.3", AGENTLESS, "config", "complete"),
    });
    wait_skyhook(
        &env,
        "assert-skyhook: Skyhook complete",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            node_state: per_node(&env, &state),
            node_status: Some(("complete", 1)),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;

    // The ordering the README promises (timestamps have second precision).
    let jobs: BTreeMap<(&str, &str), Job> = {
        let fresh = env.jobs_of(sk).await;
        jobs.into_iter()
            .map(|(k, j)| {
                let now = fresh
                    .iter()
                    .find(|f| f.name_any() == j.name_any())
                    .cloned()
                    .unwrap_or(j);
                (k, now)
            })
            .collect()
    };
    let cc_started = created(&jobs[&("cc-last", "apply")]);
    for dep in ["aa-fast", "bb-slow"] {
        let done = completed(&jobs[&(dep, "config")])
            .unwrap_or_else(|| panic!("{dep} config Job not complete"));
        assert!(
            cc_started >= done,
            "order: cc-last started at {cc_started}, before {dep} completed at {done}"
        );
    }
    let aa_done = completed(&jobs[&("aa-fast", "apply")]).expect("aa-fast apply complete");
    let bb_started = created(&jobs[&("bb-slow", "apply")]);
    assert!(
        bb_started <= aa_done,
        "parallel: bb-slow started at {bb_started}, only after aa-fast's apply completed at {aa_done}"
    );
}

/// Reference: `k8s-tests/chainsaw/skyhook/cleanup-pods`. Two nodes run aa then bb (bb depends on
/// aa). A config change (and bb's gracefulShutdown) re-runs bb with the new grace period; then
/// bb is made to fail and one node's state is wiped: the work running there for the old state
/// is killed, that node starts over from aa's apply, and both nodes end with bb erroring.
#[tokio::test]
async fn cleanup_pods() {
    scenario_cleanup_pods().await;
}

pub(crate) async fn scenario_cleanup_pods() {
    let env = setup("cleanup-pods", 2, &[]).await;
    let (n1, n2) = (env.nodes[0].clone(), env.nodes[1].clone());
    let name = env.ctx.name("sk");
    let sk = name.as_str();
    let aa = |secs: &str| json!({"version": "1.2.3", "image": format!("{AGENTLESS}:bogus"), "env": sleep(secs)});
    let bb = |env: Value, foo_value: &str, grace: Option<&str>| {
        let mut p = json!({"version": "1.2", "image": AGENTLESS,
            "dependsOn": {"aa": "1.2.3"}, "env": env, "configMap": {"foo": foo_value}});
        if let Some(g) = grace {
            p["gracefulShutdown"] = json!(g);
        }
        p
    };
    env.create(&skyhook(
        &env.ctx,
        sk,
        json!({"packages": {"aa": aa("2"), "bb": bb(sleep("2"), "bar", None)}}),
    ))
    .await;

    // assert-setup-complete.yaml
    let done = json!({
        "aa|1.2.3": entry("aa", "1.2.3", AGENTLESS, "config", "complete"),
        "bb|1.2": entry("bb", "1.2", AGENTLESS, "config", "complete"),
    });
    let generation = wait_complete(
        &env.skyhooks,
        "assert-setup-complete: Skyhook complete",
        sk,
        Complete::current(SKYHOOK_WAIT),
    )
    .await
    .metadata
    .generation
    .unwrap_or(0);
    wait_skyhook(
        &env,
        "assert-setup-complete: Skyhook status",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            observed_generation: Some(generation),
            node_state: per_node(&env, &done),
            node_status: Some(("complete", 2)),
            package_list: Some("aa:1.2.3,bb:1.2"),
            nodes_in_progress: Some(0),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;

    // force-config.yaml: aa's env, bb's configMap and gracefulShutdown change.
    let before = uids(&env.jobs_of(sk).await);
    set_packages(
        &env,
        sk,
        Some(json!({"aa": aa("3"), "bb": bb(sleep("2"), "buz", Some("46s"))})),
    )
    .await;
    // assert-config-complete.yaml
    let job = wait_stage_job(
        &env,
        "assert-config-complete: bb config pod with the new grace period",
        sk,
        "bb",
        "1.2",
        "config",
        None,
        |j| !before.contains(&uid(j)),
    )
    .await;
    assert_eq!(
        pod_spec(&job).termination_grace_period_seconds,
        Some(46),
        "assert-config-complete: terminationGracePeriodSeconds of {}",
        job.name_any()
    );
    let generation = wait_complete(
        &env.skyhooks,
        "assert-config-complete: Skyhook complete",
        sk,
        Complete::current(SKYHOOK_WAIT),
    )
    .await
    .metadata
    .generation
    .unwrap_or(0);
    wait_skyhook(
        &env,
        "assert-config-complete: Skyhook status",
        sk,
        &SkyhookExpect {
            status: Some("complete"),
            observed_generation: Some(generation),
            node_state: per_node(&env, &done),
            node_status: Some(("complete", 2)),
            ..Default::default()
        },
        SKYHOOK_WAIT,
    )
    .await;

    // muck_up.yaml: bb now fails (exit 2), and its configMap changes again. bb sleeps 8 s (the
    // reference: 2 s) so that its Job still runs when the node state is wiped below.
    let before = uids(&env.jobs_of(sk).await);
    let failing = json!([{"name": "EXIT_CODE", "value": "2"}, {"name": "SLEEP_LEN", "value": "8"}]);
    set_packages(
        &env,
        sk,
        Some(json!({"aa": aa("3"), "bb": bb(failing, "bur", Some("46s"))})),
    )
    .await;
    let doomed = env
        .ctx
        .eventually(
            "muck_up: bb's new Job runs on the first node",
            Duration::from_secs(60),
            || async {
                env.jobs_of(sk)
                    .await
                    .into_iter()
                    .find(|j| {
                        !before.contains(&uid(j))
                            && label(j, schema::PACKAGE_LABEL) == "bb-1.2"
                            && label(j, schema::NODE_LABEL) == schema::label_value(&n1)
                            && running(j)
                    })
                    .ok_or_else(|| "no running bb Job on the first node".to_string())
            },
        )
        .await;

    // Wipe the first node's state.
    let wiped_at = jiff::Timestamp::now();
    let before = uids(&env.jobs_of(sk).await);
    let wipe = json!({"metadata": {"annotations": {schema::node_state_annotation(sk): null}}});
    env.node_api
        .patch(&n1, &PatchParams::default(), &Patch::Merge(&wipe))
        .await
        .expect("wipe the node state");

    // The Job running for state that is gone is killed, before it could end by itself.
    wait_killed(
        &env,
        "assert-cleaned-pods: the bb Job running on the wiped node is killed",
        &doomed,
        Duration::from_secs(20),
    )
    .await;

    // assert-cleaned-pods.yaml: the wiped node starts over.
    let fresh = |j: &Job| {
        !before.contains(&uid(j)) && created(j) >= wiped_at - jiff::SignedDuration::from_secs(1)
    };
    for (pkg, ver, stage) in [
        ("aa", "1.2.3", "apply"),
        ("aa", "1.2.3", "config"),
        ("bb", "1.2", "apply"),
    ] {
        let step = format!("assert-cleaned-pods: {pkg} {stage} pod on the wiped node");
        let j = wait_stage_job(&env, &step, sk, pkg, ver, stage, Some(&n1), fresh).await;
        assert_eq!(
            pod_spec(&j).node_name.as_deref(),
            Some(n1.as_str()),
            "{step}: nodeName"
        );
    }
    // Deliberate deviation (docs/compatibility.md, "Spec drift re-runs packages"): bb's env
    // changed, so on the untouched node it re-runs from apply and fails there; the reference
    // re-runs only config (for the configMap change) and shows bb erroring at config.
    let mut states = BTreeMap::new();
    states.insert(
        n1.clone(),
        json!({
            "aa|1.2.3": entry("aa", "1.2.3", AGENTLESS, "config", "complete"),
            "bb|1.2": entry("bb", "1.2", AGENTLESS, "apply", "erroring"),
        }),
    );
    states.insert(
        n2.clone(),
        json!({
            "aa|1.2.3": entry("aa", "1.2.3", AGENTLESS, "config", "complete"),
            "bb|1.2": entry("bb", "1.2", AGENTLESS, "apply", "erroring"),
        }),
    );
    wait_skyhook(&env, "assert-cleaned-pods: Skyhook erroring (bb at apply on the second node: deviation 'Spec drift re-runs packages')", sk, &SkyhookExpect {
            status: Some("erroring"),
            observed_generation: Some(generation),
            node_state: states,
            node_status: Some(("erroring", 2)),
            ..Default::default()
        }, SKYHOOK_WAIT)
    .await;
}
