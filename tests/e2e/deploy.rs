//! `deploy/`: the install manifests apply (idempotently) to a real API server, every object they
//! list exists afterwards and has the contract's shape, the operator's ServiceAccount and the
//! viewer and on-call roles grant exactly what is needed, and the installed CRDs keep every field of the
//! upstream samples.
//!
//! `deploy/` is cluster-wide and shared by every test: these tests only ever apply it (never
//! delete the CRDs or the namespace), and the few cluster-scoped objects they create themselves
//! (RBAC bindings for a made-up user) carry the test's unique prefix and are removed afterwards.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Service};
use kube::api::Api;
use serde_json::Value;

use crate::support::TestCtx;
use crate::support::deploy::{
    APPLY_LOCK, OPERATOR_NS, RoleBindings, apply_deploy, deploy_dir, expected_objects,
    kubectl_retrying, object_ids, parse_json, repo, require_crd_files, text,
    wait_deploy_established,
};

/// The operator's ServiceAccount, as a user name for `kubectl auth can-i --as`.
const OPERATOR_SA: &str = "system:serviceaccount:skyhook:skyhook-operator";

#[tokio::test]
async fn apply_is_idempotent_and_creates_everything() {
    let ctx = TestCtx::new("deploy").await;
    require_crd_files();
    let dir = deploy_dir();

    // What the kustomization renders: exactly the contract's objects, nothing extra (no webhook
    // configurations, Secrets or certificates).
    // Under the lock: a first apply of the same CRDs by another test makes the dry run's patch
    // fail ("error when applying patch").
    let rendered = {
        let _guard = APPLY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        ctx.kubectl(&["apply", "-k", &dir, "--dry-run=client", "-o", "json"])
    };
    assert!(
        rendered.status.success(),
        "kubectl apply -k deploy/ --dry-run=client failed:\n{}",
        text(&rendered.stderr)
    );
    let rendered = object_ids(&parse_json(&rendered, "kubectl apply --dry-run=client"));
    assert_eq!(
        rendered,
        expected_objects(),
        "deploy/ renders a different set of objects than expected"
    );

    {
        let _guard = APPLY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        kubectl_retrying(&ctx, &["apply", "-k", &dir, "--dry-run=server"]);
        kubectl_retrying(&ctx, &["apply", "-k", &dir]);
        // A second apply right after the first changes nothing.
        let again = kubectl_retrying(&ctx, &["apply", "-k", &dir]);
        let stdout = text(&again.stdout);
        let changed: Vec<&str> = stdout
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_end().ends_with(" unchanged"))
            .collect();
        assert!(
            changed.is_empty(),
            "a second `kubectl apply -k deploy/` changed objects (not idempotent):\n{}",
            changed.join("\n")
        );
        assert_eq!(
            stdout.lines().filter(|l| !l.trim().is_empty()).count(),
            expected_objects().len(),
            "the second apply did not report every object:\n{stdout}"
        );
    }
    wait_deploy_established(&ctx);

    // Everything exists on the server.
    let got = ctx.kubectl(&["get", "-k", &dir, "-o", "json"]);
    assert!(
        got.status.success(),
        "kubectl get -k deploy/ failed (some object is missing?):\n{}",
        text(&got.stderr)
    );
    assert_eq!(
        object_ids(&parse_json(&got, "kubectl get -k deploy/")),
        expected_objects()
    );
}

fn env_map(dep: &Deployment) -> BTreeMap<String, k8s_openapi::api::core::v1::EnvVar> {
    let c = &dep
        .spec
        .as_ref()
        .expect("spec")
        .template
        .spec
        .as_ref()
        .expect("pod spec")
        .containers[0];
    c.env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name.clone(), e))
        .collect()
}

