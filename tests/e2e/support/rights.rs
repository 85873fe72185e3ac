//! The rights an e2e operator runs with: those it ships with (issue 49). Each test's operator is
//! a ServiceAccount of the test's namespace bound to the ClusterRole and Roles of
//! `deploy/rbac-operator.yaml`, the operator namespace's Role copied into the test's namespace,
//! and speaks with a token, never the admin's certificate: a write the shipped install cannot
//! make fails the test that needs it (and [`forbidden_in`] fails a test whose operator met a
//! 403 at all).
//!
//! The cluster-scoped roles are copies under names of their own (`skyhook-e2e-operator…`), so
//! that a test that installs or deletes `deploy/` never changes what the other tests run with.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::plugin::token_kubeconfig;
use super::{TestCtx, cluster};

/// The ClusterRole of `deploy/`, copied under this name.
const CLUSTER_ROLE: &str = "skyhook-e2e-operator";
/// The Role for Events in `default`, copied under this name.
const EVENTS_ROLE: &str = "skyhook-e2e-operator-events";
/// The operator's ServiceAccount in each test's namespace.
const ACCOUNT: &str = "skyhook-operator";

/// The objects of `deploy/rbac-operator.yaml`, as the API server would take them.
fn shipped() -> Vec<Value> {
    read_docs("deploy/rbac-operator.yaml")
}

/// The objects of a YAML file of the repository.
fn read_docs(path: &str) -> Vec<Value> {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {path}: {e}"));
    text.split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|v| v.get("kind").is_some())
        .collect()
}

/// The shipped object of `kind` in `namespace` (`None`: cluster-scoped).
fn shipped_one(all: &[Value], kind: &str, namespace: Option<&str>) -> Value {
    all.iter()
        .find(|v| v["kind"] == kind && v["metadata"]["namespace"].as_str() == namespace)
        .cloned()
        .unwrap_or_else(|| panic!("deploy/rbac-operator.yaml has no {kind} in {namespace:?}"))
}

/// `kubectl apply` of `objects`, as the cluster's admin.
fn apply(objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut child = cluster()
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl apply");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(list.to_string().as_bytes())
            .expect("write the objects");
    }
    let out = child.wait_with_output().expect("kubectl apply");
    assert!(
        out.status.success(),
        "kubectl apply of the operator's rights: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

static ROLES: OnceLock<()> = OnceLock::new();

/// The ClusterRole `deploy/metrics-auth/` adds (`METRICS_AUTH=tokenreview`), copied under this
/// name.
const METRICS_AUTH_ROLE: &str = "skyhook-e2e-operator-metrics-auth";

/// The shipped ClusterRoles and Events Role, under the e2e copies' names, once per run (applied
/// again on every run, so an edit of `deploy/` takes effect on a reused cluster).
fn cluster_roles() {
    ROLES.get_or_init(|| {
        let all = shipped();
        let mut role = shipped_one(&all, "ClusterRole", None);
        role["metadata"]["name"] = json!(CLUSTER_ROLE);
        let mut events = shipped_one(&all, "Role", Some("default"));
        events["metadata"]["name"] = json!(EVENTS_ROLE);
        let mut metrics_auth = read_docs("deploy/metrics-auth/rbac-metrics-auth.yaml")
            .into_iter()
            .find(|v| {
                v["kind"] == "ClusterRole"
                    && v["metadata"]["name"] == "skyhook-operator-metrics-auth"
            })
            .expect("deploy/metrics-auth/ has the operator's ClusterRole");
        metrics_auth["metadata"]["name"] = json!(METRICS_AUTH_ROLE);
        apply(&[role, events, metrics_auth]);
    });
}

static KUBECONFIGS: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());

/// A kubeconfig of the test's operator ServiceAccount, with the shipped rights (made once per
/// test; its further operators share it).
///
/// With `metrics_auth` (`METRICS_AUTH=tokenreview`), also what `deploy/metrics-auth/` grants.
pub fn operator_kubeconfig(ctx: &TestCtx, metrics_auth: bool) -> PathBuf {
    let mut made = KUBECONFIGS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, path)) = made.iter().find(|(p, _)| *p == ctx.prefix) {
        return path.clone();
    }
    cluster_roles();
    let path = bind(ctx, CLUSTER_ROLE);
    if metrics_auth {
        let name = format!("skyhook-e2e-{}-metrics-auth", ctx.prefix);
        apply(&[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"skyhook-e2e": ctx.prefix}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": METRICS_AUTH_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ctx.ns}]}),
        ]);
    }
    made.push((ctx.prefix.clone(), path.clone()));
    path
}

