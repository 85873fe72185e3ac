//! A Skyhook and a NodeWright of one name (`plan::api_handover` decides whose turn it is): the
//! NodeWright waits while the Skyhook is mid-rollout, then takes it over (the record on the
//! Skyhook, the one-time copy of its node keys, the clean-up of the legacy keys later); the
//! Skyhook stays frozen from then on, showing its NodeWright's status, until it is deleted or
//! released. The driver asks [`turn`] before a pass and [`before_planning`] inside one.

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::debug;

use super::Ctx;
use super::error::Error;
use super::write::{self, takeover};
use crate::crd::Skyhook;
use crate::plan::{self, Plan, api_handover};
use crate::schema::Api;

/// How often a NodeWright waiting for its Skyhook looks again (upstream's migration hold: 20 s).
const HANDOVER_RECHECK: Duration = Duration::from_secs(20);

/// How soon a pass follows a write of the hand-over (a record, a copy, a release): the watch
/// delivers what it wrote within that, and the next pass plans from it.
const WRITTEN_RECHECK: Duration = Duration::from_secs(1);

/// The same-named object of the other API, as its engine's store holds it.
fn peer_of(sk: &Skyhook, ctx: &Ctx) -> Option<std::sync::Arc<Skyhook>> {
    ctx.peer
        .as_ref()
        .and_then(|s| s.get(&ObjectRef::new(&sk.name_any())))
}

/// `None` when it is this object's turn to run a pass; else what the controller does instead.
pub(super) async fn turn(sk: &Skyhook, ctx: &Ctx) -> Result<Option<Action>, Error> {
    let peer = peer_of(sk, ctx);
    match api_handover::turn(ctx.api, sk, peer.as_deref()) {
        api_handover::Turn::Run => {
            if let Ok(mut w) = ctx.waiting.lock() {
                w.remove(&sk.name_any());
            }
            Ok(None)
        }
        api_handover::Turn::Frozen => frozen(sk, peer.as_deref(), ctx).await.map(Some),
        api_handover::Turn::Wait => {
            wait_for_skyhook(sk, ctx);
            Ok(Some(Action::requeue(HANDOVER_RECHECK)))
        }
        api_handover::Turn::Release => {
            takeover::release(ctx.target(), sk).await?;
            Ok(Some(Action::requeue(WRITTEN_RECHECK)))
        }
    }
}

/// A NodeWright's writes before it plans: the take-over recorded on the Skyhook of its name, the
/// node keys copied once, then the clean-up of the legacy ones when due. `Ok(when the clean-up is
/// due)` to go on planning; `Err((the next pass, the writes that failed for good))` when a write
/// of the hand-over ended this pass: planning before the copy is in the cache would run every
/// stage again.
pub(super) async fn before_planning(
    sk: &Skyhook,
    ctx: &Ctx,
) -> Result<Result<Option<Duration>, (Action, Vec<String>)>, Error> {
    if ctx.api != Api::NodeWright {
        return Ok(Ok(None));
    }
    let again = |failures| Err((Action::requeue(WRITTEN_RECHECK), failures));
    if let Some(legacy) = peer_of(sk, ctx)
        && !api_handover::taken_over(&legacy)
        && legacy.metadata.deletion_timestamp.is_none()
    {
        takeover::record_on_skyhook(ctx.target(), &legacy).await?;
        return Ok(again(Vec::new()));
    }
    let nodes = ctx.caches.nodes.all();
    if let Some(failures) = takeover::copy_keys(ctx.target(), sk, &nodes).await? {
        return Ok(again(failures));
    }
    let delay = ctx.config.legacy_cleanup_delay;
    Ok(
        match takeover::legacy_cleanup(ctx.target(), sk, &nodes, delay).await? {
            takeover::Cleanup::Pruned(failures) => again(failures),
            takeover::Cleanup::Due(left) => Ok(Some(left)),
            takeover::Cleanup::Nothing => Ok(None),
        },
    )
}

/// A NodeWright being deleted whose Skyhook is gone (or going): the legacy keys of its name it
/// took over go with it, at once, whatever `LEGACY_CLEANUP_DELAY` says; nothing else would
/// remove them. While the Skyhook lives they stay: a release continues from them. `true` when it
/// wrote (the deletion pass then waits for the next one).
pub(super) async fn before_deletion(sk: &Skyhook, ctx: &Ctx) -> Result<bool, Error> {
    if ctx.api != Api::NodeWright {
        return Ok(false);
    }
    if peer_of(sk, ctx).is_some_and(|p| p.metadata.deletion_timestamp.is_none()) {
        return Ok(false);
    }
    let nodes = ctx.caches.nodes.all();
    Ok(matches!(
        takeover::legacy_cleanup(ctx.target(), sk, &nodes, Duration::ZERO).await?,
        takeover::Cleanup::Pruned(_)
    ))
}

/// A Skyhook its NodeWright took over: no stage runs. It is recorded as taken over (once), shows
/// its NodeWright's status, and an edit is answered with a Warning; a deletion only releases the
/// finalizer while the NodeWright keeps its nodes. Looked at again now and then.
async fn frozen(sk: &Skyhook, nw: Option<&Skyhook>, ctx: &Ctx) -> Result<Action, Error> {
    let name = sk.name_any();
    ctx.pacing.forget(&name);
    if sk.metadata.deletion_timestamp.is_some() {
        takeover::release_frozen(ctx.target(), sk).await?;
        return Ok(Action::await_change());
    }
    if !api_handover::taken_over(sk) {
        takeover::record_on_skyhook(ctx.target(), sk).await?;
        return Ok(Action::requeue(WRITTEN_RECHECK));
    }
    debug!(skyhook = %name, "taken over by the NodeWright of the same name; not reconciled");
    tell_unapplied(sk, ctx);
    if let Some(status) = nw.and_then(|nw| api_handover::followed_status(sk, nw)) {
        let plan = Plan {
            status: Some(status),
            ..Plan::default()
        };
        let done = write::execute(ctx.target(), sk, plan, |_| {}).await?;
        if done.written == write::Written::Conflict {
            return Ok(Action::requeue(WRITTEN_RECHECK));
        }
    }
    // Its NodeWright's status changes trigger no pass of the Skyhook: it is looked at as often
    // as a rollout's progress is worth showing.
    Ok(Action::requeue(
        FOLLOW_INTERVAL.min(ctx.config.default_interval),
    ))
}

/// How often a frozen Skyhook's status catches up with its NodeWright's.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(2);

/// Says once per generation, in a Warning on a frozen Skyhook, that an edit is not applied.
fn tell_unapplied(sk: &Skyhook, ctx: &Ctx) {
    let Some(generation) = plan::api_handover::unapplied_edit(sk) else {
        return;
    };
    let first = ctx
        .unapplied
        .lock()
        .map(|mut told| told.insert(sk.name_any(), generation) != Some(generation))
        .unwrap_or(false);
    if first {
        takeover::announce_unapplied(&ctx.events, sk, generation);
    }
}

/// Says once, in an Event on the NodeWright, that it waits for its Skyhook to finish.
fn wait_for_skyhook(nw: &Skyhook, ctx: &Ctx) {
    let first = ctx
        .waiting
        .lock()
        .map(|mut w| w.insert(nw.name_any()))
        .unwrap_or(false);
    if first {
        takeover::announce_wait(&ctx.events, ctx.api, nw);
    }
}