#[tokio::test]
async fn installed_objects_match_the_contract() {
    let ctx = TestCtx::new("deploy-shape").await;
    apply_deploy(&ctx);
    let client = ctx.client.clone();

    // Namespace: package Jobs are privileged hostPID pods.
    let ns = Api::<Namespace>::all(client.clone())
        .get(OPERATOR_NS)
        .await
        .expect("namespace");
    let labels = ns.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("privileged"),
        "namespace labels: {labels:?}"
    );

    // Deployment.
    let dep = Api::<Deployment>::namespaced(client.clone(), OPERATOR_NS)
        .get("skyhook-operator")
        .await
        .expect("deployment");
    let labels = dep.metadata.labels.clone().unwrap_or_default();
    for (k, v) in [
        ("app.kubernetes.io/name", "skyhook-operator"),
        ("app.kubernetes.io/version", "v0.1.0"),
        ("control-plane", "controller-manager"),
    ] {
        assert_eq!(
            labels.get(k).map(String::as_str),
            Some(v),
            "deployment label {k}"
        );
    }
    let spec = dep.spec.as_ref().expect("spec");
    // Two replicas, made safe by leader election.
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().expect("pod spec");
    let tmpl_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert_eq!(
        tmpl_labels.get("app.kubernetes.io/version"),
        labels.get("app.kubernetes.io/version"),
        "pod template and Deployment disagree on the version label"
    );
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("skyhook-operator")
    );
    // Delta D50: the replicas prefer different nodes.
    let spread = pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .expect("preferred pod anti-affinity");
    assert_eq!(
        spread[0].pod_affinity_term.topology_key,
        "kubernetes.io/hostname"
    );
    let spread_labels = spread[0]
        .pod_affinity_term
        .label_selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    assert!(
        spread_labels
            .iter()
            .all(|(k, v)| tmpl_labels.get(k) == Some(v)),
        "the anti-affinity does not select the operator's pods: {spread_labels:?}"
    );
    assert_eq!(pod.containers.len(), 1, "one container");
    let c = &pod.containers[0];
    let image = c.image.clone().unwrap_or_default();
    assert_eq!(image, "ghcr.io/skyhook-rs/skyhook-operator:v0.1.0");
    // `kubectl skyhook version` reads the label; it must name the image's tag.
    assert!(
        image.ends_with(&format!(":{}", labels["app.kubernetes.io/version"])),
        "image {image} does not carry the version label's tag"
    );
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        ["skyhook-operator", "run"]
    );

    // Environment: exactly the reference's names (plus the two ports and METRICS_AUTH, which
    // deploy/metrics-auth/ turns to `tokenreview`), with their defaults.
    let env = env_map(&dep);
    let expected: BTreeMap<&str, &str> = [
        (
            "AGENT_IMAGE",
            "nvcr.io/nvidia/skyhook/agent:v6.4.1@sha256:dedf73c19455444e2663671368eaf3fcd657ea1417f0d8738c6133ed738b9c52",
        ),
        (
            "PAUSE_IMAGE",
            "registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
        ),
        ("IMAGE_PULL_SECRET", ""),
        ("COPY_DIR_ROOT", "/var/lib/skyhook"),
        ("AGENT_LOG_ROOT", "/var/log/skyhook"),
        (
            "RUNTIME_REQUIRED_TAINT",
            "skyhook.nvidia.com=runtime-required:NoSchedule",
        ),
        ("REAPPLY_ON_REBOOT", "false"),
        ("DEFAULT_INTERVAL", "10m"),
        ("LOG_ENCODER", "json"),
        ("LOG_LEVEL", "info"),
        ("METRICS_PORT", ":8080"),
        ("PROBE_PORT", ":8081"),
        ("METRICS_AUTH", "none"),
        ("LEADER_ELECTION", "true"),
    ]
    .into_iter()
    .collect();
    let names: BTreeSet<&str> = env.keys().map(String::as_str).collect();
    let mut want: BTreeSet<&str> = expected.keys().copied().collect();
    want.insert("NAMESPACE");
    want.insert("POD_NAME");
    assert_eq!(names, want, "operator environment variable names");
    for (k, v) in &expected {
        assert_eq!(
            env[*k].value.as_deref().unwrap_or_default(),
            *v,
            "value of {k}"
        );
    }
    let ns_from = env["NAMESPACE"]
        .value_from
        .as_ref()
        .and_then(|f| f.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    assert_eq!(
        ns_from.as_deref(),
        Some("metadata.namespace"),
        "NAMESPACE comes from the downward API"
    );

    // Ports and probes.
    let ports: BTreeMap<i32, Option<String>> = c
        .ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.container_port, p.name))
        .collect();
    assert!(
        ports.contains_key(&8080) && ports.contains_key(&8081),
        "ports {ports:?}"
    );
    let probe_of = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        let h = p.as_ref()?.http_get.as_ref()?;
        let port = match &h.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => *i,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => {
                c.ports
                    .as_ref()?
                    .iter()
                    .find(|p| p.name.as_deref() == Some(s))?
                    .container_port
            }
        };
        Some((h.path.clone().unwrap_or_default(), port))
    };
    assert_eq!(
        probe_of(&c.liveness_probe),
        Some(("/healthz".to_string(), 8081))
    );
    assert_eq!(
        probe_of(&c.readiness_probe),
        Some(("/readyz".to_string(), 8081))
    );

    // Hardening.
    let psc = pod.security_context.clone().unwrap_or_default();
    let csc = c.security_context.clone().unwrap_or_default();
    assert_eq!(
        csc.run_as_non_root.or(psc.run_as_non_root),
        Some(true),
        "runAsNonRoot"
    );
    assert_eq!(csc.run_as_user.or(psc.run_as_user), Some(65532), "UID");
    assert_eq!(csc.read_only_root_filesystem, Some(true));
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    let caps = csc.capabilities.clone().unwrap_or_default();
    assert_eq!(caps.drop.unwrap_or_default(), ["ALL"]);
    assert!(caps.add.unwrap_or_default().is_empty());
    let seccomp = csc.seccomp_profile.or(psc.seccomp_profile).map(|s| s.type_);
    assert_eq!(seccomp.as_deref(), Some("RuntimeDefault"));
    assert_ne!(pod.host_pid, Some(true));
    assert_ne!(pod.host_network, Some(true));
    let requests = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .unwrap_or_default();
    assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("256Mi"));
    assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("100m"));

    // Metrics Service: selects the operator pods, port 8080, scrape annotations.
    let svc = Api::<Service>::namespaced(client.clone(), OPERATOR_NS)
        .get("skyhook-operator-metrics")
        .await
        .expect("metrics service");
    let ann = svc.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("prometheus.io/scrape").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        ann.get("prometheus.io/port").map(String::as_str),
        Some("8080")
    );
    let sspec = svc.spec.expect("service spec");
    let selector = sspec.selector.unwrap_or_default();
    assert!(!selector.is_empty(), "service has a selector");
    for (k, v) in &selector {
        assert_eq!(
            tmpl_labels.get(k),
            Some(v),
            "service selector {k}={v} does not match the operator pods"
        );
    }
    let sports = sspec.ports.unwrap_or_default();
    assert!(
        sports.iter().any(|p| p.port == 8080),
        "service ports {sports:?}"
    );

    // LimitRange, as the reference Helm chart.
    let lr = Api::<LimitRange>::namespaced(client, OPERATOR_NS)
        .get("skyhook-default-limits")
        .await
        .expect("limit range");
    let item = lr
        .spec
        .expect("spec")
        .limits
        .into_iter()
        .find(|l| l.type_ == "Container")
        .expect("a Container limit");
    let q =
        |m: &Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
         k: &str| {
            m.as_ref()
                .and_then(|m| m.get(k))
                .map(|q| q.0.clone())
                .unwrap_or_default()
        };
    assert_eq!(q(&item.default, "cpu"), "500m");
    assert_eq!(q(&item.default, "memory"), "512Mi");
    assert_eq!(q(&item.default_request, "cpu"), "250m");
    assert_eq!(q(&item.default_request, "memory"), "256Mi");
}

