//! The Job and pod lookup `jobs`, `logs` and `debug collect` share: identity from labels and
//! annotations (`skyhook::jobs::JobView`), never from names.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::ListParams;
use skyhook::jobs::JobView;

use super::error::CliError;
use super::kube::Kube;

pub use skyhook::schema::JOB_NAME_LABEL;

/// One of our Jobs with its newest pod.
#[derive(Debug, Clone)]
pub struct Found {
    pub view: JobView,
    pub job: Job,
    pub pod: Option<Pod>,
}

impl Found {
    /// Sort key: node, Skyhook, package, version, stage in run order, attempt.
    pub fn order(&self) -> (&str, &str, &str, &str, u8, u32) {
        let v = &self.view;
        (
            &v.node,
            &v.skyhook,
            &v.package,
            &v.version,
            v.stage.run_order(),
            v.attempt,
        )
    }
}

/// Jobs and pods in `namespace` matching the label `selector`, each Job with its newest pod,
/// in stage order. Foreign Jobs (no readable Skyhook annotations) are left out.
///
/// `selector` is in the canonical keys; a NodeWright's Jobs are found under its prefix and read
/// in the canonical keys too.
pub async fn find(kube: &Kube, namespace: &str, selector: &str) -> Result<Vec<Found>, CliError> {
    let params = ListParams::default().labels(&kube.selector(selector));
    let api = kube.api();
    let mut jobs = kube.list_in::<Job>(namespace, &params, "jobs").await?;
    let mut pods = kube.list_in::<Pod>(namespace, &params, "pods").await?;
    for meta in jobs
        .iter_mut()
        .map(|j| &mut j.metadata)
        .chain(pods.iter_mut().map(|p| &mut p.metadata))
    {
        api.canonicalize(&mut meta.labels);
        api.canonicalize(&mut meta.annotations);
    }
    Ok(assemble(jobs, pods))
}

/// Pairs Jobs with their newest pod (by the Job controller's label) and sorts them.
pub fn assemble(jobs: Vec<Job>, pods: Vec<Pod>) -> Vec<Found> {
    let mut by_job: BTreeMap<String, Pod> = BTreeMap::new();
    for pod in pods {
        let Some(job) = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(JOB_NAME_LABEL))
            .cloned()
        else {
            continue;
        };
        let newer = by_job.get(&job).is_none_or(|old| {
            old.metadata.creation_timestamp.as_ref().map(|t| t.0)
                <= pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
        });
        if newer {
            by_job.insert(job, pod);
        }
    }
    let mut found: Vec<Found> = jobs
        .into_iter()
        .filter_map(|job| {
            let name = job.metadata.name.clone()?;
            let pod = by_job.remove(&name);
            let view = JobView::from_job(&job, pod.as_ref())?;
            Some(Found { view, job, pod })
        })
        .collect();
    found.sort_by(|a, b| a.order().cmp(&b.order()));
    found
}

/// A container of the pod waiting for a reason worth showing (not the routine
/// `PodInitializing`/`ContainerCreating`): (container, reason, message).
pub fn waiting_reason(pod: &Pod) -> Option<(String, String, String)> {
    container_statuses(pod).find_map(|c| {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        let reason = w.reason.clone()?;
        (!matches!(reason.as_str(), "PodInitializing" | "ContainerCreating")).then(|| {
            (
                c.name.clone(),
                reason,
                w.message.clone().unwrap_or_default(),
            )
        })
    })
}

/// The statuses of the pod's init containers, then of its containers.
pub fn container_statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let status = pod.status.as_ref();
    let init = status.and_then(|s| s.init_container_statuses.as_ref());
    let main = status.and_then(|s| s.container_statuses.as_ref());
    init.into_iter().chain(main).flatten()
}
