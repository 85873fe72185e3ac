//! Reading an alert gate's source: Prometheus's `/api/v1/alerts` or Alertmanager's
//! `/api/v2/alerts`, with the credentials of a Secret.
//!
//! The sources are read beside the passes, by a task of their own, each at most every
//! [`FRESH`] however many Skyhooks name it: a pass only reads the last answer and its age, so a
//! source that never answers costs the passes nothing (passes run one at a time; reading inside
//! them cost every Skyhook up to [`TIMEOUT`] per pass). An answer older than [`STALE`] counts as
//! no answer: the gate treats the source as unreachable.
//!
//! Whoever may write a DeploymentPolicy chooses the URL, so the operator guards where it sends
//! (see [`Egress`]): credentials only over https unless a setting allows http, never to a
//! link-local or cloud-metadata address (checked after DNS resolution, in the HTTP client),
//! only to the allowed hosts when a list is set; and what it reports back is the HTTP status and
//! the host, never the answer's body.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use http::Method;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use serde_json::Value;

use super::http::{Call, Outbound};
use crate::crd::{AlertApi, AlertGate};
use crate::plan::alerts::AlertReading;
pub use crate::settings::AlertEgress as Egress;

/// How long one reading of a source serves.
pub const FRESH: Duration = Duration::from_secs(10);
/// How long a source has to answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// A reading older than this is no reading (the reader fell behind, or stopped).
pub const STALE: Duration = Duration::from_secs(25);
/// A source no pass asked about for this long is no longer read (longer than the default idle
/// interval of 10 minutes, so an idle Skyhook's gate is not read from scratch in its pass).
const FORGET: Duration = Duration::from_secs(15 * 60);
/// How often the reader looks for sources due.
const TICK: Duration = Duration::from_secs(1);

/// Why a request to `url` (with credentials or not) must not be sent; `None` when it may.
pub fn refuses(egress: &Egress, url: &str, credentials: bool) -> Option<String> {
    let uri: http::Uri = match url.parse() {
        Ok(u) => u,
        Err(_) => return Some("alertGate.url is not a valid URL".into()),
    };
    let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
    if credentials && uri.scheme_str() != Some("https") && !egress.http_credentials {
        return Some(format!(
            "credentials (alertGate.credentialsSecret) are sent only over https, and \
             alertGate.url for {host} is not https (the operator setting \
             ALERT_GATE_ALLOW_HTTP_CREDENTIALS=true allows http)"
        ));
    }
    if !egress.allowed_hosts.is_empty()
        && !egress.allowed_hosts.iter().any(|p| host_matches(p, host))
    {
        return Some(format!(
            "host {host} is not among the operator's allowed alert hosts \
             (ALERT_GATE_ALLOWED_HOSTS: {})",
            egress.allowed_hosts.join(", ")
        ));
    }
    None
}

/// `pattern` (an exact host, or `*.suffix` for any name under it) matches `host`, ignoring case.
fn host_matches(pattern: &str, host: &str) -> bool {
    let (p, h) = (pattern.to_ascii_lowercase(), host.to_ascii_lowercase());
    match p.strip_prefix("*.") {
        Some(suffix) => h.len() > suffix.len() && h.ends_with(&format!(".{suffix}")),
        None => p == h,
    }
}

/// `host[:port]` of a URL, for messages (its path and query may hold what a user would not
/// show, its body is never shown).
fn host_of(url: &str) -> String {
    url.parse::<http::Uri>()
        .ok()
        .and_then(|u| {
            u.authority()
                .map(|a| a.as_str().rsplit('@').next().unwrap_or("").to_owned())
        })
        .unwrap_or_else(|| "alertGate.url".into())
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    url: String,
    api: AlertApi,
    secret: Option<String>,
}

impl Key {
    fn of(gate: &AlertGate) -> Key {
        Key {
            url: gate.url.clone(),
            api: gate.api.unwrap_or_default(),
            secret: gate.credentials_secret.clone(),
        }
    }
}

/// One source: when a pass last asked about it, its last reading, whether a read is on its way.
struct Source {
    asked: Instant,
    reading: Option<(Instant, AlertReading)>,
    reading_now: bool,
}

/// The operator's alert sources, each with its last reading.
pub struct AlertSources {
    http: Outbound,
    egress: Egress,
    sources: Mutex<HashMap<Key, Source>>,
    /// A source asked about for the first time: read it without waiting for the tick.
    wake: tokio::sync::Notify,
    /// A reading was stored.
    updated: tokio::sync::Notify,
}

impl AlertSources {
    /// `http` must refuse link-local and cloud-metadata addresses ([`Outbound::guarded`]).
    pub fn new(http: Outbound, egress: Egress) -> AlertSources {
        AlertSources {
            http,
            egress,
            sources: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
            updated: tokio::sync::Notify::new(),
        }
    }

    /// What the gate's source said last. Only a source never read before is waited for (at
    /// most [`TIMEOUT`] and a second, once): the reader reads it beside the passes from now on.
    pub async fn read(&self, gate: &AlertGate) -> AlertReading {
        let deadline = tokio::time::Instant::now() + TIMEOUT + Duration::from_secs(1);
        loop {
            // Armed before the look, so a reading stored in between still wakes this.
            let updated = self.updated.notified();
            tokio::pin!(updated);
            updated.as_mut().enable();
            if let Some(reading) = self.last(gate) {
                return reading;
            }
            if tokio::time::timeout_at(deadline, updated).await.is_err() {
                return self.last(gate).unwrap_or_else(|| {
                    AlertReading::Unreachable(format!("no answer from {} yet", host_of(&gate.url)))
                });
            }
        }
    }

