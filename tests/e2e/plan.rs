//! `kubectl skyhook plan -f`: the dry run against the live cluster, then the same spec applied.
//! Each case checks that the plan's first Jobs are exactly the Jobs the operator creates first,
//! and that the cordons and evictions it names are those that happen.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};
use skyhook::plan::dry_run::{Reason, Rollout};
use skyhook::schema::{self, Status};

use crate::support::plugin::plugin_async;
use crate::support::{Env, label, pkg, reboot_pkg, setup, skyhook, sleep};

#[derive(Debug, Deserialize)]
struct Output {
    validation: Vec<String>,
    plans: Vec<Rollout>,
}

/// (node, `package-version` as the package label has it, stage)
type JobKey = (String, String, String);

/// The documents, as one YAML file (JSON is YAML).
fn manifest(docs: &[Value]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("a temp file");
    for d in docs {
        writeln!(f, "---\n{}", serde_json::to_string_pretty(d).expect("json")).expect("write");
    }
    f
}

async fn plan(env: &Env, file: &tempfile::NamedTempFile, extra: &[&str]) -> Output {
    let path = file.path().display().to_string();
    let mut args = vec!["plan", "-f", &path, "-n", &env.ctx.ns, "-o", "json"];
    args.extend(extra);
    let ran = plugin_async(&env.ctx, &args).await;
    serde_json::from_str(ran.ok()).unwrap_or_else(|e| panic!("{e}: {}", ran.stdout))
}

async fn plan_text(env: &Env, file: &tempfile::NamedTempFile) -> String {
    let path = file.path().display().to_string();
    let ran = plugin_async(&env.ctx, &["plan", "-f", &path, "-n", &env.ctx.ns]).await;
    ran.ok().to_string()
}

fn first_jobs(r: &Rollout) -> BTreeSet<JobKey> {
    r.first_pass
        .jobs
        .iter()
        .map(|j| {
            (
                j.node.clone(),
                format!("{}-{}", j.package, j.version),
                j.stage.clone(),
            )
        })
        .collect()
}

/// The names of the Skyhook's Jobs now.
async fn job_names(env: &Env, sk: &str) -> BTreeSet<String> {
    let lp = ListParams::default().labels(&format!("{}={sk}", schema::NAME_LABEL));
    let list = env.jobs.list(&lp).await.expect("list Jobs");
    list.items.iter().map(|j| j.name_any()).collect()
}

/// The Jobs the operator creates first after a change: those not in `before`, once some appear
/// (stages sleep long enough that no second stage starts meanwhile).
async fn created_first(env: &Env, sk: &str, before: &BTreeSet<String>) -> BTreeSet<JobKey> {
    let lp = ListParams::default().labels(&format!("{}={sk}", schema::NAME_LABEL));
    let new = || async {
        let list = env.jobs.list(&lp).await.ok()?;
        let keys: BTreeSet<JobKey> = list
            .items
            .iter()
            .filter(|j| !before.contains(&j.name_any()))
            .map(|j| {
                (
                    label(j, schema::NODE_LABEL).to_string(),
                    label(j, schema::PACKAGE_LABEL).to_string(),
                    label(j, schema::STAGE_LABEL).to_string(),
                )
            })
            .collect();
        Some(keys)
    };
    env.ctx
        .wait_for("the first Jobs", Duration::from_secs(90), || async {
            new().await.filter(|k| !k.is_empty())
        })
        .await;
    // Every create of that pass lands.
    tokio::time::sleep(Duration::from_secs(2)).await;
    new().await.expect("list Jobs")
}

/// The rollout is over: complete at the current generation, and no Job of it unfinished.
async fn settled(env: &Env, name: &str) {
    env.ctx
        .wait_for("the rollout settled", Duration::from_secs(240), || async {
            let sk = env.skyhooks.get(name).await.ok()?;
            let st = sk.status.clone()?;
            let current = st.status == Some(Status::Complete)
                && st.observed_generation == sk.metadata.generation.unwrap_or(0);
            let lp = ListParams::default().labels(&format!("{}={name}", schema::NAME_LABEL));
            let jobs = env.jobs.list(&lp).await.ok()?;
            let running = jobs.items.iter().any(|j| {
                let s = j.status.as_ref();
                s.and_then(|s| s.succeeded).unwrap_or(0) == 0
                    && s.and_then(|s| s.failed).unwrap_or(0) == 0
            });
            (current && !running).then_some(())
        })
        .await;
}

