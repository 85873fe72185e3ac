//! Publishing Events: a series is one object's Events that say the same thing.
//!
//! kube-runtime's `Recorder` (5.0) keys a series by type, reason and action only, so a later
//! Event with another message raised the first one's count and kept its text: at a thousand
//! nodes `kubectl describe skyhook` showed one node's start "x4000" and none of the others. It
//! also kept a whole Event per series for six minutes and scanned them all on every publish.
//! Here the message is part of the key, and a series is remembered as its name and count.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::{Api, Client};
use serde_json::json;

/// A repeat later than this starts a new Event (kube-runtime's window).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// Series remembered at most; beyond it the least recently seen half is forgotten.
const SERIES_MAX: usize = 4096;

/// What to send for an Event.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Create { name: String },
    Patch { name: String, count: i32 },
}

struct Series {
    name: String,
    count: i32,
    last: Instant,
}

/// The open series, by key (a hash of the object and everything the Event says).
#[derive(Default)]
struct Open {
    series: HashMap<u64, Series>,
}

impl Open {
    /// The step for one more Event of `key` at `now`, remembered as sent.
    fn next(&mut self, key: u64, now: Instant, fresh_name: impl FnOnce() -> String) -> Step {
        if let Some(s) = self.series.get_mut(&key)
            && now.duration_since(s.last) < SERIES_TTL
        {
            s.count += 1;
            s.last = now;
            return Step::Patch {
                name: s.name.clone(),
                count: s.count,
            };
        }
        let name = fresh_name();
        self.restart(key, now, name.clone());
        Step::Create { name }
    }

    /// Opens the series of `key` again as the Event `name`.
    fn restart(&mut self, key: u64, now: Instant, name: String) {
        if self.series.len() >= SERIES_MAX {
            self.sweep(now);
        }
        self.series.insert(
            key,
            Series {
                name,
                count: 1,
                last: now,
            },
        );
    }

    /// Forgets expired series; if that is not enough, the least recently seen half.
    fn sweep(&mut self, now: Instant) {
        self.series
            .retain(|_, s| now.duration_since(s.last) < SERIES_TTL);
        if self.series.len() >= SERIES_MAX {
            let mut lasts: Vec<Instant> = self.series.values().map(|s| s.last).collect();
            let mid = lasts.len() / 2;
            let (_, cut, _) = lasts.select_nth_unstable(mid);
            let cut = *cut;
            self.series.retain(|_, s| s.last > cut);
        }
    }

    fn forget(&mut self, key: u64) {
        self.series.remove(&key);
    }
}

fn series_key(ev: &Event, regarding: &ObjectReference) -> u64 {
    let mut h = DefaultHasher::new();
    (
        &regarding.kind,
        &regarding.namespace,
        &regarding.name,
        &regarding.uid,
    )
        .hash(&mut h);
    (type_name(ev.type_), &ev.reason, &ev.action, &ev.note).hash(&mut h);
    h.finish()
}

fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// Publishes Events (events.k8s.io/v1) as series keyed by their message.
pub struct Publisher {
    client: Client,
    reporter: Reporter,
    open: Mutex<Open>,
}

impl Publisher {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Publisher {
            client,
            reporter,
            open: Mutex::default(),
        }
    }

    /// Sends the Event: a new one, or one more of a series seen within six minutes.
    /// Cluster-scoped objects' Events go to the "default" namespace (as `kubectl describe`
    /// looks for them there).
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let key = series_key(ev, regarding);
        let now = Timestamp::now();
        let step = self
            .open()
            .next(key, Instant::now(), || event_name(regarding, now));
        let result = match step {
            Step::Create { name } => self.create(&api, ev, regarding, name, now).await,
            Step::Patch { name, count } => {
                let patch = json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    // Deleted meanwhile (or its create failed): start the series again.
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        let name = event_name(regarding, now);
                        self.open().restart(key, Instant::now(), name.clone());
                        self.create(&api, ev, regarding, name, now).await
                    }
                    other => other.map(|_| ()),
                }
            }
        };
        if result.is_err() {
            self.open().forget(key);
        }
        result
    }

    async fn create(
        &self,
        api: &Api<K8sEvent>,
        ev: &Event,
        regarding: &ObjectReference,
        name: String,
        now: Timestamp,
    ) -> kube::Result<()> {
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: regarding.namespace.clone(),
                ..Default::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            type_: Some(type_name(ev.type_).to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            ..Default::default()
        };
        api.create(&PostParams::default(), &event).await.map(|_| ())
    }

    fn open(&self) -> std::sync::MutexGuard<'_, Open> {
        // The map holds no invariant a panicking holder could break.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// This operator as the Events' reporter (its pod, when it runs in one).