    /// The last reading of the gate's source (registered as asked about now); `None` before
    /// its first.
    fn last(&self, gate: &AlertGate) -> Option<AlertReading> {
        let Ok(mut sources) = self.sources.lock() else {
            return Some(AlertReading::Unreachable("the alert reader failed".into()));
        };
        let now = Instant::now();
        let source = sources.entry(Key::of(gate)).or_insert_with(|| Source {
            asked: now,
            reading: None,
            reading_now: false,
        });
        source.asked = now;
        match &source.reading {
            Some((at, reading)) if at.elapsed() <= STALE => Some(reading.clone()),
            Some((at, _)) => Some(AlertReading::Unreachable(format!(
                "no answer from {} for {}s (the operator reads it every {}s)",
                host_of(&gate.url),
                at.elapsed().as_secs(),
                FRESH.as_secs()
            ))),
            None => {
                self.wake.notify_one();
                None
            }
        }
    }

    /// Reads every source a pass asked about, each when its reading is older than [`FRESH`],
    /// each on a task of its own, until the operator stops.
    pub async fn run(self: Arc<Self>, client: Client, namespace: String) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                () = self.wake.notified() => {}
            }
            for key in self.due() {
                let (me, client, namespace) = (self.clone(), client.clone(), namespace.clone());
                tokio::spawn(async move {
                    let reading = match me.fetch(&client, &namespace, &key).await {
                        Ok(alerts) => AlertReading::Firing(alerts),
                        Err(why) => AlertReading::Unreachable(why),
                    };
                    if let Ok(mut sources) = me.sources.lock()
                        && let Some(s) = sources.get_mut(&key)
                    {
                        s.reading = Some((Instant::now(), reading));
                        s.reading_now = false;
                    }
                    me.updated.notify_waiters();
                });
            }
        }
    }

    /// The sources to read now (marked as being read); those nobody asked about lately go.
    fn due(&self) -> Vec<Key> {
        let Ok(mut sources) = self.sources.lock() else {
            return Vec::new();
        };
        sources.retain(|_, s| s.asked.elapsed() < FORGET);
        let mut due = Vec::new();
        for (key, s) in sources.iter_mut() {
            let old = s
                .reading
                .as_ref()
                .is_none_or(|(at, _)| at.elapsed() >= FRESH);
            if old && !s.reading_now {
                s.reading_now = true;
                due.push(key.clone());
            }
        }
        due
    }

    async fn fetch(
        &self,
        client: &Client,
        namespace: &str,
        key: &Key,
    ) -> Result<Vec<BTreeMap<String, String>>, String> {
        if let Some(why) = refuses(&self.egress, &key.url, key.secret.is_some()) {
            return Err(why);
        }
        let mut headers = vec![("accept".to_string(), "application/json".to_string())];
        if let Some(secret) = &key.secret {
            headers.push(authorization(client, namespace, secret).await?);
        }
        let base = key.url.trim_end_matches('/');
        let url = match key.api {
            AlertApi::Prometheus => format!("{base}/api/v1/alerts"),
            AlertApi::Alertmanager => {
                format!("{base}/api/v2/alerts?active=true&silenced=false&inhibited=false")
            }
        };
        let host = host_of(&url);
        let call = Call {
            method: Method::GET,
            url: &url,
            headers: &headers,
            body: Vec::new(),
            timeout: TIMEOUT,
        };
        let (status, body) = self
            .http
            .send(call)
            .await
            .map_err(|e| format!("{host}: {e}"))?;
        // The status and the host only: the body of an answer is whoever runs that URL's to
        // write, and the status and Events are read by whoever may read the Skyhook.
        if !(200..300).contains(&status) {
            return Err(format!("HTTP {status} from {host}"));
        }
        let json: Value = serde_json::from_slice(&body)
            .map_err(|_| format!("the answer from {host} is not JSON"))?;
        firing(key.api, &json).ok_or_else(|| format!("the answer from {host} has no alert list"))
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

    /// Issue 50, item 3: where credentials and requests may go.
    #[test]
    fn the_egress_rules_refuse_what_they_should() {
        let open = Egress::default();
        assert_eq!(refuses(&open, "http://prom:9090", false), None);
        let why = refuses(&open, "http://prom:9090", true).expect("credentials over http");
        assert!(why.contains("ALERT_GATE_ALLOW_HTTP_CREDENTIALS"), "{why}");
        assert_eq!(refuses(&open, "https://prom:9090", true), None);
        let http_ok = Egress {
            http_credentials: true,
            ..Egress::default()
        };
        assert_eq!(refuses(&http_ok, "http://prom:9090", true), None);
        let listed = Egress {
            allowed_hosts: vec!["prometheus.monitoring.svc".into(), "*.example.com".into()],
            ..Egress::default()
        };
        assert_eq!(
            refuses(&listed, "https://prometheus.monitoring.svc:9090", false),
            None
        );
        assert_eq!(refuses(&listed, "https://PROM.Example.com/", true), None);
        for refused in [
            "https://example.com",
            "https://evil.com/?x=.example.com",
            "http://169.254.169.254/latest",
            "https://prometheus.monitoring.svc.evil.com",
        ] {
            let why = refuses(&listed, refused, false).expect(refused);
            assert!(why.contains("ALERT_GATE_ALLOWED_HOSTS"), "{why}");
        }
        assert_eq!(host_of("https://u:p@prom:9090/api?q=1"), "prom:9090");
    }

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
