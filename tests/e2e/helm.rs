//! The Helm chart `deploy/helm/skyhook-operator/` (issue 15): it lints and renders with every
//! option, refuses broken values, sizes the operator from `estimatedNodeCount` and
//! `estimatedPackageCount`, ships the CRDs of `deploy/crds/` unchanged, and renders what
//! `kubectl apply -k deploy/` installs, object by object, but for the differences listed here.
//!
//! On the shared cluster it installs and uninstalls cleanly under a unique release name,
//! `fullnameOverride` and namespace. kwok cannot run the operator's pod, so the operator runs out
//! of cluster as the chart's ServiceAccount (impersonated) and rolls out a Skyhook that cordons,
//! drains and evicts: the chart's RBAC is enough. Its permissions are those of `deploy/`'s
//! ServiceAccount, which `deploy::operator_service_account_has_exactly_what_it_needs` shows are
//! no more than needed. kwok cannot run the pre-delete hook's kubectl either: the test runs the
//! hook pod's exact arguments as the hook's ServiceAccount, then binds the pod to a node so kwok
//! completes it and `helm uninstall` goes on.
//!
//! helm is `tests/tools/helm` (built once per version from the Go module proxy, cached outside
//! the repository).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use skyhook::crd::{DeploymentPolicy, Skyhook};
use skyhook::schema;

use crate::support::deploy::repo;
use crate::support::{Operator, TestCtx, cluster, nodewrights, pkg, skyhook, sleep};

/// The labels Helm adds to what `deploy/` has; the comparison ignores exactly these.
const HELM_LABELS: [&str; 3] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

/// `(kind, namespace, name, why)` of the objects only `deploy/` has.
const DEPLOY_ONLY: [(&str, &str, &str, &str); 1] = [(
    "Namespace",
    "",
    "skyhook",
    "`helm install` stores the release in its namespace before creating anything, so the \
     chart cannot create it; README.md has it created and labelled for Pod Security first",
)];

/// `(kind, namespace, name, why)` of the objects only the chart renders (with the values of
/// `ci/kustomize-values.yaml`).
const CHART_ONLY: [(&str, &str, &str, &str); 5] = [
    (
        "PodDisruptionBudget",
        "skyhook",
        "skyhook-operator",
        "keeps the standby replica through node drains",
    ),
    (
        "Job",
        "skyhook",
        "skyhook-operator-cleanup",
        "pre-delete hook: deletes the Skyhooks while the operator still runs",
    ),
    (
        "ServiceAccount",
        "skyhook",
        "skyhook-operator-cleanup",
        "the hook's identity",
    ),
    (
        "ClusterRole",
        "",
        "skyhook-operator-cleanup",
        "the hook may delete Skyhooks and DeploymentPolicies; the operator may not",
    ),
    (
        "ClusterRoleBinding",
        "",
        "skyhook-operator-cleanup",
        "binds the hook's ClusterRole",
    ),
];

fn chart() -> String {
    repo()
        .join("deploy/helm/skyhook-operator")
        .display()
        .to_string()
}

fn kustomize_values() -> String {
    format!("{}/ci/kustomize-values.yaml", chart())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `tests/tools/helm`; pointed at the shared cluster when `cluster` is set.
fn helm(cluster: bool) -> Command {
    let mut cmd = Command::new(repo().join("tests/tools/helm"));
    if cluster {
        cmd.env("KUBECONFIG", &crate::support::cluster().kubeconfig);
    }
    cmd
}

/// Run `cmd`, panic with its output unless it succeeds; returns stdout.
fn ok(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("run {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Run `cmd`, panic unless it fails; returns stderr.
fn fails(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out: Output = cmd.output().unwrap_or_else(|e| panic!("run {shown}: {e}"));
    assert!(
        !out.status.success(),
        "{shown} succeeded but should fail:\n{}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

/// `helm template` of the chart in namespace `skyhook` with `args`, as objects.
fn template(args: &[&str]) -> Vec<Value> {
    let c = chart();
    let mut full = vec!["template", "skyhook-operator", c.as_str(), "-n", "skyhook"];
    full.extend(args);
    objects(&ok(helm(false).args(&full)))
}

/// A container's environment: each variable's `value` by name.
fn env_of(container: &Value) -> BTreeMap<&str, &Value> {
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| (e["name"].as_str().unwrap_or_default(), &e["value"]))
        .collect()
}

/// The objects of a multi-document YAML stream.
fn objects(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("not YAML ({e}):\n{yaml}"))
        .into_iter()
        .filter(Value::is_object)
        .collect()
}

type Id = (String, String, String);

fn id(o: &Value) -> Id {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&o["kind"]),
        s(&o["metadata"]["namespace"]),
        s(&o["metadata"]["name"]),
    )
}

fn by_id(objs: Vec<Value>) -> BTreeMap<Id, Value> {
    let mut out = BTreeMap::new();
    for o in objs {
        let key = id(&o);
        assert!(out.insert(key.clone(), o).is_none(), "{key:?} twice");
    }
    out
}

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// Remove Helm's labels from an object and its pod template.
fn strip_helm_labels(o: &mut Value) {
    for path in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(m) = o.pointer_mut(path).and_then(Value::as_object_mut) {
            for l in HELM_LABELS {
                m.remove(l);
            }
        }
    }
}

