//! Real nodes: a kubelet and containerd beside the kwok nodes (tests/cluster/real-node), pulling
//! from the cluster's registry, running the reference's agent (v6.4.1, built from ../shared) and
//! its shellscript package for real. `cargo test --test e2e real_node` runs them all.

mod agent;
mod full_node;
mod interrupts;
mod lifecycle;
mod logs;
mod operator_pod;
mod pull;

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::env::Env;
use crate::support::real::images;
use crate::support::{Operator, TestCtx, install_crds};

/// A test of its own: a context, one real node labelled for it, and an operator whose Jobs run
/// the agent image from the cluster's registry.
async fn setup(test: &str, operator_env: &[(&str, &str)]) -> (Env, String) {
    install_crds();
    let mut ctx = TestCtx::new(test).await;
    let node = ctx.add_real_node();
    let agent = images(&ctx).agent;
    let mut env: Vec<(&str, &str)> = vec![("AGENT_IMAGE", &agent)];
    env.extend_from_slice(operator_env);
    let op = Operator::start(&ctx, &env);
    (Env::new(ctx, op, vec![node.clone()]), node)
}

/// The reference's shellscript package from the cluster's registry, with `config_map` as its
/// scripts and `extra` merged into the package.
fn shellscript(ctx: &TestCtx, config_map: Value, extra: Value) -> Value {
    let imgs = images(ctx);
    let mut pkg = json!({
        "version": imgs.shellscript_version,
        "image": imgs.shellscript_repo,
        "configMap": config_map,
    });
    if let (Some(p), Some(e)) = (pkg.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    pkg
}

/// Creates Skyhook `sk` of `packages` on the test's nodes.
async fn create(env: &Env, sk: &str, packages: Value) {
    env.create(&crate::support::objects::skyhook(
        &env.ctx,
        sk,
        json!({ "packages": packages }),
    ))
    .await;
}

/// [`create`], then waits until the Skyhook is complete.
async fn roll_out(env: &Env, sk: &str, packages: Value) {
    create(env, sk, packages).await;
    env.wait_status(sk, skyhook::schema::Status::Complete, ROLLOUT)
        .await;
}

/// Long enough for a first pull of the agent image and a few stages on a loaded machine.
const ROLLOUT: Duration = Duration::from_secs(240);
