//! What every pass of an engine shares ([`Ctx`]: the caches, the writers' handles, the pacing of
//! its objects), and the engines as the probes and metrics server sees them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use kube::Client;

use super::error::Error;
use super::outbound;
use super::pacing::Pacing;
use super::process::probes;
use super::watch::caches::Caches;
use super::write;
use super::write::event_queue::EventSink;
use super::write::job_creations::JobCreations;
use crate::crd::Skyhook;
use crate::metrics::{Metrics, Names};
use crate::schema::Api;
use crate::settings::Config;

/// Shared by every pass.
pub struct Ctx {
    pub client: Client,
    pub config: Config,
    pub version: String,
    pub events: Arc<EventSink>,
    pub caches: Caches,
    pub ready: AtomicBool,
    /// Waiting to lead: ready (as a follower), not reconciling.
    pub standby: AtomicBool,
    pub metrics: Arc<Metrics>,
    /// Jobs handed to the API server by earlier passes and not yet in the Job cache.
    pub creations: Arc<JobCreations>,
    pub pacing: Pacing,
    /// When the operator started (the caches' deadline counts from here).
    pub started: Instant,
    /// The alert gates' sources, each read at most every few seconds.
    pub alerts: Arc<outbound::alerts::AlertSources>,
    /// The API of the objects this engine reconciles.
    pub api: Api,
    /// Its controller runs (its CRD is served).
    pub serving: AtomicBool,
    /// The objects of the other served API: a Skyhook and a NodeWright of one name take turns
    /// (`plan::api_handover`).
    pub peer: Option<kube::runtime::reflector::Store<Skyhook>>,
    /// NodeWrights told they wait for their Skyhook (one Event each).
    pub waiting: std::sync::Mutex<BTreeSet<String>>,
    /// Frozen Skyhooks told their edit is not applied: the generation each was told of.
    pub unapplied: std::sync::Mutex<BTreeMap<String, i64>>,
    /// Legacy objects whose mirror (`MIGRATE_TO_NODEWRIGHT`) is refused for good: a pass of the
    /// Skyhook reports it among its failed writes.
    pub mirror_refusals: super::process::mirror::Refusals,
}

impl Ctx {
    /// The objects of the other API (none when it is not served), for the rules over both.
    pub(super) fn peers(&self) -> (Api, Vec<Arc<Skyhook>>) {
        let objects = self.peer.as_ref().map(|s| s.state()).unwrap_or_default();
        (self.api.other(), objects)
    }

    /// What the last pass of `name` could not write, and a refusal of its mirror.
    pub(super) fn write_failures(&self, name: &str) -> Vec<String> {
        let mut failed = self.pacing.write_failures(name);
        if self.api == Api::Skyhook
            && let Ok(refused) = self.mirror_refusals.lock()
            && let Some(said) = refused.get(name)
        {
            failed.push(said.clone());
        }
        failed
    }
}

impl Ctx {
    /// Where this engine's passes write.
    pub(super) fn target(&self) -> write::Target<'_> {
        write::Target {
            client: &self.client,
            events: &self.events,
            namespace: &self.config.namespace,
            api: self.api,
        }
    }

    /// For the readiness probe: waits for the caches, at most [`CACHE_WAIT`].
    pub(super) async fn wait_ready(&self) -> Result<(), Error> {
        if self.ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        tokio::time::timeout(CACHE_WAIT, self.caches.filled())
            .await
            .map_err(|_| Error::NotReady(CACHE_WAIT))?;
        self.ready.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// For a pass: whether the caches are filled, without waiting. A pass never waits for them
    /// itself: it would hold the controller's one worker while the caches it waits for are
    /// filled by the same controller's streams, and passes now start at the first event.
    pub(super) fn caches_ready(&self) -> Result<bool, Error> {
        if self.ready.load(Ordering::Relaxed) || self.caches.filled().now_or_never().is_some() {
            self.ready.store(true, Ordering::Relaxed);
            return Ok(true);
        }
        if self.started.elapsed() > CACHE_WAIT {
            return Err(Error::NotReady(CACHE_WAIT));
        }
        Ok(false)
    }
}

/// How long the caches may take to fill before the operator says so.
const CACHE_WAIT: Duration = Duration::from_secs(60);

/// Every engine, as the probes and metrics server sees them.
pub(super) struct Engines(pub(super) Vec<Arc<Ctx>>);

impl probes::Served for Engines {
    /// One registry for every engine; while NodeWrights are served, every series of an object
    /// is published under upstream's `nodewright_*` names too.
    fn metrics(&self) -> String {
        let twins = self
            .0
            .iter()
            .any(|c| c.api == Api::NodeWright && c.serving.load(Ordering::Relaxed));
        self.0
            .first()
            .map(|c| {
                let names = match (c.config.publish_legacy_metrics, twins) {
                    (false, _) => Names::NodeWright,
                    (true, true) => Names::Both,
                    (true, false) => Names::Legacy,
                };
                c.metrics.encode_named(names)
            })
            .unwrap_or_default()
    }

    /// Waiting to lead (the first engine's flag: there is one lease), or the caches of every
    /// engine whose API is required filled. One that serves its API once installed
    /// (`SERVE_APIS=auto`) holds nothing back, waiting for its CRD or filling after it.
    fn ready(&self) -> bool {
        let standby = self
            .0
            .first()
            .is_some_and(|c| c.standby.load(Ordering::Relaxed));
        let required = |c: &&Arc<Ctx>| c.config.serve_apis.required(c.api);
        let mut required = self.0.iter().filter(required).peekable();
        let any = required.peek().is_some();
        standby || (any && required.all(|c| c.ready.load(Ordering::Relaxed)))
    }
}
