//! Reference scenario `skyhook/config-skyhook`: configMap edits during and after the first run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use skyhook::schema::{self, NodeState, Stage, State};

use crate::support::expect::{INCOMPLETE, NOT_ERRORING};
use crate::support::{
    Complete, Env, NodeExpect, PackageExpect, SkyhookExpect, label, setup, skyhook, wait_complete,
};

const IMAGE: &str = "ghcr.io/nvidia/skyhook/agentless";
const GAME: &str =
    "enemies=aliens\nlives=3\nenemies.cheat=true\nenemies.cheat.level=noGoodRotten\n";
const UI: &str =
    "color.good=purple\ncolor.bad=yellow\nallow.textmode=true\nhow.nice.to.look=fairlyNice\n";

/// The scenario's three packages; only the configMap data moves between its steps.
fn spec(dexter: (&str, &str), baxter: (&str, &str)) -> Value {
    // Long enough to catch all three packages in `apply` at once, as the first assert does.
    let env = json!([{"name": "SLEEP_LEN", "value": "4"}]);
    json!({
        "interruptionBudget": {"count": 1},
        "packages": {
            "spencer": {"version": "3.2.3", "image": IMAGE, "env": env,
                "interrupt": {"type": "service", "services": ["cron"]}},
            "dexter": {"version": "1.2.3", "image": IMAGE, "env": env,
                "interrupt": {"type": "reboot"},
                "configInterrupts": {"game.properties": {"type": "service", "services": ["rsyslog"]}},
                "configMap": {"game.properties": dexter.0, "ui.properties": dexter.1}},
            "baxter": {"version": "3.2.1", "image": IMAGE, "env": env,
                "configInterrupts": {"game.properties": {"type": "service", "services": ["rsyslog", "cron"]}},
                "configMap": {"game.properties": baxter.0, "ui.properties": baxter.1}},
        }
    })
}

struct Scenario {
    env: Env,
    name: String,
    node: String,
    cms: Api<ConfigMap>,
}

impl Scenario {
    async fn node(&self) -> Node {
        self.env.node_api.get(&self.node).await.expect("get node")
    }

    async fn state(&self) -> NodeState {
        self.env
            .node_state(&self.node, &self.name)
            .await
            .map(|(_, s)| s)
            .unwrap_or_default()
    }

    async fn data(&self, package: &str, version: &str) -> BTreeMap<String, String> {
        let cm_name = schema::package_configmap_name(&self.name, package, version);
        let cm = self.cms.get(&cm_name).await.expect("package ConfigMap");
        let owner = cm.owner_references().first().cloned().expect("owner");
        assert!(
            owner.kind == "Skyhook"
                && owner.name == self.name
                && owner.controller == Some(true)
                && owner.block_owner_deletion == Some(true),
            "{cm_name}: owner {owner:?}"
        );
        assert_eq!(
            cm.labels().get(schema::NAME_LABEL),
            Some(&self.name),
            "{cm_name}: name label"
        );
        cm.data.unwrap_or_default()
    }

    async fn jobs(&self) -> Vec<Job> {
        self.env.jobs_of(&self.name).await
    }

    async fn patch(&self, patch: Value) {
        self.env
            .skyhooks
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch Skyhook");
    }

    /// Waits for the Skyhook's current generation to be complete, then checks the node's
    /// status label, annotation, conditions and package stages and the Skyhook's status as the
    /// scenario does.
    async fn expect_complete(&self, step: &str, stages: &[(&str, Stage)]) {
        let within = Complete::current(Duration::from_secs(120));
        let done = format!("{step}: the new generation complete");
        wait_complete(&self.env.skyhooks, &done, &self.name, within).await;
        let n = self.node().await;
        let packages = stages
            .iter()
            .map(|&(p, stage)| PackageExpect::new(p, stage, State::Complete).image(IMAGE))
            .collect();
        NodeExpect {
            packages,
            ..NodeExpect::complete()
        }
        .assert(&n, &self.name, step);
        let state = self.state().await;
        let sk = self.env.skyhooks.get(&self.name).await.expect("get");
        SkyhookExpect {
            node_status: Some(("complete", 1)),
            ..Default::default()
        }
        .assert(&sk, step);
        let st = sk.status.expect("status");
        assert_eq!(
            st.node_state.get(&self.node).map(|s| s.iter().count()),
            Some(state.iter().count()),
            "{step}: status.nodeState mirrors the node"
        );
        let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        assert!(!cordoned, "{step}: node left cordoned");
    }
}

