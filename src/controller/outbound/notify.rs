//! Rollout notifications (issue 38): an outbox per Skyhook, a ConfigMap the pass appends to
//! before it writes the status, and a sender that delivers it to the targets of the Secret
//! `skyhook-notifications`, retrying with backoff.
//!
//! Exactly once, as far as an operator can: a pass that fails or dies after the outbox write
//! names the same notifications again (their ids are the Skyhook's uid, resourceVersion and the
//! change) and the outbox keeps one of each; what the sender delivered is recorded per target,
//! so a restart or a new leader sends only what is left. The sender runs beside the passes and
//! never holds one: a receiver that fails delays its own messages, nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use http::Method;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, Resource};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tracing::{info, warn};

use super::http::{Call, Outbound};
use crate::controller::error::Error;
use crate::crd::Skyhook;
use crate::plan::notify::{Kind, Notification};
use crate::schema;

const OUTBOX_KEY: &str = schema::NOTIFICATIONS_OUTBOX_KEY;
const TARGETS_KEY: &str = schema::NOTIFICATIONS_TARGETS_KEY;
/// How often the sender looks at the outboxes.
const TICK: Duration = Duration::from_secs(1);
/// How long one delivery may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between two attempts at one target.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Delivered entries are kept this long (then forgotten), undelivered ones at most this long.
const KEEP_SENT: Duration = Duration::from_secs(3600);
const GIVE_UP: Duration = Duration::from_secs(24 * 3600);
/// Most entries an outbox keeps: past it the oldest delivered go first, then the oldest
/// undelivered (a ConfigMap holds at most 1 MiB; an entry is well under 1 KiB).
const MAX_ENTRIES: usize = 500;

/// One notification in the outbox, with its delivery so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub notification: Notification,
    /// Targets it reached.
    #[serde(default)]
    pub sent_to: Vec<String>,
    /// Failed attempts per target, and when each target may be tried again.
    #[serde(default)]
    pub attempts: BTreeMap<String, u32>,
    #[serde(default)]
    pub next_at: BTreeMap<String, String>,
    /// Every target reached (or none wanted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_at: Option<String>,
}

/// A webhook target of the Secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub name: String,
    pub url: String,
    /// `json` (default): the notification as JSON; `slack`: `{"text": ...}`.
    #[serde(default)]
    pub format: Format,
    /// Only these kinds; all when empty.
    #[serde(default)]
    pub events: Vec<Kind>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Json,
    Slack,
}

impl Target {
    fn wants(&self, kind: Kind) -> bool {
        self.events.is_empty() || self.events.contains(&kind)
    }

    fn body(&self, n: &Notification) -> Vec<u8> {
        let value = match self.format {
            Format::Json => json!(n),
            Format::Slack => json!({"text": n.message}),
        };
        serde_json::to_vec(&value).unwrap_or_default()
    }
}

/// Adds the notifications not yet in the outbox; `true` when anything was added.
pub fn merge(outbox: &mut Vec<Entry>, new: &[Notification]) -> bool {
    let added = add(outbox, new);
    while outbox.len() > MAX_ENTRIES {
        let oldest_done = outbox.iter().position(|e| e.done_at.is_some());
        let dropped = outbox.remove(oldest_done.unwrap_or(0));
        if dropped.done_at.is_none() {
            warn!(id = %dropped.notification.id, "notification outbox full: the oldest undelivered notification is dropped");
        }
    }
    added
}

fn add(outbox: &mut Vec<Entry>, new: &[Notification]) -> bool {
    let mut added = false;
    for n in new {
        if outbox.iter().all(|e| e.notification.id != n.id) {
            outbox.push(Entry {
                notification: n.clone(),
                sent_to: Vec::new(),
                attempts: BTreeMap::new(),
                next_at: BTreeMap::new(),
                done_at: None,
            });
            added = true;
        }
    }
    added
}

/// 1 s after the first failure, doubling, at most [`MAX_BACKOFF`].
fn backoff(failures: u32) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(5);
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

