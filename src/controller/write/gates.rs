//! The rollout gates' writes of a pass: the health gates' check Jobs, and the notifications put
//! in the Skyhook's outbox before its status.

use futures::FutureExt;

use kube::ResourceExt;

use super::Writer;
use super::parallel::recorded;
use super::requests::is_status;
use crate::controller::error::Error;
use crate::controller::outbound::notify;
use crate::plan::Plan;
use crate::schema;

impl Writer<'_> {
    /// The check Jobs the pass asked for; one that exists already is the same attempt. One the
    /// API server refuses for good (a bad `check.image`, a quota, a policy) is recorded against
    /// its node (`WriteFailed`, a Warning Event) and the pass goes on with the other nodes.
    pub(super) async fn create_health_checks(&self, plan: &Plan) {
        let refused = recorded(
            &plan.health_check_jobs,
            |job| {
                async move {
                    match self.jobs.create(&Default::default(), job).await {
                        Err(e) if !is_status(&e, 409) => Err(e.into()),
                        _ => Ok(()),
                    }
                }
                .boxed()
            },
            |job| {
                let node = job
                    .annotations()
                    .get(schema::NODE_ANNOTATION)
                    .cloned()
                    .unwrap_or_default();
                format!("health check Job {} of node {node}", job.name_any())
            },
        );
        for (what, e) in refused.await {
            self.met.failed(&self.name, what, &e);
        }
    }

    /// Before the status: a status that announces a change is never stored without its
    /// notifications (a failed append fails the pass, which repeats them under the same ids).
    pub(super) async fn append_notifications(
        &self,
        plan: &Plan,
        namespace: &str,
    ) -> Result<(), Error> {
        notify::append(
            self.client,
            namespace,
            self.api,
            self.sk,
            &plan.notifications,
        )
        .await
    }
}
