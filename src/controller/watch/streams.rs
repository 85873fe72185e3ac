//! The watches: what each keeps of its objects (only what the planner reads), which changes
//! are worth a pass, and how a watch waits after an error.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};

use super::decode::{LeanNode, LeanPod, LeanSkyhook, full};
use super::large;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::record_cache::{Records, recorded};
use crate::crd::{DeploymentPolicy, Skyhook};
use crate::jobs::GoPod;
use crate::jobs::JobView;
use crate::node::NodeView;
use crate::schema;

/// What of a node the planner reads, hashed: a kubelet or kwok heartbeat changes none of it, so
/// it starts no pass (at a thousand nodes heartbeats alone would keep the queue full).
pub(super) fn node_fingerprint(n: &Node) -> Option<u64> {
    let mut h = DefaultHasher::new();
    n.metadata.labels.hash(&mut h);
    n.metadata.annotations.hash(&mut h);
    if let Some(spec) = &n.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.value, &t.effect).hash(&mut h);
        }
    }
    if let Some(status) = &n.status {
        status.node_info.as_ref().map(|i| &i.boot_id).hash(&mut h);
        for c in status.conditions.iter().flatten() {
            (&c.type_, &c.status, &c.reason).hash(&mut h);
        }
    }
    Some(h.finish())
}

/// A stage pod matters to a pass only through its containers' waiting reasons (a stuck image
/// pull); its Job reports everything else. A pod of the Go operator has no Job: every step of
/// its init containers (running, exit code, restarts) and its removal matter.
pub(super) fn pod_fingerprint(p: &Pod) -> Option<u64> {
    let mut h = DefaultHasher::new();
    p.metadata.deletion_timestamp.is_some().hash(&mut h);
    let go = GoPod::from_pod(p).is_some();
    if go {
        (p.metadata.generation == Some(GONE)).hash(&mut h);
    }
    if let Some(s) = &p.status {
        let all = s.init_container_statuses.iter().flatten();
        for c in all.chain(s.container_statuses.iter().flatten()) {
            let state = c.state.as_ref();
            let waiting = state.and_then(|st| st.waiting.as_ref());
            (&c.name, waiting.and_then(|w| w.reason.as_ref())).hash(&mut h);
            if go {
                let exit = state.and_then(|st| st.terminated.as_ref().map(|t| t.exit_code));
                let running = state.is_some_and(|st| st.running.is_some());
                (exit, running, c.restart_count).hash(&mut h);
            }
        }
        if go {
            s.phase.hash(&mut h);
        }
    }
    Some(h.finish())
}

/// Marks a deleted pod of the Go operator (a generation no pod has): the planner waits for such
/// a pod to be gone before the Job of its stage starts, so its removal must start a pass, and
/// its last fingerprint must differ from the one before. Our Jobs' pods report through their
/// Jobs.
const GONE: i64 = -1;

/// Pod watch events as objects worth a pass: changes, and the removal of a Go operator's pod.
///
/// Each pod's last fingerprint is kept by name until its delete event, not for kube's
/// predicate TTL: every Job pod passes through the pending watch and leaves it with a delete,
/// so the table holds the pods pending now (a few hundred at most), where a TTL table grew to
/// every pod of the last minutes and kept that capacity (0.8 MiB at a thousand nodes).
pub(super) fn pod_triggers(
    events: impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send,
) -> impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send {
    let mut last = Fingerprints::default();
    events.try_filter_map(move |e| futures::future::ready(Ok(last.trigger(e))))
}

/// The last fingerprint of each pod a watch reports, by name.
#[derive(Default)]
struct Fingerprints(HashMap<String, u64>);

impl Fingerprints {
    /// The pod to start a pass for, if `event` changed what a pass reads of it.
    fn trigger(&mut self, event: watcher::Event<Pod>) -> Option<Pod> {
        match event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                let fingerprint = pod_fingerprint(&p)?;
                let before = self.0.insert(p.name_any(), fingerprint);
                (before != Some(fingerprint)).then_some(p)
            }
            watcher::Event::Delete(mut p) => {
                self.0.remove(&p.name_any());
                if self.0.capacity() > 64 && self.0.len() < self.0.capacity() / 4 {
                    self.0.shrink_to_fit();
                }
                // A Go operator's pod gone: the hand-over waits for it. Our Jobs' pods report
                // through their Jobs.
                GoPod::from_pod(&p).is_some().then(|| {
                    p.metadata.generation = Some(GONE);
                    p
                })
            }
            // A relist reports every pod again; what it no longer holds is forgotten.
            watcher::Event::Init => {
                self.0 = HashMap::new();
                None
            }
            watcher::Event::InitDone => None,
        }
    }
}

