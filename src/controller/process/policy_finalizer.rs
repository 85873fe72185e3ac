//! Keeps the in-use finalizer of DeploymentPolicies ([`crate::crd::policy_in_use`]). Policies and
//! Skyhooks are few, so a scan of the caches every [`PERIOD`] is cheaper than a queue of its own
//! and catches every change, including a Skyhook that stops naming a policy.

use std::collections::HashMap;

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::controller::write::event_series::{self, Publisher};
use kube::runtime::reflector::Store;

use crate::crd::policy_in_use::{self as guard, Guard};
use crate::crd::{DeploymentPolicy, Skyhook};
use crate::schema;

const PERIOD: Duration = Duration::from_secs(2);

/// The DeploymentPolicies of one group.
struct Policies {
    api: Api<kube::api::DynamicObject>,
    kind: schema::Api,
}

/// Runs until dropped. With a Skyhook selector, only the policies carrying the same labels are
/// guarded (an operator owning a subset of Skyhooks cannot tell who else uses a policy).
pub async fn run(
    client: Client,
    kind: schema::Api,
    skyhook_selector: Option<String>,
    skyhooks: Store<Skyhook>,
    policies: Store<DeploymentPolicy>,
) {
    let recorder = recorder(&client);
    let selector = match skyhook_selector.as_deref() {
        None => None,
        Some(text) => match equality_selector(text) {
            Some(s) => Some(s),
            None => {
                // Guarding every policy with a filtered Skyhook cache would release policies
                // that Skyhooks outside the selector use: guard none.
                warn!(
                    selector = text,
                    "not guarding DeploymentPolicies: only k=v selectors are understood here"
                );
                return std::future::pending().await;
            }
        },
    };
    let resource = crate::crd::policy_resource(kind);
    let api = Policies {
        api: Api::all_with(client, &resource),
        kind,
    };
    let mut held: HashMap<String, Vec<String>> = HashMap::new();
    // An empty Skyhook cache would read as "nobody uses it" and release every policy.
    let _ = skyhooks.wait_until_ready().await;
    let _ = policies.wait_until_ready().await;
    loop {
        let skyhooks = skyhooks.state();
        for p in policies.state() {
            if selector.as_ref().is_some_and(|s| !s.matches(p.labels())) {
                continue;
            }
            let name = p.name_any();
            let action = guard::guard(&p, &skyhooks);
            let res = match &action {
                Guard::Protect => set_finalizer(&api, &p, true).await,
                Guard::Release => set_finalizer(&api, &p, false).await,
                Guard::Hold { users } => {
                    if held.get(&name) != Some(users) {
                        publish(&recorder, api.kind, &p, users).await;
                        held.insert(name.clone(), users.clone());
                    }
                    Ok(())
                }
                Guard::Nothing => Ok(()),
            };
            match res {
                Ok(()) if action == Guard::Release => {
                    held.remove(&name);
                    info!(policy = %name, "released the in-use finalizer");
                }
                Ok(()) => {}
                Err(e) => {
                    warn!(policy = %name, error = %e, "could not update the in-use finalizer; retrying")
                }
            }
        }
        tokio::time::sleep(PERIOD).await;
    }
}

/// `k=v[,k=v...]` (also `==`) as a selector; `None` for anything else.
fn equality_selector(text: &str) -> Option<Selector> {
    let mut pairs = std::collections::BTreeMap::new();
    for term in text.split(',').map(str::trim) {
        let (k, v) = term.split_once("==").or_else(|| term.split_once('='))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || k.contains('!') || v.contains('=') {
            return None;
        }
        pairs.insert(k.to_string(), v.to_string());
    }
    Some(Selector::from_iter(pairs))
}

/// Adds or removes the finalizer, guarded by the resourceVersion read (a concurrent edit makes
/// the next scan try again).
async fn set_finalizer(api: &Policies, p: &DeploymentPolicy, on: bool) -> Result<(), kube::Error> {
    // The cache holds the finalizers in the canonical keys; they are written in the group's.
    let mut list: Vec<String> = p
        .finalizers()
        .iter()
        .filter(|f| *f != schema::POLICY_FINALIZER)
        .map(|f| api.kind.local(f).into_owned())
        .collect();
    if on {
        list.push(api.kind.local(schema::POLICY_FINALIZER).into_owned());
    }
    let patch = json!({"metadata": {"finalizers": list, "resourceVersion": p.resource_version()}});
    match api
        .api
        .patch(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        res => res.map(|_| ()),
    }
}

async fn publish(recorder: &Publisher, kind: schema::Api, p: &DeploymentPolicy, users: &[String]) {
    let ev = Event {
        type_: EventType::Warning,
        reason: schema::POLICY_IN_USE_REASON.to_string(),
        note: Some(guard::hold_message(&p.name_any(), users)),
        action: "Delete".to_string(),
        secondary: None,
    };
    let mut reference = p.object_ref(&());
    reference.api_version = Some(kind.api_version().to_string());
    if let Err(e) = recorder.publish(&ev, &reference).await {
        warn!(error = %e, "could not publish an event");
    }
}

/// A publisher of its own: the guard's Events are rare and must not queue behind a rollout's.
fn recorder(client: &Client) -> Publisher {
    Publisher::new(client.clone(), event_series::reporter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_equality_selectors_are_understood() {
        let labels = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let s = equality_selector("a=1, b==2").expect("parsed");
        assert!(s.matches(&labels(&[("a", "1"), ("b", "2"), ("c", "3")])));
        assert!(!s.matches(&labels(&[("a", "1")])));
        for bad in ["a!=1", "a in (1)", "a", "=1", "a=1=2"] {
            assert!(equality_selector(bad).is_none(), "{bad}");
        }
    }
}
