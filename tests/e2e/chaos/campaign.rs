//! The campaign (issue 52), run by `tests/chaos` alone on the shared cluster (it restarts the
//! API server and etcd): a workload of Skyhooks and a NodeWright on kwok nodes, two operator
//! replicas with leader election and the shipped rights, faults drawn from the seed, then a
//! settle time, and the checker over the history the harness recorded. The report goes to
//! `target/chaos/<seed>/` (report.json, history.jsonl) with a one-screen summary.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::audit;
use super::checker::{self, Rule};
use super::faults::{Fault, Injected, MENU, REAL_ONLY, Rng};
use super::history;
use super::host::{self, Host};
use super::recorder::Recorder;
use crate::support::private::restart_component;
use crate::support::real::{images, package_image};
use crate::support::refusal::Refusal;
use crate::support::{Operator, TestCtx, cluster_dir, install_nodewright_crds, run};

const LEASE: &[(&str, &str)] = &[
    ("LEADER_ELECTION", "true"),
    ("LEADER_ELECTION_LEASE_DURATION", "6s"),
    ("LEADER_ELECTION_RENEW_DEADLINE", "4s"),
    ("LEADER_ELECTION_RETRY_PERIOD", "1s"),
];

/// How long every object has to complete once the faults stop.
const SETTLE: Duration = Duration::from_secs(600);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A fault that lasts, and how to lift it.
enum Open {
    Replica(usize),
    Stopped(u32),
    Label(String),
    Pdb(String),
    Cordon(String),
    Refused(Refusal),
    Cut(String),
}

struct Campaign {
    ctx: TestCtx,
    /// Every node of the campaign, the real ones too.
    nodes: Vec<String>,
    real: Vec<String>,
    /// The packages' image: the shellscript package from the cluster's registry when real nodes
    /// run it (kwok runs no image).
    image: String,
    /// An image a real node can run for a guard pod (kwok nodes run anything).
    guard_image: String,
    ops: Vec<Operator>,
    rng: Rng,
    log: Vec<Injected>,
    open: Vec<(Instant, usize, Open)>,
    selector: (String, String),
    edits: u64,
    /// Replicas that exited by themselves and were started again.
    restarts: u64,
    /// svc's `extra` package is in the spec (the edits remove and add it in turn).
    extra_present: bool,
}

impl Campaign {
    /// A package of the workload: on a real node every script appends to the node's own
    /// record ([`host::script`]); on kwok `SLEEP_LEN` sets how long each stage takes.
    fn pkg(&self, version: &str, sleep: &str) -> Value {
        let scripts: serde_json::Map<String, Value> = host::STEPS
            .iter()
            .map(|s| (format!("{s}.sh"), Value::String(host::script(s))))
            .collect();
        json!({"version": version, "image": self.image, "configMap": scripts,
               "env": [{"name": "SLEEP_LEN", "value": sleep}]})
    }

    fn kubectl(&self, args: &[&str]) -> bool {
        self.ctx
            .cluster
            .kubectl()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn wait_api(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !self.kubectl(&["get", "--raw", "/readyz", "--request-timeout=2s"]) {
            assert!(
                Instant::now() < deadline,
                "the API server did not come back"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn labels(&self) -> Value {
        let (k, v) = self.ctx.test_label();
        json!({k: v})
    }

    fn selector(&self) -> Value {
        let (k, v) = self.ctx.test_label();
        json!({"matchLabels": {k: v, self.selector.0.clone(): self.selector.1.clone()}})
    }

    fn skyhooks(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "skyhook.nvidia.com",
            "v1alpha1",
            "Skyhook",
        ));
        Api::all_with(self.ctx.client.clone(), &ar)
    }

    fn nodewrights(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "nodewright.nvidia.com",
            "v1alpha1",
            "NodeWright",
        ));
        Api::all_with(self.ctx.client.clone(), &ar)
    }