pub(super) fn prune_meta<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// Every node as a [`NodeView`], with the events that change what the planner reads.
pub(super) fn node_watch(
    client: &Client,
) -> (
    Records<NodeView>,
    impl futures::Stream<Item = Result<Node, watcher::Error>> + Send + use<>,
) {
    let events = paced(watcher(
        Api::<LeanNode>::all(client.clone()),
        watch_config(),
    ))
    .map_ok(full::<LeanNode, Node>);
    let (nodes, events) = recorded(events, |n: &Node, _| Some(NodeView::from(n.clone())));
    let stream = events
        .applied_objects()
        .predicate_filter(node_fingerprint, PredicateConfig::default());
    (nodes, stream)
}

/// The two pod watches: our Jobs' pods while `Pending`, and the Go operator's pods.
///
/// A Job pod says something the Job does not (a stuck image or container) only while it is
/// Pending; watching it past that streamed every pod update of a rollout to us, about a GiB of
/// JSON encoded by the API server and decoded here at 1,000 nodes × 4 packages. A pod leaving
/// Pending leaves the first watch (a delete), which drops its record. The Go operator's pods
/// (no Job, hence no `job-name` label) are followed in every phase: the hand-over waits for
/// them to be gone.
pub(super) fn pod_events(
    api: &Api<LeanPod>,
) -> [impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + use<>; 2] {
    // By the managed-by label, not the name label: a NodeWright's pods carry that under its
    // own prefix.
    let pending = watch_config()
        .labels(&format!(
            "{}={},{}",
            schema::MANAGED_BY_LABEL,
            schema::MANAGED_BY_VALUE,
            schema::JOB_NAME_LABEL
        ))
        .fields("status.phase=Pending");
    let go = watch_config().labels(&format!(
        "{},!{}",
        schema::NAME_LABEL,
        schema::JOB_NAME_LABEL
    ));
    [
        paced(watcher(api.clone(), pending)).map_ok(full::<LeanPod, Pod>),
        paced(watcher(api.clone(), go)).map_ok(full::<LeanPod, Pod>),
    ]
}

/// Watches start from any cached version (`resourceVersion=0`): fine for reflector stores.
pub(super) fn watch_config() -> watcher::Config {
    watcher::Config::default().any_semantic()
}

/// The watch events of the objects of `api` carrying `labels`, for a cache of records
/// ([`record_cache`]).
pub(super) fn labelled_events<K>(
    api: Api<K>,
    labels: &str,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    paced(watcher(api, watch_config().labels(labels)))
}

/// A reflector store of the objects of `api` carrying `labels`, and its stream of watch events
/// (objects stored as `prune` leaves them).
pub(super) fn owned_watch<K>(
    api: Api<K>,
    labels: &str,
    prune: fn(&mut K),
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = paced(watcher(api, watch_config().labels(labels)))
        .modify(prune)
        .reflect(writer);
    (store, events)
}

/// Every DeploymentPolicy of `api`'s group, with the events that concern the objects naming it.
pub(super) fn policy_watch(
    client: &Client,
    api: schema::Api,
) -> (
    Store<DeploymentPolicy>,
    impl futures::Stream<Item = Result<DeploymentPolicy, watcher::Error>> + Send + use<>,
) {
    let (store, writer) = reflector::store();
    let url = api.policy_url_path();
    let stream = paced(large::watch_at::<DeploymentPolicy>(
        client.clone(),
        url,
        None,
    ))
    .modify(move |p: &mut DeploymentPolicy| {
        // Its finalizer in the canonical keys, as the planner and the finalizer task read it.
        if let Some(f) = p.metadata.finalizers.as_mut() {
            *f = f
                .iter()
                .filter_map(|k| api.canonical(k).map(|c| c.into_owned()))
                .collect();
        }
    })
    .reflect(writer)
    .touched_objects();
    (store, stream)
}

/// The objects of `api` that `labels` select (all without), with their changes: the
/// controller's own trigger, each object in the canonical keys. Built here rather than by
/// `Controller::new`, whose watch has no pace of its own (see [`NoPause`]), and on [`large`],
/// which gives back a large event's buffer.
pub(super) fn skyhook_watch(
    client: &Client,
    api: schema::Api,
    labels: Option<String>,
) -> (
    Store<Skyhook>,
    impl futures::Stream<Item = Result<Skyhook, watcher::Error>> + Send + use<>,
) {
    let (store, writer) = reflector::store();
    let stream = paced(large::watch_at::<LeanSkyhook>(
        client.clone(),
        api.url_path(),
        labels,
    ))
    .map_ok(full::<LeanSkyhook, Skyhook>)
    .modify(move |sk| crate::plan::localize::canonical(sk, api))
    .reflect(writer)
    .applied_objects();
    (store, stream)
}

