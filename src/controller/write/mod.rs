//! Applies a [`Plan`]: the only place that writes to the API server for a reconcile.
//!
//! The writes, in order, one function each:
//!
//! 1. the finalizer, if missing, and the Skyhook's version annotation, if stale;
//! 2. on deletion, the owned Jobs and ConfigMaps;
//! 3. ConfigMaps (server-side apply): package and node metadata ConfigMaps, before the Jobs
//!    that mount them;
//! 4. node patches (merge): node state, status, labels, `spec.unschedulable`, `spec.taints`. The
//!    outcomes read from finished Jobs are durable here (with the `folded_<sh>` record that says
//!    which Jobs they came from), and a cordon is persisted before any Job of an interrupt package exists. Nodes that start
//!    work are written after the others, so the stored state never exceeds the budget. Each
//!    patch is guarded by the resourceVersion it was computed from (see "Conflicts" below);
//! 5. node conditions (strategic merge);
//! 6. Job operations: `Counted`, `Fail`, `Delete`, and deleting the Go operator's pods (their
//!    outcome, if any, was stored in step 4);
//! 7. Jobs: handed to `create` (the background queue, `job_creations.rs`), which creates
//!    them after the pass (409 means an earlier pass created it: adopt it). A node state that
//!    says a stage runs before its Job exists is safe: a pass that finds no Job creates it;
//! 8. evictions (a 429 from a PodDisruptionBudget becomes a `DrainBlocked` Warning, retried next
//!    pass);
//! 9. the Skyhook status (a full replace guarded by `resourceVersion`);
//! 10. finalizer removal on deletion;
//! 11. Events, queued for a task of their own (`event_queue.rs`): a pass never waits for them.
//!
//! Within a step the writes are independent and run [`PARALLEL_WRITES`](crate::controller::api::client::PARALLEL_WRITES) at a time: a pass over a
//! thousand nodes must not take a thousand round trips. A write that meets a transient error
//! (429, 5xx, a dropped connection) is retried at once a few times (`api/retry.rs`). Every write of
//! a step is attempted; if any failed for good, the pass stops after that step (later steps may depend on it) and the next pass
//! redoes what is missing. A 404 on a Job op, a pod eviction, a node or the finalizer removal is
//! ignored: the object went away.
//!
//! Conflicts. Every write computed from a copy of an object that someone else may change
//! carries that copy's resourceVersion: the Skyhook's metadata, its status and node patches.
//! Others do change them: `kubectl skyhook package rerun` and `node reset` rewrite the node-state
//! annotation (one JSON value), an administrator cordons or taints a node, and the plugin's
//! `reset` and `deployment-policy reset` patch the status. A 409 means this pass planned from an
//! older copy, not that anything failed: the writes that depend on that copy are left out
//! ([`Plan::drop_work_of`]), the other nodes' work goes on, and the pass ends as
//! [`Written::Conflict`], which the controller requeues within a second, with no error, backoff
//! or Warning Event. The watch has usually delivered the newer copy by then. Node conditions
//! are a strategic merge by type, which cannot overwrite anyone else's, and are not guarded.

pub mod event_queue;
pub mod event_series;
mod evict;
mod gates;
pub mod job_creations;
mod job_ops;
mod outcomes;
mod parallel;
pub mod requests;
pub mod status_patch;
pub mod takeover;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeCondition};
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use crate::controller::watch::decode::{self as lean, LeanNode};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::controller::api::retry;
use crate::controller::error::Error;
use crate::crd::{Skyhook, SkyhookStatus};
use crate::jobs::PlannedJob;
use crate::plan::localize::{canonical, localize_status};
use crate::plan::{NodePatch, Note, Plan, Target as About};
use crate::schema;
use event_queue::EventSink;
use outcomes::Outcomes;
use parallel::{each, recorded};
use requests::{api_words, ignore_not_found, is_conflict, is_status, node_patch_body, with_kind};

const MANAGER: &str = "skyhook-operator";

/// How a pass's writes ended, when none failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Everything the plan asked for.
    All,
    /// An object changed after the pass read it, and the writes that depended on that copy
    /// were left out: the next pass should follow soon.
    Conflict,
}

