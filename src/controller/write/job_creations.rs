//! Job creations run behind the pass that planned them.
//!
//! At a thousand nodes a pass that waited for its own creations lasted as long as those
//! creations took on a saturated API server, and every stage that finished meanwhile waited for
//! the next pass to be stored: node state lagged the Jobs by a whole pass. Now a pass stores node
//! state, hands its Jobs to this queue and ends; the next pass can start at once.
//!
//! Until the watch shows a Job, the planner sees it here as a running Job (its view is built
//! from the very object being created), so no later pass plans it again, nor the Events and
//! metadata ConfigMap of its start. A creation that fails is forgotten and a pass is asked for:
//! that pass finds no Job and plans it again, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;

use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::event_queue::EventSink;
use super::requests::is_status;
use crate::controller::api::client::PARALLEL_WRITES;
use crate::controller::api::retry::retried;
use crate::controller::error::Error;
use crate::controller::watch::decode as lean;
use crate::crd::Skyhook;
use crate::jobs::{JobView, PlannedJob};
use crate::schema;

/// Jobs created but not yet seen by the watch are forgotten after this long: a Job deleted
/// before its watch event arrived must not look like a running Job for ever.
const UNSEEN: Duration = Duration::from_secs(60);
/// A pass after a failed creation; not at once, so that a persistent refusal is not hammered.
const AFTER_FAILURE: Duration = Duration::from_secs(5);

enum State {
    Sending,
    Created(Instant),
}

struct Entry {
    view: JobView,
    state: State,
}

/// The queue of Job creations, with what creating a Job needs.
pub struct JobCreations {
    queue: Queue,
    client: Client,
    namespace: String,
    events: Arc<EventSink>,
}

impl JobCreations {
    /// The queue, and the stream of Skyhooks whose creations failed (for `reconcile_on`).
    pub fn new(
        client: Client,
        namespace: String,
        events: Arc<EventSink>,
    ) -> (
        Arc<Self>,
        impl futures::Stream<Item = ObjectRef<Skyhook>> + Send + use<>,
    ) {
        let (queue, again) = Queue::new();
        let creations = JobCreations {
            queue,
            client,
            namespace,
            events,
        };
        (Arc::new(creations), again)
    }

    /// Jobs on their way: the planner counts them against its creations per pass.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Views of the Jobs being created that `seen` (the Job cache) does not hold yet.
    pub fn unseen(&self, seen: impl Fn(&str) -> bool) -> Vec<JobView> {
        self.queue.unseen(seen)
    }

    /// Creates `jobs` for `sk` in the background, [`PARALLEL_WRITES`] at a time.
    pub fn start(self: &Arc<Self>, sk: &Skyhook, jobs: Vec<PlannedJob>) {
        if jobs.is_empty() {
            return;
        }
        self.queue.queue(&jobs);
        let this = self.clone();
        let skyhook = ObjectRef::from(sk);
        let mut reference = sk.object_ref(&());
        // The Jobs are written in the object's API (see `plan::localize`): so is its kind.
        if let Some(api) = jobs.first().map(|j| j.view.api) {
            reference.api_version = Some(api.api_version().to_string());
            reference.kind = Some(api.kind().to_string());
        }
        tokio::spawn(async move {
            let target = Target {
                creations: &this,
                api: Api::namespaced(this.client.clone(), &this.namespace),
                skyhook: reference,
            };
            let target = &target;
            let failures: Vec<Error> = stream::iter(jobs)
                .map(|job| async move {
                    let sent = retried(|| Box::pin(target.create(&job))).await;
                    match sent {
                        Ok(()) => target.creations.queue.created(&job.view.name),
                        Err(_) => target.creations.queue.failed(&job.view.name),
                    }
                    sent.err()
                })
                .buffer_unordered(PARALLEL_WRITES)
                .filter_map(|e| async move { e })
                .collect()
                .await;
            if let Some(e) = failures.first() {
                warn!(skyhook = %skyhook.name, failed = failures.len(), error = %e,
                    "Job creations failed; a pass plans them again");
                tokio::time::sleep(AFTER_FAILURE).await;
                let _ = this.queue.again.send(skyhook);
            }
        });
    }
}

/// The Jobs being created, by name, and a way to ask for a pass of their Skyhook.
struct Queue {
    jobs: Mutex<HashMap<String, Entry>>,
    again: mpsc::UnboundedSender<ObjectRef<Skyhook>>,
}

impl Queue {
    fn new() -> (
        Self,
        impl futures::Stream<Item = ObjectRef<Skyhook>> + Send + use<>,
    ) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let again = stream::poll_fn(move |cx| rx.poll_recv(cx));
        let queue = Queue {
            jobs: Mutex::new(HashMap::new()),
            again: tx,
        };
        (queue, again)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Jobs on their way: the planner counts them against its creations per pass.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Views of the Jobs being created that `seen` (the Job cache) does not hold yet; entries
    /// the cache now holds, or created too long ago, are dropped.
    pub fn unseen(&self, seen: impl Fn(&str) -> bool) -> Vec<JobView> {
        let mut jobs = self.lock();
        jobs.retain(|name, e| match e.state {
            State::Sending => true,
            State::Created(at) => !seen(name) && at.elapsed() < UNSEEN,
        });
        jobs.iter()
            .filter(|(name, _)| !seen(name))
            .map(|(_, e)| e.view.clone())
            .collect()
    }

