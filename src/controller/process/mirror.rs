//! The migration on request (`MIGRATE_TO_NODEWRIGHT`): the legacy Skyhooks and DeploymentPolicies
//! mirrored into the `nodewright.nvidia.com` group ([`crate::plan::mirror`] decides). Like the
//! policy finalizer, a scan of the caches every [`PERIOD`]: the objects are few, and a scan
//! catches every change without a queue of its own. Each NodeWright then takes its Skyhook's
//! nodes over in its own passes (`plan::api_handover`).

use std::sync::Arc;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tracing::{info, warn};

use crate::controller::write::event_queue::EventSink;
use crate::crd::{DeploymentPolicy, Skyhook, object_resource, policy_resource};
use crate::plan::mirror::{self, Kind, MirrorWrite};
use crate::schema::{self, Api};

const PERIOD: Duration = Duration::from_secs(2);

/// Legacy objects whose mirror the API server refuses for good (a 403: the install lacks a
/// right), with what it said: the legacy Skyhook's passes report it (`WriteFailed`).
pub type Refusals = Arc<std::sync::Mutex<std::collections::BTreeMap<String, String>>>;

/// The caches the mirror reads: each API's objects and policies.
pub struct Sides {
    /// Where refusals go (shared with the legacy engine).
    pub refusals: Refusals,
    pub skyhooks: Store<Skyhook>,
    pub policies: Store<DeploymentPolicy>,
    pub nodewrights: Store<Skyhook>,
    pub nodewright_policies: Store<DeploymentPolicy>,
    /// With a Skyhook selector, only the policies the selected Skyhooks name are mirrored.
    pub selected: bool,
}

/// Runs until dropped. Starts once the NodeWright caches are filled: their watches start when
/// the NodeWright CRD is served, and an empty cache would read as "no mirror yet".
pub async fn run(client: Client, events: Arc<EventSink>, sides: Sides) {
    for store in [&sides.skyhooks, &sides.nodewrights] {
        let _ = store.wait_until_ready().await;
    }
    for store in [&sides.policies, &sides.nodewright_policies] {
        let _ = store.wait_until_ready().await;
    }
    info!(
        "mirroring Skyhooks and DeploymentPolicies into nodewright.nvidia.com (MIGRATE_TO_NODEWRIGHT)"
    );
    loop {
        match writes(&sides) {
            Ok(writes) => {
                for w in writes {
                    apply(&client, &events, &sides, w).await;
                }
            }
            Err(e) => warn!(error = %e, "cannot encode a mirror"),
        }
        tokio::time::sleep(PERIOD).await;
    }
}

fn writes(sides: &Sides) -> Result<Vec<MirrorWrite>, serde_json::Error> {
    let skyhooks = sides.skyhooks.state();
    let nodewrights = sides.nodewrights.state();
    let mut legacy_policies = sides.policies.state();
    if sides.selected {
        legacy_policies.retain(|p| {
            let name = p.name_any();
            skyhooks
                .iter()
                .any(|s| s.spec.deployment_policy.as_deref() == Some(name.as_str()))
        });
    }
    let existing = sides.nodewright_policies.state();
    let mut all = mirror::policies(&legacy_policies, &existing, &skyhooks, &nodewrights)?;
    all.extend(mirror::nodewrights(&skyhooks, &nodewrights)?);
    Ok(all)
}

/// The new group's objects of `kind`.
fn resource(kind: Kind) -> ApiResource {
    match kind {
        Kind::NodeWright => object_resource(Api::NodeWright),
        Kind::Policy => policy_resource(Api::NodeWright),
    }
}

/// One write; a failure is logged and the next scan tries again.
async fn apply(client: &Client, events: &EventSink, sides: &Sides, w: MirrorWrite) {
    match w {
        MirrorWrite::Create { kind, name, body } => {
            let object: DynamicObject = match serde_json::from_value(body) {
                Ok(o) => o,
                Err(e) => return warn!(name, error = %e, "cannot encode a mirror"),
            };
            let api = kube::Api::<DynamicObject>::all_with(client.clone(), &resource(kind));
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => {
                    info!(name, ?kind, "mirrored into nodewright.nvidia.com");
                    forget_refusal(sides, kind, &name);
                    announce(events, sides, kind, &name);
                }
                // Made meanwhile (by a user, or seen by this scan before the cache): the next
                // scan reads it.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    refused(events, sides, kind, &name, &e.message);
                }
                Err(e) => warn!(name, ?kind, error = %e, "could not create the mirror; retrying"),
            }
        }
        MirrorWrite::Follow { kind, name, patch } => {
            let url = match kind {
                Kind::NodeWright => Api::NodeWright.url_path(),
                Kind::Policy => Api::NodeWright.policy_url_path(),
            };
            match json_patch(client, &format!("{url}/{name}"), &patch).await {
                Ok(()) => info!(name, ?kind, "the mirror follows its legacy object's change"),
                Err(e) => warn!(name, ?kind, error = %e, "could not update the mirror; retrying"),
            }
        }
    }
}

