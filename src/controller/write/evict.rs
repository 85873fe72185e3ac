//! Draining a node's pods before an interrupt: an eviction (a PodDisruptionBudget's refusal is
//! recorded and reported, never bypassed), or with `drainConfig.disableEviction` a deletion.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType};
use tracing::info;

use futures::FutureExt;

use super::Writer;
use super::parallel::recorded;
use super::requests::{api_words, ignore_not_found, is_status};
use crate::controller::error::Error;
use crate::plan::Eviction;
use crate::schema;

impl Writer<'_> {
    /// Every eviction of the pass. One refused for good (a pod covered by two
    /// PodDisruptionBudgets, which the eviction API answers with a 500; a policy) is recorded
    /// against its node (`WriteFailed`, naming the pod and the API server's words, and a Warning
    /// Event): that node stays cordoned and waits, the other nodes go on.
    pub(super) async fn evict_all(&self, evictions: &[Eviction]) {
        let refused = recorded(
            evictions,
            |e| self.evict(e).boxed(),
            |e| {
                format!(
                    "eviction of pod {}/{} on node {}",
                    e.namespace, e.pod, e.node
                )
            },
        );
        for (what, e) in refused.await {
            self.met.failed(&self.name, what, &e);
        }
    }

    async fn evict(&self, e: &Eviction) -> Result<(), Error> {
        let (ns, pod) = (&e.namespace, &e.pod);
        {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let delete = DeleteParams {
                grace_period_seconds: e.grace_seconds.and_then(|g| u32::try_from(g).ok()),
                ..DeleteParams::default()
            };
            // `drainConfig.disableEviction`: deleted, so no PodDisruptionBudget applies.
            if e.delete {
                ignore_not_found(pods.delete(pod, &delete).await)?;
                info!(skyhook = %self.name, pod = %format!("{ns}/{pod}"), "deleted (disableEviction)");
                return Ok(());
            }
            let params = kube::api::EvictParams {
                delete_options: Some(delete),
                ..Default::default()
            };
            match pods.evict(pod, &params).await {
                Ok(_) => info!(skyhook = %self.name, pod = %format!("{ns}/{pod}"), "evicted"),
                Err(e) if is_status(&e, 404) => {}
                // A PodDisruptionBudget said no: honour it, retry next pass, never delete instead.
                Err(err) if is_status(&err, 429) => {
                    self.met.blocked_eviction(crate::plan::inputs::DrainBlock {
                        node: e.node.clone(),
                        pod: format!("{ns}/{pod}"),
                        message: api_words(&err),
                    });
                    let ev = Event {
                        type_: EventType::Warning,
                        reason: schema::DRAIN_BLOCKED_REASON.to_string(),
                        note: Some(format!(
                            "eviction of pod {ns}/{pod} is blocked by a PodDisruptionBudget; retrying"
                        )),
                        action: "Evict".to_string(),
                        secondary: None,
                    };
                    self.events.send(ev, self.reference());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
