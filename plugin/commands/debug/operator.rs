//! The operator piece of the archive: its Deployment, its pods' logs and a metrics snapshot.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, GetParams, ListParams};

use super::archive::Piece;
use super::{Collector, METRICS_SERVICE};
use crate::app::operator::find_operator;

impl Collector<'_> {
    /// The operator's Deployment, its pods' logs and a metrics snapshot.
    pub(super) async fn operator(&mut self) {
        let mut piece = self.start("operator");
        let ns = self.ns.clone();
        let deployments = match self.kube.deployments(&ns).await {
            Ok(d) => d,
            Err(e) => {
                piece.request_failed(format!("list deployments -n {ns}"), e);
                return self.finish(piece);
            }
        };
        let Some(deployment) = deployments
            .iter()
            .find(|d| find_operator(std::slice::from_ref(d), &ns).is_ok())
        else {
            piece.object_failed(
                format!("operator deployment in namespace {ns}"),
                format!("no operator Deployment found in namespace {ns:?}"),
            );
            return self.finish(piece);
        };
        self.add_yaml(&mut piece, "operator/deployment.yaml".into(), deployment);

        self.operator_logs(&mut piece, deployment).await;
        self.operator_metrics(&mut piece, deployment).await;
        self.finish(piece);
    }

    /// Logs of the operator Deployment's pods.
    async fn operator_logs(&mut self, piece: &mut Piece, deployment: &Deployment) {
        let ns = self.ns.clone();
        let selector = deployment
            .spec
            .as_ref()
            .and_then(|s| s.selector.match_labels.as_ref())
            .map(|labels| {
                labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.kube.client(), &ns);
        match pods.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => {
                self.archive_logs(piece, &list.items, "operator/logs", false)
                    .await
            }
            Err(e) => piece.request_failed(
                format!("list pods -n {ns} -l {selector}"),
                self.error(e, "listing the operator's pods"),
            ),
        }
    }

    /// A metrics snapshot, when a replica is available to answer.
    async fn operator_metrics(&mut self, piece: &mut Piece, deployment: &Deployment) {
        let ns = self.ns.clone();
        // Through the API server's service proxy: works from outside the cluster network.
        let url = format!("/api/v1/namespaces/{ns}/services/{METRICS_SERVICE}/proxy");
        let request = format!("GET {url}/metrics");
        let available = deployment
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0);
        if available == 0 {
            // The API server keeps retrying a Service without endpoints for minutes.
            piece.request_failed(
                request,
                "skipped: the operator Deployment has no available replicas",
            );
            return;
        }
        let result = match kube::core::Request::new(&url).get("metrics", &GetParams::default()) {
            Ok(req) => {
                let client = self.kube.client();
                let call = client.request_text(req);
                match tokio::time::timeout(self.timeout, call).await {
                    Ok(result) => result.map_err(|e| self.error(e, "getting operator metrics")),
                    Err(_) => Err(format!(
                        "getting operator metrics: no answer within {:?}",
                        self.timeout
                    )),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(text) => self.archive.add("operator/metrics.txt", text),
            Err(e) => piece.request_failed(request, e),
        }
    }
}