    /// The workload: its objects and their limits.
    async fn workload(&self) -> Vec<Rule> {
        let policy = crate::support::create_policy(
            &self.ctx,
            json!({"default": {"budget": {"count": 4}, "strategy": {"fixed": {"initialBatch": 4}}}}),
        )
        .await;
        let mut driver = self.pkg("1.0.0", "1");
        driver["interrupt"] = json!({"type": "reboot"});
        driver["configMap"]["driver.conf"] = json!("edit=0");
        let mut bravo = self.pkg("1.0.0", "1");
        bravo["dependsOn"] = json!({"alpha": "1.0.0"});
        let mut svc = self.pkg("1.0.0", "1");
        svc["interrupt"] = json!({"type": "service", "services": ["containerd"]});
        let mut extra = self.pkg("1.0.0", "1");
        extra["uninstall"] = json!({"enabled": true, "apply": false});
        let objects = [
            (
                self.skyhooks(),
                "Skyhook",
                "skyhook.nvidia.com/v1alpha1",
                self.ctx.name("base"),
                json!({"priority": 100, "interruptionBudget": {"count": 8},
                       "packages": {"alpha": self.pkg("1.0.0", "2"), "bravo": bravo}}),
                8,
            ),
            (
                self.skyhooks(),
                "Skyhook",
                "skyhook.nvidia.com/v1alpha1",
                self.ctx.name("driver"),
                json!({"priority": 200, "deploymentPolicy": policy,
                       "packages": {"driver": driver}}),
                4,
            ),
            (
                self.nodewrights(),
                "NodeWright",
                "nodewright.nvidia.com/v1alpha1",
                self.ctx.name("svc"),
                json!({"priority": 300, "interruptionBudget": {"count": 5},
                       "packages": {"svc": svc, "extra": extra}}),
                5,
            ),
        ];
        let mut rules = Vec::new();
        for (api, kind, version, name, mut spec, limit) in objects {
            spec["nodeSelectors"] = self.selector();
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": version, "kind": kind,
                "metadata": {"name": name, "labels": self.labels()},
                "spec": spec,
            }))
            .expect("object");
            api.create(&PostParams::default(), &obj)
                .await
                .unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
            rules.push(Rule {
                object: name,
                limit,
            });
        }
        rules
    }

    /// The next spec edit, in turn: a config change, a version bump, an uninstall or reinstall.
    async fn edit(&mut self) {
        self.edits += 1;
        let n = self.edits;
        let merge = |v: Value| Patch::Merge(v);
        let pp = PatchParams::default();
        let (api, name, patch, what) = match n % 3 {
            1 => (
                self.skyhooks(),
                self.ctx.name("driver"),
                json!({"spec": {"packages": {"driver": {"configMap": {"driver.conf": format!("edit={n}")}}}}}),
                "driver's config changed",
            ),
            2 => (
                self.skyhooks(),
                self.ctx.name("base"),
                json!({"spec": {"packages": {"alpha": {"version": format!("1.{n}.0")},
                                              "bravo": {"dependsOn": {"alpha": format!("1.{n}.0")}}}}}),
                "base's alpha version bumped",
            ),
            _ if self.extra_present => (
                self.nodewrights(),
                self.ctx.name("svc"),
                json!({"spec": {"packages": {"extra": null}}}),
                "svc's extra removed (uninstall)",
            ),
            _ => {
                let mut extra = self.pkg("1.0.0", "1");
                extra["uninstall"] = json!({"enabled": true, "apply": false});
                (
                    self.nodewrights(),
                    self.ctx.name("svc"),
                    json!({"spec": {"packages": {"extra": extra}}}),
                    "svc's extra added again",
                )
            }
        };
        if n.is_multiple_of(3) {
            self.extra_present = !self.extra_present;
        }
        let said = match api.patch(&name, &pp, &merge(patch)).await {
            Ok(_) => format!("spec edit: {what}"),
            Err(e) => format!("spec edit refused ({what}): {e}"),
        };
        self.logged(None, said);
    }

    fn logged(&mut self, fault: Option<Fault>, detail: String) -> usize {
        eprintln!("[chaos] {} {detail}", jiff::Timestamp::now());
        if let Some(fault) = fault {
            self.log.push(Injected {
                at: jiff::Timestamp::now(),
                fault,
                detail,
                lifted: None,
            });
        }
        self.log.len().saturating_sub(1)
    }

    fn random_node(&mut self) -> String {
        self.rng.pick(&self.nodes).cloned().unwrap_or_default()
    }

    fn real_node(&mut self) -> Option<String> {
        self.rng.pick(&self.real).cloned()
    }

    fn real_node_cmd(&self, args: &[&str]) -> bool {
        Command::new(cluster_dir().join("real-node"))
            .args(args)
            .env("KUBECONFIG", &self.ctx.cluster.kubeconfig)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    async fn inject(&mut self, fault: Fault) {
        if REAL_ONLY.contains(&fault) && self.real.is_empty() {
            return;
        }
        let lasting = Instant::now() + Duration::from_secs(self.rng.between(10, 40));
        match fault {
            Fault::RealReboot => {
                let Some(node) = self.real_node() else { return };
                if self.real_node_cmd(&["reboot", &node]) {
                    self.logged(Some(fault), format!("{node} rebooted out of band"));
                }
            }
            Fault::RuntimeKill => {
                let Some(node) = self.real_node() else { return };
                let held = self.rng.between(5, 20).to_string();
                if self.real_node_cmd(&["kill-runtime", &node, &held]) {
                    self.logged(
                        Some(fault),
                        format!("{node}: containerd and kubelet killed, down for {held} s"),
                    );
                }
            }
            Fault::NetworkCut => {
                let Some(node) = self.real_node() else { return };
                let cut =
                    (self.open.iter()).any(|(_, _, o)| matches!(o, Open::Cut(n) if *n == node));
                if cut || !self.real_node_cmd(&["cut", &node]) {
                    return;
                }
                let at = self.logged(Some(fault), format!("{node} cut from the API server"));
                let back = Instant::now() + Duration::from_secs(self.rng.between(30, 90));
                self.open.push((back, at, Open::Cut(node)));
            }
            Fault::KillReplica => {
                let i = self.rng.between(0, 1) as usize;
                if !self.ops[i].running() {
                    return;
                }
                self.ops[i].kill();
                let at = self.logged(Some(fault), format!("replica {i} killed"));
                let back = Instant::now() + Duration::from_secs(self.rng.between(2, 8));
                self.open.push((back, at, Open::Replica(i)));
            }
            Fault::StopReplica => {
                let i = self.rng.between(0, 1) as usize;
                let Some(pid) = self.ops[i].pid() else { return };
                let stopped =
                    (self.open.iter()).any(|(_, _, o)| matches!(o, Open::Stopped(p) if *p == pid));
                if stopped {
                    return;
                }
                run(Command::new("kill").args(["-STOP", &pid.to_string()]));
                let at = self.logged(Some(fault), format!("replica {i} (pid {pid}) stopped"));
                let back = Instant::now() + Duration::from_secs(self.rng.between(3, 15));
                self.open.push((back, at, Open::Stopped(pid)));
            }
            Fault::ApiServerRestart | Fault::EtcdRestart => {
                let component = if fault == Fault::ApiServerRestart {
                    "kube-apiserver"
                } else {
                    "etcd"
                };
                self.logged(Some(fault), format!("{component} killed for 3 s"));
                let state = self.ctx.cluster.state_dir.clone();
                let kubectl = || self.ctx.cluster.kubectl();
                restart_component(&state, component, Duration::from_secs(3), &kubectl);
                if component == "etcd" {
                    // kwok 0.8 does not retry a pod stage whose write failed meanwhile.
                    restart_component(&state, "kwok", Duration::ZERO, &kubectl);
                }
                self.wait_api();
            }
            Fault::DeleteStagePod => {
                let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ctx.ns);
                let lp = ListParams::default().labels("skyhook.nvidia.com/stage");
                let mut running: Vec<String> = Vec::new();
                for l in [
                    lp,
                    ListParams::default().labels("nodewright.nvidia.com/stage"),
                ] {
                    let Ok(list) = pods.list(&l).await else {
                        continue;
                    };
                    running.extend(
                        list.items
                            .into_iter()
                            .filter(|p| {
                                p.metadata.deletion_timestamp.is_none()
                                    && p.status.as_ref().and_then(|s| s.phase.as_deref())
                                        == Some("Running")
                            })
                            .filter_map(|p| p.metadata.name),
                    );
                }
                let Some(pod) = self.rng.pick(&running).cloned() else {
                    return;
                };
                if pods.delete(&pod, &DeleteParams::default()).await.is_ok() {
                    self.logged(Some(fault), format!("stage pod {pod} deleted"));
                }
            }
            Fault::SelectorLabelOff => {
                let node = self.random_node();
                let off = format!("{}-", self.selector.0);
                if self.kubectl(&["label", "node", &node, &off]) {
                    let at = self.logged(Some(fault), format!("{node} left the selector"));
                    self.open.push((lasting, at, Open::Label(node)));
                }
            }
            Fault::RefusingPdb => {
                let node = self.random_node();
                let image = if self.real.contains(&node) {
                    self.guard_image.clone()
                } else {
                    "example.com/app:1".to_string()
                };
                let app = format!("guard-{}", self.log.len());
                let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ctx.ns);
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": app, "labels": {"app": app}},
                    "spec": {"nodeName": node, "containers": [{"name": "app", "image": image}]}
                }))
                .expect("pod");
                let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
                    Api::namespaced(self.ctx.client.clone(), &self.ctx.ns);
                let pdb = serde_json::from_value(json!({"metadata": {"name": app},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}}}))
                .expect("pdb");
                let pp = PostParams::default();
                if pods.create(&pp, &pod).await.is_ok() && pdbs.create(&pp, &pdb).await.is_ok() {
                    let at = self.logged(
                        Some(fault),
                        format!("{node}: pod {app} under a PodDisruptionBudget allowing none"),
                    );
                    self.open.push((lasting, at, Open::Pdb(app)));
                }
            }
            Fault::AdminCordon => {
                let node = self.random_node();
                let nodes: Api<k8s_openapi::api::core::v1::Node> =
                    Api::all(self.ctx.client.clone());
                let Ok(n) = nodes.get(&node).await else {
                    return;
                };
                if n.spec.and_then(|s| s.unschedulable).unwrap_or(false) {
                    return;
                }
                // kubectl cordon exits 0 when its patch is refused (a WriteRefusal window):
                // the node itself says whether it took.
                if self.kubectl(&["cordon", &node]) && self.cordoned(&node).await == Some(true) {
                    let at =
                        self.logged(Some(fault), format!("{node} cordoned by an administrator"));
                    self.open.push((lasting, at, Open::Cordon(node)));
                }
            }
            Fault::WriteRefusal => {
                let node = self.random_node();
                let nodes: Api<k8s_openapi::api::core::v1::Node> =
                    Api::all(self.ctx.client.clone());
                let probe = || async {
                    let dry = PatchParams {
                        dry_run: true,
                        ..Default::default()
                    };
                    let patch = json!({"metadata": {"annotations": {"chaos-probe": "x"}}});
                    nodes
                        .patch(&node, &dry, &Patch::Merge(&patch))
                        .await
                        .is_err()
                };
                let expression = format!("object.metadata.name != '{node}'");
                let refusal = Refusal::install(
                    &self.ctx,
                    "nodes",
                    false,
                    &expression,
                    "chaos: writes to this node are refused",
                    probe,
                )
                .await;
                let at = self.logged(Some(fault), format!("writes to {node} refused"));
                self.open.push((lasting, at, Open::Refused(refusal)));
            }
        }
    }

    /// A replica that exited by itself (it does when it loses its lease) is started again, as
    /// its Deployment would; one killed by a fault waits for that fault's end.
    fn supervise(&mut self) {
        for i in 0..self.ops.len() {
            let killed = self
                .open
                .iter()
                .any(|(_, _, o)| matches!(o, Open::Replica(r) if *r == i));
            if !killed && !self.ops[i].running() {
                self.ops[i].restart(&self.ctx);
                self.restarts += 1;
                self.logged(None, format!("replica {i} had exited: started again"));
            }
        }
    }

    /// Lifts the faults whose time has come (all of them with `all`). A cordon of the
    /// administrator's is lifted only once none of ours is on the node.
    async fn lift(&mut self, all: bool) {
        self.supervise();
        let now = Instant::now();
        let mut keep = Vec::new();
        for (at, index, open) in std::mem::take(&mut self.open) {
            if !all && at > now {
                keep.push((at, index, open));
                continue;
            }
            let lifted = match &open {
                Open::Replica(i) => {
                    self.ops[*i].restart(&self.ctx);
                    true
                }
                Open::Stopped(pid) => {
                    // Gone already when it exited on its own and was started again.
                    let _ = Command::new("kill")
                        .args(["-CONT", &pid.to_string()])
                        .stderr(Stdio::null())
                        .status();
                    true
                }
                Open::Label(node) => {
                    let on = format!("{}={}", self.selector.0, self.selector.1);
                    self.kubectl(&["label", "node", node, &on, "--overwrite"])
                }
                Open::Pdb(app) => self.kubectl(&[
                    "-n",
                    &self.ctx.ns,
                    "delete",
                    "pdb",
                    app,
                    "--ignore-not-found",
                ]),
                Open::Cordon(node) => {
                    let ours = self.our_cordon(node).await;
                    !ours
                        && self.kubectl(&["uncordon", node])
                        && self.cordoned(node).await == Some(false)
                }
                // Tried again until the API server takes it (it may be down right now).
                Open::Refused(r) => r.remove(),
                Open::Cut(node) => self.real_node_cmd(&["uncut", node]),
            };
            if lifted {
                if let Some(entry) = self.log.get_mut(index) {
                    entry.lifted = Some(jiff::Timestamp::now());
                }
            } else {
                keep.push((now + Duration::from_secs(2), index, open));
            }
        }
        self.open = keep;
    }

    /// `spec.unschedulable` of `node`, read back.
    async fn cordoned(&self, node: &str) -> Option<bool> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.ctx.client.clone());
        let n = nodes.get(node).await.ok()?;
        Some(n.spec.and_then(|s| s.unschedulable).unwrap_or(false))
    }

    async fn our_cordon(&self, node: &str) -> bool {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.ctx.client.clone());
        let Ok(n) = nodes.get(node).await else {
            return true;
        };
        n.metadata.annotations.unwrap_or_default().keys().any(|k| {
            history::PREFIXES
                .iter()
                .any(|p| k.strip_prefix(p).is_some_and(|r| r.starts_with("cordon_")))
        })
    }

    /// The operators' 403s that no API server or etcd restart explains: the shipped rights are
    /// checked as in every e2e test, except in the seconds after a restart, when the new API
    /// server refuses everyone until its RBAC caches are filled.
    fn refusals_outside_restarts(&mut self) -> Vec<String> {
        const AFTER: i64 = 30;
        let restarts: Vec<jiff::Timestamp> = (self.log.iter())
            .filter(|f| matches!(f.fault, Fault::ApiServerRestart | Fault::EtcdRestart))
            .map(|f| f.at)
            .collect();
        let mut out = Vec::new();
        for op in &mut self.ops {
            let log = std::fs::read_to_string(&op.log).unwrap_or_default();
            for line in crate::support::rights::forbidden_in(&log) {
                let at = line
                    .split(|c: char| c.is_whitespace() || c == '\u{1b}')
                    .find_map(|w| w.trim_start_matches("[2m").parse::<jiff::Timestamp>().ok());
                let explained = at.is_some_and(|t| {
                    restarts.iter().any(|r| {
                        let d = t.duration_since(*r).as_secs();
                        (0..=AFTER).contains(&d)
                    })
                });
                if !explained {
                    out.push(line.chars().take(400).collect());
                }
            }
            op.forgive_403s("the campaign judges its 403s against its restarts");
        }
        out
    }

    async fn all_complete(&self, rules: &[Rule]) -> bool {
        for r in rules {
            let api = if r.object.ends_with("-svc") {
                self.nodewrights()
            } else {
                self.skyhooks()
            };
            let Ok(o) = api.get(&r.object).await else {
                return false;
            };
            if history::str_at(&o.data, "/status/status") != "complete" {
                return false;
            }
        }
        true
    }
}