fn object(sk: &skyhook::crd::Skyhook) -> Value {
    serde_json::to_value(sk).expect("json")
}

async fn replace_spec(env: &Env, name: &str, spec: &Value) {
    // One write: clearing the packages first and merging the new ones in a second patch let a
    // pass read the spec in between (no packages), which uninstalls every package.
    let ops = json!([{"op": "replace", "path": "/spec/packages", "value": spec["packages"]}]);
    let ops: json_patch::Patch = serde_json::from_value(ops).expect("a JSON patch");
    env.skyhooks
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .expect("replace the packages");
}

/// A new Skyhook: the plan names every node, its first Jobs are the operator's first Jobs, and
/// once the rollout is done the same file plans nothing.
#[tokio::test]
async fn a_new_skyhook_plans_what_the_operator_then_does_and_nothing_after() {
    let env = setup("plan-new", 3, &[]).await;
    let name = env.ctx.name("sk");
    let sk = skyhook(
        &env.ctx,
        &name,
        json!({"interruptionBudget": {"count": 2},
               "packages": {"tool": pkg("1.0.0", sleep("12"))}}),
    );
    let file = manifest(&[object(&sk)]);
    let out = plan(&env, &file, &[]).await;
    assert_eq!(out.validation.len(), 1);
    assert!(
        out.validation[0].contains("the API server accepts it"),
        "{:?}",
        out.validation
    );
    let p = &out.plans[0];
    let mut selected = p.selected.clone();
    selected.sort();
    let mut nodes = env.nodes.clone();
    nodes.sort();
    assert_eq!(selected, nodes);
    assert_eq!(p.nodes.len(), 3, "{p:#?}");
    assert!(p.nodes.iter().all(|n| n.packages[0].reason == Reason::New));
    assert_eq!(p.first_pass.jobs.len(), 2, "a budget of two: {p:#?}");
    assert_eq!(p.batches.len(), 2, "{:?}", p.batches);
    env.create(&sk).await;
    let real = created_first(&env, &name, &BTreeSet::new()).await;
    assert_eq!(first_jobs(p), real);
    settled(&env, &name).await;
    let again = plan_text(&env, &file).await;
    assert!(
        again.contains("Nothing would run: every selected node already has this spec."),
        "{again}"
    );
    let out = plan(&env, &file, &[]).await;
    assert!(out.plans[0].is_noop(), "{:#?}", out.plans[0]);
}

/// What a step expects of each node's reason.
type Expect = Box<dyn Fn(&Reason) -> bool>;

/// A version bump, a config change and an uninstall, each planned, then applied.
#[tokio::test]
async fn version_bump_config_change_and_uninstall_plan_what_then_runs() {
    let env = setup("plan-change", 2, &[]).await;
    let name = env.ctx.name("sk");
    let mut tool = pkg("1.0.0", sleep("8"));
    tool["configMap"] = json!({"tool.conf": "level=1"});
    let extra = pkg("2.0.0", sleep("8"));
    let sk = skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"tool": tool.clone(), "extra": extra.clone()}}),
    );
    env.create(&sk).await;
    settled(&env, &name).await;
    let mut steps: Vec<(&str, Value, Expect)> = Vec::new();
    let mut bumped = tool.clone();
    bumped["version"] = json!("1.1.0");
    steps.push((
        "version bump",
        json!({"tool": bumped.clone(), "extra": extra.clone()}),
        Box::new(
            |r| matches!(r, Reason::VersionChange { from, to } if from == "1.0.0" && to == "1.1.0"),
        ),
    ));
    let mut reconfigured = bumped.clone();
    reconfigured["configMap"] = json!({"tool.conf": "level=2"});
    steps.push((
        "config change",
        json!({"tool": reconfigured.clone(), "extra": extra.clone()}),
        Box::new(|r| *r == Reason::ConfigChange),
    ));
    // Asked for with the `uninstall` block, so the package keeps its env and its uninstall
    // Jobs run long enough to be told from the next pass's (a package removed from the spec
    // takes its env with it, and its uninstall ends at once here; the unit tests plan that).
    let mut removed = extra.clone();
    removed["uninstall"] = json!({"enabled": true, "apply": true});
    steps.push((
        "uninstall",
        json!({"tool": reconfigured.clone(), "extra": removed}),
        Box::new(|r| *r == Reason::Uninstall),
    ));
    for (step, packages, reason) in steps {
        let mut next = sk.clone();
        next.spec = serde_json::from_value(json!({
            "nodeSelectors": sk.spec.node_selectors, "packages": packages,
        }))
        .expect("spec");
        let out = plan(&env, &manifest(&[object(&next)]), &[]).await;
        let p = &out.plans[0];
        assert_eq!(p.nodes.len(), 2, "{step}: {p:#?}");
        for n in &p.nodes {
            assert!(
                n.packages.iter().any(|r| reason(&r.reason)),
                "{step}: {n:#?}"
            );
        }
        let before = job_names(&env, &name).await;
        replace_spec(
            &env,
            &name,
            &serde_json::to_value(&next.spec).expect("spec"),
        )
        .await;
        let real = created_first(&env, &name, &before).await;
        assert_eq!(first_jobs(p), real, "{step}: {p:#?}");
        settled(&env, &name).await;
    }
}

