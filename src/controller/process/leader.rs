//! Leader election on a `coordination.k8s.io` Lease, read and written as controller-runtime's
//! `leases` lock does: the reference operator and this one take the same Lease
//! ([`schema::LEADER_LEASE_NAME`] in the operator namespace), so during a migration the two can
//! never lead at once.
//!
//! Fencing: a leader that has not renewed for `renew_deadline` stops (the reconcile loop is
//! dropped and the process exits). A candidate takes the Lease over only after the record has
//! not changed for `lease_duration` *by its own clock*, counted from when it first saw that
//! record, which is no earlier than the leader's last renewal. With `renew_deadline` shorter
//! than `lease_duration`, the old leader has stopped before anyone else starts (docs/ say more).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::controller::error::Error;
use crate::schema;
use crate::settings::LeaderTimings;

/// What a candidate does with the Lease as it reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No Lease yet: create it, holding it.
    Create,
    /// Nobody holds it, or its holder stopped renewing: take it over.
    TakeOver,
    /// It is already ours (a renewal).
    Keep,
    /// Someone else holds it and renews it.
    Wait,
}

/// The decision for `lease`, given for how long this process has seen the same record.
pub fn decide(lease: Option<&Lease>, me: &str, unchanged_for: Duration) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("");
    if holder == me {
        return Decision::Keep;
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let seconds = spec.and_then(|s| s.lease_duration_seconds).unwrap_or(15);
    let duration = Duration::from_secs(u64::try_from(seconds.max(1)).unwrap_or(15));
    if unchanged_for >= duration {
        Decision::TakeOver
    } else {
        Decision::Wait
    }
}

/// A unique identity: the pod name (or host name) and a per-process suffix, so that a restarted
/// pod never mistakes its predecessor's record for its own.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "skyhook-operator".to_string());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}_{:x}{:08x}", std::process::id(), nanos)
}

pub struct Elector {
    api: Api<Lease>,
    identity: String,
    timings: LeaderTimings,
    /// The last record seen (its resourceVersion) and when this process first saw it.
    observed: Option<(String, Instant)>,
}

impl Elector {
    pub fn new(client: Client, namespace: &str, identity: String, timings: LeaderTimings) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            identity,
            timings,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Returns once this process holds the Lease, with the moment the winning write was sent
    /// (the leader's clock for its renew deadline starts there, never later).
    pub async fn acquire(&mut self) -> Instant {
        info!(lease = schema::LEADER_LEASE_NAME, identity = %self.identity, "waiting to lead");
        loop {
            match self.try_acquire().await {
                Ok(Some(sent)) => {
                    info!(identity = %self.identity, "leading");
                    return sent;
                }
                Ok(None) => {}
                Err(e) => warn!(error = %e, "reading the leader Lease failed; retrying"),
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// `Some(send time of the winning write)` when this process now holds the Lease.
    async fn try_acquire(&mut self) -> Result<Option<Instant>, kube::Error> {
        let lease = self
            .bounded(self.api.get_opt(schema::LEADER_LEASE_NAME))
            .await?;
        let unchanged_for = self.observe(lease.as_ref());
        match decide(lease.as_ref(), &self.identity, unchanged_for) {
            Decision::Wait => Ok(None),
            Decision::Create => {
                let fresh = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(schema::LEADER_LEASE_NAME.to_string()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(0)),
                };
                let pp = PostParams::default();
                let sent = Instant::now();
                won(self.bounded(self.api.create(&pp, &fresh)).await, sent)
            }
            // Ours already (an earlier write of ours landed, though its answer did not): write
            // it again, so that the deadline counts from a send time we know.
            Decision::TakeOver | Decision::Keep => {
                let Some(mut lease) = lease else {
                    return Ok(None);
                };
                let spec = lease.spec.as_ref();
                let transitions = spec.and_then(|s| s.lease_transitions).unwrap_or(0);
                let ours =
                    spec.and_then(|s| s.holder_identity.as_deref()) == Some(self.identity.as_str());
                let transitions = if ours {
                    transitions
                } else {
                    transitions.saturating_add(1)
                };
                lease.spec = Some(self.spec(transitions));
                let name = lease.name_any();
                let pp = PostParams::default();
                let sent = Instant::now();
                won(
                    self.bounded(self.api.replace(&name, &pp, &lease)).await,
                    sent,
                )
            }
        }
    }

    /// Renews the Lease every `retry_period`; returns why leadership was lost: another holder,
    /// or no successful renewal within `renew_deadline` of the last successful write's send
    /// time (`since` for the write that won the Lease).
    pub async fn hold(&self, since: Instant) -> String {
        let lost = format!(
            "the leader Lease was not renewed within {:?}",
            self.timings.renew_deadline
        );
        let mut renewed = since;
        loop {
            let deadline = renewed + self.timings.renew_deadline;
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return lost,
                outcome = self.renew_once() => match outcome {
                    Ok(Some(sent)) => renewed = sent,
                    Ok(None) => return "another process holds the leader Lease".to_string(),
                    Err(e) => warn!(error = %e, "renewing the leader Lease failed; retrying"),
                },
            }
            let deadline = renewed + self.timings.renew_deadline;
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return lost,
                _ = tokio::time::sleep(self.timings.retry_period) => {}
            }
        }
    }

