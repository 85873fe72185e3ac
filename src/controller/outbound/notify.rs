//! Rollout notifications (issue 38): an outbox per Skyhook, a ConfigMap the pass appends to
//! before it writes the status, and a sender that delivers it to the targets of the Secret
//! `skyhook-notifications`, retrying with backoff.
//!
//! Exactly once, as far as an operator can: a pass that fails or dies after the outbox write
//! names the same notifications again (their ids are the Skyhook's uid, resourceVersion and the
//! change) and the outbox keeps one of each. Each delivery is recorded as soon as it is answered,
//! under the outbox's resourceVersion (a conflict re-reads it and records again), so a restart, a
//! new leader or a concurrent write re-sends at most the one delivery in flight.
//!
//! Each target is served by a task of its own, one delivery at a time, each bounded by its own
//! timeout: a receiver that never answers delays its own messages and nothing else, neither
//! another target nor a pass. The outbox is bounded in bytes (the oldest go first, counted in
//! `skyhook_notifications_dropped_total`) and pruned whether or not the targets can be read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
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
/// Largest outbox, as stored: past it the oldest delivered entries go first, then the oldest
/// undelivered. A ConfigMap holds at most 1 MiB, and a pass's append must never meet that.
const MAX_BYTES: usize = 256 * 1024;

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

/// Adds the notifications not yet in the outbox, then bounds it to [`MAX_BYTES`]; `true` when
/// anything was added.
pub fn merge(outbox: &mut Vec<Entry>, new: &[Notification]) -> bool {
    let added = add(outbox, new);
    bound(outbox, MAX_BYTES);
    added
}

/// Drops the oldest delivered entries, then the oldest undelivered (counted), until the stored
/// outbox is at most `max` bytes.
fn bound(outbox: &mut Vec<Entry>, max: usize) {
    let size = |e: &Entry| serde_json::to_vec(e).map_or(0, |v| v.len()) + 1;
    let mut total = 1 + outbox.iter().map(size).sum::<usize>();
    while total > max && !outbox.is_empty() {
        let oldest_done = outbox.iter().position(|e| e.done_at.is_some());
        let dropped = outbox.remove(oldest_done.unwrap_or(0));
        total -= size(&dropped);
        if dropped.done_at.is_none() {
            dropped_undelivered("outbox_full", 1);
            warn!(id = %dropped.notification.id, "notification outbox full: the oldest undelivered notification is dropped");
        }
    }
}

fn dropped_undelivered(reason: &str, n: usize) {
    let labels = crate::metrics::DroppedLabels {
        reason: reason.to_owned(),
    };
    crate::metrics::NOTIFICATIONS_DROPPED
        .get_or_create(&labels)
        .inc_by(n as u64);
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

/// Appends a pass's notifications to the Skyhook's outbox, creating it when absent. A transient
/// error stops the pass before its status write, so nothing it would announce goes unannounced
/// (the pass repeats them under the same ids); a write refused for good (a policy, a quota)
/// drops them, counted and logged, and never holds the rollout.
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
                    other => return refused_for_good(other, &name, new),
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
                    other => return refused_for_good(other, &name, new),
                }
            }
        }
    }
    Err(Error::Outbox(format!(
        "the notification outbox {namespace}/{name} kept changing under the write"
    )))
}