/// A policy with two compartments, planned with its Skyhook from one file: the batches name
/// both compartments, and the first batch is the operator's.
#[tokio::test]
async fn a_policy_with_two_compartments_plans_its_batches() {
    let env = setup("plan-policy", 4, &[]).await;
    let canary = env.nodes[0].clone();
    let out = env
        .ctx
        .kubectl(&["label", "node", &canary, "plan-ring=canary", "--overwrite"]);
    assert!(out.status.success(), "{out:?}");
    let policy_name = env.ctx.name("policy");
    let policy = json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": policy_name},
        "spec": {
            "compartments": [{"name": "canary",
                "selector": {"matchLabels": {"plan-ring": "canary"}},
                "budget": {"count": 1}, "strategy": {"fixed": {}}}],
            "default": {"budget": {"count": 2}, "strategy": {"fixed": {}}},
        },
    });
    let name = env.ctx.name("sk");
    let sk = skyhook(
        &env.ctx,
        &name,
        json!({"deploymentPolicy": policy_name, "packages": {"tool": pkg("1.0.0", sleep("10"))}}),
    );
    let out = plan(&env, &manifest(&[policy.clone(), object(&sk)]), &[]).await;
    assert_eq!(out.validation.len(), 2, "{:?}", out.validation);
    let p = &out.plans[0];
    assert_eq!(p.policy, policy_name);
    let compartments: BTreeSet<&str> = p.batches.iter().map(|b| b.compartment.as_str()).collect();
    assert_eq!(
        compartments,
        BTreeSet::from(["canary", "__default__"]),
        "{:?}",
        p.batches
    );
    for b in &p.batches {
        let max = if b.compartment == "canary" { 1 } else { 2 };
        assert!(b.nodes.len() <= max, "{b:?}");
    }
    let created = env
        .ctx
        .kubectl_stdin(&["apply", "-f", "-"], policy.to_string().as_bytes());
    assert!(created.status.success(), "{created:?}");
    env.create(&sk).await;
    let real = created_first(&env, &name, &BTreeSet::new()).await;
    assert_eq!(first_jobs(p), real);
    env.wait_status(&name, Status::Complete, Duration::from_secs(240))
        .await;
}