fn read_outbox(cm: &ConfigMap) -> Vec<Entry> {
    cm.data
        .as_ref()
        .and_then(|d| d.get(OUTBOX_KEY))
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

fn outbox_data(entries: &[Entry]) -> BTreeMap<String, String> {
    let text = serde_json::to_string(entries).unwrap_or_else(|_| "[]".into());
    BTreeMap::from([(OUTBOX_KEY.to_string(), text)])
}

/// Appends a pass's notifications to the Skyhook's outbox, creating it when absent. An error
/// stops the pass before its status write, so nothing it would announce goes unannounced.
pub async fn append(
    client: &Client,
    namespace: &str,
    api: schema::Api,
    sk: &Skyhook,
    new: &[Notification],
) -> Result<(), Error> {
    if new.is_empty() {
        return Ok(());
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let sk_name = sk.meta().name.clone().unwrap_or_default();
    let name = schema::notifications_configmap_name_in(api, &sk_name);
    let mut owner = sk.controller_owner_ref(&());
    if let Some(o) = owner.as_mut() {
        o.api_version = api.api_version().to_string();
        o.kind = api.kind().to_string();
    }
    for _ in 0..5 {
        match cms.get_opt(&name).await? {
            Some(mut cm) => {
                let mut outbox = read_outbox(&cm);
                if !merge(&mut outbox, new) {
                    return Ok(());
                }
                cm.data = Some(outbox_data(&outbox));
                match cms.replace(&name, &PostParams::default(), &cm).await {
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    other => return Ok(other.map(|_| ())?),
                }
            }
            None => {
                let mut outbox = Vec::new();
                merge(&mut outbox, new);
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.to_string()),
                        labels: Some(BTreeMap::from([(
                            schema::NOTIFICATIONS_LABEL.to_string(),
                            schema::label_value(&sk_name),
                        )])),
                        owner_references: owner.clone().map(|r| vec![r]),
                        ..Default::default()
                    },
                    data: Some(outbox_data(&outbox)),
                    ..Default::default()
                };
                match cms.create(&PostParams::default(), &cm).await {
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    other => return Ok(other.map(|_| ())?),
                }
            }
        }
    }
    Err(Error::Outbox(format!(
        "the notification outbox {namespace}/{name} kept changing under the write"
    )))
}

/// Delivers the outboxes until the operator stops (only the leader runs it).
pub async fn run(client: Client, namespace: String, http: Outbound) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let cms: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let mut warned = None::<String>;
    loop {
        tokio::time::sleep(TICK).await;
        let targets = match targets(&secrets).await {
            Ok(t) => {
                warned = None;
                t
            }
            Err(why) => {
                if warned.as_deref() != Some(why.as_str()) {
                    warn!(%why, "notifications wait for their targets");
                    warned = Some(why);
                }
                continue;
            }
        };
        let lp = ListParams::default().labels(schema::NOTIFICATIONS_LABEL);
        let Ok(list) = cms.list(&lp).await else {
            continue;
        };
        for cm in list.items {
            deliver(&cms, &http, &targets, cm).await;
        }
    }
}

/// The targets of the Secret.
async fn targets(secrets: &Api<Secret>) -> Result<Vec<Target>, String> {
    let name = schema::NOTIFICATIONS_SECRET;
    let secret = secrets
        .get(name)
        .await
        .map_err(|e| format!("reading Secret {name}: {e}"))?;
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get(TARGETS_KEY))
        .map(|v| String::from_utf8_lossy(&v.0).to_string())
        .ok_or_else(|| format!("Secret {name} has no key {TARGETS_KEY}"))?;
    let targets: Vec<Target> = serde_saphyr::from_str(&raw)
        .map_err(|e| format!("Secret {name} key {TARGETS_KEY}: {e}"))?;
    for t in &targets {
        let http = t.url.starts_with("http://") || t.url.starts_with("https://");
        if !http || t.url.parse::<http::Uri>().is_err() {
            return Err(format!(
                "Secret {name} key {TARGETS_KEY}: target {:?}: url {:?} is not an http:// or https:// URL",
                t.name, t.url
            ));
        }
    }
    Ok(targets)
}

