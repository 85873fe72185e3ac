//! Reading an alert gate's source: Prometheus's `/api/v1/alerts` or Alertmanager's
//! `/api/v2/alerts`, with the credentials of a Secret, each source read at most every
//! [`FRESH`] however many Skyhooks and passes ask (passes come every few seconds).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use http::Method;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use serde_json::Value;

use super::http::{Call, Outbound};
use crate::crd::{AlertApi, AlertGate};
use crate::plan::alerts::AlertReading;

/// How long one reading of a source serves.
pub const FRESH: Duration = Duration::from_secs(10);
/// How long a source has to answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);

type Key = (String, AlertApi, Option<String>);

/// The operator's alert sources, each with its last reading.
pub struct AlertSources {
    http: Outbound,
    last: Mutex<HashMap<Key, (Instant, AlertReading)>>,
}

impl AlertSources {
    pub fn new(http: Outbound) -> AlertSources {
        AlertSources {
            http,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// The gate's source as last read, read again when older than [`FRESH`].
    pub async fn read(&self, client: &Client, namespace: &str, gate: &AlertGate) -> AlertReading {
        let api = gate.api.unwrap_or_default();
        let key: Key = (gate.url.clone(), api, gate.credentials_secret.clone());
        if let Ok(last) = self.last.lock()
            && let Some((at, reading)) = last.get(&key)
            && at.elapsed() < FRESH
        {
            return reading.clone();
        }
        let reading = match self.fetch(client, namespace, gate, api).await {
            Ok(alerts) => AlertReading::Firing(alerts),
            Err(why) => AlertReading::Unreachable(why),
        };
        if let Ok(mut last) = self.last.lock() {
            last.retain(|_, (at, _)| at.elapsed() < FRESH * 6);
            last.insert(key, (Instant::now(), reading.clone()));
        }
        reading
    }

    async fn fetch(
        &self,
        client: &Client,
        namespace: &str,
        gate: &AlertGate,
        api: AlertApi,
    ) -> Result<Vec<BTreeMap<String, String>>, String> {
        let mut headers = vec![("accept".to_string(), "application/json".to_string())];
        if let Some(secret) = &gate.credentials_secret {
            headers.push(authorization(client, namespace, secret).await?);
        }
        let base = gate.url.trim_end_matches('/');
        let url = match api {
            AlertApi::Prometheus => format!("{base}/api/v1/alerts"),
            AlertApi::Alertmanager => {
                format!("{base}/api/v2/alerts?active=true&silenced=false&inhibited=false")
            }
        };
        let call = Call {
            method: Method::GET,
            url: &url,
            headers: &headers,
            body: Vec::new(),
            timeout: TIMEOUT,
        };
        let (status, body) = self.http.send(call).await.map_err(|e| e.to_string())?;
        if !(200..300).contains(&status) {
            let excerpt: String = String::from_utf8_lossy(&body).chars().take(200).collect();
            return Err(format!("HTTP {status} from {url}: {excerpt}"));
        }
        let json: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("the answer of {url} is not JSON: {e}"))?;
        firing(api, &json).ok_or_else(|| format!("the answer of {url} has no alert list"))
    }
}

/// The `authorization` header from the Secret: `token`, or `username` and `password`.
async fn authorization(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(String, String), String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets.get(name).await.map_err(|e| {
        format!("reading Secret {namespace}/{name} (alertGate.credentialsSecret): {e}")
    })?;
    let data = secret.data.unwrap_or_default();
    let text = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).trim().to_string())
    };
    if let Some(token) = text("token") {
        return Ok(("authorization".into(), format!("Bearer {token}")));
    }
    match (text("username"), text("password")) {
        (Some(u), Some(p)) => {
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            Ok(("authorization".into(), format!("Basic {basic}")))
        }
        _ => Err(format!(
            "Secret {namespace}/{name} (alertGate.credentialsSecret) has neither key token nor keys username and password"
        )),
    }
}

/// The firing alerts of an answer, each as its labels.
fn firing(api: AlertApi, json: &Value) -> Option<Vec<BTreeMap<String, String>>> {
    let list = match api {
        AlertApi::Prometheus => json.get("data")?.get("alerts")?.as_array()?,
        AlertApi::Alertmanager => json.as_array()?,
    };
    let is_firing = |a: &Value| match api {
        AlertApi::Prometheus => a.get("state").and_then(Value::as_str) == Some("firing"),
        AlertApi::Alertmanager => {
            a.get("status")
                .and_then(|s| s.get("state"))
                .and_then(Value::as_str)
                == Some("active")
        }
    };
    Some(
        list.iter()
            .filter(|a| is_firing(a))
            .map(|a| {
                let labels = a.get("labels").and_then(Value::as_object);
                labels
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn firing_alerts_are_read_from_both_apis() {
        let prom = json!({"status": "success", "data": {"alerts": [
            {"labels": {"alertname": "A", "severity": "critical"}, "state": "firing"},
            {"labels": {"alertname": "B"}, "state": "pending"}]}});
        let got = firing(AlertApi::Prometheus, &prom).expect("alerts");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["alertname"], "A");
        let am = json!([
            {"labels": {"alertname": "C"}, "status": {"state": "active"}},
            {"labels": {"alertname": "D"}, "status": {"state": "suppressed"}}]);
        let got = firing(AlertApi::Alertmanager, &am).expect("alerts");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["alertname"], "C");
        assert!(firing(AlertApi::Prometheus, &json!({"status": "error"})).is_none());
    }
}
