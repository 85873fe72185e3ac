//! The migration on request (`MIGRATE_TO_NODEWRIGHT`, issue 39): every legacy Skyhook and
//! DeploymentPolicy mirrored into the `nodewright.nvidia.com` group, as upstream v0.18's mirror
//! controllers do (delta D23). The NodeWright then takes the Skyhook's nodes over
//! ([`super::api_handover`]) once the Skyhook is not mid-rollout.
//!
//! Upstream's rules, kept here: the mirror is stamped `mirrored-from`; a same-named object the
//! mirror did not create is left alone; nothing is ever deleted, and the legacy object is never
//! written. One choice of ours: a mirror follows its legacy object's spec (and pause and disable)
//! only while the legacy object is still the one reconciled, that is while its Skyhook is
//! mid-rollout and the NodeWright waits. After the take-over the NodeWright is the object to
//! edit; following the frozen Skyhook then would undo those edits.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use serde_json::{Value, json};

use super::api_handover::{Turn, turn};
use crate::crd::{DeploymentPolicy, Skyhook};
use crate::schema::{self, Api};

/// Which kind of new-group object a write is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NodeWright,
    Policy,
}

/// One write of the mirror.
#[derive(Debug, Clone, PartialEq)]
pub enum MirrorWrite {
    /// A new object of the new group, whole.
    Create {
        kind: Kind,
        name: String,
        body: Value,
    },
    /// A JSON patch bringing a mirror up to date with its legacy object.
    Follow {
        kind: Kind,
        name: String,
        patch: Value,
    },
}

/// The legacy annotations a NodeWright mirror carries, under its own prefix.
const CARRIED: [&str; 3] = [
    schema::PAUSE_ANNOTATION,
    schema::DISABLE_ANNOTATION,
    schema::NON_INTERRUPT_CORDON_ANNOTATION,
];

/// The writes that mirror `legacy` Skyhooks into NodeWrights, given the NodeWrights that exist
/// (as the engine's cache holds them: canonical keys).
pub fn nodewrights(
    legacy: &[Arc<Skyhook>],
    existing: &[Arc<Skyhook>],
) -> Result<Vec<MirrorWrite>, serde_json::Error> {
    mirror_kind(
        Kind::NodeWright,
        legacy,
        existing,
        nodewright_body,
        |sk, nw| {
            if ours(nw.annotations(), &sk.name_any()) && follows(sk, nw) {
                follow_nodewright(sk, nw)
            } else {
                Ok(None)
            }
        },
    )
}

/// The writes that mirror `legacy` DeploymentPolicies into the new group. A mirror follows its
/// policy while a legacy Skyhook that uses it is still reconciled.
pub fn policies(
    legacy: &[Arc<DeploymentPolicy>],
    existing: &[Arc<DeploymentPolicy>],
    skyhooks: &[Arc<Skyhook>],
    nodewrights: &[Arc<Skyhook>],
) -> Result<Vec<MirrorWrite>, serde_json::Error> {
    let create = |p: &DeploymentPolicy| {
        let name = p.name_any();
        Ok(json!({
            "apiVersion": Api::NodeWright.api_version(),
            "kind": "DeploymentPolicy",
            "metadata": {
                "name": name,
                "labels": p.labels(),
                "annotations": stamp(&name),
            },
            "spec": serde_json::to_value(&p.spec)?,
        }))
    };
    let follow = |p: &DeploymentPolicy, mirror: &DeploymentPolicy| {
        let name = p.name_any();
        let stored = Api::NodeWright.canonical_map(mirror.annotations());
        let live = used_by_live_skyhook(&name, skyhooks, nodewrights);
        let spec = serde_json::to_value(&p.spec)?;
        Ok(
            (ours(&stored, &name) && live && serde_json::to_value(&mirror.spec)? != spec)
                .then(|| json!([{"op": "replace", "path": "/spec", "value": spec}])),
        )
    };
    mirror_kind(Kind::Policy, legacy, existing, create, follow)
}

/// The writes of one kind: the whole object for each live legacy object without a same-named
/// object in the new group, and `follow`'s patch (if any) for each that has one.
fn mirror_kind<T: kube::Resource>(
    kind: Kind,
    legacy: &[Arc<T>],
    existing: &[Arc<T>],
    create: impl Fn(&T) -> Result<Value, serde_json::Error>,
    follow: impl Fn(&T, &T) -> Result<Option<Value>, serde_json::Error>,
) -> Result<Vec<MirrorWrite>, serde_json::Error> {
    let by_name: BTreeMap<String, &T> = existing
        .iter()
        .map(|o| (o.name_any(), o.as_ref()))
        .collect();
    let mut writes = Vec::new();
    for object in legacy
        .iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
    {
        let name = object.name_any();
        match by_name.get(&name) {
            None => writes.push(MirrorWrite::Create {
                kind,
                body: create(object)?,
                name,
            }),
            Some(mirror) => {
                if let Some(patch) = follow(object, mirror)? {
                    writes.push(MirrorWrite::Follow { kind, name, patch });
                }
            }
        }
    }
    Ok(writes)
}

