//! Plugin users' roles in e2e tests: the viewer Role where a test's operator runs, and what an
//! on-call user is refused.

use std::time::Duration;

use serde_json::{Value, json};

use super::deploy::{OPERATOR_NS, text};
use super::plugin::{Ran, plugin};
use super::{Env, TestCtx};

/// The viewer Role of the operator namespace, copied into the test's namespace (where this
/// test's operator runs its Jobs) and bound to `user` there.
pub fn viewer_role_here(ctx: &TestCtx, user: &str) {
    let got = ctx.kubectl(&[
        "get",
        "role",
        "skyhook-viewer",
        "-n",
        OPERATOR_NS,
        "-o",
        "json",
    ]);
    assert!(got.status.success(), "{}", text(&got.stderr));
    let mut role: Value = serde_json::from_slice(&got.stdout).expect("role json");
    role["metadata"] = json!({"name": "skyhook-viewer", "namespace": ctx.ns});
    let applied = ctx.kubectl_stdin(&["apply", "-f", "-"], role.to_string().as_bytes());
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let bound = ctx.kubectl(&[
        "create",
        "rolebinding",
        &format!("{user}-here"),
        "-n",
        &ctx.ns,
        "--role=skyhook-viewer",
        &format!("--user={user}"),
    ]);
    assert!(bound.status.success(), "{}", text(&bound.stderr));
}

/// The plugin as `user`, in the test's namespace, never prompting.
pub fn as_user(env: &Env, user: &str, args: &[&str]) -> Ran {
    plugin(&env.ctx, &as_user_args(env, user, args))
}

/// `args` as `user`, in the test's namespace.
pub fn as_user_args<'a>(env: &'a Env, user: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--as", user, "-n", env.ctx.ns.as_str()];
    all.extend_from_slice(args);
    all
}

/// `kubectl --as user patch <what> --type merge -p <patch>`: its stderr when refused.
pub fn refused_patch(env: &Env, user: &str, what: &[&str], patch: &Value) -> String {
    let mut args = vec!["patch"];
    args.extend_from_slice(what);
    let p = patch.to_string();
    let as_user = format!("--as={user}");
    args.extend(["--type", "merge", "-p", p.as_str(), as_user.as_str()]);
    let out = env.ctx.kubectl(&args);
    assert!(
        !out.status.success(),
        "kubectl {} was allowed",
        args.join(" ")
    );
    text(&out.stderr)
}

/// Waits until RBAC (served from informers) lets `user` patch Skyhooks, or read nodes.
pub async fn wait_bound(env: &Env, user: &str, verb: &str, resource: &str) {
    env.ctx
        .wait_for(
            &format!("{user} may {verb} {resource}"),
            Duration::from_secs(20),
            || async {
                let out = env
                    .ctx
                    .kubectl(&["auth", "can-i", verb, resource, "--as", user]);
                (text(&out.stdout).trim() == "yes").then_some(())
            },
        )
        .await;
}