    /// `Ok(Some(send time of the renewing write))`, or `Ok(None)` when the Lease is someone
    /// else's.
    async fn renew_once(&self) -> Result<Option<Instant>, kube::Error> {
        let Some(mut lease) = self
            .bounded(self.api.get_opt(schema::LEADER_LEASE_NAME))
            .await?
        else {
            return Ok(None);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(None);
        }
        lease.spec = Some(LeaseSpec {
            renew_time: Some(MicroTime(Timestamp::now())),
            lease_duration_seconds: Some(self.duration_seconds()),
            ..spec
        });
        let name = lease.name_any();
        // A 409 (written meanwhile) is an error like any other: read again next round.
        let pp = PostParams::default();
        let sent = Instant::now();
        self.bounded(self.api.replace(&name, &pp, &lease))
            .await
            .map(|_| Some(sent))
    }

    /// On a clean shutdown: hand the Lease back so that a successor need not wait it out.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self
            .bounded(self.api.get_opt(schema::LEADER_LEASE_NAME))
            .await
        else {
            return;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..spec
        });
        let name = lease.name_any();
        let pp = PostParams::default();
        match self.bounded(self.api.replace(&name, &pp, &lease)).await {
            Ok(_) => info!("released the leader Lease"),
            Err(e) => warn!(error = %e, "could not release the leader Lease"),
        }
    }

    fn spec(&self, transitions: i32) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration_seconds()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.timings.lease_duration.as_secs().max(1)).unwrap_or(15)
    }

    /// For how long the current record has been seen unchanged.
    fn observe(&mut self, lease: Option<&Lease>) -> Duration {
        let version = lease.and_then(|l| l.resource_version()).unwrap_or_default();
        match &self.observed {
            Some((seen, since)) if *seen == version => since.elapsed(),
            _ => {
                self.observed = Some((version, Instant::now()));
                Duration::ZERO
            }
        }
    }

    /// A request that cannot outlive a renewal round.
    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        match tokio::time::timeout(self.timings.retry_period, request).await {
            Ok(r) => r,
            Err(_) => Err(kube::Error::Service(
                format!("no answer within {:?}", self.timings.retry_period).into(),
            )),
        }
    }
}

/// Who may reconcile: this process alone (no leader election), or this process as the leader.
pub enum Leadership {
    Alone,
    /// Leading since the winning write was sent at that instant.
    Leading(Box<Elector>, Instant),
}