/// Where a permission is checked.
#[derive(Clone, Copy, Debug)]
enum Scope<'a> {
    /// Cluster-scoped resource (no namespace).
    Cluster,
    /// Namespaced resource, in every namespace at once (`-A`).
    AllNamespaces,
    /// Namespaced resource, in one namespace.
    Ns(&'a str),
}

/// One `kubectl auth can-i` question and its expected answer.
#[derive(Clone, Debug)]
struct Check<'a> {
    verb: &'a str,
    /// `resource[.group][/subresource]`.
    resource: &'a str,
    scope: Scope<'a>,
    allowed: bool,
}

fn check<'a>(verb: &'a str, resource: &'a str, scope: Scope<'a>, allowed: bool) -> Check<'a> {
    Check {
        verb,
        resource,
        scope,
        allowed,
    }
}

/// `verbs` on `resource` in `scope`, all expected to be `allowed`.
fn checks<'a>(
    verbs: &[&'a str],
    resource: &'a str,
    scope: Scope<'a>,
    allowed: bool,
) -> Vec<Check<'a>> {
    verbs
        .iter()
        .map(|v| check(v, resource, scope, allowed))
        .collect()
}

/// Ask `kubectl auth can-i` as `user`; `Err` when kubectl answered neither yes nor no.
fn can_i(ctx: &TestCtx, user: &str, c: &Check) -> Result<bool, String> {
    let as_user = format!("--as={user}");
    // `resource=name` asks about one object by name (kubectl's `resource/name`).
    let named = c.resource.replace('=', "/");
    let (resource, sub) = match c.resource.split_once('/') {
        _ if c.resource.contains('=') => (named.as_str(), None),
        Some((r, s)) => (r, Some(format!("--subresource={s}"))),
        None => (c.resource, None),
    };
    let mut args = vec!["auth", "can-i", c.verb, resource, as_user.as_str()];
    if let Some(s) = &sub {
        args.push(s);
    }
    match c.scope {
        Scope::Cluster => {}
        Scope::AllNamespaces => args.push("--all-namespaces"),
        Scope::Ns(ns) => args.extend(["-n", ns]),
    }
    let out = ctx.kubectl(&args);
    let answer = text(&out.stdout);
    match answer.trim() {
        "yes" => Ok(true),
        a if a.starts_with("no") => Ok(false),
        _ => Err(format!(
            "kubectl {} answered {:?} / {:?}",
            args.join(" "),
            answer.trim(),
            text(&out.stderr).trim()
        )),
    }
}

