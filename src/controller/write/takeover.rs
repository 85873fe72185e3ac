//! The writes of a NodeWright taking over the Skyhook of its name (`plan::api_handover`): the
//! copy of the node keys it lacks, the record of when it took over, the clean-up of the legacy
//! keys `LEGACY_CLEANUP_DELAY` later, and the release of a frozen Skyhook's finalizer.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::event_queue::EventSink;
use super::{Target, execute};
use crate::controller::error::Error;
use crate::crd::Skyhook;
use crate::node::NodeView;
use crate::plan::{self, Plan, api_handover};
use crate::schema::{self, Api};

/// Copies the node keys of the Skyhook of its name that the NodeWright lacks, and records the
/// take-over on it. `None` when there was nothing to copy; else the writes that failed for good.
pub async fn copy_keys(
    to: Target<'_>,
    nw: &Skyhook,
    nodes: &[Arc<NodeView>],
) -> Result<Option<Vec<String>>, Error> {
    let name = nw.name_any();
    let at = jiff::Timestamp::now().to_string();
    let patches: Vec<plan::NodePatch> = nodes
        .iter()
        .filter_map(|n| api_handover::copied_keys(&name, n, &at))
        .collect();
    if patches.is_empty() {
        return Ok(None);
    }
    info!(nodewright = %name, nodes = patches.len(), "taking over the node keys of the Skyhook of the same name");
    mark_taken_over(&to, nw).await?;
    let plan = Plan {
        node_patches: patches,
        ..Plan::default()
    };
    Ok(Some(execute(to, nw, plan, |_| {}).await?.failures))
}

/// Records on the NodeWright when it took over (`legacy-migrated-at`, under its prefix as
/// upstream writes it), unless it says so already (upstream's migration, or an earlier pass).
async fn mark_taken_over(to: &Target<'_>, nw: &Skyhook) -> Result<(), Error> {
    if nw
        .annotations()
        .contains_key(schema::LEGACY_MIGRATED_AT_ANNOTATION)
    {
        return Ok(());
    }
    let key = to.api.local(schema::LEGACY_MIGRATED_AT_ANNOTATION);
    let now = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {key.as_ref(): now}}});
    let objects: kube::Api<DynamicObject> =
        kube::Api::all_with(to.client.clone(), &crate::crd::object_resource(to.api));
    objects
        .patch(
            &nw.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Records on a legacy Skyhook that the NodeWright of its name took it over
/// (`taken-over-by-nodewright`): from then on it stays frozen, whatever becomes of the NodeWright.
/// Guarded by the Skyhook's resourceVersion, so that a release written meanwhile is not lost.
pub async fn record_on_skyhook(to: Target<'_>, sk: &Skyhook) -> Result<(), Error> {
    let name = sk.name_any();
    info!(skyhook = %name, "recording that the NodeWright of the same name took this Skyhook over");
    let now = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": sk.resource_version(),
        "annotations": {schema::TAKEN_OVER_ANNOTATION: now},
    }});
    patch_legacy(&to, &name, &patch).await
}

/// A released Skyhook with no NodeWright of its name left: the record and the release come off,
/// and its next pass reconciles its spec again.
pub async fn release(to: Target<'_>, sk: &Skyhook) -> Result<(), Error> {
    let name = sk.name_any();
    warn!(skyhook = %name, "released from its NodeWright: the Skyhook's spec is reconciled again");
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": sk.resource_version(),
        "annotations": {
            schema::TAKEN_OVER_ANNOTATION: null,
            schema::RELEASE_FROM_NODEWRIGHT_ANNOTATION: null,
        },
    }});
    patch_legacy(&to, &name, &patch).await?;
    let ev = Event {
        type_: EventType::Warning,
        reason: schema::RELEASED_FROM_NODEWRIGHT_REASON.to_string(),
        note: Some(format!(
            "Skyhook {name} was released from its NodeWright (annotation {}): its spec is \
             reconciled again on the nodes it selects, from the legacy node state",
            schema::RELEASE_FROM_NODEWRIGHT_ANNOTATION
        )),
        action: "Release".to_string(),
        secondary: None,
    };
    to.events.send(ev, sk.object_ref(&()));
    Ok(())
}

