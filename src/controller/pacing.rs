//! What one pass of a Skyhook leaves for its next: when it ended (passes are spaced), the
//! Skyhook as its status write stored it, and the writes that failed for good (the next pass's
//! status reports them).
//!
//! The Skyhook's own watch lags its status writes (the object holds every node's state, a few
//! hundred KiB at a thousand nodes). A pass that started from the cached copy meanwhile planned
//! from the status before last: its status write met a 409, and it announced again what the
//! last pass had announced. The copy the status write stored (the Skyhook sent, with the
//! resourceVersion of the answer) is as good as the watch's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::crd::Skyhook;

/// A pass reads the caches this long after it was asked for at the earliest: the Jobs of a
/// rollout finish in bursts, and one pass for a burst writes each node once where a pass per
/// Job would write it again and again. (Events that arrive while a pass waits or runs make one
/// more pass after it.)
pub const GATHER: Duration = Duration::from_millis(500);
/// Pacing of one Skyhook are at least this far apart: a burst of events (a pass's own writes
/// coming back through the watches) makes one pass, not many.
pub const MIN_GAP: Duration = Duration::from_millis(300);
/// ... and at most this far, however long the last pass took.
pub const MAX_GAP: Duration = Duration::from_secs(2);
/// A status write that took longer than this holds the next one back (see
/// [`Pacing::status_hold`]); a small Skyhook's status is written by every pass that changes it.
pub const SLOW_STATUS: Duration = Duration::from_millis(250);
/// The next status write waits this many times as long as the last one took ...
pub const STATUS_HOLD_FACTOR: u32 = 8;
/// ... and at most this long.
pub const MAX_STATUS_HOLD: Duration = Duration::from_secs(30);

struct Last {
    ended: Instant,
    took: Duration,
    stored: Option<Arc<Skyhook>>,
    /// When the last status write ended, and how long it took.
    status: Option<(Instant, Duration)>,
    /// The writes of the last pass that failed for good, one line each.
    write_failures: Vec<String>,
    /// The evictions of the last pass a PodDisruptionBudget refused.
    drain_blocks: Vec<crate::plan::inputs::DrainBlock>,
    /// Nodes whose patch was refused for good, with none going through since.
    refused_nodes: std::collections::BTreeSet<String>,
}

#[derive(Default)]
pub struct Pacing {
    last: Mutex<HashMap<String, Last>>,
    /// Nodes whose auto-taint was refused for good (upstream's D47): left out of every
    /// Skyhook until a retry of the taint succeeds. Kept in memory only: after a restart the
    /// first refusal leaves them out again.
    refused_auto_taints: Mutex<std::collections::BTreeSet<String>>,
    /// When each Skyhook's next pass was first asked for (since its last pass started).
    asked: Mutex<HashMap<String, Instant>>,
}