pub fn reporter() -> Reporter {
    Reporter {
        controller: crate::schema::EVENT_COMPONENT.to_string(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

/// `<object>.<nanoseconds, hex>`, kube-runtime's and client-go's form.
fn event_name(regarding: &ObjectReference, now: Timestamp) -> String {
    format!(
        "{}.{:x}",
        regarding.name.as_deref().unwrap_or("skyhook"),
        now.as_nanosecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: reason.into(),
            secondary: None,
        }
    }

    fn node(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Node".into()),
            name: Some(name.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_series_is_one_object_saying_the_same_thing() {
        let a = node("a");
        let base = series_key(&ev("Apply", "started apply of x"), &a);
        let cases = [
            (
                "same",
                series_key(&ev("Apply", "started apply of x"), &a),
                true,
            ),
            (
                "other message",
                series_key(&ev("Apply", "started config of x"), &a),
                false,
            ),
            (
                "other reason",
                series_key(&ev("Reboot", "started apply of x"), &a),
                false,
            ),
            (
                "other object",
                series_key(&ev("Apply", "started apply of x"), &node("b")),
                false,
            ),
        ];
        for (what, key, same) in cases {
            assert_eq!(key == base, same, "{what}");
        }
    }

    #[test]
    fn repeats_within_the_window_count_up_later_ones_start_over() {
        let mut open = Open::default();
        let t0 = Instant::now();
        let mut n = 0;
        let mut name = || {
            n += 1;
            format!("e{n}")
        };
        assert_eq!(
            open.next(1, t0, &mut name),
            Step::Create { name: "e1".into() }
        );
        assert_eq!(
            open.next(1, t0 + Duration::from_secs(60), &mut name),
            Step::Patch {
                name: "e1".into(),
                count: 2
            }
        );
        assert_eq!(
            open.next(2, t0, &mut name),
            Step::Create { name: "e2".into() }
        );
        // The window runs from the last repeat.
        assert_eq!(
            open.next(
                1,
                t0 + Duration::from_secs(60) + SERIES_TTL - Duration::from_secs(1),
                &mut name
            ),
            Step::Patch {
                name: "e1".into(),
                count: 3
            }
        );
        assert_eq!(
            open.next(2, t0 + SERIES_TTL, &mut name),
            Step::Create { name: "e3".into() }
        );
        open.forget(2);
        assert_eq!(
            open.next(2, t0 + SERIES_TTL, &mut name),
            Step::Create { name: "e4".into() }
        );
    }

    #[test]
    fn the_memory_of_series_is_bounded() {
        let mut open = Open::default();
        let t0 = Instant::now();
        for i in 0..(SERIES_MAX as u64 * 3) {
            open.next(i, t0 + Duration::from_millis(i), || format!("e{i}"));
            assert!(
                open.series.len() <= SERIES_MAX,
                "{} series at {i}",
                open.series.len()
            );
        }
        // The most recent series are the ones kept.
        let last = SERIES_MAX as u64 * 3 - 1;
        assert!(matches!(
            open.next(last, t0 + Duration::from_millis(last), || "x".into()),
            Step::Patch { count: 2, .. }
        ));
    }
}