/// Whether the object (annotations in the canonical keys) is the mirror of `name`.
fn ours(annotations: &BTreeMap<String, String>, name: &str) -> bool {
    annotations
        .get(schema::MIRRORED_FROM_ANNOTATION)
        .is_some_and(|from| from == name)
}

/// A mirror follows its Skyhook while the Skyhook is reconciled (mid-rollout: the NodeWright
/// waits and has done nothing yet).
fn follows(sk: &Skyhook, nw: &Skyhook) -> bool {
    turn(Api::Skyhook, sk, Some(nw)) == Turn::Run
}

fn used_by_live_skyhook(policy: &str, skyhooks: &[Arc<Skyhook>], nws: &[Arc<Skyhook>]) -> bool {
    skyhooks
        .iter()
        .filter(|s| s.spec.deployment_policy.as_deref() == Some(policy))
        .any(|s| {
            let nw = nws.iter().find(|n| n.name_any() == s.name_any());
            turn(Api::Skyhook, s, nw.map(|n| n.as_ref())) == Turn::Run
        })
}

/// `mirrored-from: <name>` as the new group writes it.
fn stamp(name: &str) -> BTreeMap<String, String> {
    let key = Api::NodeWright.local(schema::MIRRORED_FROM_ANNOTATION);
    BTreeMap::from([(key.into_owned(), name.to_string())])
}

fn nodewright_body(sk: &Skyhook) -> Result<Value, serde_json::Error> {
    let name = sk.name_any();
    let mut annotations = stamp(&name);
    for key in CARRIED {
        if let Some(v) = sk.annotations().get(key) {
            annotations.insert(Api::NodeWright.local(key).into_owned(), v.clone());
        }
    }
    Ok(json!({
        "apiVersion": Api::NodeWright.api_version(),
        "kind": Api::NodeWright.kind(),
        "metadata": {"name": name, "labels": sk.labels(), "annotations": annotations},
        "spec": serde_json::to_value(&sk.spec)?,
    }))
}