/// A merge patch of a legacy Skyhook's metadata; a 409 (it changed since it was read) is left to
/// the next pass, which reads it again.
async fn patch_legacy(to: &Target<'_>, name: &str, patch: &serde_json::Value) -> Result<(), Error> {
    let objects: kube::Api<DynamicObject> = kube::Api::all_with(
        to.client.clone(),
        &crate::crd::object_resource(Api::Skyhook),
    );
    match objects
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What the clean-up of the legacy keys did.
pub enum Cleanup {
    /// Nothing to do: no take-over recorded, or no legacy key left.
    Nothing,
    /// Not yet: this long to go.
    Due(Duration),
    /// Removed now; the writes that failed for good.
    Pruned(Vec<String>),
}

/// `delay` after the NodeWright took over (`legacy-migrated-at`), the legacy node keys of its
/// name go (`api_handover::pruned_keys`), written as the legacy API writes.
pub async fn legacy_cleanup(
    to: Target<'_>,
    nw: &Skyhook,
    nodes: &[Arc<NodeView>],
    delay: Duration,
) -> Result<Cleanup, Error> {
    let at = nw
        .annotations()
        .get(schema::LEGACY_MIGRATED_AT_ANNOTATION)
        .and_then(|v| v.parse::<jiff::Timestamp>().ok());
    let (Api::NodeWright, Some(at)) = (to.api, at) else {
        return Ok(Cleanup::Nothing);
    };
    let name = nw.name_any();
    let mut plan = Plan::default();
    for node in nodes {
        if let Some((patch, conditions)) = api_handover::pruned_keys(&name, node) {
            if !patch.is_empty() {
                plan.node_patches.push(patch);
            }
            if !conditions.is_empty() {
                plan.node_conditions
                    .push((node.name.clone(), Vec::new(), conditions));
            }
        }
    }
    if plan.node_patches.is_empty() && plan.node_conditions.is_empty() {
        return Ok(Cleanup::Nothing);
    }
    let elapsed = jiff::Timestamp::now()
        .duration_since(at)
        .try_into()
        .unwrap_or(Duration::ZERO);
    if let Some(left) = delay.checked_sub(elapsed)
        && !left.is_zero()
    {
        return Ok(Cleanup::Due(left));
    }
    let n = plan.node_patches.len().max(plan.node_conditions.len());
    info!(nodewright = %name, nodes = n, "removing the legacy node keys of the Skyhook it took over");
    let legacy = Target {
        api: Api::Skyhook,
        ..to
    };
    Ok(Cleanup::Pruned(
        execute(legacy, nw, plan, |_| {}).await?.failures,
    ))
}

/// A frozen Skyhook being deleted: its finalizer goes, nothing else (its nodes are its
/// NodeWright's now).
pub async fn release_frozen(to: Target<'_>, sk: &Skyhook) -> Result<(), Error> {
    let plan = Plan {
        remove_finalizer: sk.finalizers().iter().any(|f| f == schema::FINALIZER),
        ..Plan::default()
    };
    execute(to, sk, plan, |_| {}).await?;
    Ok(())
}

/// The Warning on a Skyhook edited after its NodeWright took it over.
pub fn announce_unapplied(events: &EventSink, sk: &Skyhook, generation: i64) {
    let name = sk.name_any();
    warn!(skyhook = %name, generation, "a Skyhook taken over by its NodeWright was edited; the edit is not applied");
    let ev = Event {
        type_: EventType::Warning,
        reason: schema::EDIT_NOT_APPLIED_REASON.to_string(),
        note: Some(format!(
            "Skyhook {name} was taken over by NodeWright {name} (nodewright.nvidia.com) and is no \
             longer reconciled: its generation {generation} is not applied. Make the change on the \
             NodeWright (kubectl edit nodewrights.nodewright.nvidia.com {name})"
        )),
        action: "Freeze".to_string(),
        secondary: None,
    };
    events.send(ev, sk.object_ref(&()));
}

/// The Event on a NodeWright that waits for the Skyhook of its name to finish its rollout.
pub fn announce_wait(events: &EventSink, api: Api, nw: &Skyhook) {
    let name = nw.name_any();
    info!(nodewright = %name, "waiting for the Skyhook of the same name to finish its rollout");
    let mut reference = nw.object_ref(&());
    reference.api_version = Some(api.api_version().to_string());
    reference.kind = Some(api.kind().to_string());
    let ev = Event {
        type_: EventType::Normal,
        reason: schema::WAITING_FOR_SKYHOOK_REASON.to_string(),
        note: Some(format!(
            "NodeWright {name} waits for Skyhook {name} to finish its rollout (it is mid-rollout); \
             then the NodeWright takes its nodes over and the Skyhook is no longer reconciled"
        )),
        action: "Wait".to_string(),
        secondary: None,
    };
    events.send(ev, reference);
}