/// With leader election on (`timings`), waits until this process leads, with `standby` set
/// meanwhile; `None` when shut down first.
pub async fn lead(
    timings: Option<LeaderTimings>,
    namespace: &str,
    standby: &AtomicBool,
    client: &Client,
    shutdown: impl std::future::Future<Output = ()>,
) -> Option<Leadership> {
    let Some(timings) = timings else {
        return Some(Leadership::Alone);
    };
    let mut elector = Elector::new(client.clone(), namespace, identity(), timings);
    standby.store(true, Ordering::Relaxed);
    let since = tokio::select! {
        since = elector.acquire() => since,
        _ = shutdown => return None,
    };
    standby.store(false, Ordering::Relaxed);
    Some(Leadership::Leading(Box::new(elector), since))
}

/// Runs the reconcile loop; a leader that loses its Lease drops the loop at once (no write
/// after that) and reports it, and one that shuts down cleanly hands the Lease back.
pub async fn supervise(
    reconciling: impl std::future::Future<Output = ()>,
    leadership: Leadership,
) -> Result<(), Error> {
    match leadership {
        Leadership::Alone => reconciling.await,
        Leadership::Leading(e, since) => {
            // Renewal runs in a task of its own, so a long pass never delays its deadline.
            let e: std::sync::Arc<Elector> = std::sync::Arc::from(e);
            let mut holding = tokio::spawn({
                let e = e.clone();
                async move { e.hold(since).await }
            });
            tokio::select! {
                _ = reconciling => {
                    holding.abort();
                    e.release().await;
                }
                why = &mut holding => {
                    let why = why.unwrap_or_else(|err| format!("the renewal task ended: {err}"));
                    return Err(Error::LostLeadership(why));
                }
            }
        }
    }
    Ok(())
}

/// A write that won the Lease (sent at `sent`); a 409 means another candidate won the race: not
/// leading, not an error.
fn won<T>(res: Result<T, kube::Error>, sent: Instant) -> Result<Option<Instant>, kube::Error> {
    match res {
        Ok(_) => Ok(Some(sent)),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, seconds: Option<i32>) -> Lease {
        Lease {
            metadata: Default::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: seconds,
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn decision_table() {
        let s = Duration::from_secs;
        let cases = [
            ("no lease", None, s(0), Decision::Create),
            (
                "ours",
                Some(lease(Some("me"), Some(15))),
                s(0),
                Decision::Keep,
            ),
            (
                "ours, long unchanged",
                Some(lease(Some("me"), Some(15))),
                s(99),
                Decision::Keep,
            ),
            (
                "released",
                Some(lease(None, Some(15))),
                s(0),
                Decision::TakeOver,
            ),
            (
                "released (empty)",
                Some(lease(Some(""), Some(15))),
                s(0),
                Decision::TakeOver,
            ),
            (
                "held, fresh",
                Some(lease(Some("other"), Some(15))),
                s(3),
                Decision::Wait,
            ),
            (
                "held, just short",
                Some(lease(Some("other"), Some(15))),
                s(14),
                Decision::Wait,
            ),
            (
                "held, expired",
                Some(lease(Some("other"), Some(15))),
                s(15),
                Decision::TakeOver,
            ),
            (
                "held, record's own duration",
                Some(lease(Some("other"), Some(60))),
                s(30),
                Decision::Wait,
            ),
            (
                "held, no duration: 15 s",
                Some(lease(Some("other"), None)),
                s(16),
                Decision::TakeOver,
            ),
            (
                "held, zero duration reads as 1 s",
                Some(lease(Some("other"), Some(0))),
                s(1),
                Decision::TakeOver,
            ),
        ];
        for (name, l, unchanged, want) in cases {
            assert_eq!(decide(l.as_ref(), "me", unchanged), want, "case: {name}");
        }
    }

    #[test]
    fn identities_differ_between_processes_of_one_pod() {
        let a = identity();
        std::thread::sleep(Duration::from_millis(2));
        let b = identity();
        assert_ne!(a, b);
    }
}
