//! `deploy/`, the install manifests: applying them (serialised, retried over races with other
//! appliers) and the objects they must contain.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Output;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use super::TestCtx;

/// The operator namespace `deploy/` installs into.
pub const OPERATOR_NS: &str = "skyhook";
/// The two CRDs, by object name.
pub const CRD_NAMES: [&str; 2] = [
    "skyhooks.skyhook.nvidia.com",
    "deploymentpolicies.skyhook.nvidia.com",
];
/// The CRDs of upstream v0.18's API, which `kubectl apply -k deploy/` installs too.
pub const NODEWRIGHT_CRD_NAMES: [&str; 2] = [
    "nodewrights.nodewright.nvidia.com",
    "deploymentpolicies.nodewright.nvidia.com",
];
/// The two generated CRD files, relative to the repository root.
pub const CRD_FILES: [&str; 2] = [
    "deploy/crds/skyhook.nvidia.com_skyhooks.yaml",
    "deploy/crds/skyhook.nvidia.com_deploymentpolicies.yaml",
];

/// Serialises this binary's applies of `deploy/`: two concurrent first-time applies of the same
/// object race (one of them gets AlreadyExists), and the idempotence check must not see another
/// test's changes between its two applies.
pub static APPLY_LOCK: Mutex<()> = Mutex::new(());

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Panic with a clear message when the generated CRD files are missing.
pub fn require_crd_files() {
    for f in CRD_FILES {
        let path = repo().join(f);
        assert!(
            path.is_file(),
            "{} does not exist; generate it with `cargo run --bin skyhook-operator -- crd --write deploy/crds`",
            path.display()
        );
    }
}

/// `kubectl <args>`, retried a few times when it lost a race with another applier (possibly from
/// a parallel test in another binary); panics with its output when it keeps failing.
pub fn kubectl_retrying(ctx: &TestCtx, args: &[&str]) -> Output {
    const TRANSIENT: [&str; 4] = [
        "AlreadyExists",
        "already exists",
        "the object has been modified",
        "Operation cannot be fulfilled",
    ];
    let mut attempt = 1;
    loop {
        let out = ctx.kubectl(args);
        if out.status.success() {
            return out;
        }
        let err = text(&out.stderr);
        if attempt >= 5 || !TRANSIENT.iter().any(|t| err.contains(t)) {
            panic!(
                "kubectl {} failed ({}):\nstdout:\n{}\nstderr:\n{err}",
                args.join(" "),
                out.status,
                text(&out.stdout)
            );
        }
        attempt += 1;
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Wait until the Skyhook CRDs are Established (served).
pub fn wait_established(ctx: &TestCtx) {
    wait_for_crds(ctx, &CRD_NAMES);
}

/// Wait until every CRD `kubectl apply -k deploy/` installs is Established.
pub fn wait_deploy_established(ctx: &TestCtx) {
    wait_for_crds(ctx, &[CRD_NAMES, NODEWRIGHT_CRD_NAMES].concat());
}

fn wait_for_crds(ctx: &TestCtx, names: &[&str]) {
    let crds: Vec<String> = names.iter().map(|n| format!("crd/{n}")).collect();
    let crds: Vec<&str> = crds.iter().map(String::as_str).collect();
    super::wait_crds(|| ctx.cluster.kubectl(), &crds);
}

/// Install (or refresh) just the two CRDs from `deploy/crds/` and wait until they are served.
pub fn apply_crds(ctx: &TestCtx) {
    require_crd_files();
    let files: Vec<String> = CRD_FILES
        .iter()
        .map(|f| repo().join(f).display().to_string())
        .collect();
    {
        let _guard = APPLY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let mut args = vec!["apply"];
        for f in &files {
            args.extend(["-f", f.as_str()]);
        }
        kubectl_retrying(ctx, &args);
    }
    wait_established(ctx);
}

pub fn deploy_dir() -> String {
    repo().join("deploy").display().to_string()
}

/// `kubectl apply -k deploy/` (idempotent), then wait for the CRDs. Returns the apply's stdout.
pub fn apply_deploy(ctx: &TestCtx) -> String {
    require_crd_files();
    let dir = deploy_dir();
    let out = {
        let _guard = APPLY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        kubectl_retrying(ctx, &["apply", "-k", &dir])
    };
    wait_deploy_established(ctx);
    text(&out.stdout)
}

/// `(kind, namespace, name)` of every object of a `kubectl ... -o json` List.
pub fn object_ids(list: &Value) -> BTreeSet<(String, String, String)> {
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .map(|o| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&o["kind"]),
                s(&o["metadata"]["namespace"]),
                s(&o["metadata"]["name"]),
            )
        })
        .collect()
}

