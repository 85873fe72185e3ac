//! The operator's own planner on the cluster as it is now, for the commands that show what it
//! would do (`deployment-policy preview`, `release`): the objects it reads are listed once, and
//! `plan::plan` runs on them. Nothing is written, and no rule of the planner is repeated here.

use std::sync::Arc;

use clap::Parser;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use skyhook::crd::{DeploymentPolicy, Skyhook};
use skyhook::jobs::JobView;
use skyhook::plan::{self, Elsewhere, Inputs, NodeView, Plan};
use skyhook::schema;
use skyhook::settings::{Config, Settings};

use crate::app::error::CliError;
use crate::app::kube::Kube;

/// The plan the operator's next pass of `sk` (normalised) would make, and what it read.
pub async fn plan_now(
    kube: &Kube,
    namespace: &str,
    sk: &Skyhook,
) -> Result<(Plan, World), CliError> {
    let world = World::read(kube, namespace, sk).await?;
    let config = defaults()?;
    let plan = plan::plan(&Inputs {
        skyhook: sk,
        status: sk.status.as_ref(),
        skyhooks: &world.skyhooks,
        // The object's own API: the other API's objects gate single nodes by priority, which
        // these commands do not show.
        peers: plan::fleet::Peers::NONE,
        policies: &world.policies,
        nodes: &world.nodes,
        jobs: &world.jobs,
        configmaps: &world.configmaps,
        pods_on_nodes: &Default::default(),
        busy_nodes: &world.elsewhere.busy,
        interrupting_nodes: &world.elsewhere.interrupting,
        go_pods: &Default::default(),
        invalid: &[],
        write_failures: &[],
        drain_blocks: &[],
        refused_auto_taints: &plan::inputs::NO_NODES,
        health_checks: &plan::inputs::NO_CHECKS,
        alerts: None,
        config: &config,
        operator_version: env!("CARGO_PKG_VERSION"),
        now: jiff::Timestamp::now(),
        status_hold: None,
        create_room: plan::launch::MAX_JOB_CREATES_PER_PASS,
    });
    Ok((plan, world))
}

/// What the planner reads, listed once.
pub struct World {
    pub skyhooks: Vec<Arc<Skyhook>>,
    pub policies: Vec<Arc<DeploymentPolicy>>,
    nodes: Vec<Arc<NodeView>>,
    jobs: Vec<Arc<JobView>>,
    configmaps: Vec<Arc<ConfigMap>>,
    elsewhere: Elsewhere,
}

impl World {
    async fn read(kube: &Kube, namespace: &str, sk: &Skyhook) -> Result<World, CliError> {
        let client = kube.client();
        let lp = ListParams::default();
        let all = |e, what: &str| kube.fail(e, format!("listing {what}"));
        let skyhooks = kube
            .skyhooks(&lp)
            .await
            .map_err(|e| all(e, kube.api().plural()))?;
        let policies = kube
            .policies()
            .await
            .map_err(|e| all(e, "deploymentpolicies"))?;
        let nodes = Api::<Node>::all(client.clone())
            .list(&lp)
            .await
            .map_err(|e| all(e, "nodes"))?;
        // Every API's Jobs: another object's running stage holds a node for both.
        let mut jobs = Vec::new();
        for api in schema::Api::ALL {
            let selector = ListParams::default().labels(api.local(schema::NAME_LABEL).as_ref());
            let listed = Api::<Job>::namespaced(client.clone(), namespace)
                .list(&selector)
                .await
                .map_err(|e| all(e, &format!("jobs in namespace {namespace:?}")))?;
            jobs.extend(listed.items);
        }
        let own = ListParams::default().labels(&kube.selector(&format!(
            "{}={}",
            schema::NAME_LABEL,
            sk.name_any()
        )));
        let configmaps = Api::<ConfigMap>::namespaced(client, namespace)
            .list(&own)
            .await
            .map_err(|e| all(e, &format!("configmaps in namespace {namespace:?}")))?;
        let name = sk.name_any();
        let views: Vec<JobView> = jobs
            .iter()
            .filter_map(|j| JobView::from_job(j, None))
            .collect();
        let mut elsewhere = Elsewhere::default();
        let api = kube.api();
        let mine = |v: &JobView| v.api == api && v.skyhook == name;
        for v in views.iter().filter(|v| !mine(v) && !v.finished()) {
            elsewhere.add(&v.node, v.stage);
        }
        let mut skyhooks: Vec<Arc<Skyhook>> = skyhooks.into_iter().map(Arc::new).collect();
        skyhooks.retain(|s| s.name_any() != name);
        skyhooks.push(Arc::new(sk.clone()));
        Ok(World {
            skyhooks,
            policies: policies.into_iter().map(Arc::new).collect(),
            nodes: nodes
                .items
                .into_iter()
                .map(|n| Arc::new(NodeView::from(n)).in_api(api))
                .collect(),
            jobs: views.into_iter().filter(mine).map(Arc::new).collect(),
            configmaps: configmaps
                .items
                .into_iter()
                .map(|mut c| {
                    api.canonicalize(&mut c.metadata.labels);
                    api.canonicalize(&mut c.metadata.annotations);
                    Arc::new(c)
                })
                .collect(),
            elsewhere,
        })
    }
}

/// The operator's defaults (these commands do not know the running operator's flags; none of
/// them changes which nodes a batch holds or which stage runs first).
fn defaults() -> Result<Config, CliError> {
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        settings: Settings,
    }
    let parsed = Defaults::try_parse_from(["skyhook-operator"])
        .map_err(|e| CliError::Encode(format!("operator defaults: {e}")))?;
    parsed
        .settings
        .validate()
        .map_err(|e| CliError::Encode(format!("operator defaults: {e}")))
}
