//! Counts every request the operator's client sends, by verb, resource and response class, as
//! `skyhook_api_requests_total`. Counted below kube's API layer, so retries, watches and the
//! executor's writes are all seen exactly as the API server sees them: SREs can size the
//! operator's load, and the suite asserts a bound on writes per stage.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request, Response};

use crate::metrics::{API_REQUESTS, ApiRequests, RequestLabels};

/// The Kubernetes verb and resource of a request, from its method, path and query.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> (String, String) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match parts.first() {
        Some(&"api") => parts.get(2..).unwrap_or_default(),
        Some(&"apis") => parts.get(3..).unwrap_or_default(),
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => (path.to_string(), false),
        [r] => (r.to_string(), false),
        [r, _] => (r.to_string(), true),
        [r, _, sub, ..] => (format!("{r}/{sub}"), true),
    };
    let watching =
        query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        Method::GET if watching => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb.to_string(), resource)
}

/// Whether a verb changes anything.
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// The tower layer that counts.
#[derive(Clone)]
pub struct CountLayer {
    pub requests: ApiRequests,
}

impl CountLayer {
    /// Counting into [`API_REQUESTS`].
    pub fn global() -> Self {
        CountLayer {
            requests: API_REQUESTS.clone(),
        }
    }
}

impl<S> tower_layer::Layer<S> for CountLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            requests: self.requests.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    requests: ApiRequests,
}

impl<S, B, R> tower_service::Service<Request<B>> for Counted<S>
where
    S: tower_service::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri().path(), req.uri().query());
        let requests = self.requests.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            let code = match &res {
                Ok(r) => format!("{}xx", r.status().as_u16() / 100),
                Err(_) => "error".to_string(),
            };
            requests
                .get_or_create(&RequestLabels {
                    verb,
                    resource,
                    code,
                })
                .inc();
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_like_the_api_server_audit_log() {
        let cases: &[(&str, Method, &str, Option<&str>, &str, &str)] = &[
            (
                "list nodes",
                Method::GET,
                "/api/v1/nodes",
                None,
                "list",
                "nodes",
            ),
            (
                "watch nodes",
                Method::GET,
                "/api/v1/nodes",
                Some("watch=true&resourceVersion=1"),
                "watch",
                "nodes",
            ),
            (
                "get node",
                Method::GET,
                "/api/v1/nodes/n1",
                None,
                "get",
                "nodes",
            ),
            (
                "patch node",
                Method::PATCH,
                "/api/v1/nodes/n1",
                None,
                "patch",
                "nodes",
            ),
            (
                "patch node status",
                Method::PATCH,
                "/api/v1/nodes/n1/status",
                None,
                "patch",
                "nodes/status",
            ),
            (
                "create job",
                Method::POST,
                "/apis/batch/v1/namespaces/skyhook/jobs",
                None,
                "create",
                "jobs",
            ),
            (
                "delete job",
                Method::DELETE,
                "/apis/batch/v1/namespaces/skyhook/jobs/j",
                None,
                "delete",
                "jobs",
            ),
            (
                "delete jobs",
                Method::DELETE,
                "/apis/batch/v1/namespaces/skyhook/jobs",
                Some("labelSelector=a"),
                "deletecollection",
                "jobs",
            ),
            (
                "replace status",
                Method::PUT,
                "/apis/skyhook.nvidia.com/v1alpha1/skyhooks/s/status",
                None,
                "update",
                "skyhooks/status",
            ),
            (
                "evict",
                Method::POST,
                "/api/v1/namespaces/apps/pods/p/eviction",
                None,
                "create",
                "pods/eviction",
            ),
            (
                "list all pods",
                Method::GET,
                "/api/v1/pods",
                Some("fieldSelector=spec.nodeName%3Dn1"),
                "list",
                "pods",
            ),
            (
                "events",
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/default/events",
                None,
                "create",
                "events",
            ),
        ];
        for (case, method, path, query, verb, resource) in cases {
            let got = classify(method, path, *query);
            assert_eq!(got, (verb.to_string(), resource.to_string()), "{case}");
        }
        assert!(is_write("patch") && !is_write("watch"));
    }
}
