//! How long each package stage took: the finished Jobs still in the cluster, any object's.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::SignedDuration;

use crate::jobs::{JobView, Outcome};
use crate::schema::Stage;

/// Where an estimate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Jobs of this version.
    SameVersion(usize),
    /// Jobs of other versions of the package.
    OtherVersions(usize),
    /// No finished Job: counted as taking no time.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Took {
    pub median: SignedDuration,
    pub source: Source,
}

impl Took {
    /// Whole seconds, at least one: a stage never ends in the pass that started it.
    pub fn seconds(&self) -> SignedDuration {
        SignedDuration::from_secs(self.median.as_secs().max(1))
    }
}

/// Median durations of the succeeded Jobs, by package, stage and version.
#[derive(Debug, Default)]
pub struct Durations {
    by_version: BTreeMap<(String, Stage, String), Vec<i64>>,
    by_package: BTreeMap<(String, Stage), Vec<i64>>,
    /// How many Jobs the figures come from.
    pub jobs: usize,
}

impl Durations {
    pub fn of(history: &[Arc<JobView>]) -> Durations {
        let mut d = Durations::default();
        for j in history {
            let (Some(created), Outcome::Complete { at }) = (j.created, &j.outcome) else {
                continue;
            };
            let secs = at.duration_since(created).as_secs().max(0);
            d.by_version
                .entry((j.package.to_string(), j.stage, j.version.to_string()))
                .or_default()
                .push(secs);
            d.by_package
                .entry((j.package.to_string(), j.stage))
                .or_default()
                .push(secs);
            d.jobs += 1;
        }
        d
    }

    pub fn estimate(&self, package: &str, version: &str, stage: Stage) -> Took {
        let key = (package.to_string(), stage, version.to_string());
        if let Some(list) = self.by_version.get(&key) {
            return Took {
                median: median(list),
                source: Source::SameVersion(list.len()),
            };
        }
        match self.by_package.get(&(package.to_string(), stage)) {
            Some(list) => Took {
                median: median(list),
                source: Source::OtherVersions(list.len()),
            },
            None => Took {
                median: SignedDuration::ZERO,
                source: Source::None,
            },
        }
    }
}

fn median(list: &[i64]) -> SignedDuration {
    let mut sorted = list.to_vec();
    sorted.sort_unstable();
    SignedDuration::from_secs(sorted.get(sorted.len() / 2).copied().unwrap_or(0))
}