/// An interrupt package on a node with a pod a PodDisruptionBudget protects: the plan names
/// the cordon, the eviction and the budget refusing it; the operator cordons, is refused by
/// that budget, and evicts that pod once the budget goes.
#[tokio::test]
async fn an_interrupt_on_a_node_with_a_protected_pod_names_its_drain() {
    let env = setup("plan-drain", 2, &[]).await;
    let node = env.nodes[0].clone();
    let pods: Api<Pod> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let web = env.ctx.name("web");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": web, "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "example.com/app:1"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let pdb_name = env.ctx.name("pdb");
    let pdb = serde_json::from_value(json!({"metadata": {"name": pdb_name},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}}))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
    env.ctx
        .wait_for("the budget's status", Duration::from_secs(30), || async {
            let p = pdbs.get(&pdb_name).await.ok()?;
            p.status?.observed_generation.map(|_| ())
        })
        .await;
    let name = env.ctx.name("sk");
    let sk = skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"drv": reboot_pkg("1.0.0")}}),
    );
    let out = plan(&env, &manifest(&[object(&sk)]), &[]).await;
    let p = &out.plans[0];
    let run = p
        .nodes
        .iter()
        .find(|n| n.node == node)
        .expect("the node runs");
    let interrupt = run.interrupt.as_ref().expect("an interrupt");
    assert!(interrupt.cordon, "{interrupt:?}");
    assert_eq!(interrupt.kinds, ["reboot (drv)"]);
    let named: Vec<(String, Option<String>)> = interrupt
        .evictions
        .iter()
        .map(|e| (e.pod.clone(), e.refused_by.clone()))
        .collect();
    assert_eq!(
        named,
        [(format!("{}/{web}", env.ctx.ns), Some(pdb_name.clone()))]
    );
    let other = p
        .nodes
        .iter()
        .find(|n| n.node != node)
        .expect("the other node");
    assert!(
        other
            .interrupt
            .as_ref()
            .is_some_and(|i| i.cordon && i.evictions.is_empty())
    );
    let text = plan_text(&env, &manifest(&[object(&sk)])).await;
    eprintln!("{text}");
    assert!(
        text.contains(&format!("refused now by PodDisruptionBudget {pdb_name}")),
        "{text}"
    );
    env.create(&sk).await;
    env.ctx
        .wait_for(
            "the operator refused by the budget the plan named",
            Duration::from_secs(90),
            || async {
                let sk = env.skyhooks.get(&name).await.ok()?;
                let c = sk
                    .status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == schema::NODE_BLOCKED_CONDITION)?;
                (c.status == "True" && c.message.contains(&web)).then_some(())
            },
        )
        .await;
    let n = env.node_api.get(&node).await.expect("node");
    assert_eq!(n.spec.and_then(|s| s.unschedulable), Some(true));
    pdbs.delete(&pdb_name, &Default::default())
        .await
        .expect("delete pdb");
    env.ctx
        .wait_for("the named pod evicted", Duration::from_secs(90), || async {
            matches!(pods.get_opt(&web).await, Ok(None)).then_some(())
        })
        .await;
    env.wait_status(&name, Status::Complete, Duration::from_secs(180))
        .await;
}

/// An invalid spec exits 1 naming the field with the API server's admission message; `--against`
/// plans a file's object as the next version of a stored one.
#[tokio::test]
async fn an_invalid_spec_is_refused_and_against_compares_with_the_stored_object() {
    let env = setup("plan-invalid", 1, &[]).await;
    let name = env.ctx.name("sk");
    let sk = skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"tool": pkg("not-a-version", sleep("1"))}}),
    );
    let file = manifest(&[object(&sk)]);
    let path = file.path().display().to_string();
    let ran = plugin_async(&env.ctx, &["plan", "-f", &path, "-n", &env.ctx.ns]).await;
    ran.fails(1, "is invalid: spec.packages");
    assert!(ran.stderr.contains("not-a-version"), "{ran:?}");
    // Stored at 1.0.0 and complete; the file names another object at 1.1.0.
    let live = skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"tool": pkg("1.0.0", sleep("1"))}}),
    );
    env.create(&live).await;
    settled(&env, &name).await;
    let mut next = skyhook(
        &env.ctx,
        &env.ctx.name("next"),
        json!({"packages": {"tool": pkg("1.1.0", sleep("1"))}}),
    );
    next.metadata.labels = live.metadata.labels.clone();
    let out = plan(&env, &manifest(&[object(&next)]), &["--against", &name]).await;
    let p = &out.plans[0];
    assert_eq!(p.name, name);
    assert_eq!(
        p.nodes[0].packages[0].reason,
        Reason::VersionChange {
            from: "1.0.0".into(),
            to: "1.1.0".into()
        }
    );
    // Without it, the file's object is new.
    let out = plan(&env, &manifest(&[object(&next)]), &[]).await;
    assert_eq!(out.plans[0].nodes[0].packages[0].reason, Reason::New);
}
