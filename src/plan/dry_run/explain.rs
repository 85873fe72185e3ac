//! Why a node runs a package, in words: what the planner chose to run set beside what the
//! node had before and what the spec asks. The choice is the planner's; this only names it.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;

use crate::crd::Skyhook;
use crate::node::NodeView;
use crate::schema::{self, NodeState, Stage, semver_compare};
use serde::{Deserialize, Serialize};

/// Each node's package versions before the rollout, by package name.
pub struct Before {
    nodes: BTreeMap<String, BTreeMap<String, String>>,
    spec: BTreeMap<String, String>,
}

impl Before {
    pub fn of(sk: &Skyhook, nodes: &[Arc<NodeView>]) -> Before {
        let key = schema::node_state_annotation(&sk.name_any());
        let nodes = nodes
            .iter()
            .map(|n| {
                let state = n
                    .annotation(&key)
                    .and_then(|a| NodeState::parse(a).ok())
                    .unwrap_or_default();
                let versions = state
                    .iter()
                    .map(|(_, p)| (p.name.to_string(), p.version.to_string()))
                    .collect();
                (n.name.clone(), versions)
            })
            .collect();
        let spec = sk
            .spec
            .packages
            .iter()
            .map(|(k, p)| (k.clone(), p.version.clone()))
            .collect();
        Before { nodes, spec }
    }

    /// Why `node` runs `stages` of `package` at `version`.
    pub fn reason(&self, node: &str, package: &str, version: &str, stages: &[Stage]) -> Reason {
        let had = self
            .nodes
            .get(node)
            .and_then(|n| n.get(package))
            .filter(|v| v.as_str() != version || stages.contains(&Stage::Uninstall));
        let wanted = self.spec.get(package);
        let first = stages.first().copied();
        match (first, had, wanted) {
            (Some(Stage::Uninstall | Stage::UninstallInterrupt), _, None) => Reason::Uninstall,
            (Some(Stage::Uninstall | Stage::UninstallInterrupt), _, Some(to)) => {
                match semver_compare(to, version) {
                    Ordering::Less => Reason::Downgrade {
                        from: version.to_string(),
                        to: to.clone(),
                    },
                    _ => Reason::Uninstall,
                }
            }
            (_, Some(from), _) => Reason::VersionChange {
                from: from.clone(),
                to: version.to_string(),
            },
            (Some(Stage::Config), None, _) => Reason::ConfigChange,
            (_, None, _)
                if !self
                    .nodes
                    .get(node)
                    .is_some_and(|n| n.contains_key(package)) =>
            {
                Reason::New
            }
            (first, None, _) => Reason::Resume {
                stage: first.map_or("-", Stage::as_str).to_string(),
            },
        }
    }
}

/// Why a node runs a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Reason {
    /// Not on the node before.
    New,
    VersionChange {
        from: String,
        to: String,
    },
    /// The spec asks for an older version: the installed one is removed first.
    Downgrade {
        from: String,
        to: String,
    },
    /// The package left the spec (or its `uninstall` block asks for it).
    Uninstall,
    /// Its configMap changed.
    ConfigChange,
    /// The same version, not complete on the node (a failure, a reset or a rerun).
    Resume {
        stage: String,
    },
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::New => write!(f, "new package"),
            Reason::VersionChange { from, to } => write!(f, "version change {from} -> {to}"),
            Reason::Downgrade { from, to } => write!(f, "downgrade {from} -> {to}"),
            Reason::Uninstall => write!(f, "uninstall"),
            Reason::ConfigChange => write!(f, "config change"),
            Reason::Resume { stage } => write!(f, "not complete here (from {stage})"),
        }
    }
}