/// How `chart`'s rendering of `key` differs from `deploy`'s, Helm's labels aside.
fn differences(key: &Id, deploy: &Value, chart: &Value) -> Vec<String> {
    let mut c = chart.clone();
    strip_helm_labels(&mut c);
    let mut out = Vec::new();
    diff(deploy, &c, "", &mut out);
    out.into_iter().map(|p| format!("{key:?}{p}")).collect()
}

/// Every difference between `a` (deploy/) and `b` (the chart), as `path: a != b`. Numbers
/// compare by value (`1` and `1.0` are the same).
fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => diff(va, vb, &p, out),
                    (Some(va), None) => out.push(format!("{p}: deploy/ has {va}, the chart none")),
                    (None, Some(vb)) => out.push(format!("{p}: the chart has {vb}, deploy/ none")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                diff(va, vb, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if a == b => {}
        _ => out.push(format!("{path}: deploy/ {a} != chart {b}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering, no cluster needed (but the first call builds helm).

#[test]
fn lint_and_template_pass_with_every_option() {
    let c = chart();
    let ci = kustomize_values();
    let every = "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,\
                 networkPolicy.enabled=true,rbac.createSkyhookViewerRole=true,\
                 rbac.createSkyhookEditorRole=true,imagePullSecret=regcred,useHostNetwork=true,\
                 controllerManager.manager.env.skyhookSelector=team=a,\
                 controllerManager.selectors.dedicated=system,\
                 controllerManager.tolerations[0].key=dedicated,\
                 controllerManager.tolerations[0].operator=Exists,\
                 controllerManager.manager.image.digest=sha256:0123,\
                 controllerManager.manager.agent.digest=sha256:4567,\
                 controllerManager.manager.extraEnv[0].name=STAGE_DEADLINE,\
                 controllerManager.manager.extraEnv[0].value=2h";
    let variants: [Vec<&str>; 4] = [
        vec![],
        vec!["-f", ci.as_str()],
        vec!["--set", every],
        vec![
            "--set",
            "controllerManager.replicas=1,controllerManager.manager.env.leaderElection=false,\
             cleanup.enabled=false,limitRange=null,rbac.createPluginUserRoles=false",
        ],
    ];
    for extra in &variants {
        let mut args = vec!["lint", "--strict", c.as_str(), "--namespace", "skyhook"];
        args.extend(extra);
        let out = ok(helm(false).args(&args));
        assert!(out.contains("0 chart(s) failed"), "{out}");
        let objs = template(extra);
        assert!(
            objs.iter().any(|o| o["kind"] == "Deployment"),
            "no Deployment"
        );
    }

    // The options render what they say.
    let every_objs = template(&["--set", every]);
    let kinds: BTreeSet<&str> = every_objs
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    for k in ["ServiceMonitor", "PrometheusRule", "NetworkPolicy"] {
        assert!(kinds.contains(k), "no {k} in {kinds:?}");
    }
    find(&every_objs, "ClusterRole", "skyhook-viewer-role");
    find(&every_objs, "ClusterRole", "skyhook-editor-role");
    let dep = find(&every_objs, "Deployment", "skyhook-operator");
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(pod["hostNetwork"], json!(true));
    assert_eq!(pod["nodeSelector"], json!({"dedicated": "system"}));
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    let c0 = &pod["containers"][0];
    assert_eq!(
        c0["image"], "ghcr.io/skyhook-rs/skyhook-operator@sha256:0123",
        "a digest selects the image"
    );
    let env = env_of(c0);
    assert_eq!(
        env["AGENT_IMAGE"],
        "nvcr.io/nvidia/skyhook/agent:v6.4.1@sha256:4567"
    );
    assert_eq!(env["IMAGE_PULL_SECRET"], "regcred");
    assert_eq!(env["SKYHOOK_SELECTOR"], "team=a");
    assert_eq!(env["STAGE_DEADLINE"], "2h");
    // The hook deletes only what the operator manages.
    let hook = find(&every_objs, "Job", "skyhook-operator-cleanup");
    let hook_pod = &hook["spec"]["template"]["spec"];
    assert_eq!(hook_pod["initContainers"][0]["args"][2], "-l");
    assert_eq!(hook_pod["initContainers"][0]["args"][3], "team=a");
    assert_eq!(hook_pod["containers"][0]["args"][3], "team=a");
    assert_eq!(hook_pod["imagePullSecrets"], json!([{"name": "regcred"}]));

    // One replica without leader election: no PodDisruptionBudget, no hook, no LimitRange.
    let single = template(&variants[3].clone());
    let kinds: BTreeSet<&str> = single.iter().filter_map(|o| o["kind"].as_str()).collect();
    for k in ["PodDisruptionBudget", "Job", "LimitRange"] {
        assert!(!kinds.contains(k), "{k} rendered: {kinds:?}");
    }
    assert!(
        !single
            .iter()
            .any(|o| o["metadata"]["name"] == "skyhook-viewer"),
        "plugin-user roles rendered"
    );

    // The reference chart's values file is accepted as is (its webhook, kube-rbac-proxy and
    // metrics-reader keys are ignored).
    let reference = std::env::temp_dir().join(format!(
        "skyhook-helm-reference-values-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&reference, REFERENCE_VALUES).expect("write");
    let objs = template(&["-f", &reference.display().to_string()]);
    let dep = find(&objs, "Deployment", "skyhook-operator");
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"][0]["image"],
        "nvcr.io/nvidia/skyhook/operator:v0.13.0@sha256:1529ebb47f9a7848d5065c716b4f7eb68029287b9ed06968f9cc0b0d4ed81b87",
        "the reference's image values are honoured (swap in this operator's image)"
    );
}

/// The reference chart's values that differ in shape from ours, from its values.yaml.
const REFERENCE_VALUES: &str = r#"
controllerManager:
  kubeRbacProxy:
    args: [--secure-listen-address=0.0.0.0:8443]
    image: {repository: quay.io/brancz/kube-rbac-proxy, tag: v0.15.0}
  manager:
    env:
      leaderElection: "true"
      logLevel: info
    image:
      repository: nvcr.io/nvidia/skyhook/operator
      tag: "v0.13.0"
      digest: "sha256:1529ebb47f9a7848d5065c716b4f7eb68029287b9ed06968f9cc0b0d4ed81b87"
  replicas: 2
  podDisruptionBudget:
    minAvailable: 1
kubernetesClusterDomain: cluster.local
webhookService:
  ports: [{name: webhook, port: 443, protocol: TCP, targetPort: 9443}]
  type: ClusterIP
webhook:
  secretName: webhook-cert
  enable: true
  removalImage: bitnami/kubectl
metrics:
  addServiceAccountBinding: false
  serviceAccountName: prometheus
  serviceAccountNamespace: monitoring
estimatedPackageCount: 1
estimatedNodeCount: 1
"#;

#[test]
fn templates_refuse_broken_values() {
    let c = chart();
    let cases: [(&str, Vec<&str>, &str); 7] = [
        (
            "namespace default",
            vec!["-n", "default"],
            "namespace \"default\"",
        ),
        (
            "two replicas without leader election",
            vec![
                "--set",
                "controllerManager.manager.env.leaderElection=false",
            ],
            "leaderElection",
        ),
        (
            "a PodDisruptionBudget that blocks every drain",
            vec![
                "--set",
                "controllerManager.podDisruptionBudget.minAvailable=2",
            ],
            "minAvailable must be less than",
        ),
        (
            "selectors and affinity together",
            vec![
                "--set",
                "controllerManager.selectors.a=b,controllerManager.nodeAffinity.matchExpressions[0].key=x,controllerManager.nodeAffinity.matchExpressions[0].operator=Exists",
            ],
            "not both",
        ),
        (
            "a sizing that is no number",
            vec!["--set-string", "estimatedNodeCount=many"],
            "estimatedNodeCount must be a number",
        ),
        (
            "a retry budget that is no number",
            vec![
                "--set",
                "controllerManager.manager.env.jobBackoffLimit=three",
            ],
            "jobBackoffLimit must be a whole number",
        ),
        (
            "publishLegacyMetrics neither true nor false",
            vec![
                "--set",
                "controllerManager.manager.env.publishLegacyMetrics=no",
            ],
            "publishLegacyMetrics must be \"true\", \"false\" or empty",
        ),
    ];
    for (what, args, message) in cases {
        let mut full = vec!["template", "skyhook-operator", c.as_str()];
        if !args.contains(&"-n") {
            full.extend(["-n", "skyhook"]);
        }
        full.extend(args);
        let err = fails(helm(false).args(&full));
        assert!(err.contains(message), "{what}: {err}");
    }
}

/// Values carried over from upstream's chart v0.20.0 mean here what they meant there: the job
/// settings, the clean-up delay and the legacy metrics under upstream's variable names, the agent
/// and the metrics port; what has no meaning here renders nothing.
#[test]
fn upstream_v0_20_values_mean_the_same_here() {
    let values = repo()
        .join("tests/e2e/fixtures/upstream-v0.20-chart-values.yaml")
        .display()
        .to_string();
    let c = chart();
    let linted = ok(helm(false).args(["lint", "--strict", &c, "-n", "skyhook", "-f", &values]));
    assert!(linted.contains("0 chart(s) failed"), "{linted}");
    let objs = template(&["-f", &values]);
    let dep = find(&objs, "Deployment", "skyhook-operator");
    let c0 = &dep["spec"]["template"]["spec"]["containers"][0];
    let env = env_of(c0);
    for (name, value) in [
        ("LEGACY_CLEANUP_DELAY", "24h"),
        ("JOB_TTL_SUCCEEDED", "1h"),
        ("JOB_STAGE_TIMEOUT", "1h"),
        ("JOB_BACKOFF_LIMIT", "3"),
        ("PUBLISH_LEGACY_METRICS", "true"),
        ("METRICS_PORT", ":8443"),
        (
            "RUNTIME_REQUIRED_TAINT",
            "nodewright.nvidia.com=runtime-required:NoSchedule",
        ),
        (
            "AGENT_IMAGE",
            "ghcr.io/nvidia/nodewright/agent:v7.0.0@sha256:7cf394273374142370473cd3df191b9a40d2d1a7f0ac119b922e5c90c88a592b",
        ),
    ] {
        assert_eq!(
            env.get(name).copied(),
            Some(&json!(value)),
            "{name}: {env:?}"
        );
    }
    assert!(!env.contains_key("JOB_TTL_FAILED"), "{env:?}");
    // Upstream's Service port 8443 reaches the operator's metrics port.
    assert_eq!(c0["ports"][0]["containerPort"], json!(8443));
    let svc = find(&objs, "Service", "skyhook-operator-metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], json!(8443));
    let kinds: BTreeSet<&str> = objs.iter().filter_map(|o| o["kind"].as_str()).collect();
    for k in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "Certificate",
    ] {
        assert!(!kinds.contains(k), "{k} rendered: {kinds:?}");
    }

    // publishLegacyMetrics "false": the PrometheusRule asks for the series under the names the
    // operator then publishes.
    let renamed = template(&[
        "-f",
        &values,
        "--set",
        "controllerManager.manager.env.publishLegacyMetrics=false,metrics.prometheusRule.enabled=true",
    ]);
    let rule =
        serde_json::to_string(find(&renamed, "PrometheusRule", "skyhook-operator")).expect("JSON");
    assert!(rule.contains("nodewright_node_status_count"), "{rule}");
    assert!(rule.contains("skyhook_operator_leader"), "{rule}");
    assert!(!rule.contains("skyhook_name"), "{rule}");
    assert!(!rule.contains("skyhook_node_status_count"), "{rule}");
}

/// Requests and limits of the rendered Deployment: (cpu, memory) each.
fn resources(args: &[&str]) -> ((String, String), (String, String)) {
    let objs = template(args);
    let r = &find(&objs, "Deployment", "skyhook-operator")["spec"]["template"]["spec"]["containers"]
        [0]["resources"];
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    (
        (s(&r["requests"]["cpu"]), s(&r["requests"]["memory"])),
        (s(&r["limits"]["cpu"]), s(&r["limits"]["memory"])),
    )
}

#[test]
fn resources_follow_the_sizing_formula() {
    // (nodes, packages) → requests (cpu, memory), limits (cpu, memory), per values.yaml:
    // units = N * max(P, 4); peak = 16 + 0.003 * units MiB; memory request max(64, 1.5 peak),
    // limit max(256, 3 peak); cpu request max(100m, 0.01 units), limit max(1000m, 4 request).
    let cases = [
        ((1, 1), (("100m", "64Mi"), ("1000m", "256Mi"))),
        ((100, 4), (("100m", "64Mi"), ("1000m", "256Mi"))),
        ((1000, 4), (("100m", "64Mi"), ("1000m", "256Mi"))),
        ((1000, 2), (("100m", "64Mi"), ("1000m", "256Mi"))),
        ((1000, 8), (("100m", "64Mi"), ("1000m", "256Mi"))),
        ((5000, 4), (("200m", "114Mi"), ("1000m", "256Mi"))),
        ((20000, 4), (("800m", "384Mi"), ("3200m", "768Mi"))),
    ];
    for ((n, p), ((rc, rm), (lc, lm))) in cases {
        let set = format!("estimatedNodeCount={n},estimatedPackageCount={p}");
        let got = resources(&["--set", &set]);
        let want = (
            (rc.to_string(), rm.to_string()),
            (lc.to_string(), lm.to_string()),
        );
        assert_eq!(got, want, "{n} nodes x {p} packages");
    }
    // Requests cover and limits leave three times the highest measured peaks
    // (docs/performance.md, 2026-11-27).
    for ((n, p), measured_mib) in [((100, 4), 14.2), ((1000, 4), 26.2), ((5000, 4), 54.0)] {
        let ((_, request), (_, limit)) = resources(&[
            "--set",
            &format!("estimatedNodeCount={n},estimatedPackageCount={p}"),
        ]);
        let mib = |q: &str| -> f64 { q.trim_end_matches("Mi").parse().expect("MiB") };
        assert!(
            mib(&request) >= measured_mib,
            "{n}x{p}: request {request} below the measured {measured_mib} MiB"
        );
        assert!(
            mib(&limit) >= 3.0 * measured_mib,
            "{n}x{p}: limit {limit} below three times the measured {measured_mib} MiB"
        );
    }
    // Explicit resources win.
    let got = resources(&[
        "--set",
        "controllerManager.manager.resources.requests.cpu=1,controllerManager.manager.resources.requests.memory=1Gi,estimatedNodeCount=5000",
    ]);
    assert_eq!(got.0, ("1".to_string(), "1Gi".to_string()));
    assert_eq!(got.1, ("null".to_string(), "null".to_string()));
}

#[test]
fn chart_crds_are_the_deploy_crds() {
    // The generated CRD files of a directory (not its kustomization or subdirectories).
    let list = |dir: &Path| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && !p.ends_with("kustomization.yaml"))
            .map(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (name, std::fs::read(&p).expect("read"))
            })
            .collect()
    };
    // Skyhook's CRDs in crds/ (always installed); the NodeWright API's in nodewright-crds/
    // (rendered with nodewright.crds=true).
    for (from, to) in [
        ("deploy/crds", "crds"),
        ("deploy/crds/nodewright", "nodewright-crds"),
    ] {
        let deploy = list(&repo().join(from));
        let chart = list(&PathBuf::from(chart()).join(to));
        assert_eq!(
            deploy.keys().collect::<Vec<_>>(),
            chart.keys().collect::<Vec<_>>(),
            "deploy/helm/skyhook-operator/{to}/ must hold exactly the files of {from}/"
        );
        for (name, bytes) in &deploy {
            assert!(
                chart[name] == *bytes,
                "deploy/helm/skyhook-operator/{to}/{name} differs from {from}/{name}; after \
                 regenerating the CRDs run: cp {from}/*.yaml deploy/helm/skyhook-operator/{to}/ \
                 (keep {from}/kustomization.yaml out)"
            );
        }
    }
    let rendered = template(&["--set", "nodewright.crds=true"]);
    let crds: Vec<&str> = rendered
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        crds,
        [
            "nodewrights.nodewright.nvidia.com",
            "deploymentpolicies.nodewright.nvidia.com"
        ]
    );
    assert!(
        template(&[])
            .iter()
            .all(|o| o["kind"] != "CustomResourceDefinition"),
        "the NodeWright CRDs rendered without nodewright.crds"
    );
}

#[test]
fn chart_renders_what_deploy_installs() {
    let ci = kustomize_values();
    let chart_objs = template(&[
        "-f",
        &ci,
        "--include-crds",
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true",
    ]);
    let kustomize = |dir: &str| {
        objects(&ok(cluster()
            .kubectl()
            .args(["kustomize", &repo().join(dir).display().to_string()])))
    };
    let mut deploy_objs = kustomize("deploy");
    deploy_objs.extend(kustomize("deploy/monitoring"));
    let mut deploy = by_id(deploy_objs);
    let mut chart = by_id(chart_objs);

    for (kind, ns, name, why) in DEPLOY_ONLY {
        let key = (kind.to_string(), ns.to_string(), name.to_string());
        assert!(
            deploy.remove(&key).is_some(),
            "{key:?} ({why}) is no longer in deploy/"
        );
        assert!(
            !chart.contains_key(&key),
            "the chart now renders {key:?}: drop it from DEPLOY_ONLY"
        );
    }
    for (kind, ns, name, why) in CHART_ONLY {
        let key = (kind.to_string(), ns.to_string(), name.to_string());
        let o = chart
            .remove(&key)
            .unwrap_or_else(|| panic!("the chart no longer renders {key:?} ({why})"));
        assert!(
            !deploy.contains_key(&key),
            "deploy/ now has {key:?}: drop it from CHART_ONLY"
        );
        if name.ends_with("-cleanup") {
            assert_eq!(
                o["metadata"]["annotations"]["helm.sh/hook"], "pre-delete",
                "{key:?} is a pre-delete hook"
            );
        }
    }
    assert_eq!(
        deploy.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "deploy/ (+ deploy/monitoring/) and the chart render different objects"
    );

    let mut problems = Vec::new();
    for (key, d) in &deploy {
        let c = &chart[key];
        for l in HELM_LABELS {
            assert!(
                c["metadata"]["labels"].get(l).is_some() || key.0 == "CustomResourceDefinition",
                "{key:?} lacks Helm's label {l}"
            );
        }
        problems.extend(differences(key, d, c));
    }
    assert!(
        problems.is_empty(),
        "the chart differs from deploy/:\n  {}",
        problems.join("\n  ")
    );
    // The comparison covered what matters.
    let kinds: BTreeSet<&str> = deploy.keys().map(|k| k.0.as_str()).collect();
    for k in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "LimitRange",
        "NetworkPolicy",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(kinds.contains(k), "no {k} compared");
    }
}

