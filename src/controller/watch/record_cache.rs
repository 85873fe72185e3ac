//! Watch caches of compact records. A pass reads a few fields of each Job and pod, and there are
//! nodes × packages × stages of them: a kube reflector store would keep every object whole (a
//! few KiB each, most of the operator's memory at a thousand nodes), so these keep only the
//! record a pass reads, built once as the object arrives.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::watcher;
use tokio::sync::watch;

/// Keyed by the object's name: a record that keeps the name (a Job's view) keeps this same
/// copy, handed to the record function, rather than one of its own.
type Map<T> = HashMap<Arc<str>, Arc<T>>;

/// The records of one watch (one namespace), by object name.
pub struct Records<T> {
    map: Arc<RwLock<Map<T>>>,
    ready: watch::Receiver<bool>,
}

impl<T> Clone for Records<T> {
    fn clone(&self) -> Self {
        Records {
            map: self.map.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<T> Records<T> {
    /// Every record, in no particular order.
    pub fn all(&self) -> Vec<Arc<T>> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.values().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Option<Arc<T>> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.get(name).cloned()
    }

    /// Resolves once the first list has been stored.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.clone();
        // An error means the watch is gone for good: nothing left to wait for.
        let _ = ready.wait_for(|r| *r).await;
    }
}

/// Keeps `records` up to date from a watcher's events, as kube's reflector does: a relist
/// builds a new map and swaps it in whole at its end, so a pass never sees half a list.
struct Writer<K, T> {
    map: Arc<RwLock<Map<T>>>,
    relist: Option<Map<T>>,
    ready: watch::Sender<bool>,
    record: fn(&K, &Arc<str>) -> Option<T>,
}

impl<K: ResourceExt, T> Writer<K, T> {
    fn apply(&mut self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Init => self.relist = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                let key: Arc<str> = o.name_any().into();
                if let (Some(relist), Some(r)) = (self.relist.as_mut(), (self.record)(o, &key)) {
                    relist.insert(key, Arc::new(r));
                }
            }
            watcher::Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    *self.map.write().unwrap_or_else(PoisonError::into_inner) = relist;
                }
                self.ready.send_replace(true);
            }
            watcher::Event::Apply(o) => {
                let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
                // An object that no longer carries anything worth keeping leaves the cache.
                let key: Arc<str> = o.name_any().into();
                match (self.record)(o, &key) {
                    Some(r) => map.insert(key, Arc::new(r)),
                    None => map.remove(&key),
                };
            }
            watcher::Event::Delete(o) => {
                let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
                map.remove(o.name_any().as_str());
            }
        }
    }
}

/// `events`, unchanged, with a cache of `record(object, name)` for every object for which it
/// is `Some`.
pub fn recorded<K, T, S>(
    events: S,
    record: fn(&K, &Arc<str>) -> Option<T>,
) -> (
    Records<T>,
    impl Stream<Item = S::Item> + Send + use<K, T, S>,
)
where
    K: ResourceExt + Send + 'static,
    T: Send + Sync + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let map = Arc::new(RwLock::new(HashMap::new()));
    let (tx, rx) = watch::channel(false);
    let mut writer = Writer {
        map: map.clone(),
        relist: None,
        ready: tx,
        record,
    };
    let stream = events.inspect(move |e| {
        if let Ok(e) = e {
            writer.apply(e);
        }
    });
    (Records { map, ready: rx }, stream)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn cm(name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some([("v".to_string(), value.to_string())].into()),
            ..ConfigMap::default()
        }
    }

    /// The record: the value, unless it is "skip".
    fn value(c: &ConfigMap, _: &Arc<str>) -> Option<String> {
        let v = c.data.as_ref()?.get("v")?;
        (v != "skip").then(|| v.clone())
    }

    fn sorted(r: &Records<String>) -> Vec<String> {
        let mut all: Vec<String> = r.all().iter().map(|s| s.to_string()).collect();
        all.sort();
        all
    }

    /// A record that keeps the name keeps the map key's copy, not one of its own.
    #[tokio::test]
    async fn a_record_shares_its_name_with_the_key() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (records, events) = recorded(rx, |_: &ConfigMap, name| Some(name.clone()));
        let mut events = Box::pin(events);
        tx.unbounded_send(Ok(watcher::Event::Apply(cm("a", "1"))))
            .unwrap();
        events.next().await;
        let map = records.map.read().unwrap();
        let (key, record) = map.iter().next().unwrap();
        assert!(Arc::ptr_eq(key, record));
        assert_eq!(Arc::strong_count(key), 2);
    }

    #[tokio::test]
    async fn records_follow_applies_deletes_and_relists() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (records, events) = recorded(rx, value);
        let mut events = Box::pin(events);
        let send = |e: watcher::Event<ConfigMap>| {
            tx.unbounded_send(Ok(e)).unwrap();
        };
        for e in [Init, InitApply(cm("a", "1")), InitApply(cm("b", "skip"))] {
            send(e);
            events.next().await;
        }
        // Half a list is never shown, and not ready either.
        assert!(records.all().is_empty());
        assert!(!*records.ready.borrow());
        send(InitDone);
        events.next().await;
        records.wait_until_ready().await;
        assert_eq!(sorted(&records), ["1"]);

        for e in [
            Apply(cm("c", "3")),
            Apply(cm("a", "skip")),
            Delete(cm("c", "3")),
            Apply(cm("d", "4")),
        ] {
            send(e);
            events.next().await;
        }
        assert_eq!(sorted(&records), ["4"]);
        assert_eq!(records.get("d").as_deref().map(String::as_str), Some("4"));

        // A relist replaces everything at its end.
        for e in [Init, InitApply(cm("e", "5")), InitDone] {
            send(e);
            events.next().await;
        }
        assert_eq!(sorted(&records), ["5"]);
    }
}