#[tokio::test]
#[ignore = "run by tests/chaos: it restarts the shared API server and etcd"]
async fn campaign() {
    let seed = env_or("CHAOS_SEED", 1);
    let minutes = env_or("CHAOS_MINUTES", 5);
    let kwok = env_or("CHAOS_KWOK", 40) as usize;
    let real_count = env_or("CHAOS_REAL", 3) as usize;
    let out_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/chaos")
        .join(seed.to_string());
    std::fs::create_dir_all(&out_dir).expect("report directory");
    install_nodewright_crds();
    let mut ctx = TestCtx::new("chaos").await;
    let mut nodes = ctx.add_test_nodes(kwok);
    let real: Vec<String> = (0..real_count)
        .map(|i| ctx.add_real_node_as(&format!("rn{i}")))
        .collect();
    nodes.extend(real.iter().cloned());
    let (image, guard_image, agent) = if real.is_empty() {
        let image = "ghcr.io/nvidia/skyhook-packages/shellscript".to_string();
        (image, String::new(), None)
    } else {
        let imgs = images(&ctx);
        let source = std::env::var_os("SKYHOOK_SHARED")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"))
            .join("reference/upstream-packages/shellscript");
        // Every version the workload may name: 1.0.0 and each bump of `Campaign::edit`.
        let most_edits = (minutes * 60).saturating_sub(45) / 40 + 2;
        let mut repo = String::new();
        for n in (0..=most_edits).filter(|n| *n == 0 || n % 3 == 2) {
            let tag = if n == 0 {
                "1.0.0".to_string()
            } else {
                format!("1.{n}.0")
            };
            repo = package_image(&ctx, "chaos-shellscript", &tag, &source);
        }
        (repo, imgs.pause, Some(imgs.agent))
    };
    let selector = ("chaos-pool".to_string(), "yes".to_string());
    let on = format!("{}={}", selector.0, selector.1);
    let mut args = vec!["label", "node", "--overwrite"];
    args.extend(nodes.iter().map(String::as_str));
    args.push(&on);
    run(ctx.cluster.kubectl().args(&args));
    let (k, v) = ctx.test_label();
    let recorder = Recorder::start(&ctx.client, &ctx.ns, &format!("{k}={v}"));
    let mut op_env: Vec<(&str, &str)> = LEASE.to_vec();
    if let Some(agent) = &agent {
        op_env.push(("AGENT_IMAGE", agent));
    }
    let ops = vec![
        Operator::start_named(&ctx, "a", &op_env),
        Operator::start_named(&ctx, "b", &op_env),
    ];
    let mut c = Campaign {
        ctx,
        nodes,
        real,
        image,
        guard_image,
        ops,
        rng: Rng::new(seed),
        log: Vec::new(),
        open: Vec::new(),
        selector,
        edits: 0,
        restarts: 0,
        extra_present: true,
    };
    let rules = c.workload().await;
    let started = Instant::now();
    let end = started + Duration::from_secs(minutes * 60);
    let mut next_edit = started + Duration::from_secs(45);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(c.rng.between(4, 12))).await;
        c.lift(false).await;
        if Instant::now() >= next_edit {
            c.edit().await;
            next_edit = Instant::now() + Duration::from_secs(c.rng.between(40, 80));
            continue;
        }
        let Some(&(fault, _)) = c.rng.pick(MENU) else {
            continue;
        };
        c.inject(fault).await;
    }
    eprintln!("[chaos] faults stop; settling (up to {SETTLE:?})");
    let settle_start = Instant::now();
    loop {
        c.lift(true).await;
        if c.open.is_empty() && c.all_complete(&rules).await {
            break;
        }
        if settle_start.elapsed() > SETTLE {
            eprintln!("[chaos] not settled within {SETTLE:?}");
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let settled_in = settle_start.elapsed();
    // The last changes reach the watches.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let records = recorder.stop();
    let path = out_dir.join("history.jsonl");
    let lines: Vec<String> = records
        .iter()
        .map(|r| serde_json::to_string(r).expect("record"))
        .collect();
    std::fs::write(&path, lines.join("\n")).expect("write the history");
    // The checker reads the file, not the harness's memory.
    let history = history::read(&path).expect("read the history");
    let mut verdict = checker::check(&history, &rules);
    // Each real node's own record, copied out before the node goes, then read back.
    let mut hosts = Vec::new();
    for node in &c.real {
        let dir = out_dir.join("hosts").join(node);
        std::fs::create_dir_all(&dir).expect("host record directory");
        let state = c.ctx.cluster.state_dir.join("real").join(node);
        let files = [
            (c.ctx.node_root(node).join(host::STEPS_FILE), "steps.log"),
            (
                c.ctx
                    .node_root(node)
                    .join("var/log/skyhook-node/reboot.log"),
                "reboot.log",
            ),
            (state.join("boots.log"), "boots.log"),
            (
                c.ctx
                    .node_root(node)
                    .join("var/log/skyhook-node/systemctl.log"),
                "systemctl.log",
            ),
        ];
        for (from, to) in &files {
            let text = std::fs::read_to_string(from).unwrap_or_default();
            std::fs::write(dir.join(to), text).expect("copy a host record");
        }
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        hosts.push(Host::parse(
            node,
            &read("steps.log"),
            &read("reboot.log"),
            &read("boots.log"),
            &read("systemctl.log"),
        ));
    }
    host::check(&mut verdict, &history, &hosts);
    // The API server's audit log, this campaign's namespace only, copied out and read back.
    let audit_path = c.ctx.cluster.state_dir.join("logs/audit.log");
    let audit_text = std::fs::read_to_string(&audit_path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: the campaign reads the audit log; run it with tests/chaos, which starts \
             the cluster under tests/e2e/chaos/audit-policy.yaml",
            audit_path.display()
        )
    });
    let quoted_ns = format!("\"{}\"", c.ctx.ns);
    let ours: Vec<&str> = audit_text
        .lines()
        .filter(|l| l.contains(&quoted_ns))
        .collect();
    std::fs::write(out_dir.join("audit.log"), ours.join("\n")).expect("write the audit log");
    let events = audit::read(&std::fs::read_to_string(out_dir.join("audit.log")).expect("audit"));
    let operator = crate::support::rights::operator_user(&c.ctx);
    audit::check(&mut verdict, &history, &events, &c.ctx.ns, &operator);
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for f in &c.log {
        *by_kind.entry(format!("{:?}", f.fault)).or_default() += 1;
    }
    let report = json!({
        "seed": seed, "minutes": minutes, "kwok_nodes": kwok, "real_nodes": c.real.len(),
        "settled_in_s": settled_in.as_secs(),
        "faults_by_kind": by_kind, "faults": c.log,
        "spec_edits": c.edits, "replica_restarts": c.restarts,
        "records": history.len(),
        "stages_run": verdict.stages_run, "interrupts": verdict.interrupts,
        "host_steps": verdict.host_steps, "host_reboots": verdict.host_reboots,
        "host_service_calls": verdict.host_service_calls,
        "audit_events": verdict.audit_events,
        "checks": verdict.checks, "violations": verdict.violations,
    });
    std::fs::write(
        out_dir.join("report.json"),
        serde_json::to_string_pretty(&report).expect("report"),
    )
    .expect("write the report");
    let checks: u64 = verdict.checks.values().sum();
    eprintln!(
        "\n[chaos] seed {seed}, {minutes} min, {kwok} kwok and {} real nodes: {} faults {by_kind:?}, {} spec edits, {} replica restarts;\n\
         [chaos] {} stages run, {} interrupts, {} history records, {} audit events, {} script runs, {} reboots and {} service manager calls on the real nodes;\n\
         [chaos] {checks} invariant checks, {} violations; settled in {} s\n\
         [chaos] report: {}",
        c.real.len(),
        c.log.len(),
        c.edits,
        c.restarts,
        verdict.stages_run,
        verdict.interrupts,
        history.len(),
        verdict.audit_events,
        verdict.host_steps,
        verdict.host_reboots,
        verdict.host_service_calls,
        verdict.violations.len(),
        settled_in.as_secs(),
        out_dir.join("report.json").display()
    );
    for v in &verdict.violations {
        eprintln!("[chaos] VIOLATION {}: {}", v.invariant, v.evidence);
    }
    let refused = c.refusals_outside_restarts();
    assert!(
        refused.is_empty(),
        "403s with the shipped rights away from any API server or etcd restart:\n{}",
        refused.join("\n")
    );
    assert!(
        verdict.violations.is_empty(),
        "{} violations",
        verdict.violations.len()
    );
}