/// What a pass wrote: whether all of it, the Skyhook as its status write stored it (with how
/// long that replace took), and the writes that failed for good, one line each.
pub struct Executed {
    pub written: Written,
    pub stored: Option<(Skyhook, Duration)>,
    pub failures: Vec<String>,
    /// Evictions a PodDisruptionBudget refused in this pass.
    pub drain_blocks: Vec<crate::plan::inputs::DrainBlock>,
    /// Nodes whose auto-taint patch was refused for good, and nodes it tainted.
    pub auto_taints: (Vec<String>, Vec<String>),
    /// Nodes whose patch was refused for good in this pass, and nodes patched.
    pub node_writes: (BTreeSet<String>, BTreeSet<String>),
}

/// Where a pass writes: the API server, the Event queue, the operator's namespace, and the API
/// of the object (its plan is written in that API's keys).
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub client: &'a Client,
    pub events: &'a EventSink,
    pub namespace: &'a str,
    pub api: schema::Api,
}

pub async fn execute(
    to: Target<'_>,
    sk: &Skyhook,
    mut plan: Plan,
    create: impl FnOnce(Vec<PlannedJob>),
) -> Result<Executed, Error> {
    crate::plan::localize::localize(&mut plan, to.api).map_err(kube::Error::SerdeError)?;
    let w = Writer::new(to, sk);
    let w = &w;
    // The status write below must carry the newest resourceVersion.
    let Some(resource_version) = w.write_metadata(&plan).await? else {
        return Ok(Executed {
            written: Written::Conflict,
            stored: None,
            failures: Vec::new(),
            drain_blocks: Vec::new(),
            auto_taints: Default::default(),
            node_writes: Default::default(),
        });
    };
    if plan.delete_owned {
        w.delete_owned().await?;
    }
    w.write_configmaps(&mut plan).await;
    let mut written = w.write_nodes(&mut plan).await?;
    each(&plan.node_conditions, |c| {
        w.patch_node_conditions(c).boxed()
    })
    .await?;
    each(&plan.job_ops, |op| w.job_op(op).boxed()).await?;
    let mut creations = std::mem::take(&mut plan.create_jobs);
    for job in &mut creations {
        w.stamp(job);
    }
    create(creations);
    w.create_health_checks(&plan).await;
    w.evict_all(&plan.evictions).await;
    each(&plan.stale_configmaps, |name| {
        async move {
            let res = w.cms.delete(name, &DeleteParams::default()).await;
            ignore_not_found(res)
        }
        .boxed()
    })
    .await?;
    w.append_notifications(&plan, to.namespace).await?;
    let status_started = Instant::now();
    let (status_written, stored) = w.write_status(&mut plan, resource_version).await?;
    let stored = stored.map(|sk| (sk, status_started.elapsed()));
    if status_written == Written::Conflict {
        written = Written::Conflict;
    }
    if plan.remove_finalizer && w.remove_finalizer().await? == Written::Conflict {
        written = Written::Conflict;
    }
    w.publish_events(&plan.events);
    let failures = w.met.take_failures();
    let drain_blocks = w.met.take_drain_blocks();
    Ok(Executed {
        written,
        stored,
        failures,
        drain_blocks,
        auto_taints: w.met.take_auto_taints(),
        node_writes: (w.met.failed_nodes(), w.patched_nodes()),
    })
}

/// The APIs one pass writes through, for one Skyhook.
struct Writer<'a> {
    client: &'a Client,
    events: &'a EventSink,
    sk: &'a Skyhook,
    api: schema::Api,
    name: String,
    /// The object's own kind (a Skyhook or a NodeWright).
    skyhooks: Api<kube::api::DynamicObject>,
    jobs: Api<Job>,
    cms: Api<ConfigMap>,
    /// Node patches answer with the whole node; only its resourceVersion is read.
    nodes: Api<LeanNode>,
    /// Conflicts and writes refused for good.
    met: Outcomes,
    /// The resourceVersion each node patch of this pass returned: the first node version that
    /// stores the stages started after it.
    patched: Mutex<BTreeMap<String, String>>,
}

impl<'a> Writer<'a> {
    fn new(to: Target<'a>, sk: &'a Skyhook) -> Self {
        let client = to.client;
        Writer {
            client,
            events: to.events,
            sk,
            api: to.api,
            name: sk.name_any(),
            skyhooks: Api::all_with(client.clone(), &crate::crd::object_resource(to.api)),
            jobs: Api::namespaced(client.clone(), to.namespace),
            cms: Api::namespaced(client.clone(), to.namespace),
            nodes: Api::all(client.clone()),
            met: Outcomes::default(),
            patched: Mutex::new(BTreeMap::new()),
        }
    }