/// The outcome of an outbox write: a refusal other than a conflict or throttling (a 4xx) drops
/// the pass's notifications; anything else is the pass's error.
fn refused_for_good<T>(
    outcome: Result<T, kube::Error>,
    name: &str,
    new: &[Notification],
) -> Result<(), Error> {
    match outcome {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if (400..500).contains(&e.code) && e.code != 429 => {
            dropped_undelivered("outbox_refused", new.len());
            warn!(outbox = %name, code = e.code, reason = %e.reason, message = %e.message,
                dropped = new.len(), "the notification outbox write was refused; these notifications are dropped");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Delivers the outboxes until the operator stops (only the leader runs it). Each tick prunes
/// every outbox and starts a delivery task for each (outbox, target) with something due and no
/// task running yet.
pub async fn run(client: Client, namespace: String, http: Outbound) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let cms: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let busy: Busy = Arc::default();
    // Owned here: when the operator stops leading and this future is dropped, its deliveries
    // stop with it.
    let mut deliveries = tokio::task::JoinSet::new();
    let mut warned = None::<String>;
    loop {
        tokio::time::sleep(TICK).await;
        while deliveries.try_join_next().is_some() {}
        let targets = match targets(&secrets).await {
            Ok(t) => {
                warned = None;
                Some(Arc::new(t))
            }
            Err(why) => {
                if warned.as_deref() != Some(why.as_str()) {
                    warn!(%why, "notifications wait for their targets");
                    warned = Some(why);
                }
                None
            }
        };
        let lp = ListParams::default().labels(schema::NOTIFICATIONS_LABEL);
        let Ok(list) = cms.list(&lp).await else {
            continue;
        };
        let now = Timestamp::now();
        for cm in list.items {
            let cm = prune(&cms, cm, targets.as_deref().map(Vec::as_slice), now).await;
            let Some(targets) = &targets else { continue };
            let outbox = read_outbox(&cm);
            let name = cm.metadata.name.clone().unwrap_or_default();
            for t in targets.iter() {
                let due = due_for(&outbox, t, now);
                if due.is_empty() || !claim(&busy, &name, &t.name) {
                    continue;
                }
                let task = Delivery {
                    cms: cms.clone(),
                    http: http.clone(),
                    target: t.clone(),
                    wanted_by: targets.clone(),
                    cm: cm.clone(),
                    busy: busy.clone(),
                };
                deliveries.spawn(task.run(due));
            }
        }
    }
}

/// The targets of the Secret. Nothing of the Secret's content is ever put in the error (it is
/// logged): a webhook URL is a credential, and a YAML error may quote the line it stopped at.
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
    parse_targets(&raw).map_err(|why| format!("Secret {name} key {TARGETS_KEY}: {why}"))
}

/// The targets as YAML (a list of name, url, format, events); the error names the problem and
/// where, never the text.
fn parse_targets(raw: &str) -> Result<Vec<Target>, String> {
    let targets: Vec<Target> = serde_saphyr::from_str(raw).map_err(|e| {
        let at = yaml_location(&e.to_string());
        format!(
            "not a YAML list of targets (name, url, format, events){at}; the content is not shown, \
             as it holds credentials"
        )
    })?;
    for (i, t) in targets.iter().enumerate() {
        let http = t.url.starts_with("http://") || t.url.starts_with("https://");
        if !http || t.url.parse::<http::Uri>().is_err() {
            return Err(format!(
                "target {} (item {}): its url is not an http:// or https:// URL (not shown, as \
                 it holds credentials)",
                shown_name(&t.name),
                i + 1
            ));
        }
    }
    Ok(targets)
}

/// A target's name in a message: short names as they are; anything long enough to be a pasted
/// URL or token is cut.
fn shown_name(name: &str) -> String {
    if name.len() <= 40 && !name.contains("://") {
        format!("{name:?}")
    } else {
        "(name not shown)".to_owned()
    }
}

/// ` at line L column C` from a YAML error's words, when they say where.
fn yaml_location(words: &str) -> String {
    let num_after = |key: &str| {
        let i = words.find(key)? + key.len();
        let digits: String = words[i..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        (!digits.is_empty()).then_some(digits)
    };
    match (num_after("line"), num_after("column")) {
        (Some(l), Some(c)) => format!(" at line {l} column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

/// The (outbox, target) pairs a delivery task is serving.
type Busy = Arc<Mutex<BTreeSet<(String, String)>>>;

fn claim(busy: &Busy, outbox: &str, target: &str) -> bool {
    busy.lock()
        .map(|mut b| b.insert((outbox.to_owned(), target.to_owned())))
        .unwrap_or(false)
}

/// The ids of the entries due for `t` now, oldest first.
fn due_for(outbox: &[Entry], t: &Target, now: Timestamp) -> Vec<String> {
    outbox
        .iter()
        .filter(|e| e.done_at.is_none() && t.wants(e.notification.kind))
        .filter(|e| !e.sent_to.contains(&t.name))
        .filter(|e| {
            e.next_at
                .get(&t.name)
                .and_then(|at| at.parse::<Timestamp>().ok())
                .is_none_or(|at| now >= at)
        })
        .map(|e| e.notification.id.clone())
        .collect()
}

/// The outbox with what is done marked (`targets`: when they could be read) and what is old
/// forgotten; written back when that changed it (a conflict leaves it to the next tick).
async fn prune(
    cms: &Api<ConfigMap>,
    mut cm: ConfigMap,
    targets: Option<&[Target]>,
    now: Timestamp,
) -> ConfigMap {
    let before = read_outbox(&cm);
    let mut outbox = before.clone();
    if let Some(targets) = targets {
        for e in &mut outbox {
            mark_done(e, targets, now);
        }
    }
    let age = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(|t| now.duration_since(t).unsigned_abs())
    };
    let mut expired = 0;
    outbox.retain(|e| match age(&e.done_at) {
        Some(a) => a < KEEP_SENT,
        None => {
            let keep = age(&Some(e.notification.time.clone())).is_none_or(|a| a < GIVE_UP);
            expired += usize::from(!keep);
            keep
        }
    });
    bound(&mut outbox, MAX_BYTES);
    if outbox == before {
        return cm;
    }
    if expired > 0 {
        dropped_undelivered("expired", expired);
    }
    cm.data = Some(outbox_data(&outbox));
    let name = cm.metadata.name.clone().unwrap_or_default();
    match cms.replace(&name, &PostParams::default(), &cm).await {
        Ok(written) => written,
        Err(e) => {
            info!(outbox = %name, error = %e, "notification outbox not pruned; the next tick retries");
            cm
        }
    }
}

/// Marks an entry done once every target that wants it has had it.
fn mark_done(e: &mut Entry, targets: &[Target], now: Timestamp) {
    let all = targets
        .iter()
        .filter(|t| t.wants(e.notification.kind))
        .all(|t| e.sent_to.contains(&t.name));
    if all && e.done_at.is_none() {
        e.done_at = Some(now.to_string());
    }
}

/// What one target's answer to one notification did.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Delivered,
    Failed,
}

/// One target's deliveries from one outbox: sent one after the other, each recorded as soon as
/// it is answered; the first failure ends the task (the entry waits for its backoff).
struct Delivery {
    cms: Api<ConfigMap>,
    http: Outbound,
    target: Target,
    /// Every target, to tell when an entry is done.
    wanted_by: Arc<Vec<Target>>,
    /// The outbox as last read or written (its resourceVersion guards the next write).
    cm: ConfigMap,
    busy: Busy,
}

impl Delivery {
    async fn run(mut self, due: Vec<String>) {
        for id in due {
            let Some(n) = read_outbox(&self.cm)
                .into_iter()
                .find(|e| e.notification.id == id)
                .map(|e| e.notification)
            else {
                continue;
            };
            let answer = self.send(&n).await;
            let failed = answer == Answer::Failed;
            if let Err(e) = self.record(&id, answer).await {
                let name = self.cm.metadata.name.clone().unwrap_or_default();
                warn!(outbox = %name, target = %self.target.name, %id, error = %e,
                    "a notification's delivery could not be recorded; it may be sent again");
                break;
            }
            if failed {
                break;
            }
        }
        let name = self.cm.metadata.name.clone().unwrap_or_default();
        if let Ok(mut b) = self.busy.lock() {
            b.remove(&(name, self.target.name.clone()));
        }
    }

    async fn send(&self, n: &Notification) -> Answer {
        let t = &self.target;
        let headers = [
            ("content-type".to_string(), "application/json".to_string()),
            (schema::NOTIFICATION_ID_HEADER.to_string(), n.id.clone()),
        ];
        let call = Call {
            method: Method::POST,
            url: &t.url,
            headers: &headers,
            body: t.body(n),
            timeout: SEND_TIMEOUT,
        };
        match self.http.send(call).await {
            Ok((status, _)) if (200..300).contains(&status) => Answer::Delivered,
            outcome => {
                let why = match outcome {
                    Ok((status, _)) => format!("HTTP {status}"),
                    Err(err) => err.to_string(),
                };
                info!(target = %t.name, id = %n.id, %why, "notification not delivered; retrying");
                Answer::Failed
            }
        }
    }

    /// Records one answer in the outbox under its resourceVersion; a conflict re-reads it.
    async fn record(&mut self, id: &str, answer: Answer) -> Result<(), String> {
        let name = self.cm.metadata.name.clone().unwrap_or_default();
        for _ in 0..8 {
            let mut outbox = read_outbox(&self.cm);
            let now = Timestamp::now();
            let Some(e) = outbox.iter_mut().find(|e| e.notification.id == id) else {
                return Ok(());
            };
            apply(e, &self.target.name, &answer, now);
            mark_done(e, &self.wanted_by, now);
            self.cm.data = Some(outbox_data(&outbox));
            match self
                .cms
                .replace(&name, &PostParams::default(), &self.cm)
                .await
            {
                Ok(written) => {
                    self.cm = written;
                    return Ok(());
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    match self.cms.get_opt(&name).await.map_err(|e| e.to_string())? {
                        Some(fresh) => self.cm = fresh,
                        None => return Ok(()),
                    }
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Err(format!("outbox {name} kept changing under the write"))
    }
}

/// One answer on an entry: the target reached, or its failures counted and its next attempt
/// put off.
fn apply(e: &mut Entry, target: &str, answer: &Answer, now: Timestamp) {
    match answer {
        Answer::Delivered => {
            if !e.sent_to.iter().any(|t| t == target) {
                e.sent_to.push(target.to_owned());
            }
            e.attempts.remove(target);
            e.next_at.remove(target);
        }
        Answer::Failed => {
            let n = e.attempts.entry(target.to_owned()).or_default();
            *n += 1;
            let wait = jiff::SignedDuration::try_from(backoff(*n)).unwrap_or_default();
            let at = now.checked_add(wait).unwrap_or(now);
            e.next_at.insert(target.to_owned(), at.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::outbound::http::OutboundError;

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
    }

    /// The outbox is bounded by its stored size, not a count: long messages cannot push a
    /// ConfigMap past 1 MiB (which failed every pass). Delivered entries go first, then the
    /// oldest undelivered, counted.
    #[test]
    fn the_outbox_is_bounded_in_bytes_oldest_first() {
        let long = |id: &str| Notification {
            message: "x".repeat(4000),
            ..note(id)
        };
        let mut outbox = Vec::new();
        merge(&mut outbox, &[note("a"), note("b")]);
        outbox[1].done_at = Some("2026-11-28T10:00:01Z".into());
        let dropped = || {
            let l = crate::metrics::DroppedLabels {
                reason: "outbox_full".into(),
            };
            crate::metrics::NOTIFICATIONS_DROPPED
                .get_or_create(&l)
                .get()
        };
        let before = dropped();
        let more: Vec<Notification> = (0..300).map(|i| long(&format!("x{i}"))).collect();
        merge(&mut outbox, &more);
        let size = outbox_data(&outbox)[OUTBOX_KEY].len();
        assert!(size <= MAX_BYTES, "{size} bytes");
        assert!(
            size > MAX_BYTES - 5000,
            "{size} bytes: filled up to the bound"
        );
        let ids: Vec<&str> = outbox.iter().map(|e| e.notification.id.as_str()).collect();
        assert!(!ids.contains(&"b"), "the delivered one goes first");
        assert!(!ids.contains(&"a"), "then the oldest");
        assert_eq!(ids.last(), Some(&"x299"), "the newest stays");
        assert!(dropped() - before >= 2, "undelivered drops are counted");
    }

    /// Each answer is recorded on its own entry; a delivery recorded twice (a conflict re-read)
    /// stays one.
    #[test]
    fn an_answer_is_recorded_once_and_done_when_every_target_had_it() {
        let now: Timestamp = "2026-11-28T10:00:00Z".parse().expect("time");
        let targets: Vec<Target> =
            serde_saphyr::from_str("- name: a\n  url: http://a/\n- name: b\n  url: http://b/\n")
                .expect("targets");
        let mut outbox = Vec::new();
        merge(&mut outbox, &[note("n1")]);
        let e = &mut outbox[0];
        apply(e, "a", &Answer::Failed, now);
        assert_eq!(e.attempts["a"], 1);
        assert!(
            due_for(std::slice::from_ref(e), &targets[0], now).is_empty(),
            "backing off"
        );
        apply(e, "a", &Answer::Delivered, now);
        apply(e, "a", &Answer::Delivered, now);
        assert_eq!(e.sent_to, ["a"]);
        assert!(e.attempts.is_empty() && e.next_at.is_empty());
        mark_done(e, &targets, now);
        assert!(e.done_at.is_none(), "b has not had it");
        assert_eq!(due_for(std::slice::from_ref(e), &targets[1], now), ["n1"]);
        apply(e, "b", &Answer::Delivered, now);
        mark_done(e, &targets, now);
        assert!(e.done_at.is_some());
    }

    /// A target URL is a credential (a Slack or Teams webhook) and YAML errors quote lines:
    /// neither reaches the message that is logged.
    #[test]
    fn target_errors_never_quote_the_secret() {
        let planted = "https://hooks.slack.com/services/T000/B000/PLANTEDSECRET";
        let bad_url = format!("- name: ops\n  url: ftp{}\n", &planted[5..]);
        let why = parse_targets(&bad_url).expect_err("not http");
        assert!(why.contains("\"ops\"") && why.contains("item 1"), "{why}");
        assert!(!why.contains("PLANTEDSECRET"), "{why}");
        let bad_yaml = format!("- name: ops\n  url: {planted}\n  events: [PLANTEDSECRET\n");
        let why = parse_targets(&bad_yaml).expect_err("not YAML");
        assert!(
            !why.contains("PLANTEDSECRET") && !why.contains("hooks.slack"),
            "{why}"
        );
        let pasted = format!("- name: {planted}\n  url: nope\n");
        let why = parse_targets(&pasted).expect_err("not http");
        assert!(!why.contains("PLANTEDSECRET"), "{why}");
        assert!(
            !OutboundError::Url.to_string().contains("http"),
            "the client's URL error names no URL"
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
