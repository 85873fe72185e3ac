//! What can end a pass or the operator, each with what to do about it.

use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("SERVE_APIS names no API to reconcile; set it to skyhook, nodewright or both")]
    NoApis,
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot encode an object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the watch caches did not fill within {0:?}; is the API server reachable?")]
    NotReady(Duration),
    #[error("cannot load kubeconfig {0}: {1}")]
    Kubeconfig(String, String),
    #[error("SKYHOOK_SELECTOR {0:?} was refused by the API server: {1}")]
    Selector(String, kube::Error),
    #[error(
        "the API server does not serve {0} after {1:?}: install the CRDs (kubectl apply -f \
         deploy/crds/) and start the operator again, or leave its API out of SERVE_APIS"
    )]
    CrdMissing(String, Duration),
    #[error(
        "the API server refused to list Skyhooks ({0}): grant the operator's ServiceAccount the \
         ClusterRole in deploy/rbac-operator.yaml"
    )]
    Forbidden(String),
    #[error("{0}")]
    JobNameTaken(String),
    #[error("{0}")]
    Outbox(String),
    #[error("cannot prepare outbound HTTP: {0}")]
    Outbound(#[from] super::outbound::http::OutboundError),
    #[error("leadership lost ({0}); exiting so that the new leader works alone")]
    LostLeadership(String),
    #[error("cannot serve {what} on {addr}: {source}")]
    Serve {
        what: &'static str,
        addr: String,
        source: std::io::Error,
    },
}