/// The JSON patch that gives `nw` the spec and the carried annotations of `sk`; `None` when
/// they are the same.
fn follow_nodewright(sk: &Skyhook, nw: &Skyhook) -> Result<Option<Value>, serde_json::Error> {
    let mut ops = Vec::new();
    let spec = serde_json::to_value(&sk.spec)?;
    if serde_json::to_value(&nw.spec)? != spec {
        ops.push(json!({"op": "replace", "path": "/spec", "value": spec}));
    }
    for key in CARRIED {
        let path = format!(
            "/metadata/annotations/{}",
            Api::NodeWright
                .local(key)
                .replace('~', "~0")
                .replace('/', "~1")
        );
        match (sk.annotations().get(key), nw.annotations().get(key)) {
            (Some(want), have) if have != Some(want) => {
                ops.push(json!({"op": "add", "path": path, "value": want}));
            }
            (None, Some(_)) => ops.push(json!({"op": "remove", "path": path})),
            _ => {}
        }
    }
    Ok((!ops.is_empty()).then(|| Value::Array(ops)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::SkyhookStatus;
    use crate::plan::fixtures::skyhook;
    use crate::schema::Status;

    fn with_status(b: crate::plan::fixtures::SkyhookB, status: Status) -> Arc<Skyhook> {
        b.status(SkyhookStatus {
            status: Some(status),
            ..SkyhookStatus::default()
        })
        .arc()
    }

    fn mirror_of(name: &str) -> crate::plan::fixtures::SkyhookB {
        skyhook(name).annotations(json!({"skyhook.nvidia.com/mirrored-from": name}))
    }

    #[test]
    fn a_legacy_skyhook_without_a_nodewright_is_mirrored_stamped_with_its_name() {
        let sk = skyhook("gpu")
            .annotations(json!({"skyhook.nvidia.com/pause": "true", "other": "x"}))
            .policy("p")
            .arc();
        let writes = nodewrights(&[sk], &[]).unwrap();
        let [MirrorWrite::Create { kind, name, body }] = writes.as_slice() else {
            panic!("one create expected: {writes:?}");
        };
        assert_eq!((*kind, name.as_str()), (Kind::NodeWright, "gpu"));
        assert_eq!(body["apiVersion"], "nodewright.nvidia.com/v1alpha1");
        assert_eq!(body["kind"], "NodeWright");
        let annotations = &body["metadata"]["annotations"];
        assert_eq!(annotations["nodewright.nvidia.com/mirrored-from"], "gpu");
        assert_eq!(annotations["nodewright.nvidia.com/pause"], "true");
        assert!(annotations.get("skyhook.nvidia.com/pause").is_none());
        assert!(annotations.get("other").is_none());
        assert_eq!(body["spec"]["deploymentPolicy"], "p");
    }

    #[test]
    fn a_nodewright_the_mirror_did_not_create_is_left_alone() {
        let sk = with_status(skyhook("gpu").policy("new"), Status::InProgress);
        let own = skyhook("gpu").arc();
        assert!(nodewrights(&[sk], &[own]).unwrap().is_empty());
    }

    #[test]
    fn a_mirror_follows_its_skyhook_only_while_the_skyhook_is_mid_rollout() {
        let mirror = mirror_of("gpu").policy("old").arc();
        let moving = with_status(
            skyhook("gpu")
                .policy("new")
                .annotations(json!({"skyhook.nvidia.com/disable": "true"})),
            Status::InProgress,
        );
        let writes = nodewrights(&[moving], std::slice::from_ref(&mirror)).unwrap();
        let [MirrorWrite::Follow { patch, .. }] = writes.as_slice() else {
            panic!("one follow expected: {writes:?}");
        };
        assert_eq!(patch[0]["path"], "/spec");
        assert_eq!(patch[0]["value"]["deploymentPolicy"], "new");
        assert_eq!(
            patch[1]["path"],
            "/metadata/annotations/nodewright.nvidia.com~1disable"
        );
        let complete = with_status(skyhook("gpu").policy("new"), Status::Complete);
        assert!(nodewrights(&[complete], &[mirror]).unwrap().is_empty());
    }

    #[test]
    fn a_deleted_skyhook_is_not_mirrored_and_an_identical_mirror_needs_nothing() {
        let mut gone = skyhook("old").build();
        gone.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let same = with_status(mirror_of("gpu"), Status::InProgress);
        let mirror = mirror_of("gpu").arc();
        assert!(
            nodewrights(&[Arc::new(gone), same], &[mirror])
                .unwrap()
                .is_empty()
        );
    }

    fn policy(name: &str, budget: i32, annotations: Value) -> Arc<DeploymentPolicy> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "skyhook.nvidia.com/v1alpha1",
                "kind": "DeploymentPolicy",
                "metadata": {"name": name, "annotations": annotations},
                "spec": {"default": {"budget": {"count": budget}, "strategy": {"fixed": {}}}},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn policies_are_mirrored_and_followed_while_a_skyhook_using_them_is_reconciled() {
        let legacy = policy("p", 2, json!({}));
        let writes = policies(std::slice::from_ref(&legacy), &[], &[], &[]).unwrap();
        let [MirrorWrite::Create { kind, body, .. }] = writes.as_slice() else {
            panic!("one create expected: {writes:?}");
        };
        assert_eq!(*kind, Kind::Policy);
        assert_eq!(body["apiVersion"], "nodewright.nvidia.com/v1alpha1");
        assert_eq!(
            body["metadata"]["annotations"]["nodewright.nvidia.com/mirrored-from"],
            "p"
        );

        let stale = policy("p", 1, json!({"nodewright.nvidia.com/mirrored-from": "p"}));
        let user = with_status(skyhook("gpu").policy("p"), Status::InProgress);
        let writes = policies(
            std::slice::from_ref(&legacy),
            std::slice::from_ref(&stale),
            &[user],
            &[],
        )
        .unwrap();
        assert!(matches!(writes.as_slice(), [MirrorWrite::Follow { .. }]));

        let done = with_status(skyhook("gpu").policy("p"), Status::Complete);
        let taken = mirror_of("gpu").arc();
        assert!(
            policies(std::slice::from_ref(&legacy), &[stale], &[done], &[taken])
                .unwrap()
                .is_empty()
        );

        let foreign = policy("p", 1, json!({}));
        let user = with_status(skyhook("gpu").policy("p"), Status::InProgress);
        assert!(
            policies(&[legacy], &[foreign], &[user], &[])
                .unwrap()
                .is_empty()
        );
    }
}
