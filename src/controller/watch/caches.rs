//! The caches a pass reads, and the streams of the changes that call for a pass, with the
//! Skyhooks each change concerns.

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::Api;
use kube::core::{Selector, SelectorExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use super::decode::{LeanJob, LeanPod, full};
use super::record_cache::{Records, recorded};
use super::streams::{
    job_record, labelled_events, node_watch, owned_watch, pod_events, pod_triggers, policy_watch,
    prune_meta, skyhook_watch,
};
use super::tee::{changes, tee};
use crate::crd::{DeploymentPolicy, Skyhook};
use crate::jobs::{JobView, PodView};
use crate::node::NodeView;
use crate::schema;

/// The caches a pass reads.
pub struct Caches {
    /// The API whose objects these caches hold (nodes, Jobs and pods are every API's).
    pub api: schema::Api,
    pub skyhooks: Store<Skyhook>,
    pub nodes: Records<NodeView>,
    pub jobs: Records<JobView>,
    /// Our Jobs' pods while Pending (stuck containers).
    pub pods: Records<PodView>,
    /// The Go operator's pods.
    pub go_pods: Records<PodView>,
    pub policies: Store<DeploymentPolicy>,
    pub configmaps: Store<ConfigMap>,
}

type Changes<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// The changes that call for a pass, by kind; each is polled by the controller, which is what
/// fills the caches.
pub struct Triggers {
    pub skyhooks: Changes<Skyhook>,
    pub nodes: Changes<Node>,
    pub jobs: Changes<Job>,
    pub pods: Changes<Pod>,
    pub configmaps: Changes<ConfigMap>,
    pub policies: Changes<DeploymentPolicy>,
}

impl Caches {
    /// Every watch of the operator, for each API of `apis`: all nodes, our Jobs and pods in
    /// `namespace` (one watch each, shared), and per API the objects `selector` picks, its
    /// DeploymentPolicies and its ConfigMaps.
    pub fn start(
        client: &Client,
        namespace: &str,
        selector: Option<String>,
        apis: &[schema::Api],
    ) -> Vec<(Caches, Triggers)> {
        let n = apis.len();
        let managed = format!("{}={}", schema::MANAGED_BY_LABEL, schema::MANAGED_BY_VALUE);
        let (nodes, node_stream) = node_watch(client);
        let (jobs, job_events) = recorded(
            labelled_events(
                Api::<LeanJob>::namespaced(client.clone(), namespace),
                &managed,
            )
            .map_ok(full::<LeanJob, Job>),
            job_record,
        );
        let [pending, go] = pod_events(&Api::<LeanPod>::namespaced(client.clone(), namespace));
        let (pods, pending) = recorded(pending, |p, _| PodView::from_pod(p));
        let (go_pods, go) = recorded(go, |p, _| PodView::from_pod(p));
        let mut node_triggers = tee(node_stream.boxed(), n, changes).into_iter();
        let mut job_triggers = tee(job_events.touched_objects().boxed(), n, changes).into_iter();
        let pod_stream = futures::stream::select(pod_triggers(pending), pod_triggers(go));
        let mut pod_triggers = tee(pod_stream.boxed(), n, changes).into_iter();
        let mut out = Vec::new();
        for &api in apis {
            let (configmaps, cm_events) = owned_watch(
                Api::<ConfigMap>::namespaced(client.clone(), namespace),
                &api.local(schema::NAME_LABEL),
                prune_meta,
            );
            let (policies, policy_stream) = policy_watch(client, api);
            let (skyhooks, sk_stream) = skyhook_watch(client, api, selector.clone());
            let (Some(nodes_t), Some(jobs_t), Some(pods_t)) = (
                node_triggers.next(),
                job_triggers.next(),
                pod_triggers.next(),
            ) else {
                break;
            };
            let triggers = Triggers {
                skyhooks: sk_stream.boxed(),
                nodes: nodes_t,
                jobs: jobs_t,
                pods: pods_t,
                configmaps: cm_events.touched_objects().boxed(),
                policies: policy_stream.boxed(),
            };
            let caches = Caches {
                api,
                skyhooks,
                nodes: nodes.clone(),
                jobs: jobs.clone(),
                pods: pods.clone(),
                go_pods: go_pods.clone(),
                policies,
                configmaps,
            };
            out.push((caches, triggers));
        }
        out
    }

    /// Resolves once every cache holds its first list.
    pub async fn filled(&self) {
        self.nodes.wait_until_ready().await;
        self.jobs.wait_until_ready().await;
        self.pods.wait_until_ready().await;
        self.go_pods.wait_until_ready().await;
        let _ = self.policies.wait_until_ready().await;
        let _ = self.configmaps.wait_until_ready().await;
    }
}

/// The object of `api` an object of ours belongs to, by its name label under that API's prefix.
pub fn owner_of<K: Resource>(api: schema::Api, o: &K) -> Option<ObjectRef<Skyhook>> {
    o.meta()
        .labels
        .as_ref()?
        .get(api.local(schema::NAME_LABEL).as_ref())
        .map(|n| ObjectRef::new(n))
}

/// A node event concerns every Skyhook that selects the node.
pub fn skyhooks_selecting(skyhooks: &Store<Skyhook>, node: &Node) -> Vec<ObjectRef<Skyhook>> {
    skyhooks
        .state()
        .iter()
        .filter(|sk| {
            Selector::try_from(sk.spec.node_selectors.clone())
                .is_ok_and(|s| s.matches(node.labels()))
        })
        .map(|sk| ObjectRef::from(sk.as_ref()))
        .collect()
}

/// A DeploymentPolicy event concerns every Skyhook that names the policy.
pub fn skyhooks_using(
    skyhooks: &Store<Skyhook>,
    policy: &DeploymentPolicy,
) -> Vec<ObjectRef<Skyhook>> {
    let name = policy.name_any();
    skyhooks
        .state()
        .iter()
        .filter(|sk| sk.spec.deployment_policy.as_deref() == Some(name.as_str()))
        .map(|sk| ObjectRef::from(sk.as_ref()))
        .collect()
}
