//! What a pass reads of the Job and pod caches: this Skyhook's Jobs (with Jobs still being
//! created), the nodes other Skyhooks keep busy, and the Go operator's pods.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;

use super::Ctx;
use crate::jobs::{GoPod, JobView};

/// What the Job cache keeps of a Job: its view, without its pod's waiting reasons (read from
/// the pod cache at each pass).
pub(super) fn job_record(job: &Job, name: &Arc<str>) -> Option<JobView> {
    let mut view = JobView::from_job(job, None)?;
    view.name = name.clone();
    Some(view)
}

/// This Skyhook's Jobs, each running one with its pod's stuck container (a wait the Job cannot
/// see).
pub(super) fn job_views(ctx: &Ctx, skyhook: &str) -> Vec<Arc<JobView>> {
    let pods = ctx.pods.all();
    let stuck: HashMap<&str, &(String, String, String)> = pods
        .iter()
        .filter_map(|p| Some((p.job.as_deref()?, p.stuck.as_ref()?)))
        .collect();
    let mut views: Vec<Arc<JobView>> = ctx
        .jobs
        .all()
        .into_iter()
        .filter(|j| j.skyhook == skyhook)
        .map(|j| match stuck.get(&*j.name) {
            // Only a running Job with a stuck pod is copied, to carry the pod's reason.
            Some(s) if !j.finished() => Arc::new(JobView {
                stuck: Some(Box::new((*s).clone())),
                ..JobView::clone(&j)
            }),
            _ => j,
        })
        .collect();
    let on_the_way = ctx.creating.unseen(|name| ctx.jobs.get(name).is_some());
    views.extend(
        on_the_way
            .into_iter()
            .filter(|v| v.skyhook == skyhook)
            .map(Arc::new),
    );
    views
}

/// Nodes where a Job of another Skyhook runs, or a pod of the Go operator for another Skyhook
/// (unless it failed: it waits for that Skyhook's pass to replace it).
pub(super) fn busy_elsewhere(ctx: &Ctx, skyhook: &str) -> BTreeSet<String> {
    let mut busy: BTreeSet<String> = ctx
        .jobs
        .all()
        .iter()
        .filter(|j| j.skyhook != skyhook && !j.finished())
        .map(|j| j.node.to_string())
        .collect();
    let on_the_way = ctx.creating.unseen(|name| ctx.jobs.get(name).is_some());
    busy.extend(
        on_the_way
            .into_iter()
            .filter(|v| v.skyhook != skyhook)
            .map(|v| v.node.to_string()),
    );
    busy.extend(
        ctx.go_pods
            .all()
            .iter()
            .filter(|p| p.skyhook != skyhook)
            .filter_map(|p| p.go.as_ref())
            .filter(|p| p.deleting || !p.failed())
            .map(|p| p.node.clone()),
    );
    busy
}

/// This Skyhook's pods left by the Go operator (package and interrupt pods in the operator
/// namespace, by the reference's labels), by node.
pub(super) fn go_pods(ctx: &Ctx, skyhook: &str) -> BTreeMap<String, Vec<GoPod>> {
    let mut by_node: BTreeMap<String, Vec<GoPod>> = BTreeMap::new();
    let pods = ctx.go_pods.all();
    let ours = pods.iter().filter(|p| p.skyhook == skyhook);
    for p in ours.filter_map(|p| p.go.clone()) {
        by_node.entry(p.node.clone()).or_default().push(p);
    }
    by_node
}