/// How one watch waits after an error before its next request: [`Pace::FIRST`], doubling while
/// errors follow each other, up to [`Pace::MAX`]; any event starts again from the first. Each
/// watch has its own, so one failing watch never holds back the others (and the caches they
/// fill).
///
/// An expired resource version (410) is no failure: the watcher lists afresh next, which after
/// an API server restart is how every watch catches up (the new server's watch cache starts at
/// the current revision). It therefore waits the first pause, not the next step of a series that
/// the outage before it (connection refused, again and again) has grown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pace {
    next: Duration,
}

impl Pace {
    pub const FIRST: Duration = Duration::from_millis(500);
    pub const MAX: Duration = Duration::from_secs(10);

    pub const fn new() -> Self {
        Pace { next: Self::FIRST }
    }

    /// The pause after `error`.
    pub fn after(&mut self, error: &watcher::Error) -> Duration {
        if expired(error) {
            self.reset();
        }
        let pause = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        pause
    }

    pub fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// A 410 Gone: the resource version a watch resumes from is no longer in the server's window.
pub(super) fn expired(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// `events` (a watcher's stream), paused after each error as [`Pace`] says. It replaces kube's
/// `default_backoff()`, whose pauses grow to 30 s and, with jitter, up to a minute.
pub(super) fn paced<K: Send>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
    paced_by(events, Pace::new(), |pause| pause)
}

/// [`paced`], each pause passed through `wait` first (the unit tests record them).
fn paced_by<K: Send>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    pace: Pace,
    wait: fn(Duration) -> Duration,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
    let state = (Box::pin(events), pace, None::<Duration>);
    futures::stream::unfold(state, move |(mut events, mut pace, pause)| async move {
        if let Some(pause) = pause {
            tokio::time::sleep(wait(pause)).await;
        }
        let item = events.next().await?;
        let pause = match &item {
            // The watcher says Init as it starts a list, before the list answers: no progress
            // yet (a list failing again and again must not retry at the first pause each time).
            Ok(watcher::Event::Init) => None,
            Ok(_) => {
                pace.reset();
                None
            }
            Err(e) => {
                let pause = pace.after(e);
                tracing::debug!(error = %e, ?pause, "watch error; retrying after a pause");
                Some(pause)
            }
        };
        Some((item, (events, pace, pause)))
    })
}

/// The controller's own pause after an error from any of its triggers: none. kube's default
/// pauses the merged stream of all triggers (every watch, and so every cache) for one watch's
/// error, up to a minute each time, and resets only on an event that passes the triggers'
/// filters; after an API server restart, when every watch fails at least once, that froze the
/// caches for minutes while passes went on writing from them. Each watch is [`paced`] instead.
pub(crate) struct NoPause;

impl Iterator for NoPause {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoPause {
    fn reset(&mut self) {}
}

/// What the Job cache keeps of a Job: its view, without its pod's waiting reasons (read from
/// the pod cache at each pass).
pub(super) fn job_record(job: &Job, name: &Arc<str>) -> Option<JobView> {
    let mut view = JobView::from_job(job, None)?;
    view.name = name.clone();
    Some(view)
}

#[cfg(test)]
mod tests {
    use futures::{StreamExt, stream};
    use kube::core::Status;

    use super::*;

