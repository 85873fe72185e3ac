//! The pass's operations on Jobs and owned objects that exist: marking a failed attempt counted,
//! failing a Job whose pod cannot start, deleting Jobs and the Go operator's pods, and, on
//! deletion, every Job and ConfigMap of the object.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tracing::{info, warn};

use super::Writer;
use super::requests::ignore_not_found;
use crate::controller::error::Error;
use crate::plan::JobOp;
use crate::schema;

impl Writer<'_> {
    pub(super) async fn job_op(&self, (_, op): &(String, JobOp)) -> Result<(), Error> {
        {
            let res = match op {
                JobOp::Counted { job } => {
                    // Created with the TTL of a successful Job: a failed one stays for `kubectl
                    // logs` until the planner prunes it.
                    let key = self.api.local(schema::COUNTED_ANNOTATION);
                    let patch = json!({
                        "metadata": {"annotations": {key.as_ref(): schema::TRUE_VALUE}},
                        "spec": {"ttlSecondsAfterFinished": null},
                    });
                    self.jobs
                        .patch(job, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(|_| ())
                }
                JobOp::Fail {
                    job,
                    reason,
                    message,
                } => {
                    // Shrinking the deadline makes the Job controller fail it (and stop its pod)
                    // while the Job stays for `kubectl describe`; our annotation keeps the real
                    // reason.
                    let (r, m) = (
                        self.api.local(schema::FAILURE_REASON_ANNOTATION),
                        self.api.local(schema::FAILURE_MESSAGE_ANNOTATION),
                    );
                    let patch = json!({
                        "metadata": {"annotations": {r.as_ref(): reason, m.as_ref(): message}},
                        "spec": {"activeDeadlineSeconds": 1},
                    });
                    warn!(skyhook = %self.name, %job, %reason, "failing a Job whose pod cannot start");
                    self.jobs
                        .patch(job, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(|_| ())
                }
                // Foreground: the Job stays until its pod is gone, and the planner creates no
                // next attempt while it does, so two pods of one stage never overlap on a host.
                JobOp::Delete { job } => self
                    .jobs
                    .delete(job, &DeleteParams::foreground())
                    .await
                    .map(|_| ()),
                // The Go operator's pod, in the namespace of our Jobs; the planner waits until
                // it is gone before its stage runs as a Job.
                JobOp::DeleteGoPod { pod } => {
                    let ns = self.jobs.namespace().unwrap_or_default();
                    info!(skyhook = %self.name, %pod, "deleting a pod of the Go operator");
                    Api::<Pod>::namespaced(self.client.clone(), ns)
                        .delete(pod, &DeleteParams::default())
                        .await
                        .map(|_| ())
                }
            };
            ignore_not_found(res)?;
        }
        Ok(())
    }

    /// On deletion: every Job and ConfigMap labelled with this Skyhook.
    pub(super) async fn delete_owned(&self) -> Result<(), Error> {
        let labelled = |label| {
            let selector = crate::jobs::localize::selector(self.api, label, &self.name);
            ListParams::default().labels(&selector)
        };
        let lp = labelled(schema::NAME_LABEL);
        // Foreground: a Job stays until its pod is gone, so the cordon it relies on (an
        // interrupt may be rebooting the node) is kept as long as the Job is seen.
        self.jobs
            .delete_collection(&DeleteParams::foreground(), &lp)
            .await?;
        let plain = DeleteParams::default();
        self.cms.delete_collection(&plain, &lp).await?;
        let meta = labelled(schema::NODE_META_LABEL);
        self.cms.delete_collection(&plain, &meta).await?;
        Ok(())
    }
}
