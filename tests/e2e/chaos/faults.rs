//! The fault menu: each fault is drawn from the seed, injected, logged with its time, and (for
//! the ones that last) lifted after a drawn while. To add one: a variant, its line in `MENU`
//! (also what `tests/chaos --help` prints), and its arms in `inject` and `lift`.

use serde::Serialize;

/// A seeded generator (splitmix64): the same seed draws the same campaign.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        let i = (self.next() % items.len() as u64) as usize;
        items.get(i)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Fault {
    KillReplica,
    StopReplica,
    ApiServerRestart,
    EtcdRestart,
    DeleteStagePod,
    SelectorLabelOff,
    RefusingPdb,
    AdminCordon,
    WriteRefusal,
    RealReboot,
    RuntimeKill,
    NetworkCut,
}

/// Every fault and what it does, for `--help` and the docs.
pub const MENU: &[(Fault, &str)] = &[
    (
        Fault::KillReplica,
        "SIGKILL one operator replica (the leader or not); restarted 2-8 s later",
    ),
    (
        Fault::StopReplica,
        "SIGSTOP one replica for 3-15 s (its lease lapses while it sleeps), then SIGCONT",
    ),
    (
        Fault::ApiServerRestart,
        "SIGKILL kube-apiserver, down for 3 s, started again with the same flags",
    ),
    (
        Fault::EtcdRestart,
        "SIGKILL etcd, down for 3 s, started again (kwok restarted after it)",
    ),
    (
        Fault::DeleteStagePod,
        "delete a running stage pod of ours (its Job sees the pod fail)",
    ),
    (
        Fault::SelectorLabelOff,
        "remove a node's selector label for 10-40 s, then restore it",
    ),
    (
        Fault::RefusingPdb,
        "a pod on a node under a PodDisruptionBudget that refuses every eviction, for 10-40 s",
    ),
    (
        Fault::AdminCordon,
        "an administrator cordons a schedulable node for 10-40 s (uncordoned once none of our cordons is on it)",
    ),
    (
        Fault::WriteRefusal,
        "an admission policy refuses every write to one node for 10-40 s",
    ),
    (
        Fault::RealReboot,
        "a real node rebooted out of band (its init ends, as a power cycle would)",
    ),
    (
        Fault::RuntimeKill,
        "SIGKILL a real node's containerd and kubelet, both held down 5-20 s, then started again",
    ),
    (
        Fault::NetworkCut,
        "a real node cut from the API server for 30-90 s (the kubelet's and its bridge's traffic dropped)",
    ),
];

/// The faults that need a real node.
pub const REAL_ONLY: [Fault; 3] = [Fault::RealReboot, Fault::RuntimeKill, Fault::NetworkCut];

/// One injected fault, as the report lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Injected {
    pub at: jiff::Timestamp,
    pub fault: Fault,
    pub detail: String,
    pub lifted: Option<jiff::Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_campaign() {
        let draw = |seed| {
            let mut r = Rng::new(seed);
            (0..20).map(|_| r.between(0, 8)).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
        assert!(draw(3).iter().all(|x| *x <= 8));
        assert_eq!(MENU.len(), 12, "every fault has its line");
    }
}