    /// A pod of ours (`job`) or of the Go operator, with one container waiting for `reason`.
    fn pod(name: &str, job: bool, reason: Option<&str>) -> Pod {
        let annotation = r#"{"name":"p","version":"1","skyhook":"sh","stage":"apply","image":"i"}"#;
        let mut labels = serde_json::json!({schema::NAME_LABEL: "sh"});
        if job {
            labels[schema::JOB_NAME_LABEL] = name.into();
        }
        let waiting = reason.map(|r| serde_json::json!({"waiting": {"reason": r}}));
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels,
                         "annotations": {schema::PACKAGE_ANNOTATION: annotation}},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": waiting}]},
        }))
        .expect("pod")
    }

    fn names(pods: &[Option<Pod>]) -> Vec<Option<String>> {
        pods.iter()
            .map(|p| p.as_ref().map(|p| p.name_any()))
            .collect()
    }

    #[test]
    fn pod_triggers_report_changes_and_forget_a_pod_at_its_delete() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let mut f = Fingerprints::default();
        let seen: Vec<Option<Pod>> = [
            Apply(pod("a", true, None)),
            Apply(pod("a", true, None)),
            Apply(pod("a", true, Some("ErrImagePull"))),
            Delete(pod("a", true, None)),
            Apply(pod("a", true, None)),
        ]
        .into_iter()
        .map(|e| f.trigger(e))
        .collect();
        assert_eq!(
            names(&seen),
            [
                Some("a".into()),
                None,
                Some("a".into()),
                None,
                Some("a".into())
            ]
        );

        // A Go operator's pod gone starts a pass, marked as gone.
        let gone = f
            .trigger(Delete(pod("g", false, None)))
            .expect("go pod delete");
        assert_eq!(gone.metadata.generation, Some(GONE));
        assert_eq!(f.0.len(), 1);

        // A relist reports every pod again.
        let relist: Vec<Option<Pod>> = [Init, InitApply(pod("a", true, None)), InitDone]
            .into_iter()
            .map(|e| f.trigger(e))
            .collect();
        assert_eq!(names(&relist), [None, Some("a".into()), None]);
    }

    #[test]
    fn pod_triggers_give_back_the_table_of_a_finished_burst() {
        let mut f = Fingerprints::default();
        for i in 0..1000 {
            f.trigger(watcher::Event::Apply(pod(&format!("p{i}"), true, None)));
        }
        let grown = f.0.capacity();
        for i in 0..1000 {
            f.trigger(watcher::Event::Delete(pod(&format!("p{i}"), true, None)));
        }
        assert!(f.0.is_empty());
        assert!(f.0.capacity() < grown / 4, "{} of {grown}", f.0.capacity());
    }

    fn expired_event() -> watcher::Error {
        let status = Status::failure("too old resource version: 274 (277)", "Expired");
        watcher::Error::WatchError(status.with_code(410).boxed())
    }

    fn refused() -> watcher::Error {
        let status = Status::failure("storage is (re)initializing", "TooManyRequests");
        watcher::Error::WatchStartFailed(kube::Error::Api(status.with_code(429).boxed()))
    }

    #[test]
    fn errors_in_a_row_double_the_pause_up_to_the_cap() {
        let mut pace = Pace::new();
        let pauses: Vec<u64> = (0..7)
            .map(|_| pace.after(&refused()).as_millis() as u64)
            .collect();
        assert_eq!(pauses, [500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        pace.reset();
        assert_eq!(pace.after(&watcher::Error::NoResourceVersion), Pace::FIRST);
    }

    #[test]
    fn an_expired_version_relists_after_the_first_pause_however_long_the_outage() {
        let mut pace = Pace::new();
        for _ in 0..5 {
            pace.after(&refused());
        }
        assert_eq!(pace.after(&expired_event()), Pace::FIRST);
        // The relist fails in turn: the series goes on from there.
        assert_eq!(pace.after(&refused()), Pace::FIRST * 2);
    }

    #[test]
    fn only_a_410_counts_as_expired() {
        assert!(expired(&expired_event()));
        let gone = Status::failure("gone", "Expired").with_code(410).boxed();
        assert!(expired(&watcher::Error::WatchStartFailed(
            kube::Error::Api(gone)
        )));
        assert!(!expired(&refused()));
        assert!(!expired(&watcher::Error::NoResourceVersion));
    }

    /// What a paced stream did, in order: items pulled from the watch and pauses taken.
    static STEPS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

    fn step(s: String) {
        STEPS.lock().unwrap().push(s);
    }

    /// Records the pause instead of taking it.
    fn record(pause: Duration) -> Duration {
        step(format!("pause {}ms", pause.as_millis()));
        Duration::ZERO
    }

    #[tokio::test]
    async fn a_paced_watch_pauses_after_an_error_before_its_next_request() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let items: Vec<Result<watcher::Event<u32>, watcher::Error>> = vec![
            Ok(Apply(1)),
            Err(refused()),
            Err(refused()),
            Err(expired_event()),
            // The relist starts, fails, starts again and goes through.
            Ok(Init),
            Err(refused()),
            Ok(Init),
            Ok(InitApply(2)),
            Ok(InitDone),
            Err(refused()),
            Ok(Apply(3)),
        ];
        let events = stream::iter(items).inspect(|item| {
            step(match item {
                Ok(Init) => "init".into(),
                Ok(InitApply(n) | Apply(n)) => format!("event {n}"),
                Ok(e) => format!("{e:?}"),
                Err(e) if expired(e) => "expired".into(),
                Err(_) => "refused".into(),
            })
        });
        let out: Vec<_> = paced_by(events, Pace::new(), record).collect().await;
        assert_eq!(out.len(), 11);
        let steps = STEPS.lock().unwrap().clone();
        assert_eq!(
            steps,
            [
                "event 1",
                "refused",
                "pause 500ms",
                "refused",
                "pause 1000ms",
                // However long the series before it, a 410 relists after the first pause.
                "expired",
                "pause 500ms",
                "init",
                // Starting a list is no progress: the series goes on.
                "refused",
                "pause 1000ms",
                "init",
                "event 2",
                "InitDone",
                // An event starts it again.
                "refused",
                "pause 500ms",
                "event 3",
            ]
        );
    }

    #[test]
    fn the_controller_never_pauses_nor_gives_up_on_its_triggers() {
        let mut none = NoPause;
        assert!((0..100).all(|_| none.next() == Some(Duration::ZERO)));
    }
}