/// A JSON patch (kube's typed client sends only merge and apply patches without a feature this
/// crate does not build).
async fn json_patch(
    client: &Client,
    url: &str,
    ops: &serde_json::Value,
) -> Result<(), kube::Error> {
    let body = serde_json::to_vec(ops).map_err(kube::Error::SerdeError)?;
    let req = http::Request::patch(url)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    client.request::<DynamicObject>(req).await.map(drop)
}

/// The legacy Skyhook a refusal is reported on: the Skyhook itself, or for a policy, every
/// Skyhook that names it.
fn reported_on(sides: &Sides, kind: Kind, name: &str) -> Vec<std::sync::Arc<Skyhook>> {
    match kind {
        Kind::NodeWright => sides
            .skyhooks
            .get(&ObjectRef::new(name))
            .into_iter()
            .collect(),
        Kind::Policy => sides
            .skyhooks
            .state()
            .into_iter()
            .filter(|s| s.spec.deployment_policy.as_deref() == Some(name))
            .collect(),
    }
}

/// A mirror the API server refuses for good: a Warning on the legacy object (once per
/// message), and the refusal kept for its passes' `WriteFailed` condition. Tried again every
/// scan: a grant added later lets the migration go on.
fn refused(events: &EventSink, sides: &Sides, kind: Kind, name: &str, message: &str) {
    let what = match kind {
        Kind::NodeWright => format!("NodeWright {name}"),
        Kind::Policy => format!("DeploymentPolicy {name} of nodewright.nvidia.com"),
    };
    let said = format!(
        "MIGRATE_TO_NODEWRIGHT cannot create {what}: the API server refused it ({message}). \
         Grant the operator's ClusterRole create on nodewrights and deploymentpolicies of \
         nodewright.nvidia.com (deploy/rbac-operator.yaml and the chart grant it)"
    );
    warn!(name, ?kind, error = %message, "the mirror is refused for good; retrying every scan");
    for sk in reported_on(sides, kind, name) {
        let first = sides
            .refusals
            .lock()
            .map(|mut r| r.insert(sk.name_any(), said.clone()) != Some(said.clone()))
            .unwrap_or(false);
        if first {
            let ev = Event {
                type_: EventType::Warning,
                reason: schema::MIGRATION_REFUSED_REASON.to_string(),
                note: Some(said.clone()),
                action: "Mirror".to_string(),
                secondary: None,
            };
            events.send(ev, sk.object_ref(&()));
        }
    }
}

/// A mirror made at last: its legacy objects' refusals go.
fn forget_refusal(sides: &Sides, kind: Kind, name: &str) {
    if let Ok(mut r) = sides.refusals.lock() {
        for sk in reported_on(sides, kind, name) {
            r.remove(&sk.name_any());
        }
    }
}

/// A Normal Event on the legacy object: where its mirror is, and what happens next.
fn announce(events: &EventSink, sides: &Sides, kind: Kind, name: &str) {
    let found = match kind {
        Kind::NodeWright => sides
            .skyhooks
            .get(&ObjectRef::new(name))
            .map(|s| s.object_ref(&())),
        Kind::Policy => sides
            .policies
            .get(&ObjectRef::new(name))
            .map(|p| p.object_ref(&())),
    };
    let Some(reference) = found else {
        return;
    };
    let note = match kind {
        Kind::NodeWright => format!(
            "Skyhook {name} mirrored into NodeWright {name} (nodewright.nvidia.com); the \
             NodeWright takes its nodes over once the Skyhook is not mid-rollout, and the \
             Skyhook is then no longer reconciled: edit the NodeWright from then on"
        ),
        Kind::Policy => format!(
            "DeploymentPolicy {name} mirrored into deploymentpolicies.nodewright.nvidia.com \
             {name}, for the NodeWrights that name it"
        ),
    };
    let ev = Event {
        type_: EventType::Normal,
        reason: schema::MIRRORED_REASON.to_string(),
        note: Some(note),
        action: "Mirror".to_string(),
        secondary: None,
    };
    events.send(ev, reference);
}
