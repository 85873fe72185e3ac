//! Upstream v0.15's node order (delta D7): `status.nodePriority` records when each node was
//! picked into a batch, and each node's Jobs get `SKYHOOK_NODE_ORDER`, its place among the picked
//! nodes (by pick time, ties by name) plus `status.nodeOrderOffset`, which counts the nodes that
//! left the list (complete, or gone). The order only grows over a rollout, so the first node
//! picked, and only it, sees 0.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::admission::MAX_STATUS_COUNT;
use crate::schema::Status;

/// `prior` with the nodes picked in this pass (and not yet listed) at `now`.
pub fn picked(
    prior: &BTreeMap<String, Time>,
    allowed: &BTreeSet<String>,
    now: Timestamp,
) -> BTreeMap<String, Time> {
    let mut out = prior.clone();
    for node in allowed {
        out.entry(node.clone()).or_insert(Time(now));
    }
    out
}

/// Each listed node's `SKYHOOK_NODE_ORDER`.
pub fn orders(priority: &BTreeMap<String, Time>, offset: i64) -> BTreeMap<String, i64> {
    let mut by_pick: Vec<(&Time, &String)> = priority.iter().map(|(n, t)| (t, n)).collect();
    by_pick.sort_by(|a, b| (a.0.0, a.1).cmp(&(b.0.0, b.1)));
    by_pick
        .into_iter()
        .enumerate()
        .map(|(i, (_, n))| {
            let order = offset.max(0).saturating_add(i as i64);
            (n.clone(), order.min(MAX_STATUS_COUNT))
        })
        .collect()
}

/// Drops the nodes that are complete or no longer targeted, counting them into `offset`.
pub fn prune(
    priority: &mut BTreeMap<String, Time>,
    offset: &mut i64,
    statuses: &BTreeMap<String, Status>,
) {
    let before = priority.len();
    priority.retain(|n, _| statuses.get(n).is_some_and(|s| *s != Status::Complete));
    let left = (before - priority.len()) as i64;
    *offset = (*offset).max(0).saturating_add(left).min(MAX_STATUS_COUNT);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_700_000_000 + secs).expect("time"))
    }

    #[test]
    fn orders_grow_across_batches() {
        let none = BTreeMap::new();
        let first: BTreeSet<String> = ["n-b".to_string()].into();
        let mut p = picked(&none, &first, at(0).0);
        let mut offset = 0;
        assert_eq!(orders(&p, offset)["n-b"], 0);
        // The next batch: two nodes picked in the same second, ordered by name.
        let next: BTreeSet<String> = ["n-c".to_string(), "n-a".to_string()].into();
        p = picked(&p, &next, at(5).0);
        assert_eq!(
            orders(&p, offset),
            BTreeMap::from([("n-b".into(), 0), ("n-a".into(), 1), ("n-c".into(), 2)])
        );
        // n-b completes; n-a and n-c keep their orders.
        let statuses = BTreeMap::from([
            ("n-a".to_string(), Status::InProgress),
            ("n-b".to_string(), Status::Complete),
            ("n-c".to_string(), Status::InProgress),
        ]);
        prune(&mut p, &mut offset, &statuses);
        assert_eq!(offset, 1);
        assert_eq!(
            orders(&p, offset),
            BTreeMap::from([("n-a".into(), 1), ("n-c".into(), 2)])
        );
        // A node that is gone counts too.
        prune(
            &mut p,
            &mut offset,
            &BTreeMap::from([("n-a".to_string(), Status::InProgress)]),
        );
        assert_eq!(offset, 2);
        assert_eq!(orders(&p, offset), BTreeMap::from([("n-a".into(), 2)]));
    }
}