/// Run every check (in parallel), and fail once listing every wrong answer.
fn assert_permissions(ctx: &TestCtx, user: &str, table: &[Check]) {
    let results: Vec<(Check, Result<bool, String>)> = std::thread::scope(|s| {
        table
            .chunks(8)
            .flat_map(|chunk| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|c| s.spawn(move || (c.clone(), can_i(ctx, user, c))))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("can-i thread"))
                    .collect::<Vec<_>>()
            })
            .collect()
    });
    let wrong: Vec<String> = results
        .into_iter()
        .filter_map(|(c, r)| match r {
            Ok(got) if got == c.allowed => None,
            Ok(got) => Some(format!(
                "  {} {} ({:?}): expected {}, got {}",
                c.verb,
                c.resource,
                c.scope,
                if c.allowed { "yes" } else { "no" },
                if got { "yes" } else { "no" }
            )),
            Err(e) => Some(format!("  {} {} ({:?}): {e}", c.verb, c.resource, c.scope)),
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} wrong permission(s) for {user}:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// RBAC reaches the authorizer through informers: wait until `probe` is answered `yes`.
async fn wait_allowed(ctx: &TestCtx, user: &str, probe: Check<'_>) {
    let what = format!("{user} to be allowed to {} {}", probe.verb, probe.resource);
    ctx.wait_for(&what, Duration::from_secs(20), || {
        let r = can_i(ctx, user, &probe);
        async move { matches!(r, Ok(true)).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn operator_service_account_has_exactly_what_it_needs() {
    let ctx = TestCtx::new("deploy-rbac").await;
    apply_deploy(&ctx);
    // `kubectl auth can-i` answers no for a resource it cannot discover: the NodeWright API's
    // grants are checked with its CRDs installed.
    crate::support::install_nodewright_crds();
    use Scope::*;
    let op = Ns(OPERATOR_NS);
    let other = Ns(ctx.ns.as_str());
    wait_allowed(&ctx, OPERATOR_SA, check("create", "jobs.batch", op, true)).await;

    let mut table = Vec::new();
    // Needed.
    table.extend(checks(
        &["get", "list", "watch", "patch"],
        "nodes",
        Cluster,
        true,
    ));
    table.push(check("patch", "nodes/status", Cluster, true));
    // Drain: one field-selected list per node, in every namespace.
    table.push(check("list", "pods", AllNamespaces, true));
    table.push(check("create", "pods/eviction", AllNamespaces, true));
    table.push(check("create", "pods/eviction", other, true));
    table.extend(checks(
        &["get", "list", "watch", "patch", "update"],
        "skyhooks.skyhook.nvidia.com",
        Cluster,
        true,
    ));
    table.extend(checks(
        &["get", "patch", "update"],
        "skyhooks.skyhook.nvidia.com/status",
        Cluster,
        true,
    ));
    table.push(check(
        "update",
        "skyhooks.skyhook.nvidia.com/finalizers",
        Cluster,
        true,
    ));
    // patch: the in-use finalizer.
    table.extend(checks(
        &["get", "list", "watch", "patch"],
        "deploymentpolicies.skyhook.nvidia.com",
        Cluster,
        true,
    ));
    // The same engine serves NodeWrights (upstream's API after v0.18); create: the mirror of
    // MIGRATE_TO_NODEWRIGHT.
    table.extend(checks(
        &["get", "list", "watch", "create", "patch", "update"],
        "nodewrights.nodewright.nvidia.com",
        Cluster,
        true,
    ));
    table.extend(checks(
        &["get", "list", "watch", "create", "patch"],
        "deploymentpolicies.nodewright.nvidia.com",
        Cluster,
        true,
    ));
    table.extend(checks(
        &["get", "patch", "update"],
        "nodewrights.nodewright.nvidia.com/status",
        Cluster,
        true,
    ));
    table.push(check(
        "update",
        "nodewrights.nodewright.nvidia.com/finalizers",
        Cluster,
        true,
    ));
    table.extend(checks(
        &[
            "create",
            "get",
            "list",
            "watch",
            "delete",
            "deletecollection",
            "patch",
        ],
        "jobs.batch",
        op,
        true,
    ));
    table.push(check("get", "pods/log", op, true));
    // Pending stage pods and the Go operator's pods are watched here; the latter deleted.
    table.extend(checks(
        &["get", "list", "watch", "delete"],
        "pods",
        op,
        true,
    ));
    table.extend(checks(
        &[
            "create",
            "get",
            "list",
            "watch",
            "update",
            "patch",
            "delete",
            "deletecollection",
        ],
        "configmaps",
        op,
        true,
    ));
    table.extend(checks(
        &["create", "get", "list", "watch", "update", "patch"],
        "leases.coordination.k8s.io",
        op,
        true,
    ));
    for ns in [op, Ns("default")] {
        table.extend(checks(&["create", "patch"], "events", ns, true));
        table.extend(checks(
            &["create", "patch"],
            "events.events.k8s.io",
            ns,
            true,
        ));
    }

    // Not needed: no webhook (no Secrets, no webhook configurations), Jobs and ConfigMaps only in
    // the operator namespace, no pod create or update, no pod delete but the Go operator's pods in
    // the operator namespace (evictions elsewhere), no node or Skyhook create/delete, no
    // escalation paths.
    table.extend(checks(&["get", "list", "watch"], "secrets", op, false));
    // The rollout gates' credentials, by name only.
    for name in [
        "secrets=skyhook-alert-credentials",
        "secrets=skyhook-notifications",
    ] {
        table.push(check("get", name, op, true));
    }
    table.push(check("get", "secrets=other", op, false));
    table.push(check("list", "secrets", AllNamespaces, false));
    table.extend(checks(&["create", "delete"], "nodes", Cluster, false));
    table.extend(checks(
        &["create", "delete"],
        "skyhooks.skyhook.nvidia.com",
        Cluster,
        false,
    ));
    table.extend(checks(
        &["create", "update", "delete"],
        "deploymentpolicies.skyhook.nvidia.com",
        Cluster,
        false,
    ));
    table.push(check(
        "delete",
        "nodewrights.nodewright.nvidia.com",
        Cluster,
        false,
    ));
    table.extend(checks(
        &["update", "delete"],
        "deploymentpolicies.nodewright.nvidia.com",
        Cluster,
        false,
    ));
    table.extend(checks(
        &["create", "patch", "delete"],
        "deployments.apps",
        op,
        false,
    ));
    table.extend(checks(
        &["create", "update", "patch", "deletecollection"],
        "pods",
        op,
        false,
    ));
    table.push(check("delete", "pods", AllNamespaces, false));
    // No cluster-wide pod reads beyond the drain's list; the Eviction API enforces budgets.
    table.extend(checks(&["get", "watch"], "pods", AllNamespaces, false));
    table.push(check("get", "pods", other, false));
    table.push(check(
        "list",
        "poddisruptionbudgets.policy",
        AllNamespaces,
        false,
    ));
    table.push(check("delete", "pods", other, false));
    table.push(check("create", "jobs.batch", other, false));
    table.push(check("list", "jobs.batch", AllNamespaces, false));
    table.push(check("create", "configmaps", other, false));
    table.push(check("list", "configmaps", AllNamespaces, false));
    table.push(check("deletecollection", "jobs.batch", other, false));
    table.push(check("deletecollection", "configmaps", other, false));
    table.push(check(
        "create",
        "leases.coordination.k8s.io",
        Ns("kube-system"),
        false,
    ));
    table.push(check(
        "update",
        "leases.coordination.k8s.io",
        Ns("kube-system"),
        false,
    ));
    table.push(check("create", "events", Ns("kube-system"), false));
    table.push(check("get", "pods/log", Ns("kube-system"), false));
    table.push(check("create", "serviceaccounts/token", op, false));
    table.push(check(
        "create",
        "validatingwebhookconfigurations.admissionregistration.k8s.io",
        Cluster,
        false,
    ));
    table.push(check(
        "update",
        "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        Cluster,
        false,
    ));
    table.push(check(
        "patch",
        "customresourcedefinitions.apiextensions.k8s.io",
        Cluster,
        false,
    ));
    table.push(check(
        "create",
        "clusterrolebindings.rbac.authorization.k8s.io",
        Cluster,
        false,
    ));
    table.push(check(
        "escalate",
        "clusterroles.rbac.authorization.k8s.io",
        Cluster,
        false,
    ));
    table.push(check(
        "bind",
        "clusterroles.rbac.authorization.k8s.io",
        Cluster,
        false,
    ));
    table.push(check("impersonate", "users", Cluster, false));
    table.push(check("delete", "namespaces", Cluster, false));

    assert_permissions(&ctx, OPERATOR_SA, &table);
}

#[tokio::test]
async fn viewer_and_oncall_roles_grant_what_the_plugin_needs() {
    let ctx = TestCtx::new("deploy-plugin").await;
    apply_deploy(&ctx);
    use Scope::*;
    let op = Ns(OPERATOR_NS);
    let viewer = ctx.name("viewer");
    let oncall = ctx.name("oncall");
    // Bound as deploy/README.md tells an admin to.
    let _viewer = RoleBindings::viewer(&ctx, &viewer);
    let _oncall = RoleBindings::oncall(&ctx, &oncall);
    wait_allowed(&ctx, &viewer, check("list", "deployments.apps", op, true)).await;
    wait_allowed(
        &ctx,
        &oncall,
        check("patch", "skyhooks.skyhook.nvidia.com", Cluster, true),
    )
    .await;

    // What every read command needs (§8): Skyhooks, policies, nodes and events across the
    // cluster; Jobs, pods, logs and the operator Deployment in the operator namespace.
    let mut reads = Vec::new();
    reads.extend(checks(
        &["get", "list", "watch"],
        "skyhooks.skyhook.nvidia.com",
        Cluster,
        true,
    ));
    reads.push(check(
        "get",
        "skyhooks.skyhook.nvidia.com/status",
        Cluster,
        true,
    ));
    reads.extend(checks(
        &["get", "list", "watch"],
        "deploymentpolicies.skyhook.nvidia.com",
        Cluster,
        true,
    ));
    reads.extend(checks(&["get", "list", "watch"], "nodes", Cluster, true));
    reads.extend(checks(
        &["get", "list", "watch"],
        "events",
        AllNamespaces,
        true,
    ));
    reads.push(check("list", "events.events.k8s.io", AllNamespaces, true));
    reads.extend(checks(&["get", "list", "watch"], "jobs.batch", op, true));
    reads.extend(checks(&["get", "list", "watch"], "pods", op, true));
    reads.push(check("get", "pods/log", op, true));
    reads.extend(checks(&["get", "list"], "deployments.apps", op, true));

    // Never, for either: creating or deleting Skyhooks, policies or nodes, full updates, secrets
    // and ConfigMaps (package configMaps may hold credentials), anything outside the operator
    // namespace, pods, Jobs or Deployments written.
    let mut never = Vec::new();
    never.extend(checks(
        &["create", "update", "delete"],
        "skyhooks.skyhook.nvidia.com",
        Cluster,
        false,
    ));
    never.extend(checks(
        &["create", "patch", "delete"],
        "deploymentpolicies.skyhook.nvidia.com",
        Cluster,
        false,
    ));
    never.extend(checks(&["update", "delete"], "nodes", Cluster, false));
    never.push(check("patch", "nodes/status", Cluster, false));
    never.extend(checks(&["get", "list"], "secrets", op, false));
    never.push(check("get", "configmaps", op, false));
    never.push(check("list", "deployments.apps", Ns("default"), false));
    never.push(check("list", "pods", Ns("kube-system"), false));
    never.push(check("get", "pods/log", Ns("kube-system"), false));
    never.push(check("create", "pods/eviction", op, false));
    never.extend(checks(&["create", "delete"], "pods", op, false));
    never.extend(checks(
        &["create", "delete", "patch"],
        "jobs.batch",
        op,
        false,
    ));
    never.push(check("patch", "deployments.apps", op, false));
    never.push(check("create", "events", Ns("default"), false));

    // The viewer writes nothing at all.
    let mut table = reads.clone();
    table.extend(never.clone());
    table.push(check(
        "patch",
        "skyhooks.skyhook.nvidia.com",
        Cluster,
        false,
    ));
    table.push(check(
        "patch",
        "skyhooks.skyhook.nvidia.com/status",
        Cluster,
        false,
    ));
    table.push(check("patch", "nodes", Cluster, false));
    assert_permissions(&ctx, &viewer, &table);

    // On-call: the reads, plus patches (limited further by the admission policies; see
    // plugin_roles.rs) and the `oncall` marker verb those policies look for.
    let mut table = reads;
    table.extend(never);
    table.extend(checks(
        &["patch", "oncall"],
        "skyhooks.skyhook.nvidia.com",
        Cluster,
        true,
    ));
    table.push(check(
        "patch",
        "skyhooks.skyhook.nvidia.com/status",
        Cluster,
        true,
    ));
    table.push(check("patch", "nodes", Cluster, true));
    assert_permissions(&ctx, &oncall, &table);
}

/// The sample files: the colleague's copy in `tests/fixtures/valid/` when present, else the
/// reference's upstream samples.
fn sample_files() -> Vec<PathBuf> {
    let fixtures = repo().join("tests/fixtures/valid");
    let upstream = repo().join("../shared/reference/upstream-samples");
    let dir = if fixtures.is_dir() {
        fixtures
    } else {
        upstream
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .collect();
    files.sort();
    files
}

/// Remove every `null` (recording where): the API server prunes nulls of non-nullable fields
/// before validation, so they are not "lost" fields. This is how the upstream
/// `interrupt_group.yaml` package `spenser:` (a null body) is skipped.
fn drop_nulls(v: &mut Value, path: &str, dropped: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            let nulls: Vec<String> = m
                .iter()
                .filter(|(_, v)| v.is_null())
                .map(|(k, _)| k.clone())
                .collect();
            for k in nulls {
                m.remove(&k);
                dropped.push(format!("{path}.{k}"));
            }
            for (k, child) in m.iter_mut() {
                drop_nulls(child, &format!("{path}.{k}"), dropped);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter_mut().enumerate() {
                drop_nulls(child, &format!("{path}[{i}]"), dropped);
            }
        }
        _ => {}
    }
}

/// Every field of `sent` must be in `got` with the same value; `got` may have more (defaults).
fn lost_fields(sent: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    match (sent, got) {
        (Value::Object(s), Value::Object(g)) => {
            for (k, sv) in s {
                let p = format!("{path}.{k}");
                match g.get(k) {
                    Some(gv) => lost_fields(sv, gv, &p, out),
                    None => out.push(format!("{p}: missing (sent {sv})")),
                }
            }
        }
        (Value::Array(s), Value::Array(g)) if s.len() == g.len() => {
            for (i, (sv, gv)) in s.iter().zip(g).enumerate() {
                lost_fields(sv, gv, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(s), Value::Number(g)) if s.as_f64() == g.as_f64() => {}
        _ if sent == got => {}
        _ => out.push(format!("{path}: sent {sent}, got {got}")),
    }
}

/// `resource` argument of kubectl for an object: `<kind>.<group>` (kubectl accepts the kind).
fn resource_of(doc: &Value) -> String {
    let kind = doc["kind"].as_str().unwrap_or_default().to_lowercase();
    match doc["apiVersion"].as_str().and_then(|v| v.split_once('/')) {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind,
    }
}

/// `doc` without the fields a round trip is not expected to keep as sent: `metadata` (the
/// server's own) and `status` (a status subresource ignores it on create).
fn body(doc: &Value) -> Value {
    let mut v = doc.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    v
}

/// Dry-run `doc` (already renamed) and list every sent field missing or changed in what the API
/// server returns.
fn spec_round_trip(ctx: &TestCtx, doc: &Value) -> Result<Vec<String>, String> {
    let sent = serde_json::to_vec(doc).expect("json");
    let out = ctx.kubectl_stdin(
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        &sent,
    );
    if !out.status.success() {
        return Err(format!("rejected: {}", text(&out.stderr).trim()));
    }
    let got: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("output is not JSON: {e}"))?;
    let mut lost = Vec::new();
    lost_fields(&body(doc), &body(&got), "", &mut lost);
    Ok(lost)
}

/// Deletes an object the test created, however the test ends.
struct Created<'a> {
    ctx: &'a TestCtx,
    resource: String,
    name: String,
}

impl Drop for Created<'_> {
    fn drop(&mut self) {
        let _ = self.ctx.kubectl(&[
            "delete",
            &self.resource,
            &self.name,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

/// `status` as stored by the Go operator must survive the CRD's schema too. A status is only
/// accepted through the status subresource of an existing object, so create an inert copy
/// (selecting no node, paused, no finalizer), dry-run a merge patch of the status, compare,
/// delete the copy.
fn status_round_trip(ctx: &TestCtx, doc: &Value, name: String) -> Result<Vec<String>, String> {
    let status = doc["status"].clone();
    let mut obj = doc.clone();
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    obj["metadata"] = serde_json::json!({
        "name": name,
        "annotations": {"skyhook.nvidia.com/pause": "true"},
    });
    if obj["kind"] == "Skyhook" {
        obj["spec"]["nodeSelectors"] =
            serde_json::json!({"matchLabels": {"skyhook-e2e/never": ctx.prefix}});
    }
    let resource = resource_of(&obj);
    let out = ctx.kubectl_stdin(
        &["create", "-f", "-", "-o", "name"],
        &serde_json::to_vec(&obj).expect("json"),
    );
    if !out.status.success() {
        return Err(format!(
            "an inert copy could not be created: {}",
            text(&out.stderr).trim()
        ));
    }
    let _created = Created {
        ctx,
        resource: resource.clone(),
        name: name.clone(),
    };
    let patch = serde_json::json!({ "status": status }).to_string();
    let out = ctx.kubectl(&[
        "patch",
        &resource,
        &name,
        "--subresource=status",
        "--type=merge",
        "--dry-run=server",
        "-o",
        "json",
        "-p",
        &patch,
    ]);
    if !out.status.success() {
        return Err(format!(
            "status patch rejected: {}",
            text(&out.stderr).trim()
        ));
    }
    let got: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("output is not JSON: {e}"))?;
    let mut lost = Vec::new();
    lost_fields(&status, &got["status"], ".status", &mut lost);
    Ok(lost)
}

#[tokio::test]
async fn upstream_samples_keep_every_field() {
    let ctx = TestCtx::new("deploy-samples").await;
    apply_deploy(&ctx);
    let files = sample_files();
    assert!(!files.is_empty(), "no sample files found");

    let mut problems = Vec::new();
    let mut objects = 0;
    for file in &files {
        let shown = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let yaml = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml)
            .unwrap_or_else(|e| panic!("{} is not YAML: {e}", file.display()));
        for (i, mut doc) in docs.into_iter().enumerate() {
            if !doc.is_object() {
                continue;
            }
            objects += 1;
            let mut dropped = Vec::new();
            drop_nulls(&mut doc, "", &mut dropped);
            if !dropped.is_empty() {
                eprintln!("{shown}: not sending null field(s) {dropped:?}");
            }
            // A unique name, so the dry run never touches another test's object.
            doc["metadata"]["name"] = Value::String(ctx.name(&format!("s{objects}")));
            let mut report = |r: Result<Vec<String>, String>| match r {
                Ok(lost) => problems.extend(
                    lost.into_iter()
                        .map(|l| format!("{shown} (document {i}): {l}")),
                ),
                Err(e) => problems.push(format!("{shown} (document {i}): {e}")),
            };
            report(spec_round_trip(&ctx, &doc));
            if doc.get("status").is_some_and(|s| !s.is_null()) {
                report(status_round_trip(
                    &ctx,
                    &doc,
                    ctx.name(&format!("st{objects}")),
                ));
            }
        }
    }
    assert!(objects > 0, "the sample files held no objects: {files:?}");
    assert!(
        problems.is_empty(),
        "{} problem(s) applying the samples against the installed CRDs:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}