    /// The finalizer and the version annotation in one merge patch, guarded by the
    /// resourceVersion this pass read. Returns the patched Skyhook's resourceVersion.
    async fn patch_metadata(
        &self,
        add_finalizer: bool,
        version: Option<&str>,
    ) -> Result<Option<String>, Error> {
        let sk = self.sk;
        let api = self.api;
        let mut patch = json!({"metadata": {"resourceVersion": sk.resource_version()}});
        if add_finalizer {
            let mut finalizers: Vec<String> = sk
                .finalizers()
                .iter()
                .map(|f| api.local(f).into_owned())
                .collect();
            finalizers.push(api.local(schema::FINALIZER).into_owned());
            patch["metadata"]["finalizers"] = json!(finalizers);
        }
        if let Some(v) = version {
            let key = api.local(schema::VERSION_ANNOTATION);
            patch["metadata"]["annotations"] = json!({key.as_ref(): v});
        }
        let patched = self
            .skyhooks
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(patched.resource_version())
    }

    async fn apply_configmap(&self, cm: &ConfigMap) -> Result<(), Error> {
        let apply = PatchParams::apply(MANAGER).force();
        let body = Patch::Apply(with_kind(cm, "v1", "ConfigMap"));
        self.cms.patch(&cm.name_any(), &apply, &body).await?;
        Ok(())
    }

