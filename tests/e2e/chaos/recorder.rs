//! The harness's own watches of Nodes, Jobs, pods and objects, appended to the history as they
//! arrive. A watch that lists again (after an API server restart) records the objects that went
//! while it was away as deleted, so the checker never believes a Job still runs that is gone.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::history::{Kind, Record};

pub struct Recorder {
    records: Arc<Mutex<Vec<Record>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Keeps what the checker reads: no managed fields, no pod spec beyond its node.
fn trimmed(mut v: Value) -> Value {
    if let Some(m) = v.pointer_mut("/metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    if let Some(spec) = v.pointer_mut("/spec").and_then(Value::as_object_mut)
        && spec.contains_key("containers")
    {
        let node = spec.get("nodeName").cloned();
        spec.clear();
        if let Some(n) = node {
            spec.insert("nodeName".into(), n);
        }
    }
    if let Some(spec) = v.pointer_mut("/spec").and_then(Value::as_object_mut)
        && spec.contains_key("template")
    {
        spec.remove("template");
    }
    v
}

impl Recorder {
    /// Watches, in `ns`, Jobs and pods; the nodes labelled `label` (`k=v`); the Skyhooks and
    /// NodeWrights labelled so.
    pub fn start(client: &Client, ns: &str, label: &str) -> Recorder {
        let records = Arc::new(Mutex::new(Vec::new()));
        let by_label = || watcher::Config::default().labels(label);
        let nodewright = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "nodewright.nvidia.com",
            "v1alpha1",
            "NodeWright",
        ));
        let tasks = vec![
            watch::<k8s_openapi::api::core::v1::Node>(
                Api::all(client.clone()),
                by_label(),
                Kind::Node,
                records.clone(),
            ),
            watch::<k8s_openapi::api::batch::v1::Job>(
                Api::namespaced(client.clone(), ns),
                watcher::Config::default(),
                Kind::Job,
                records.clone(),
            ),
            watch::<k8s_openapi::api::core::v1::Pod>(
                Api::namespaced(client.clone(), ns),
                watcher::Config::default(),
                Kind::Pod,
                records.clone(),
            ),
            watch::<skyhook::crd::Skyhook>(
                Api::all(client.clone()),
                by_label(),
                Kind::Object,
                records.clone(),
            ),
            watch_dynamic(
                Api::all_with(client.clone(), &nodewright),
                by_label(),
                records.clone(),
            ),
        ];
        Recorder { records, tasks }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Record>> {
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops the watches; the history so far.
    pub fn stop(self) -> Vec<Record> {
        for t in &self.tasks {
            t.abort();
        }
        self.lock().clone()
    }
}

fn push(records: &Mutex<Vec<Record>>, kind: Kind, deleted: bool, obj: Value) {
    let r = Record {
        t: jiff::Timestamp::now(),
        kind,
        deleted,
        obj: trimmed(obj),
    };
    records
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(r);
}

fn as_values<K: Serialize>(ev: Event<K>) -> Event<Value> {
    let v = |o: K| serde_json::to_value(o).unwrap_or(Value::Null);
    match ev {
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(v(o)),
        Event::InitDone => Event::InitDone,
        Event::Apply(o) => Event::Apply(v(o)),
        Event::Delete(o) => Event::Delete(v(o)),
    }
}

fn uid(v: &Value) -> String {
    super::history::str_at(v, "/metadata/uid").to_string()
}

/// One watch's view of what it listed: a relist marks the objects it no longer lists as
/// deleted.
struct Relist {
    records: Arc<Mutex<Vec<Record>>>,
    kind: Kind,
    relisted: BTreeSet<String>,
    known: Vec<(String, Value)>,
}

impl Relist {
    fn new(records: Arc<Mutex<Vec<Record>>>, kind: Kind) -> Relist {
        Relist {
            records,
            kind,
            relisted: BTreeSet::new(),
            known: Vec::new(),
        }
    }

    fn seen(&mut self, v: &Value) {
        let u = uid(v);
        self.known.retain(|(k, _)| *k != u);
        self.known.push((u, v.clone()));
    }

    fn on(&mut self, ev: Event<Value>) {
        match ev {
            Event::Init => self.relisted.clear(),
            Event::InitApply(v) => {
                self.relisted.insert(uid(&v));
                self.seen(&v);
                push(&self.records, self.kind, false, v);
            }
            Event::InitDone => {
                let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.known)
                    .into_iter()
                    .partition(|(u, _)| !self.relisted.contains(u));
                self.known = kept;
                for (_, v) in gone {
                    push(&self.records, self.kind, true, v);
                }
            }
            Event::Apply(v) => {
                self.seen(&v);
                push(&self.records, self.kind, false, v);
            }
            Event::Delete(v) => {
                let u = uid(&v);
                self.known.retain(|(k, _)| *k != u);
                push(&self.records, self.kind, true, v);
            }
        }
    }
}

/// Retries a failed watch every 300 ms, never slower: after an API server or etcd restart the
/// history's gap is the outage, not the outage and a backoff of up to 30 s (a Job made and gone
/// in a longer gap would be one no invariant judged).
struct Steady;

impl Iterator for Steady {
    type Item = std::time::Duration;
    fn next(&mut self) -> Option<Self::Item> {
        Some(std::time::Duration::from_millis(300))
    }
}

impl kube::runtime::utils::Backoff for Steady {
    fn reset(&mut self) {}
}

fn watch<K>(
    api: Api<K>,
    cfg: watcher::Config,
    kind: Kind,
    records: Arc<Mutex<Vec<Record>>>,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let mut relist = Relist::new(records, kind);
        let mut stream = watcher(api, cfg).backoff(Steady).boxed();
        while let Some(ev) = stream.next().await {
            let Ok(ev) = ev else { continue };
            relist.on(as_values(ev));
        }
    })
}

fn watch_dynamic(
    api: Api<DynamicObject>,
    cfg: watcher::Config,
    records: Arc<Mutex<Vec<Record>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut relist = Relist::new(records, Kind::Object);
        let mut stream = watcher(api, cfg).backoff(Steady).boxed();
        while let Some(ev) = stream.next().await {
            let Ok(ev) = ev else { continue };
            relist.on(as_values(ev));
        }
    })
}
