//! Events leave the reconcile pass: a pass queues them and a task of its own publishes them.
//!
//! At a thousand nodes Events are more than half of the operator's requests (a stage start is
//! one on the node and one on the Skyhook); publishing them inside the pass made every pass
//! wait for them, and a stage that finished meanwhile waited for the next pass. Losing an Event
//! under overload is acceptable (they are best effort in Kubernetes too); delaying node state
//! is not. Dropped Events are counted and logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Event;
use tokio::sync::mpsc;
use tracing::warn;

use super::event_series::Publisher;

/// Events waiting to be published; beyond this a pass's Events are dropped.
const QUEUE: usize = 20_000;
/// Event writes at once.
const PARALLEL: usize = 8;

pub struct EventSink {
    tx: mpsc::Sender<(Event, ObjectReference)>,
    dropped: AtomicU64,
}

impl EventSink {
    /// Starts the publishing task (needs a Tokio runtime).
    pub fn start(publisher: Publisher) -> Self {
        let publisher = Arc::new(publisher);
        let (tx, mut rx) = mpsc::channel::<(Event, ObjectReference)>(QUEUE);
        let queued = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        tokio::spawn(
            queued.for_each_concurrent(PARALLEL, move |(ev, reference)| {
                let publisher = publisher.clone();
                async move {
                    if let Err(e) = publisher.publish(&ev, &reference).await {
                        warn!(error = %e, reason = %ev.reason, "could not publish an event");
                    }
                }
            }),
        );
        EventSink {
            tx,
            dropped: AtomicU64::new(0),
        }
    }

    pub fn send(&self, ev: Event, reference: ObjectReference) {
        if self.tx.try_send((ev, reference)).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Logged at powers of two so an overload does not flood the log as well.
            if n.is_power_of_two() {
                warn!(
                    dropped = n,
                    "the Event queue is full; Events are being dropped"
                );
            }
        }
    }
}