fn stage_of(j: &Job) -> &str {
    label(j, schema::STAGE_LABEL)
}

fn new_jobs(before: &BTreeSet<String>, now: &[Job]) -> Vec<Job> {
    now.iter()
        .filter(|j| !before.contains(&j.name_any()))
        .cloned()
        .collect()
}

fn names(jobs: &[Job]) -> BTreeSet<String> {
    jobs.iter().map(|j| j.name_any()).collect()
}

fn interrupt_arg(job: &Job) -> Value {
    use base64::Engine as _;
    let pod = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod");
    let arg = pod.containers[0]
        .args
        .as_ref()
        .and_then(|a| a.get(3))
        .expect("interrupt argument");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(arg)
        .expect("base64");
    serde_json::from_slice(&raw).expect("json")
}

/// Reference `k8s-tests/chainsaw/skyhook/config-skyhook`: three packages on one node; a
/// configMap edit while the first run is under way, an edit of keys with configInterrupts (merged
/// into one interrupt), an edit of keys without one (config only), and a glob configInterrupt.
#[tokio::test]
async fn config_skyhook() {
    scenario_config_skyhook().await;
}

pub(crate) async fn scenario_config_skyhook() {
    let env = setup("sc-config", 1, &[]).await;
    let name = env.ctx.name("config-skyhook");
    let node = env.nodes[0].clone();
    let cms = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let s = Scenario {
        env,
        name,
        node,
        cms,
    };
    s.env
        .create(&skyhook(&s.env.ctx, &s.name, spec((GAME, UI), (GAME, UI))))
        .await;

    // Step 1: all three packages in apply at once, the node cordoned for its interrupts.
    s.env
        .ctx
        .wait_for(
            "step 1: all three packages in apply",
            Duration::from_secs(60),
            || async {
                let st = s.state().await;
                let applying = st
                    .iter()
                    .filter(|(_, e)| e.stage == Stage::Apply && e.state == Some(State::InProgress))
                    .count();
                (applying == 3).then_some(())
            },
        )
        .await;
    let n = s.node().await;
    NodeExpect {
        status: Some("in_progress"),
        not_ready: Some(INCOMPLETE),
        erroring: Some(NOT_ERRORING),
        ..Default::default()
    }
    .assert(&n, &s.name, "step 1");
    assert_eq!(
        n.spec.as_ref().and_then(|x| x.unschedulable),
        Some(true),
        "step 1: cordon"
    );
    s.env
        .ctx
        .wait_for(
            "step 1: Skyhook in_progress with the node's state",
            Duration::from_secs(20),
            || async {
                let st = s.env.skyhooks.get(&s.name).await.ok()?.status?;
                let mirrored = st
                    .node_state
                    .get(&s.node)
                    .is_some_and(|ns| ns.iter().count() == 3);
                (st.status == Some(schema::Status::InProgress)
                    && mirrored
                    && st.node_status.values().all(|v| v.as_str() == "in_progress"))
                .then_some(())
            },
        )
        .await;
    let want: BTreeMap<String, String> = [("game.properties", GAME), ("ui.properties", UI)]
        .map(|(k, v)| (k.into(), v.into()))
        .into();
    assert_eq!(
        s.data("dexter", "1.2.3").await,
        want,
        "step 1: dexter's ConfigMap"
    );
    assert_eq!(
        s.data("baxter", "3.2.1").await,
        want,
        "step 1: baxter's ConfigMap"
    );
    let meta = s
        .cms
        .list(&ListParams::default().labels(&format!("{}={}", schema::NODE_META_LABEL, s.name)))
        .await
        .expect("list metadata");
    assert_eq!(meta.items.len(), 1, "step 1: one node metadata ConfigMap");
    let data = meta.items[0].data.clone().unwrap_or_default();
    assert_eq!(data.len(), 3, "step 1: metadata keys {:?}", data.keys());
    for (key, needle) in [
        ("labels.json", schema::status_label(&s.name)),
        ("annotations.json", schema::node_state_annotation(&s.name)),
        ("packages.json", "\"agentVersion\"".into()),
        ("packages.json", "\"3.2.3\"".into()),
    ] {
        assert!(data[key].contains(&needle), "step 1: {key} lacks {needle}");
    }

    // Step 2: baxter's game.properties edited while the first run is under way. Deliberate
    // deviation (docs/compatibility.md, "configMap edits during a rollout"): the ConfigMap is
    // written at once and the node, not yet at config, runs config once with the new data; the
    // reference holds the edit back until every node is complete, then runs config again.
    s.patch(json!({"spec": spec((GAME, UI), ("changed\n", UI))}))
        .await;
    s.env
        .ctx
        .wait_for(
            "step 2: baxter's ConfigMap written during the run",
            Duration::from_secs(15),
            || async {
                let cm = s
                    .cms
                    .get(&schema::package_configmap_name(&s.name, "baxter", "3.2.1"))
                    .await
                    .ok()?;
                (cm.data?.get("game.properties").map(String::as_str) == Some("changed\n"))
                    .then_some(())
            },
        )
        .await;
    let st = s.state().await;
    assert!(
        !st.iter()
            .any(|(_, e)| e.name == "baxter" && e.stage != Stage::Apply),
        "step 2: baxter already past apply when the ConfigMap changed: {st:?}"
    );
    let all_post = [
        ("baxter", Stage::PostInterrupt),
        ("dexter", Stage::PostInterrupt),
        ("spencer", Stage::PostInterrupt),
    ];
    s.expect_complete("step 2", &all_post).await;
    let mut want_baxter = want.clone();
    want_baxter.insert("game.properties".into(), "changed\n".into());
    assert_eq!(
        s.data("dexter", "1.2.3").await,
        want,
        "step 2: dexter's ConfigMap"
    );
    assert_eq!(
        s.data("baxter", "3.2.1").await,
        want_baxter,
        "step 2: baxter's ConfigMap"
    );
    let jobs = s.jobs().await;
    let baxter_configs = jobs
        .iter()
        .filter(|j| stage_of(j) == "config" && label(j, schema::PACKAGE_LABEL) == "baxter-3.2.1")
        .count();
    assert_eq!(
        baxter_configs, 1,
        "step 2: baxter's config ran once, with the new data"
    );

    // Step 3: game.properties edited on both packages with configInterrupts: config, one merged
    // interrupt, post-interrupt.
    let before = names(&jobs);
    s.patch(json!({"spec": spec(("changed\n", UI), ("changed again\n", UI))}))
        .await;
    s.env
        .wait_status(&s.name, schema::Status::InProgress, Duration::from_secs(30))
        .await;
    s.expect_complete("step 3", &all_post).await;
    let fresh = new_jobs(&before, &s.jobs().await);
    let interrupts: Vec<&Job> = fresh
        .iter()
        .filter(|j| stage_of(j) == "interrupt")
        .collect();
    assert_eq!(interrupts.len(), 1, "step 3: one merged interrupt Job");
    assert_eq!(
        interrupt_arg(interrupts[0]),
        json!({"type": "service_restart", "services": ["cron", "rsyslog"]}),
        "step 3: the two packages' config interrupts merged"
    );
    let configs: BTreeSet<&str> = fresh
        .iter()
        .filter(|j| stage_of(j) == "config")
        .map(|j| label(j, schema::PACKAGE_LABEL))
        .collect();
    assert_eq!(
        configs,
        BTreeSet::from(["baxter-3.2.1", "dexter-1.2.3"]),
        "step 3: config Jobs"
    );
    assert!(
        !fresh.iter().any(|j| stage_of(j) == "apply"),
        "step 3: a config change re-ran apply"
    );
    assert_eq!(
        s.data("dexter", "1.2.3").await["game.properties"],
        "changed\n"
    );
    assert_eq!(
        s.data("baxter", "3.2.1").await["game.properties"],
        "changed again\n"
    );

    // Step 4: ui.properties has no configInterrupt: config only, nothing cordoned or interrupted.
    let before = names(&s.jobs().await);
    s.patch(json!({"spec": spec(("changed\n", "changed\n"), ("changed again\n", "changed\n"))}))
        .await;
    s.env
        .wait_status(&s.name, schema::Status::InProgress, Duration::from_secs(30))
        .await;
    s.expect_complete(
        "step 4",
        &[
            ("baxter", Stage::Config),
            ("dexter", Stage::Config),
            ("spencer", Stage::PostInterrupt),
        ],
    )
    .await;
    let fresh = new_jobs(&before, &s.jobs().await);
    let stages: Vec<&str> = fresh.iter().map(stage_of).collect();
    assert_eq!(stages, vec!["config", "config"], "step 4: only config runs");
    assert_eq!(
        s.data("dexter", "1.2.3").await["ui.properties"],
        "changed\n"
    );
    assert_eq!(
        s.data("baxter", "3.2.1").await["ui.properties"],
        "changed\n"
    );

    // Step 5: a glob configInterrupt on dexter, applied as a partial object (a merge patch, as
    // chainsaw's apply does), and a change of a key it matches.
    let before = names(&s.jobs().await);
    s.patch(json!({"spec": {"packages": {"dexter": {
        "configInterrupts": {"*.properties": {"type": "service", "services": ["rsyslog"]}},
        "configMap": {"game.properties": "changed via glob\n"},
    }}}}))
    .await;
    s.env
        .wait_status(&s.name, schema::Status::InProgress, Duration::from_secs(30))
        .await;
    s.expect_complete("step 5", &[("dexter", Stage::PostInterrupt)])
        .await;
    let fresh = new_jobs(&before, &s.jobs().await);
    let config = fresh
        .iter()
        .find(|j| stage_of(j) == "config" && label(j, schema::PACKAGE_LABEL) == "dexter-1.2.3")
        .expect("step 5: a config Job for dexter");
    let pod = config
        .spec
        .as_ref()
        .and_then(|x| x.template.spec.as_ref())
        .expect("pod");
    // The check runs as the pod's main container here, not as a third init container
    // (docs/compatibility.md, "Jobs"); names and arguments are the reference's.
    let mut all = pod.init_containers.clone().unwrap_or_default();
    all.extend(pod.containers.iter().cloned());
    let by_name = |n: &str| all.iter().find(|c| c.name == n).cloned();
    assert!(by_name("dexter-init").is_some(), "step 5: dexter-init");
    for (container, verb) in [
        ("dexter-config", "config"),
        ("dexter-configcheck", "config-check"),
    ] {
        let args = by_name(container)
            .and_then(|c| c.args)
            .unwrap_or_else(|| panic!("step 5: {container} missing"));
        assert_eq!(args.len(), 3, "step 5: {container} args {args:?}");
        assert_eq!(
            (args[0].as_str(), args[1].as_str()),
            (verb, "/root"),
            "step 5: {container}"
        );
    }
    let interrupts: Vec<&Job> = fresh
        .iter()
        .filter(|j| stage_of(j) == "interrupt")
        .collect();
    assert_eq!(interrupts.len(), 1, "step 5: the glob's interrupt");
    assert_eq!(
        interrupt_arg(interrupts[0]),
        json!({"type": "service_restart", "services": ["rsyslog"]}),
        "step 5: the glob's interrupt"
    );
    assert_eq!(
        s.data("dexter", "1.2.3").await["game.properties"],
        "changed via glob\n"
    );
}
