//! The rollout gates' writes of a pass: the health gates' check Jobs, and the notifications put
//! in the Skyhook's outbox before its status.

use futures::FutureExt;

use super::Writer;
use super::parallel::each;
use super::requests::is_status;
use crate::controller::error::Error;
use crate::controller::outbound::notify;
use crate::plan::Plan;

impl Writer<'_> {
    /// The check Jobs the pass asked for; one that exists already is the same attempt.
    pub(super) async fn create_health_checks(&self, plan: &Plan) -> Result<(), Error> {
        each(&plan.health_check_jobs, |job| {
            async move {
                match self.jobs.create(&Default::default(), job).await {
                    Err(e) if !is_status(&e, 409) => Err(e.into()),
                    _ => Ok(()),
                }
            }
            .boxed()
        })
        .await
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
