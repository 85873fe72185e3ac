//! Node counts of one pass, for the metrics. Taken from the whole desired status before it is
//! trimmed to its byte budget ([`super::status_budget`]), so the gauges count every node.

use crate::crd::{Skyhook, SkyhookStatus};
use crate::schema::{Stage, State, Status};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Targeted nodes per status, in [`Status::ALL`] order.
    pub statuses: [usize; Status::ALL.len()],
    pub targeted: usize,
    /// One per spec package.
    pub packages: Vec<PackageCensus>,
    /// Nodes waiting for the health gate, and past its timeout.
    pub health_holding: usize,
    pub health_failed: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageCensus {
    pub name: String,
    pub version: String,
    /// Nodes per state of this package, in [`State::ALL`] order.
    pub states: [usize; State::ALL.len()],
    /// Nodes per stage, in [`Stage::ALL`] order.
    pub stages: [usize; Stage::ALL.len()],
    pub restarts: i64,
}

impl Census {
    pub fn of(sk: &Skyhook, st: &SkyhookStatus) -> Census {
        let statuses = Status::ALL.map(|s| st.node_status.values().filter(|x| **x == s).count());
        let packages = sk
            .spec
            .packages
            .values()
            .map(|p| {
                let entries: Vec<_> = st
                    .node_state
                    .values()
                    .filter_map(|ns| ns.get(&p.name, &p.version))
                    .collect();
                PackageCensus {
                    name: p.name.clone(),
                    version: p.version.clone(),
                    states: State::ALL
                        .map(|s| entries.iter().filter(|e| e.state == Some(s)).count()),
                    stages: Stage::ALL.map(|s| entries.iter().filter(|e| e.stage == s).count()),
                    restarts: entries.iter().map(|e| i64::from(e.restarts)).sum(),
                }
            })
            .collect();
        Census {
            statuses,
            targeted: st.node_status.len(),
            packages,
            health_holding: 0,
            health_failed: 0,
        }
    }
}
