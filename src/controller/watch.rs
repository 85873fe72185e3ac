//! The watch caches: what each reflector keeps of its objects (only what the planner reads)
//! and which changes are worth a pass.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use futures::TryStreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Node, NodeSystemInfo, Pod, PodSpec,
};
use kube::Client;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};

use crate::crd::DeploymentPolicy;
use crate::jobs::GoPod;

/// Node objects keep what the planner reads (labels, annotations, taints, unschedulable,
/// conditions, boot id); images, volumes, addresses and capacities are most of a Node's bytes.
pub(super) fn prune_node(n: &mut Node) {
    n.metadata.managed_fields = None;
    if let Some(spec) = n.spec.as_mut() {
        spec.pod_cidr = None;
        spec.pod_cidrs = None;
        spec.provider_id = None;
    }
    if let Some(s) = n.status.as_mut() {
        s.images = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
        s.config = None;
        s.addresses = None;
        s.allocatable = None;
        s.capacity = None;
        s.daemon_endpoints = None;
        s.features = None;
        s.runtime_handlers = None;
        s.node_info = s.node_info.take().map(|i| NodeSystemInfo {
            boot_id: i.boot_id,
            ..NodeSystemInfo::default()
        });
    }
}

/// A Job is read for its labels, annotations and conditions only ([`JobView`]); its pod
/// template is most of its bytes, and there are nodes × packages × stages of them.
pub(super) fn prune_job(j: &mut Job) {
    j.metadata.managed_fields = None;
    j.spec = None;
    if let Some(s) = j.status.as_mut() {
        s.uncounted_terminated_pods = None;
    }
}

/// A stage pod is read for its Job label and its containers' waiting reasons; a pod of the Go
/// operator ([`GoPod`]) also for its node and its init containers' restarts and last exit.
pub(super) fn prune_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    p.spec = p.spec.take().map(|s| PodSpec {
        node_name: s.node_name,
        ..PodSpec::default()
    });
    if let Some(s) = p.status.as_mut() {
        let keep = |list: &mut Option<Vec<ContainerStatus>>| {
            if let Some(list) = list.as_mut() {
                for c in list.iter_mut() {
                    *c = ContainerStatus {
                        name: std::mem::take(&mut c.name),
                        state: c.state.take(),
                        restart_count: c.restart_count,
                        last_state: c.last_state.take().and_then(|l| l.terminated).map(|t| {
                            ContainerState {
                                terminated: Some(ContainerStateTerminated {
                                    exit_code: t.exit_code,
                                    finished_at: t.finished_at,
                                    ..ContainerStateTerminated::default()
                                }),
                                ..ContainerState::default()
                            }
                        }),
                        ..ContainerStatus::default()
                    };
                }
            }
        };
        keep(&mut s.init_container_statuses);
        keep(&mut s.container_statuses);
        s.ephemeral_container_statuses = None;
        s.conditions = None;
        s.host_ips = None;
        s.pod_ips = None;
    }
}

/// What of a node the planner reads, hashed: a kubelet or kwok heartbeat changes none of it, so
/// it starts no pass (at a thousand nodes heartbeats alone would keep the queue full).
pub(super) fn node_fingerprint(n: &Node) -> Option<u64> {
    let mut h = DefaultHasher::new();
    n.metadata.labels.hash(&mut h);
    n.metadata.annotations.hash(&mut h);
    if let Some(spec) = &n.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.value, &t.effect).hash(&mut h);
        }
    }
    if let Some(status) = &n.status {
        status.node_info.as_ref().map(|i| &i.boot_id).hash(&mut h);
        for c in status.conditions.iter().flatten() {
            (&c.type_, &c.status, &c.reason).hash(&mut h);
        }
    }
    Some(h.finish())
}

/// A stage pod matters to a pass only through its containers' waiting reasons (a stuck image
/// pull); its Job reports everything else. A pod of the Go operator has no Job: every step of
/// its init containers (running, exit code, restarts) and its removal matter.
pub(super) fn pod_fingerprint(p: &Pod) -> Option<u64> {
    let mut h = DefaultHasher::new();
    p.metadata.deletion_timestamp.is_some().hash(&mut h);
    let go = GoPod::from_pod(p).is_some();
    if go {
        (p.metadata.generation == Some(GONE)).hash(&mut h);
    }
    if let Some(s) = &p.status {
        let all = s.init_container_statuses.iter().flatten();
        for c in all.chain(s.container_statuses.iter().flatten()) {
            let state = c.state.as_ref();
            let waiting = state.and_then(|st| st.waiting.as_ref());
            (&c.name, waiting.and_then(|w| w.reason.as_ref())).hash(&mut h);
            if go {
                let exit = state.and_then(|st| st.terminated.as_ref().map(|t| t.exit_code));
                let running = state.is_some_and(|st| st.running.is_some());
                (exit, running, c.restart_count).hash(&mut h);
            }
        }
        if go {
            s.phase.hash(&mut h);
        }
    }
    Some(h.finish())
}

/// Marks a deleted pod of the Go operator (a generation no pod has): the planner waits for such
/// a pod to be gone before the Job of its stage starts, so its removal must start a pass, and
/// its last fingerprint must differ from the one before. Our Jobs' pods report through their
/// Jobs.
const GONE: i64 = -1;

/// Pod watch events as objects worth a pass: changes, and the removal of a Go operator's pod.
pub(super) fn pod_triggers(
    events: impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send,
) -> impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send {
    events
        .map_ok(|e| match e {
            watcher::Event::Delete(mut p) if GoPod::from_pod(&p).is_some() => {
                p.metadata.generation = Some(GONE);
                watcher::Event::Apply(p)
            }
            e => e,
        })
        .applied_objects()
        .predicate_filter(pod_fingerprint, PredicateConfig::default())
}

pub(super) fn prune_meta<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// Every node, pruned, with the events that change what the planner reads.
pub(super) fn node_watch(
    client: &Client,
) -> (
    Store<Node>,
    impl futures::Stream<Item = Result<Node, watcher::Error>> + Send + use<>,
) {
    let (nodes, writer) = reflector::store();
    let stream = watcher(Api::<Node>::all(client.clone()), watch_config())
        .default_backoff()
        .modify(prune_node)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(node_fingerprint, PredicateConfig::default());
    (nodes, stream)
}

/// Watches start from any cached version (`resourceVersion=0`): fine for reflector stores.
pub(super) fn watch_config() -> watcher::Config {
    watcher::Config::default().any_semantic()
}

/// A reflector store of the objects of `api` carrying `labels`, and its stream of watch events
/// (objects stored as `prune` leaves them).
pub(super) fn owned_watch<K>(
    api: Api<K>,
    labels: &str,
    prune: fn(&mut K),
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, watch_config().labels(labels))
        .default_backoff()
        .modify(prune)
        .reflect(writer);
    (store, events)
}

/// Every DeploymentPolicy, with the events that concern the Skyhooks naming it.
pub(super) fn policy_watch(
    client: &Client,
) -> (
    Store<DeploymentPolicy>,
    impl futures::Stream<Item = Result<DeploymentPolicy, watcher::Error>> + Send + use<>,
) {
    let (store, writer) = reflector::store();
    let stream = watcher(Api::all(client.clone()), watch_config())
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    (store, stream)
}