impl Pacing {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Last>> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn asked(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long a pass of `skyhook` asked for now must still wait, if at all: [`GATHER`] after
    /// it was first asked for, and the gap after its last pass (as long as that pass took,
    /// within [`MIN_GAP`]..[`MAX_GAP`]; a pass that writes for seconds on a busy API server is
    /// followed by a pause as long, which halves the passes and status writes of a rollout
    /// while a finished stage still waits at most a couple of seconds).
    ///
    /// The caller requeues for what is left rather than sleeping: passes run one at a time, and
    /// a pass that slept its wait inside the controller's only worker held every other
    /// Skyhook's passes back; with four Skyhooks busy, an unpaused one waited 12 s for its turn.
    pub fn wait_left(&self, skyhook: &str) -> Option<Duration> {
        let now = Instant::now();
        let asked = *self.asked().entry(skyhook.to_string()).or_insert(now);
        let last = self.lock().get(skyhook).map(|l| (l.ended, l.took));
        wait_left(now, asked, last)
    }

    /// The nodes left out of every Skyhook because their auto-taint was refused.
    pub fn refused_auto_taints(&self) -> std::collections::BTreeSet<String> {
        self.refused_auto_taints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What a pass's auto-taint patches met: `refused` nodes are left out, `tainted` ones
    /// come back.
    pub fn auto_taints(&self, refused: &[String], tainted: &[String]) {
        let mut set = self
            .refused_auto_taints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        set.extend(refused.iter().cloned());
        for n in tainted {
            set.remove(n);
        }
    }

    /// A pass of `skyhook` starts: what is asked from now on is asked of the next one.
    pub fn starting(&self, skyhook: &str) {
        self.asked().remove(skyhook);
    }

    /// The copy of `cached` to plan from: the one the last status write returned when the
    /// cache has not caught up with it yet.
    pub fn newest(&self, cached: Arc<Skyhook>) -> Arc<Skyhook> {
        let mut passes = self.lock();
        let Some(last) = passes.get_mut(&cached.name_any()) else {
            return cached;
        };
        match &last.stored {
            Some(stored) if newer(stored, &cached) => stored.clone(),
            _ => {
                last.stored = None;
                cached
            }
        }
    }

    /// A pass of `skyhook` that started at `started` ended; `stored` is the Skyhook its status
    /// replace returned, if it made one, and how long that replace took.
    pub fn ended(&self, skyhook: &str, started: Instant, stored: Option<(Skyhook, Duration)>) {
        let now = Instant::now();
        let mut passes = self.lock();
        let last = passes.entry(skyhook.to_string()).or_insert(Last {
            ended: now,
            took: Duration::ZERO,
            stored: None,
            status: None,
            write_failures: Vec::new(),
            drain_blocks: Vec::new(),
            refused_nodes: Default::default(),
        });
        last.ended = now;
        last.took = now - started;
        if let Some((stored, took)) = stored {
            last.stored = Some(Arc::new(stored));
            last.status = Some((now, took));
        }
    }

    /// How long a status write of `skyhook` should still wait, if at all. The status holds
    /// every node's state (about 1 MiB at a thousand nodes × four packages): the API server
    /// validates and stores all of it on every replace, a second or more each under load, and
    /// that work competes with the Job controller the rollout waits for. A slow replace
    /// therefore holds the next back for [`STATUS_HOLD_FACTOR`] times as long (at most
    /// [`MAX_STATUS_HOLD`]); node state, Jobs and node patches never wait for it.
    pub fn status_hold(&self, skyhook: &str) -> Option<Duration> {
        let (at, took) = self.lock().get(skyhook)?.status?;
        hold_left(at, took, Instant::now())
    }

    /// The writes of `skyhook`'s last pass that failed for good.
    pub fn write_failures(&self, skyhook: &str) -> Vec<String> {
        self.lock()
            .get(skyhook)
            .map(|l| l.write_failures.clone())
            .unwrap_or_default()
    }

    /// Keeps what the pass that just ended could not write (called after [`Pacing::ended`]).
    pub fn failed_writes(&self, skyhook: &str, failures: Vec<String>) {
        if let Some(last) = self.lock().get_mut(skyhook) {
            last.write_failures = failures;
        }
    }

    /// The nodes whose patches by `skyhook` were refused for good, none going through since.
    pub fn refused_nodes(&self, skyhook: &str) -> std::collections::BTreeSet<String> {
        self.lock()
            .get(skyhook)
            .map(|l| l.refused_nodes.clone())
            .unwrap_or_default()
    }

    /// What a pass's node patches met: `refused` nodes join the set, `patched` ones leave it.
    pub fn node_writes(
        &self,
        skyhook: &str,
        refused: &std::collections::BTreeSet<String>,
        patched: &std::collections::BTreeSet<String>,
    ) {
        if let Some(last) = self.lock().get_mut(skyhook) {
            last.refused_nodes.extend(refused.iter().cloned());
            last.refused_nodes.retain(|n| !patched.contains(n));
        }
    }

    /// The evictions of `skyhook`'s last pass that a PodDisruptionBudget refused.
    pub fn drain_blocks(&self, skyhook: &str) -> Vec<crate::plan::inputs::DrainBlock> {
        self.lock()
            .get(skyhook)
            .map(|l| l.drain_blocks.clone())
            .unwrap_or_default()
    }

    /// Keeps the evictions refused in the pass that just ended (after [`Pacing::ended`]).
    pub fn blocked_drains(&self, skyhook: &str, blocks: Vec<crate::plan::inputs::DrainBlock>) {
        if let Some(last) = self.lock().get_mut(skyhook) {
            last.drain_blocks = blocks;
        }
    }

    pub fn forget(&self, skyhook: &str) {
        self.lock().remove(skyhook);
        self.asked().remove(skyhook);
    }
}

/// What is left at `now` of the wait of a pass first asked for at `asked`, after a last pass
/// that ended at `.0` and took `.1`.
fn wait_left(now: Instant, asked: Instant, last: Option<(Instant, Duration)>) -> Option<Duration> {
    let gathered = asked + GATHER;
    let due = last.map_or(gathered, |(ended, took)| gathered.max(ended + gap(took)));
    due.checked_duration_since(now)
        .filter(|left| !left.is_zero())
}

fn hold_left(at: Instant, took: Duration, now: Instant) -> Option<Duration> {
    if took < SLOW_STATUS {
        return None;
    }
    let until = at + (took * STATUS_HOLD_FACTOR).min(MAX_STATUS_HOLD);
    until
        .checked_duration_since(now)
        .filter(|left| !left.is_zero())
}

fn gap(took: Duration) -> Duration {
    took.clamp(MIN_GAP, MAX_GAP)
}

/// `a` is a later version of the object than `b`. Resource versions are etcd revisions, which
/// only grow; one that is not a number is never taken as newer.
fn newer(a: &Skyhook, b: &Skyhook) -> bool {
    let version = |s: &Skyhook| s.resource_version()?.parse::<u64>().ok();
    match (version(a), version(b)) {
        (Some(a), Some(b)) => a > b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;

    fn sk(version: &str) -> Skyhook {
        let mut sk = Skyhook::new("sk", Default::default());
        sk.metadata = ObjectMeta {
            name: Some("sk".into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        };
        sk
    }

    /// The resourceVersion of the copy a pass plans from, when the cache holds `cached`.
    fn planned_from(passes: &Pacing, cached: &str) -> String {
        let sk = passes.newest(Arc::new(sk(cached)));
        sk.resource_version().unwrap_or_default()
    }

    #[test]
    fn the_stored_copy_is_used_until_the_cache_catches_up() {
        let passes = Pacing::default();
        assert_eq!(planned_from(&passes, "10"), "10");
        passes.ended("sk", Instant::now(), Some((sk("12"), Duration::ZERO)));
        // The watch still shows 10: plan from what the status write returned.
        assert_eq!(planned_from(&passes, "10"), "12");
        // It shows 13 (someone edited the spec since): the cache is newer.
        assert_eq!(planned_from(&passes, "13"), "13");
        // ... and the stored copy is dropped for good.
        assert_eq!(planned_from(&passes, "11"), "11");
        // A version that is not a number is never taken as newer.
        passes.ended("sk", Instant::now(), Some((sk("x"), Duration::ZERO)));
        assert_eq!(planned_from(&passes, "11"), "11");
    }

    #[test]
    fn slow_status_writes_hold_the_next_back_within_bounds() {
        let at = Instant::now();
        let ms = Duration::from_millis;
        // (case, last replace took, time since it ended, hold left)
        let cases = [
            ("fast: never held", ms(200), ms(0), None),
            ("slow: 8 times as long", ms(500), ms(0), Some(ms(4000))),
            ("slow, partly waited", ms(500), ms(3500), Some(ms(500))),
            ("slow, waited out", ms(500), ms(4000), None),
            ("very slow: capped", ms(5000), ms(1000), Some(ms(29000))),
        ];
        for (case, took, since, want) in cases {
            assert_eq!(hold_left(at, took, at + since), want, "{case}");
        }
    }

    #[test]
    fn a_pass_waits_to_gather_and_for_the_gap_after_the_last() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // (case, asked at, last pass (ended at, took), now, wait left)
        let cases = [
            ("first pass: gathers", ms(0), None, ms(0), Some(GATHER)),
            (
                "first pass: partly gathered",
                ms(0),
                None,
                ms(200),
                Some(ms(300)),
            ),
            ("first pass: gathered", ms(0), None, ms(500), None),
            (
                "asked again later: gathers from the first ask",
                ms(0),
                None,
                ms(499),
                Some(ms(1)),
            ),
            (
                "short last pass: the gather decides",
                ms(1000),
                Some((ms(900), ms(10))),
                ms(1000),
                Some(GATHER),
            ),
            (
                "long last pass: its gap decides",
                ms(1000),
                Some((ms(900), ms(1500))),
                ms(1600),
                Some(ms(800)),
            ),
            (
                "very long last pass: gap capped",
                ms(1000),
                Some((ms(900), ms(9000))),
                ms(1500),
                Some(ms(1400)),
            ),
            ("due long ago", ms(0), Some((ms(0), ms(10))), ms(5000), None),
        ];
        for (case, asked, last, now, want) in cases {
            let last = last.map(|(ended, took)| (t0 + ended, took));
            assert_eq!(wait_left(t0 + now, t0 + asked, last), want, "{case}");
        }
    }

    #[test]
    fn asking_again_does_not_restart_the_gather_until_a_pass_starts() {
        let passes = Pacing::default();
        let first = passes.wait_left("sk").expect("gathers");
        std::thread::sleep(Duration::from_millis(20));
        let again = passes.wait_left("sk").expect("still gathering");
        assert!(again < first, "{again:?} < {first:?}");
        passes.starting("sk");
        passes.ended("sk", Instant::now(), None);
        assert!(passes.wait_left("sk").expect("next pass gathers") > again);
        passes.forget("sk");
        assert!(passes.asked().is_empty() && passes.lock().is_empty());
    }

    #[test]
    fn passes_are_spaced_by_how_long_the_last_took_within_bounds() {
        assert_eq!(gap(Duration::ZERO), MIN_GAP);
        assert_eq!(gap(Duration::from_millis(900)), Duration::from_millis(900));
        assert_eq!(gap(Duration::from_secs(30)), MAX_GAP);
    }
}
