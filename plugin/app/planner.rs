//! The operator's own planner on the cluster as it is now, for the commands that show what it
//! would do (`deployment-policy preview`, `release`, `plan`): the objects it reads are listed once, and
//! `plan::plan` runs on them. Nothing is written, and no rule of the planner is repeated here.

use std::sync::Arc;

use clap::Parser;
use k8s_openapi::api::batch::v1::Job;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use skyhook::crd::{DeploymentPolicy, Skyhook, SkyhookStatus};
use skyhook::jobs::JobView;
use skyhook::plan::dry_run::Snapshot;
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
        refused_nodes: &plan::inputs::NO_NODES,
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
    /// The nodes as listed, for a dry run that changes them.
    raw_nodes: Vec<Node>,
    /// Every object's finished Jobs: how long each package stage took.
    history: Vec<Arc<JobView>>,
    /// What could not be read, one line each.
    pub notes: Vec<String>,
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
        let (configmaps, notes) = own_configmaps(kube, namespace, sk).await?;
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
        let history: Vec<Arc<JobView>> = views
            .iter()
            .filter(|v| v.finished())
            .cloned()
            .map(Arc::new)
            .collect();
        let mut skyhooks: Vec<Arc<Skyhook>> = skyhooks.into_iter().map(Arc::new).collect();
        skyhooks.retain(|s| s.name_any() != name);
        skyhooks.push(Arc::new(sk.clone()));
        Ok(World {
            skyhooks,
            policies: policies.into_iter().map(Arc::new).collect(),
            nodes: nodes
                .items
                .iter()
                .map(|n| Arc::new(NodeView::from(n.clone())).in_api(api))
                .collect(),
            raw_nodes: nodes.items,
            history,
            jobs: views.into_iter().filter(mine).map(Arc::new).collect(),
            notes,
            configmaps: configmaps
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

/// The object's package ConfigMaps. The viewer role reads no ConfigMaps (package configMaps may
/// hold credentials): the plan is then made without them, and a note says what that leaves out.
async fn own_configmaps(
    kube: &Kube,
    namespace: &str,
    sk: &Skyhook,
) -> Result<(Vec<ConfigMap>, Vec<String>), CliError> {
    let own = ListParams::default().labels(&kube.selector(&format!(
        "{}={}",
        schema::NAME_LABEL,
        sk.name_any()
    )));
    match Api::<ConfigMap>::namespaced(kube.client(), namespace)
        .list(&own)
        .await
    {
        Ok(list) => Ok((list.items, Vec::new())),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok((
            Vec::new(),
            vec![format!(
                "package ConfigMaps not read ({}): which configMap keys changed, and so which \
                 configInterrupts run, is not judged",
                crate::app::error::one_line(&s.message)
            )],
        )),
        Err(e) => Err(kube.fail(e, format!("listing configmaps in namespace {namespace:?}"))),
    }
}

/// The world a dry run of `sk` starts from: what the planner reads, with `policies` in place of
/// the stored ones of their names, every pod and PodDisruptionBudget (the drains), and the
/// finished Jobs of every object (the durations). `status` is the one stored for `sk`. With it,
/// what could not be read, one line each.
pub async fn snapshot(
    kube: &Kube,
    namespace: &str,
    sk: &Skyhook,
    status: Option<SkyhookStatus>,
    policies: &[DeploymentPolicy],
) -> Result<(Snapshot, Vec<String>), CliError> {
    let mut world = World::read(kube, namespace, sk).await?;
    for p in policies {
        world.policies.retain(|x| x.name_any() != p.name_any());
        world.policies.push(Arc::new(p.clone()));
    }
    let client = kube.client();
    let mut notes = std::mem::take(&mut world.notes);
    let pod_list = readable(
        kube,
        Api::<Pod>::all(client.clone())
            .list(&ListParams::default())
            .await,
        "pods",
        &mut notes,
    )?;
    let budgets = readable(
        kube,
        Api::<PodDisruptionBudget>::all(client)
            .list(&ListParams::default())
            .await,
        "poddisruptionbudgets",
        &mut notes,
    )?;
    let mut pods: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for pod in pod_list {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            pods.entry(node).or_default().push(pod);
        }
    }
    let mut candidate = sk.clone();
    candidate.status = None;
    let snapshot = Snapshot {
        api: kube.api(),
        skyhook: candidate,
        status,
        skyhooks: world.skyhooks,
        policies: world.policies,
        nodes: world.raw_nodes,
        jobs: world.jobs,
        history: world.history,
        configmaps: world.configmaps,
        pods,
        budgets,
        elsewhere: world.elsewhere,
        namespace: namespace.to_string(),
        config: defaults()?,
        operator_version: env!("CARGO_PKG_VERSION").to_string(),
        now: jiff::Timestamp::now(),
    };
    Ok((snapshot, notes))
}

/// The items of a cluster-wide list the drains need; a list the user may not read leaves them
/// out, with a note saying so (a viewer sees the rollout, without the pods each drain evicts).
fn readable<K>(
    kube: &Kube,
    res: Result<kube::core::ObjectList<K>, kube::Error>,
    what: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<K>, CliError>
where
    K: Clone,
{
    match res {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            notes.push(format!(
                "drains shown without {what}: you may not list them cluster-wide ({})",
                crate::app::error::one_line(&s.message)
            ));
            Ok(Vec::new())
        }
        Err(e) => Err(kube.fail(e, format!("listing {what} (the drains)"))),
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