    /// The finalizer and version annotation, if the plan changes them. Returns the Skyhook's
    /// resourceVersion after them, or `None` when the Skyhook changed since the pass read it
    /// (its spec, a pause, a plugin's status patch): then the whole plan may be stale.
    async fn write_metadata(&self, plan: &Plan) -> Result<Option<Option<String>>, Error> {
        if !plan.add_finalizer && plan.version_annotation.is_none() {
            return Ok(Some(self.sk.resource_version()));
        }
        let version = plan.version_annotation.as_deref();
        match self.patch_metadata(plan.add_finalizer, version).await {
            Ok(rv) => Ok(Some(rv)),
            Err(e) if is_conflict(&e) => {
                info!(skyhook = %self.name, "the Skyhook changed since this pass read it; planning again");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// ConfigMaps, before the Jobs that mount them. One that is refused for good is recorded:
    /// then no Job starts this pass and no node starts work (a stage must not run with an old
    /// ConfigMap), while finished Jobs are still recorded, cordons lifted, the status written.
    /// Dropped once written: a node's metadata ConfigMap repeats all its labels and annotations.
    async fn write_configmaps(&self, plan: &mut Plan) {
        let configmaps = std::mem::take(&mut plan.configmaps);
        let refused = recorded(
            &configmaps,
            |cm| self.apply_configmap(cm).boxed(),
            |cm| {
                format!(
                    "ConfigMap {}/{}",
                    cm.namespace().unwrap_or_default(),
                    cm.name_any()
                )
            },
        )
        .await;
        if refused.is_empty() {
            return;
        }
        for (what, e) in &refused {
            self.met.failed(&self.name, what.clone(), e);
        }
        let starting = plan.node_patches.iter().filter(|p| p.starts);
        let starting: BTreeSet<String> = starting.map(|p| p.node.clone()).collect();
        plan.node_patches.retain(|p| !p.starts);
        plan.drop_node_work(&starting);
        plan.create_jobs.clear();
    }

    /// Node patches. Nodes leaving work are stored before nodes starting it (see
    /// `NodePatch::starts`). If one of the first could not be stored, none of the second is:
    /// the stored state could otherwise show more nodes at work than the budget allows. The
    /// work of nodes whose patch met a 409 is dropped from the plan.
    async fn write_nodes(&self, plan: &mut Plan) -> Result<Written, Error> {
        let mut left_out = BTreeSet::new();
        // A node refused before is left out of the batch already: its patch failing again
        // holds no other node's start.
        let probes: BTreeSet<&str> = plan
            .node_patches
            .iter()
            .filter(|p| p.probe)
            .map(|p| p.node.as_str())
            .collect();
        for starting in [false, true] {
            let patches = plan.node_patches.iter().filter(|p| p.starts == starting);
            left_out.extend(self.met.take_conflicts());
            let failed = (self.met.failed_nodes().iter()).any(|n| !probes.contains(n.as_str()));
            if starting && (failed || !left_out.is_empty()) {
                let skipped: BTreeSet<String> = patches.map(|p| p.node.clone()).collect();
                plan.drop_node_work(&skipped);
                left_out.extend(skipped.into_iter().filter(|_| !failed));
                break;
            }
            each(patches, |p| self.patch_node(p).boxed()).await?;
        }
        plan.drop_node_work(&self.met.failed_nodes());
        left_out.extend(self.met.take_conflicts());
        if left_out.is_empty() {
            return Ok(Written::All);
        }
        info!(
            skyhook = %self.name,
            nodes = ?left_out,
            "nodes changed since this pass read them; their work waits for the next pass"
        );
        plan.drop_work_of(&left_out);
        Ok(Written::Conflict)
    }

    /// The status, if the plan changes it; a 409 drops it (and the Events that report it).
    async fn write_status(
        &self,
        plan: &mut Plan,
        resource_version: Option<String>,
    ) -> Result<(Written, Option<Skyhook>), Error> {
        let Some(status) = plan.status.take() else {
            return Ok((Written::All, None));
        };
        match self.replace_status(status, resource_version).await {
            Ok(sk) => Ok((Written::All, Some(sk))),
            Err(e) if is_conflict(&e) => {
                info!(skyhook = %self.name, "the Skyhook changed since this pass read it; its status waits for the next pass");
                plan.drop_status();
                Ok((Written::Conflict, None))
            }
            Err(e) => Err(e),
        }
    }

    /// The nodes this pass patched.
    fn patched_nodes(&self) -> BTreeSet<String> {
        let patched = self
            .patched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        patched.keys().cloned().collect()
    }

    /// `job` with the resourceVersion its node's patch returned in this pass, when there was
    /// one: the first node version that stores its stage.
    fn stamp(&self, job: &mut PlannedJob) {
        let patched = self
            .patched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(job.node())
            .cloned();
        if let Some(rv) = patched
            && let Err(e) = job.stamp_node_version(&rv)
        {
            // Left with the version the pass read: an older copy only makes a later pass wait
            // for the watch a little longer before it judges the Job.
            warn!(job = %job.name(), error = %e, "could not record the node version on a Job");
        }
    }

    /// A 409 (the node changed since this pass read it) is recorded, not an error: see
    /// "Conflicts" at the top.
    async fn patch_node(&self, p: &NodePatch) -> Result<(), Error> {
        let body = node_patch_body(p);
        match self
            .nodes
            .patch(&p.node, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(node) => {
                if p.auto_taint {
                    self.met.auto_taint(&p.node, false);
                }
                if let Some(rv) = node.resource_version() {
                    self.patched
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(p.node.clone(), rv);
                }
                Ok(())
            }
            Err(e) if is_status(&e, 409) => {
                debug!(skyhook = %self.name, node = %p.node, "node changed since this pass read it");
                self.met.conflict(&p.node);
                Ok(())
            }
            // Refused for good (a policy engine, an annotation over the size limit): this
            // node's work waits, the other nodes' goes on.
            Err(e) if !is_status(&e, 404) && !retry::is_transient(&e) => {
                self.met.node_failed(&self.name, &p.node, &e);
                if p.auto_taint {
                    self.met.auto_taint(&p.node, true);
                    let note = Note::node(
                        &p.node,
                        schema::AUTO_TAINT_REASON,
                        format!(
                            "Node [{}]: the runtime-required taint could not be added ({}); the node is left out of every Skyhook until it can",
                            p.node,
                            api_words(&e)
                        ),
                    );
                    self.publish(&note.warning());
                }
                Ok(())
            }
            res => ignore_not_found(res),
        }
    }

    async fn patch_node_conditions(
        &self,
        (node, set, remove): &(String, Vec<NodeCondition>, Vec<String>),
    ) -> Result<(), Error> {
        {
            let mut list: Vec<Value> = set.iter().map(|c| json!(c)).collect();
            list.extend(
                remove
                    .iter()
                    .map(|t| json!({"type": t, "$patch": "delete"})),
            );
            let body = json!({"status": {"conditions": list}});
            let res = self
                .nodes
                .patch_status(node, &PatchParams::default(), &Patch::Strategic(&body))
                .await;
            ignore_not_found(res)?;
        }
        Ok(())
    }

    async fn replace_status(
        &self,
        status: SkyhookStatus,
        resource_version: Option<String>,
    ) -> Result<Skyhook, Error> {
        // A full replace (guarded by resourceVersion) drops map keys a merge patch would keep.
        // Not a clone of the whole object: its old status is as large as the new one.
        let api = self.api;
        let mut local = status;
        localize_status(&mut local, api);
        let mut obj = Skyhook {
            metadata: self.sk.metadata.clone(),
            spec: self.sk.spec.clone(),
            status: Some(local),
        };
        obj.metadata.managed_fields = None;
        // Patched when the stored status is known (the common case): only what changed is sent.
        if let (Some(before), Some(rv), Some(after)) =
            (&self.sk.status, &resource_version, &obj.status)
        {
            let mut before = std::borrow::Cow::Borrowed(before);
            if api != schema::Api::Skyhook {
                localize_status(before.to_mut(), api);
            }
            let ops = status_patch::ops(&before, after, rv).map_err(kube::Error::SerdeError)?;
            match lean::patch_status(self.client, api, &self.name, &ops).await {
                Ok(stored) => {
                    obj.metadata.resource_version = stored;
                    canonical(&mut obj, api);
                    return Ok(obj);
                }
                // The stored status was not what this pass read it to be (a path to remove is
                // missing): the replace below sends it whole.
                Err(e) if is_status(&e, 422) => {
                    warn!(skyhook = %self.name, error = %e, "status patch refused; replacing the status whole");
                }
                Err(e) => return Err(e.into()),
            }
        }
        obj.metadata.resource_version = resource_version;
        let mut stored = lean::replace_status(self.client, api, obj).await?;
        canonical(&mut stored, api);
        Ok(stored)
    }

    async fn remove_finalizer(&self) -> Result<Written, Error> {
        let sk = self.sk;
        let finalizers: Vec<String> = sk
            .finalizers()
            .iter()
            .filter(|f| *f != schema::FINALIZER)
            .map(|f| self.api.local(f).into_owned())
            .collect();
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": sk.resource_version()}});
        match self
            .skyhooks
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => info!(skyhook = %self.name, "released the finalizer"),
            Err(e) if is_status(&e, 404) => {}
            Err(e) if is_status(&e, 409) => return Ok(Written::Conflict),
            Err(e) => return Err(e.into()),
        }
        Ok(Written::All)
    }

    /// Events on the Skyhook or a node, queued for the publishing task.
    fn publish_events(&self, events: &[Note]) {
        for note in events {
            self.publish(note);
        }
    }

    /// The object this pass is about, as an Event names it (its own kind and group).
    fn reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        let mut r = self.sk.object_ref(&());
        r.api_version = Some(self.api.api_version().to_string());
        r.kind = Some(self.api.kind().to_string());
        r
    }

    fn publish(&self, note: &Note) {
        let reference = match (note.target, &note.node) {
            (About::Node, Some(n)) => Node {
                metadata: kube::api::ObjectMeta {
                    name: Some(n.clone()),
                    ..Default::default()
                },
                ..Default::default()
            }
            .object_ref(&()),
            _ => self.reference(),
        };
        let ev = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.clone(),
            note: Some(note.message.clone()),
            action: note.reason.clone(),
            secondary: None,
        };
        self.events.send(ev, reference);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_patch_carries_its_resource_version_as_a_precondition() {
        let mut p = NodePatch::new("n1");
        p.annotations.insert("a".into(), Some("1".into()));
        p.annotations.insert("gone".into(), None);
        p.taints = Some(Vec::new());
        p.unschedulable = Some(false);
        assert_eq!(
            node_patch_body(&p),
            json!({"metadata": {"annotations": {"a": "1", "gone": null}},
                   "spec": {"unschedulable": false, "taints": null}})
        );
        p.resource_version = Some("42".into());
        assert_eq!(node_patch_body(&p)["metadata"]["resourceVersion"], "42");
    }

    #[test]
    fn only_a_409_is_a_conflict() {
        let api = |code: u16| {
            Error::Kube(kube::Error::Api(
                kube::core::Status::failure("m", "r")
                    .with_code(code)
                    .boxed(),
            ))
        };
        for (code, want) in [(409, true), (404, false), (422, false), (500, false)] {
            assert_eq!(is_conflict(&api(code)), want, "{code}");
        }
    }
}