/// `metrics.auth.enabled` renders deploy/metrics-auth/'s roles, and turns METRICS_AUTH on.
#[test]
fn metrics_auth_renders_what_deploy_metrics_auth_installs() {
    let ci = kustomize_values();
    let objs = template(&["-f", &ci, "--set", "metrics.auth.enabled=true"]);
    let env = &find(&objs, "Deployment", "skyhook-operator")["spec"]["template"]["spec"]["containers"]
        [0]["env"];
    let auth = env
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "METRICS_AUTH");
    assert_eq!(
        auth.map(|e| &e["value"]),
        Some(&json!("tokenreview")),
        "{env}"
    );
    let chart: BTreeMap<Id, Value> = by_id(objs)
        .into_iter()
        .filter(|(_, o)| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-metrics-auth") || n.ends_with("-metrics-reader"))
        })
        .collect();
    let dir = repo().join("deploy/metrics-auth").display().to_string();
    let deploy = by_id(objects(&ok(cluster().kubectl().args(["kustomize", &dir]))));
    assert_eq!(
        deploy.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "deploy/metrics-auth/ and the chart's metrics.auth render different objects"
    );
    let problems: Vec<String> = deploy
        .iter()
        .flat_map(|(key, d)| differences(key, d, &chart[key]))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// On the shared cluster.