/// One outbox: every entry due is sent to every target that wants it and has not had it; the
/// outcome written back (a conflict leaves it to the next tick, which sends only what is left).
async fn deliver(cms: &Api<ConfigMap>, http: &Outbound, targets: &[Target], mut cm: ConfigMap) {
    let mut outbox = read_outbox(&cm);
    let now = Timestamp::now();
    let before = outbox.clone();
    for e in outbox.iter_mut().filter(|e| e.done_at.is_none()) {
        for t in targets.iter().filter(|t| t.wants(e.notification.kind)) {
            if e.sent_to.contains(&t.name) {
                continue;
            }
            let due = e
                .next_at
                .get(&t.name)
                .and_then(|at| at.parse::<Timestamp>().ok())
                .is_none_or(|at| now >= at);
            if !due {
                continue;
            }
            let headers = [
                ("content-type".to_string(), "application/json".to_string()),
                (
                    schema::NOTIFICATION_ID_HEADER.to_string(),
                    e.notification.id.clone(),
                ),
            ];
            let call = Call {
                method: Method::POST,
                url: &t.url,
                headers: &headers,
                body: t.body(&e.notification),
                timeout: SEND_TIMEOUT,
            };
            match http.send(call).await {
                Ok((status, _)) if (200..300).contains(&status) => {
                    e.sent_to.push(t.name.clone());
                    e.attempts.remove(&t.name);
                    e.next_at.remove(&t.name);
                }
                outcome => {
                    let n = e.attempts.entry(t.name.clone()).or_default();
                    *n += 1;
                    let wait = jiff::SignedDuration::try_from(backoff(*n)).unwrap_or_default();
                    let at = now.checked_add(wait).unwrap_or(now);
                    e.next_at.insert(t.name.clone(), at.to_string());
                    let why = match outcome {
                        Ok((status, _)) => format!("HTTP {status}"),
                        Err(err) => err.to_string(),
                    };
                    info!(target = %t.name, id = %e.notification.id, %why, attempt = *n, "notification not delivered; retrying");
                }
            }
        }
        let all = targets
            .iter()
            .filter(|t| t.wants(e.notification.kind))
            .all(|t| e.sent_to.contains(&t.name));
        if all {
            e.done_at = Some(now.to_string());
        }
    }
    let age = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(|t| now.duration_since(t).unsigned_abs())
    };
    outbox.retain(|e| match age(&e.done_at) {
        Some(a) => a < KEEP_SENT,
        None => age(&Some(e.notification.time.clone())).is_none_or(|a| a < GIVE_UP),
    });
    if outbox == before {
        return;
    }
    cm.data = Some(outbox_data(&outbox));
    let name = cm.metadata.name.clone().unwrap_or_default();
    if let Err(e) = cms.replace(&name, &PostParams::default(), &cm).await {
        info!(outbox = %name, error = %e, "notification outbox not updated; the next round retries");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(id: &str) -> Notification {
        Notification {
            id: id.into(),
            skyhook: "sh".into(),
            kind: Kind::BatchStarted,
            compartment: None,
            node: None,
            message: "m".into(),
            time: "2026-11-28T10:00:00Z".into(),
        }
    }

    #[test]
    fn the_outbox_keeps_one_of_each_notification() {
        let mut outbox = Vec::new();
        assert!(merge(&mut outbox, &[note("a"), note("b")]));
        assert!(
            !merge(&mut outbox, &[note("a")]),
            "a repeated pass adds nothing"
        );
        assert_eq!(outbox.len(), 2);
        outbox[1].done_at = Some("2026-11-28T10:00:01Z".into());
        let more: Vec<Notification> = (0..MAX_ENTRIES).map(|i| note(&format!("x{i}"))).collect();
        merge(&mut outbox, &more);
        assert_eq!(outbox.len(), MAX_ENTRIES);
        assert!(
            outbox.iter().all(|e| e.notification.id != "b"),
            "the delivered one goes first"
        );
        assert!(
            outbox.iter().all(|e| e.notification.id != "a"),
            "then the oldest"
        );
    }

    #[test]
    fn retries_back_off_to_thirty_seconds() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn targets_read_from_yaml_and_slack_gets_text() {
        let raw = "- name: ops\n  url: http://x/hook\n  format: slack\n  events: [RolloutComplete]\n- name: all\n  url: http://y/\n";
        let t: Vec<Target> = serde_saphyr::from_str(raw).expect("targets");
        assert!(t[0].wants(Kind::RolloutComplete) && !t[0].wants(Kind::BatchStarted));
        assert!(t[1].wants(Kind::NodeErroring));
        let body: serde_json::Value = serde_json::from_slice(&t[0].body(&note("a"))).expect("json");
        assert_eq!(body, json!({"text": "m"}));
    }
}
