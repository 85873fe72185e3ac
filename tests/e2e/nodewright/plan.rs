//! `kubectl nodewright plan -f` on a NodeWright manifest: validated by the new group's API
//! server rules, planned by the operator's planner in the NodeWright API, and its first Jobs are
//! those the operator creates once the NodeWright is applied.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use skyhook::plan::dry_run::Rollout;
use skyhook::schema::{self, Api as Kind, Status};

use super::{create_nodewright, nw_setup, wait_nodewright};
use crate::support::plugin::nodewright_plugin;
use crate::support::{pkg, sleep};

#[derive(Debug, serde::Deserialize)]
struct Output {
    plans: Vec<Rollout>,
}

fn label<'a>(j: &'a Job, key: &str) -> &'a str {
    j.labels().get(key).map(String::as_str).unwrap_or_default()
}

#[tokio::test]
async fn kubectl_nodewright_plan_plans_a_nodewright_as_the_operator_then_runs_it() {
    let env = nw_setup("nw-plan", 2, &[]).await;
    let name = env.ctx.name("nw");
    let spec = json!({"packages": {"tool": pkg("1.0.0", sleep("10"))}});
    let (k, v) = env.ctx.test_label();
    let mut full = spec.clone();
    full["nodeSelectors"] = json!({"matchLabels": {k.clone(): v.clone()}});
    let doc: Value = json!({
        "apiVersion": Kind::NodeWright.api_version(), "kind": Kind::NodeWright.kind(),
        "metadata": {"name": name, "labels": {k: v}},
        "spec": full,
    });
    let mut file = tempfile::NamedTempFile::new().expect("a temp file");
    write!(file, "{doc}").expect("write");
    let path = file.path().display().to_string();
    let ns = env.ctx.ns.clone();
    let ran = nodewright_plugin(
        &env.ctx,
        &["plan", "-f", &path, "-n", &ns, "-o", "json"],
        None,
    );
    let out: Output = serde_json::from_str(ran.ok()).expect("plan JSON");
    let p = &out.plans[0];
    assert_eq!(p.kind, "NodeWright");
    assert_eq!(p.nodes.len(), 2, "{p:#?}");
    let planned: BTreeSet<(String, String, String)> = p
        .first_pass
        .jobs
        .iter()
        .map(|j| {
            let package = format!("{}-{}", j.package, j.version);
            (j.node.clone(), package, j.stage.clone())
        })
        .collect();
    create_nodewright(&env.ctx, &name, spec).await;
    let jobs: Api<Job> = Api::namespaced(env.ctx.client.clone(), &ns);
    let lp = ListParams::default().labels(&format!(
        "{}={name}",
        Kind::NodeWright.local(schema::NAME_LABEL)
    ));
    env.ctx
        .wait_for("the first Jobs", Duration::from_secs(90), || async {
            let l = jobs.list(&lp).await.ok()?;
            (!l.items.is_empty()).then_some(())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let real: BTreeSet<(String, String, String)> = jobs
        .list(&lp)
        .await
        .expect("list Jobs")
        .items
        .iter()
        .map(|j| {
            (
                label(j, &Kind::NodeWright.local(schema::NODE_LABEL)).to_string(),
                label(j, &Kind::NodeWright.local(schema::PACKAGE_LABEL)).to_string(),
                label(j, &Kind::NodeWright.local(schema::STAGE_LABEL)).to_string(),
            )
        })
        .collect();
    assert_eq!(planned, real);
    wait_nodewright(&env, &name, Status::Complete, Duration::from_secs(120)).await;
}