/// The Prometheus Operator's CRDs, reduced to what the API server needs to store the chart's
/// ServiceMonitor and PrometheusRule (no schema). Created once on the shared cluster and left
/// there (nothing else uses the group); an existing definition is kept.
const MONITORING_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: prometheusrules.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: PrometheusRule, listKind: PrometheusRuleList, plural: prometheusrules, singular: prometheusrule}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

fn install_monitoring_crds(ctx: &TestCtx) {
    let out = ctx.kubectl_stdin(&["create", "-f", "-"], MONITORING_CRDS.as_bytes());
    let err = text(&out.stderr);
    assert!(
        out.status.success() || err.lines().all(|l| l.contains("AlreadyExists")),
        "creating the monitoring CRDs: {err}"
    );
    ok(ctx.cluster.kubectl().args([
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    ]));
}

/// A copy of the cluster's kubeconfig whose user acts as `user` (`as:`), for the operator.
fn impersonating_kubeconfig(ctx: &TestCtx, user: &str) -> PathBuf {
    let kc = std::fs::read_to_string(&ctx.cluster.kubeconfig).expect("read kubeconfig");
    let mut kc: Value = serde_saphyr::from_str(&kc).expect("kubeconfig YAML");
    for u in kc["users"].as_array_mut().expect("users") {
        u["user"]["as"] = json!(user);
    }
    let path = std::env::temp_dir().join(format!("skyhook-kubeconfig-{}-as-sa", ctx.prefix));
    std::fs::write(&path, serde_json::to_vec(&kc).expect("json")).expect("write kubeconfig");
    path
}