    fn created(&self, name: &str) {
        if let Some(e) = self.lock().get_mut(name) {
            e.state = State::Created(Instant::now());
        }
    }

    fn failed(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Notes `jobs` as on their way.
    fn queue(&self, jobs: &[PlannedJob]) {
        let mut queue = self.lock();
        for job in jobs {
            let (view, state) = (job.view.clone(), State::Sending);
            queue.insert(job.view.name.to_string(), Entry { view, state });
        }
    }
}

/// One Skyhook's creations: where its Jobs go, and whom a taken name is reported to.
struct Target<'a> {
    creations: &'a JobCreations,
    api: Api<Job>,
    skyhook: k8s_openapi::api::core::v1::ObjectReference,
}

impl Target<'_> {
    async fn create(&self, job: &PlannedJob) -> Result<(), Error> {
        let c = self.creations;
        match lean::create_job(&c.client, &c.namespace, job.body().to_vec()).await {
            Ok(_) => {
                info!(job = %job.view.name, "created Job");
                Ok(())
            }
            // A deterministic name already taken means an earlier pass created it: adopt it, but
            // only if it is the same work.
            Err(e) if is_status(&e, 409) => self.adopt(job).await,
            Err(e) => Err(e.into()),
        }
    }

    /// The Job under this name is adopted when its labels and spec hash say it does the same work;
    /// otherwise a Warning Event names both, never a silent wait.
    async fn adopt(&self, job: &PlannedJob) -> Result<(), Error> {
        let name = &job.view.name;
        let existing = self.api.get(name).await?;
        let have = JobView::from_job(&existing, None);
        if let Some(h) = &have
            && same_work(&job.view, h)
        {
            debug!(job = %name, "Job exists, adopting");
            return Ok(());
        }
        let found = have.map_or_else(
            || "not one of this operator's stage Jobs".to_string(),
            |h| {
                format!(
                    "{} {}:{} {} on {} attempt {} (spec hash {})",
                    h.skyhook,
                    h.package,
                    h.version,
                    h.stage.as_str(),
                    h.node,
                    h.attempt,
                    h.spec_hash
                )
            },
        );
        let message = format!(
            "Job {name} already exists and does other work ({found}); delete it so that this stage \
         can run"
        );
        let ev = Event {
            type_: EventType::Warning,
            reason: schema::JOB_NAME_TAKEN_REASON.to_string(),
            note: Some(message.clone()),
            action: "CreateJob".to_string(),
            secondary: None,
        };
        self.creations.events.send(ev, self.skyhook.clone());
        Err(Error::JobNameTaken(message))
    }
}

fn same_work(a: &JobView, b: &JobView) -> bool {
    let key = |v: &JobView| {
        (
            v.skyhook.clone(),
            v.package.clone(),
            v.version.clone(),
            v.stage,
            v.node.clone(),
            v.attempt,
            v.spec_hash.clone(),
        )
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(name: &str, node: &str) -> PlannedJob {
        PlannedJob::new(&crate::jobs::minimal_job(name, node, serde_json::json!({}))).unwrap()
    }

    fn names(views: Vec<JobView>) -> Vec<String> {
        let mut names: Vec<String> = views.into_iter().map(|v| v.name.to_string()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_job_on_its_way_counts_as_running_until_the_cache_holds_it() {
        let (creating, _again) = Queue::new();
        creating.queue(&[
            outgoing("a", "n1"),
            outgoing("b", "n2"),
            outgoing("c", "n3"),
        ]);
        assert_eq!(creating.len(), 3);
        let none = |_: &str| false;
        let views = creating.unseen(none);
        assert!(views.iter().all(|v| !v.finished() && v.skyhook == "sk"));
        assert_eq!(names(views), ["a", "b", "c"]);

        // Created but not yet watched: still running as far as the planner knows.
        creating.created("a");
        assert_eq!(names(creating.unseen(none)), ["a", "b", "c"]);
        // The watch delivered it: the cache's copy counts from now on.
        assert_eq!(names(creating.unseen(|n| n == "a")), ["b", "c"]);
        assert_eq!(creating.len(), 2);
        // A failed creation is forgotten, so that a pass plans it again.
        creating.failed("b");
        assert_eq!(names(creating.unseen(none)), ["c"]);
        // Still being sent: kept even if a Job of that name is already cached.
        assert_eq!(names(creating.unseen(|_| true)), Vec::<String>::new());
        assert_eq!(creating.len(), 1);
    }

    #[test]
    fn a_created_job_the_watch_never_shows_is_forgotten() {
        let (creating, _again) = Queue::new();
        creating.queue(&[outgoing("a", "n1")]);
        if let Some(e) = creating.lock().get_mut("a") {
            e.state = State::Created(Instant::now() - UNSEEN - Duration::from_secs(1));
        }
        assert!(creating.unseen(|_| false).is_empty());
        assert_eq!(creating.len(), 0);
    }
}
