//! What runs around the engines: the start before them (probes, the API and its CRDs,
//! leadership), the tasks beside them (notifications, the policy finalizer, the mirror) and the
//! readiness mark once the caches are filled.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tracing::warn;

use super::leader::{Leadership, lead};
use super::{metrics_auth, mirror, policy_finalizer, probes, startup};
use crate::controller::ctx::{Ctx, Engines};
use crate::controller::error::Error;
use crate::controller::outbound;
use crate::schema::Api;
use crate::settings::{Config, MetricsAuth};

/// What the mirror reads (`MIGRATE_TO_NODEWRIGHT`), when it is on and both APIs are served.
pub(in crate::controller) fn mirror_sides(
    engines: &Engines,
    config: &Config,
) -> Option<mirror::Sides> {
    let of = |api| engines.0.iter().find(|c| c.api == api);
    let (legacy, nw) = (of(Api::Skyhook)?, of(Api::NodeWright)?);
    config.migrate_to_nodewright.then(|| mirror::Sides {
        refusals: legacy.mirror_refusals.clone(),
        skyhooks: legacy.caches.skyhooks.clone(),
        policies: legacy.caches.policies.clone(),
        nodewrights: nw.caches.skyhooks.clone(),
        nodewright_policies: nw.caches.policies.clone(),
        selected: config.skyhook_selector.is_some(),
    })
}

/// The notification sender (with `NOTIFICATIONS`), for as long as reconciling runs; without it,
/// a task that never ends.
pub(in crate::controller) fn notifications_task(
    client: &Client,
    config: &Config,
    http: outbound::http::Outbound,
) -> impl std::future::Future<Output = ()> + use<> {
    let run = config
        .notifications
        .then(|| outbound::notify::run(client.clone(), config.namespace.clone(), http));
    async move {
        match run {
            Some(task) => task.await,
            None => std::future::pending().await,
        }
    }
}

/// The task that keeps the DeploymentPolicy in-use finalizer, for as long as reconciling runs.
pub(in crate::controller) fn policy_finalizer_task(
    ctx: &Ctx,
) -> impl std::future::Future<Output = ()> + use<> {
    policy_finalizer::run(
        ctx.client.clone(),
        ctx.api,
        ctx.config.skyhook_selector.clone(),
        ctx.caches.skyhooks.clone(),
        ctx.caches.policies.clone(),
    )
}

/// `main` until it ends, with `task` running beside it.
pub(in crate::controller) async fn beside(
    main: impl std::future::Future<Output = ()>,
    task: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        _ = main => {}
        _ = task => {}
    }
}

/// Everything between building the caches and reconciling: probes and metrics first (a
/// liveness probe must not kill an operator that waits), the API and its CRDs, then leadership.
/// `None` when shut down while waiting to lead.
pub(in crate::controller) async fn prepare(
    engines: &Engines,
    client: &Client,
    shutdown: impl std::future::Future<Output = ()> + Clone,
) -> Result<Option<Leadership>, Error> {
    let Some(first) = engines.0.first() else {
        return Err(Error::NoApis);
    };
    let serving = &first.config.serving;
    let auth = (serving.metrics_auth == MetricsAuth::TokenReview)
        .then(|| metrics_auth::Authorizer::new(client.clone()));
    probes::spawn(serving, auth, Arc::new(Engines(engines.0.clone()))).await?;
    let selector = first.config.skyhook_selector.as_deref();
    let required = engines
        .0
        .iter()
        .filter(|c| c.config.serve_apis.required(c.api));
    for ctx in required {
        tokio::select! {
            waited = startup::wait_for_skyhook_api(client, ctx.api, selector, CRD_WAIT) => waited?,
            _ = shutdown.clone() => return Ok(None),
        }
    }
    let (timings, ns) = (first.config.leader, &first.config.namespace);
    let standby = &first.standby;
    let Some(leadership) = lead(timings, ns, standby, client, shutdown).await else {
        return Ok(None);
    };
    first.metrics.leader.set(1);
    Ok(Some(leadership))
}

/// How long start-up waits for the Skyhook CRD to be served (it may be being installed beside
/// the operator) before saying it is missing.
const CRD_WAIT: Duration = Duration::from_secs(120);

/// Marks the operator ready once the caches have filled, whether or not any Skyhook exists to
/// reconcile (the caches fill once the reconcile loop runs).
pub(in crate::controller) fn mark_ready_when_synced(ctx: &Arc<Ctx>) {
    let readiness = ctx.clone();
    tokio::spawn(async move {
        while let Err(e) = readiness.wait_ready().await {
            warn!(error = %e, "caches not ready");
        }
    });
}