/// `kubectl auth can-i --list` as `user` in `ns`: what the API server says `user` may do there,
/// one sorted line per resource, with `rename` applied (object names carrying the release's
/// name).
fn can_i_list(ctx: &TestCtx, user: &str, ns: &str, rename: Option<(&str, &str)>) -> Vec<String> {
    let out = ok(ctx.cluster.kubectl().args([
        "auth",
        "can-i",
        "--list",
        "-n",
        ns,
        &format!("--as={user}"),
    ]));
    let mut lines: Vec<String> = out
        .lines()
        .skip(1)
        .map(|l| {
            let l = l.split_whitespace().collect::<Vec<_>>().join(" ");
            match rename {
                Some((from, to)) => l.replace(from, to),
                None => l,
            }
        })
        .collect();
    lines.sort();
    lines
}

/// The release; when the test fails it is left in place, with a hint.
struct Release {
    name: String,
    ns: String,
    installed: bool,
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.installed && std::thread::panicking() {
            eprintln!(
                "helm release {} left in namespace {} for inspection; remove it with: \
                 tests/tools/helm uninstall {} -n {} --no-hooks",
                self.name, self.ns, self.name, self.ns
            );
        }
    }
}

#[tokio::test]
async fn install_roll_out_as_the_charts_service_account_and_uninstall() {
    // Both APIs: the chart's hook then deletes NodeWrights too (it renders that step when the
    // cluster serves them at install).
    crate::support::install_nodewright_crds();
    let mut ctx = TestCtx::new("helm").await;
    install_monitoring_crds(&ctx);
    let nodes = ctx.add_test_nodes(2);
    let ns = ctx.ns.clone();
    let (k, v) = ctx.test_label();
    let fullname = format!("{}-skyhook-operator", ctx.prefix);
    let sa = format!("system:serviceaccount:{ns}:{fullname}");
    let hook_sa = format!("system:serviceaccount:{ns}:{fullname}-cleanup");
    ctx.report_on_failure(&["get", "jobs,pods", "-n", &ns, "-o", "wide"]);

    // As README.md says: the namespace exists and allows privileged pods, then `helm install`.
    ok(ctx.cluster.kubectl().args([
        "label",
        "namespace",
        &ns,
        "pod-security.kubernetes.io/enforce=privileged",
        "--overwrite",
    ]));
    let values = json!({
        "fullnameOverride": fullname,
        "controllerManager": {"manager": {"env": {"skyhookSelector": format!("{k}={v}")}}},
        "estimatedNodeCount": 2,
        "metrics": {"serviceMonitor": {"enabled": true}, "prometheusRule": {"enabled": true}},
        "networkPolicy": {"enabled": true},
        "rbac": {"createSkyhookViewerRole": true, "createSkyhookEditorRole": true},
        "cleanup": {"jobTimeoutSeconds": 180},
    });
    let values_file = std::env::temp_dir().join(format!("skyhook-helm-values-{}.json", ctx.prefix));
    std::fs::write(&values_file, values.to_string()).expect("write values");
    let values_file = values_file.display().to_string();
    let mut release = Release {
        name: ctx.prefix.clone(),
        ns: ns.clone(),
        installed: false,
    };
    let c = chart();
    ok(helm(true).args([
        "install",
        &release.name,
        &c,
        "-n",
        &ns,
        "-f",
        &values_file,
        "--timeout",
        "2m",
    ]));
    release.installed = true;

    // Every object of the release exists; the hook objects do not yet.
    let manifest = ok(helm(true).args(["get", "manifest", &release.name, "-n", &ns]));
    let manifest_file =
        std::env::temp_dir().join(format!("skyhook-helm-manifest-{}.yaml", ctx.prefix));
    std::fs::write(&manifest_file, &manifest).expect("write manifest");
    let manifest_file = manifest_file.display().to_string();
    let rendered: BTreeSet<Id> = objects(&manifest).iter().map(id).collect();
    let kinds: BTreeSet<&str> = rendered.iter().map(|i| i.0.as_str()).collect();
    for k in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "LimitRange",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(kinds.contains(k), "the release has no {k}: {rendered:?}");
    }
    let live = ok(ctx
        .cluster
        .kubectl()
        .args(["get", "-f", &manifest_file, "-o", "json"]));
    let live: Value = serde_json::from_str(&live).expect("kubectl get JSON");
    let live: BTreeSet<Id> = live["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(id)
        .collect();
    assert_eq!(live, rendered, "objects of the release on the server");
    let hook_objects = [
        format!("job/{fullname}-cleanup"),
        format!("serviceaccount/{fullname}-cleanup"),
    ];
    let cluster_hook_objects = [
        format!("clusterrole/{fullname}-cleanup"),
        format!("clusterrolebinding/{fullname}-cleanup"),
    ];
    let hooks_left = |ctx: &TestCtx| -> String {
        let mut out = ok(ctx.cluster.kubectl().args(
            ["get", "-n", &ns, "--ignore-not-found", "-o", "name"]
                .into_iter()
                .chain(hook_objects.iter().map(String::as_str)),
        ));
        out.push_str(&ok(ctx.cluster.kubectl().args(
            ["get", "--ignore-not-found", "-o", "name"]
                .into_iter()
                .chain(cluster_hook_objects.iter().map(String::as_str)),
        )));
        out
    };
    assert_eq!(hooks_left(&ctx), "", "hook objects exist before uninstall");

    // The chart's ServiceAccount may do exactly what deploy/'s may (rules compared by the
    // API server, in the release namespace, in `default` and elsewhere).
    crate::support::deploy::apply_deploy(&ctx);
    ctx.wait_for(
        "the chart's RBAC to reach the authorizer",
        Duration::from_secs(20),
        || {
            let out = ctx.kubectl(&[
                "auth",
                "can-i",
                "create",
                "leases.coordination.k8s.io",
                "-n",
                &ns,
                &format!("--as={sa}"),
            ]);
            async move { (text(&out.stdout).trim() == "yes").then_some(()) }
        },
    )
    .await;
    let deploy_sa = "system:serviceaccount:skyhook:skyhook-operator";
    let other = "kube-public";
    for (ours, theirs) in [
        (ns.as_str(), "skyhook"),
        ("default", "default"),
        (other, other),
    ] {
        assert_eq!(
            can_i_list(&ctx, &sa, ours, Some((&fullname, "skyhook-operator"))),
            can_i_list(&ctx, deploy_sa, theirs, None),
            "permissions of the chart's ServiceAccount in {ours} and deploy/'s in {theirs}"
        );
    }

    // The operator, out of cluster as the chart's ServiceAccount, with leader election on.
    let kubeconfig = impersonating_kubeconfig(&ctx, &sa);
    let pod_name = format!("{fullname}-0");
    let mut op = Operator::start(
        &ctx,
        &[
            ("KUBECONFIG", &kubeconfig.display().to_string()),
            ("LEADER_ELECTION", "true"),
            ("POD_NAME", &pod_name),
        ],
    );
    // A pod to evict on the first node, a policy, and a Skyhook with a ConfigMap and an interrupt.
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let victim = ctx.name("victim");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": victim},
        "spec": {"nodeName": nodes[0], "containers": [{"name": "app", "image": "example.com/app:1"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let policy_name = ctx.name("policy");
    let policy: DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": policy_name, "labels": {k.clone(): v.clone()}},
        "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}},
    }))
    .expect("policy");
    let policies: Api<DeploymentPolicy> = Api::all(ctx.client.clone());
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create DeploymentPolicy");
    let name = ctx.name("sk");
    let mut tune = pkg("1.0.0", sleep("1"));
    tune["interrupt"] = json!({"type": "reboot"});
    tune["configMap"] = json!({"tune.sh": "echo tuned"});
    let skyhooks: Api<Skyhook> = Api::all(ctx.client.clone());
    skyhooks
        .create(
            &PostParams::default(),
            &skyhook(
                &ctx,
                &name,
                json!({"deploymentPolicy": policy_name, "packages": {"tune": tune}}),
            ),
        )
        .await
        .expect("create Skyhook");
    // A NodeWright on the same nodes, with an interrupt of its own.
    let nw_name = ctx.name("nw");
    let mut nw_tune = tune.clone();
    nw_tune["version"] = json!("2.0.0");
    nodewrights::create_nodewright(&ctx, &nw_name, json!({"packages": {"tune": nw_tune}})).await;
    ctx.wait_for(
        "the rollout as the chart's ServiceAccount to complete",
        Duration::from_secs(240),
        || async {
            let s = skyhooks.get(&name).await.ok()?;
            (s.status?.status == Some(schema::Status::Complete)).then_some(())
        },
    )
    .await;
    nodewrights::wait_nodewright_in(
        &ctx,
        &nw_name,
        schema::Status::Complete,
        Duration::from_secs(240),
    )
    .await;
    ctx.wait_for(
        "the drained pod to be gone",
        Duration::from_secs(30),
        || async { pods.get_opt(&victim).await.ok()?.is_none().then_some(()) },
    )
    .await;
    let holder = ok(ctx.cluster.kubectl().args([
        "get",
        "lease",
        "3c22c1ae.nvidia.com",
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]));
    assert!(holder.contains(&pod_name), "lease holder {holder:?}");

    // Uninstall. The pre-delete hook Job's pod cannot be scheduled here (no scheduler), and kwok
    // would not run its kubectl: run the pod's own arguments as the hook's ServiceAccount, then
    // bind the pod to a node so kwok completes it.
    let log = std::env::temp_dir().join(format!("skyhook-helm-uninstall-{}.log", ctx.prefix));
    let log_file = std::fs::File::create(&log).expect("uninstall log");
    let mut uninstall = helm(true)
        .args(["uninstall", &release.name, "-n", &ns, "--timeout", "4m"])
        .stdout(log_file.try_clone().expect("fd"))
        .stderr(log_file)
        .spawn()
        .expect("spawn helm uninstall");
    let hook_pod = ctx
        .wait_for("the hook Job's pod", Duration::from_secs(60), || async {
            let lp = ListParams::default().labels(&format!(
                "app.kubernetes.io/component=cleanup,app.kubernetes.io/instance={}",
                release.name
            ));
            pods.list(&lp).await.ok()?.items.into_iter().next()
        })
        .await;
    let spec = hook_pod.spec.clone().expect("hook pod spec");
    assert_eq!(
        spec.node_name, None,
        "no scheduler here: the hook pod waits"
    );
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some(format!("{fullname}-cleanup").as_str())
    );
    let steps: Vec<Vec<String>> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.args.clone().unwrap_or_default())
        .collect();
    assert_eq!(steps.len(), 3, "NodeWrights, Skyhooks, policies: {steps:?}");
    assert!(
        steps.iter().all(|s| s.contains(&format!("{k}={v}"))),
        "the hook deletes only this operator's objects: {steps:?}"
    );
    for step in &steps {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let out = ctx
                .cluster
                .kubectl()
                .args(step)
                .arg(format!("--as={hook_sa}"))
                .output()
                .expect("kubectl");
            if out.status.success() {
                eprintln!("hook step {step:?}: {}", text(&out.stdout).trim());
                break;
            }
            // The hook's RBAC was created a moment before; the Job retries (backoffLimit) too.
            assert!(
                attempt < 3 && text(&out.stderr).contains("forbidden"),
                "hook step {step:?} failed: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    // The operator did its deletion work while it still ran, and was never refused.
    assert!(
        skyhooks.get_opt(&name).await.expect("get").is_none(),
        "the Skyhook is gone"
    );
    assert!(
        policies.get_opt(&policy_name).await.expect("get").is_none(),
        "the DeploymentPolicy is gone"
    );
    assert!(
        nodewrights::nodewright(&ctx, &nw_name).await.is_none(),
        "the NodeWright is gone"
    );
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    for node in &nodes {
        let n = node_api.get(node).await.expect("node");
        let ours: Vec<&String> = n
            .annotations()
            .keys()
            .chain(n.labels().keys())
            .filter(|k| k.contains(&name) || k.contains(&nw_name))
            .collect();
        assert!(ours.is_empty(), "{node} still has {ours:?}");
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            !taints
                .iter()
                .any(|t| t.key.starts_with("skyhook.nvidia.com")
                    || t.key.starts_with("nodewright.nvidia.com")),
            "{node} still has {taints:?}"
        );
        assert_ne!(
            n.spec.as_ref().and_then(|s| s.unschedulable),
            Some(true),
            "{node} still cordoned"
        );
    }
    let op_log = std::fs::read_to_string(&op.log).unwrap_or_default();
    let refused: Vec<&str> = op_log
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .collect();
    assert!(
        refused.is_empty(),
        "the operator was refused as the chart's ServiceAccount:\n{}",
        refused.join("\n")
    );
    // Its work is done. In a real install `helm uninstall` deletes its Deployment with its
    // roles; this one runs outside the release, so it stops before the roles go (it would renew
    // its Lease without them and meet 403s).
    op.kill();

    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": hook_pod.name_any()},
        "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[1]},
    });
    pods.create_subresource::<Value, Value>(
        "binding",
        &hook_pod.name_any(),
        &PostParams::default(),
        &binding,
    )
    .await
    .expect("bind the hook pod");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = uninstall.try_wait().expect("wait helm") {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "helm uninstall still runs after 240 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let uninstall_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "helm uninstall failed:\n{uninstall_log}");
    release.installed = false;
    drop(op);

    // Nothing of the release is left, hooks included.
    let left = ok(ctx.cluster.kubectl().args([
        "get",
        "-f",
        &manifest_file,
        "--ignore-not-found",
        "-o",
        "name",
    ]));
    assert_eq!(left.trim(), "", "objects left after helm uninstall");
    ctx.wait_for(
        "the hook objects to be deleted",
        Duration::from_secs(30),
        || {
            let left = hooks_left(&ctx);
            async move { left.trim().is_empty().then_some(()) }
        },
    )
    .await;
    for f in [&values_file, &manifest_file] {
        let _ = std::fs::remove_file(f);
    }
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(&log);
}