pub fn parse_json(out: &Output, what: &str) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what} printed no JSON ({e}):\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

/// The objects `deploy/` must contain: `(kind, namespace, name)`.
pub fn expected_objects() -> BTreeSet<(String, String, String)> {
    let ns = OPERATOR_NS;
    [
        ("Namespace", "", ns),
        ("CustomResourceDefinition", "", CRD_NAMES[0]),
        ("CustomResourceDefinition", "", CRD_NAMES[1]),
        ("CustomResourceDefinition", "", NODEWRIGHT_CRD_NAMES[0]),
        ("CustomResourceDefinition", "", NODEWRIGHT_CRD_NAMES[1]),
        ("ServiceAccount", ns, "skyhook-operator"),
        ("ClusterRole", "", "skyhook-operator"),
        ("ClusterRoleBinding", "", "skyhook-operator"),
        ("Role", ns, "skyhook-operator"),
        ("RoleBinding", ns, "skyhook-operator"),
        ("Role", "default", "skyhook-operator-events"),
        ("RoleBinding", "default", "skyhook-operator-events"),
        ("ClusterRole", "", "skyhook-viewer"),
        ("Role", ns, "skyhook-viewer"),
        ("ClusterRole", "", "skyhook-oncall"),
        ("ValidatingAdmissionPolicy", "", "skyhook-oncall-skyhooks"),
        (
            "ValidatingAdmissionPolicyBinding",
            "",
            "skyhook-oncall-skyhooks",
        ),
        ("ValidatingAdmissionPolicy", "", "skyhook-oncall-nodes"),
        (
            "ValidatingAdmissionPolicyBinding",
            "",
            "skyhook-oncall-nodes",
        ),
        ("ValidatingAdmissionPolicy", "", "skyhook-oncall-status"),
        (
            "ValidatingAdmissionPolicyBinding",
            "",
            "skyhook-oncall-status",
        ),
        ("Deployment", ns, "skyhook-operator"),
        ("Service", ns, "skyhook-operator-metrics"),
        ("NetworkPolicy", ns, "skyhook-operator"),
        ("LimitRange", ns, "skyhook-default-limits"),
    ]
    .into_iter()
    .map(|(k, n, m)| (k.to_string(), n.to_string(), m.to_string()))
    .collect()
}

/// A made-up user's bindings to the plugin roles of `deploy/rbac-plugin-user.yaml`, made as
/// deploy/README.md tells an admin to, and deleted however the test ends.
pub struct RoleBindings<'a> {
    ctx: &'a TestCtx,
    name: String,
    namespaced: bool,
}

impl<'a> RoleBindings<'a> {
    /// `skyhook-viewer`: the ClusterRole and the Role in the operator namespace.
    pub fn viewer(ctx: &'a TestCtx, user: &str) -> RoleBindings<'a> {
        let b = RoleBindings {
            ctx,
            name: format!("{user}-viewer"),
            namespaced: true,
        };
        let as_user = format!("--user={user}");
        kubectl_retrying(
            ctx,
            &[
                "create",
                "clusterrolebinding",
                &b.name,
                "--clusterrole=skyhook-viewer",
                &as_user,
            ],
        );
        kubectl_retrying(
            ctx,
            &[
                "create",
                "rolebinding",
                "-n",
                OPERATOR_NS,
                &b.name,
                "--role=skyhook-viewer",
                &as_user,
            ],
        );
        b
    }

    /// `skyhook-oncall` beside `skyhook-viewer` (returned together).
    pub fn oncall(ctx: &'a TestCtx, user: &str) -> [RoleBindings<'a>; 2] {
        let b = RoleBindings {
            ctx,
            name: format!("{user}-oncall"),
            namespaced: false,
        };
        kubectl_retrying(
            ctx,
            &[
                "create",
                "clusterrolebinding",
                &b.name,
                "--clusterrole=skyhook-oncall",
                &format!("--user={user}"),
            ],
        );
        [RoleBindings::viewer(ctx, user), b]
    }
}

impl Drop for RoleBindings<'_> {
    fn drop(&mut self) {
        let _ = self.ctx.kubectl(&[
            "delete",
            "clusterrolebinding",
            &self.name,
            "--ignore-not-found",
        ]);
        if self.namespaced {
            let _ = self.ctx.kubectl(&[
                "delete",
                "rolebinding",
                "-n",
                OPERATOR_NS,
                &self.name,
                "--ignore-not-found",
            ]);
        }
    }
}