/// A client with the test operator's shipped rights: for a proxy that stands between the
/// operator and the API server (`proxy::start`), which forwards with it.
pub async fn operator_client(ctx: &TestCtx) -> kube::Client {
    let path = operator_kubeconfig(ctx, false);
    let kc = kube::config::Kubeconfig::read_from(&path).expect("read the operator's kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("the operator's kubeconfig is valid");
    kube::Client::try_from(config).expect("client")
}

/// A kubeconfig of the test's operator with the shipped rights less `verb` on `resource` of
/// `group` (an install whose roles were trimmed): a ClusterRole of the test's own.
pub fn trimmed_kubeconfig(ctx: &TestCtx, group: &str, resource: &str, verb: &str) -> PathBuf {
    let mut made = KUBECONFIGS.lock().unwrap_or_else(|p| p.into_inner());
    cluster_roles();
    let mut role = shipped_one(&shipped(), "ClusterRole", None);
    let own = format!("skyhook-e2e-{}", ctx.prefix);
    role["metadata"] = json!({"name": own, "labels": {"skyhook-e2e": ctx.prefix}});
    for rule in role["rules"].as_array_mut().expect("rules") {
        let of = |k: &str, v: &str| rule[k].as_array().is_some_and(|a| a.iter().any(|x| x == v));
        if of("apiGroups", group) && of("resources", resource) {
            let verbs = rule["verbs"].as_array_mut().expect("verbs");
            verbs.retain(|v| v != verb);
        }
    }
    apply(&[role]);
    let path = bind(ctx, &own);
    made.push((ctx.prefix.clone(), path.clone()));
    path
}

/// The test's operator ServiceAccount bound to `cluster_role`, the operator namespace's Role
/// and the Events Role; a token kubeconfig for it.
fn bind(ctx: &TestCtx, cluster_role: &str) -> PathBuf {
    let all = shipped();
    let subject = json!([{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ctx.ns}]);
    let labels = json!({"skyhook-e2e": ctx.prefix});
    let mut role = shipped_one(&all, "Role", Some("skyhook"));
    role["metadata"]["namespace"] = json!(ctx.ns);
    let mut role_binding = shipped_one(&all, "RoleBinding", Some("skyhook"));
    role_binding["metadata"]["namespace"] = json!(ctx.ns);
    role_binding["subjects"] = subject.clone();
    let bound = format!("skyhook-e2e-{}", ctx.prefix);
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": ACCOUNT, "namespace": ctx.ns}}),
        role,
        role_binding,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": bound, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": cluster_role},
            "subjects": subject}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": bound, "namespace": "default", "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                "name": EVENTS_ROLE},
            "subjects": subject}),
    ];
    apply(&objects);
    let token = ctx.kubectl(&["create", "token", ACCOUNT, "-n", &ctx.ns, "--duration=12h"]);
    assert!(
        token.status.success(),
        "a token for the operator: {}",
        String::from_utf8_lossy(&token.stderr)
    );
    let path = std::env::temp_dir().join(format!("skyhook-operator-{}.kubeconfig", ctx.prefix));
    token_kubeconfig(ctx, &path, String::from_utf8_lossy(&token.stdout).trim());
    wait_bound(ctx);
    path
}

/// The user name the test's operator ServiceAccount acts as.
pub fn operator_user(ctx: &TestCtx) -> String {
    format!("system:serviceaccount:{}:{ACCOUNT}", ctx.ns)
}

/// RBAC is served from informers: waits until the new bindings apply.
fn wait_bound(ctx: &TestCtx) {
    let user = operator_user(ctx);
    let deadline = Instant::now() + Duration::from_secs(30);
    for (verb, resource, ns) in [
        ("list", "nodes", None),
        ("create", "jobs.batch", Some(ctx.ns.as_str())),
        ("create", "events", Some("default")),
    ] {
        loop {
            let mut args = vec!["auth", "can-i", verb, resource, "--as", &user];
            if let Some(ns) = ns {
                args.extend(["-n", ns]);
            }
            let out = ctx.kubectl(&args);
            if String::from_utf8_lossy(&out.stdout).trim() == "yes" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{user} may not {verb} {resource} after 30 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The bindings of the test's operator outside its namespace (which goes with the test).
pub fn unbind(ctx: &TestCtx) {
    let made = KUBECONFIGS
        .lock()
        .map(|m| m.iter().any(|(p, _)| *p == ctx.prefix));
    if !made.unwrap_or(false) {
        return;
    }
    let name = format!("skyhook-e2e-{}", ctx.prefix);
    let auth = format!("{name}-metrics-auth");
    let _ = ctx.kubectl(&[
        "delete",
        "clusterrolebinding",
        &name,
        &auth,
        "--wait=false",
        "--ignore-not-found",
    ]);
    let _ = ctx.kubectl(&[
        "delete",
        "clusterrole",
        &name,
        "--ignore-not-found",
        "--wait=false",
    ]);
    let _ = ctx.kubectl(&[
        "delete",
        "rolebinding",
        &name,
        "-n",
        "default",
        "--wait=false",
    ]);
}

/// The lines of an operator's log that report an API answer of 403: a write or read the shipped
/// rights do not allow.
pub fn forbidden_in(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("code: 403") || l.contains("is forbidden: User"))
        .collect()
}
