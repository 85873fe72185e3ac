//! The objects of both APIs that share the nodes (issue 49): Skyhooks and NodeWrights select the
//! same nodes for the weeks a migration takes, and the rules that order work on a node
//! (priority, `sequencing: all`) and the runtime-required taint are decided over all of them,
//! here, for both engines. (Shared cordons are the node's own rule:
//! [`NodeView::cordoned_by_another`] reads the cordon marks of both prefixes.)
//!
//! An engine plans in its own API's keys; an object of the other API (a peer) is read from the
//! node as stored, under its own prefix. A Skyhook and a NodeWright of one name are one object
//! in a take-over: the one whose turn it is (`api_handover::turn`) speaks for both.

use std::sync::Arc;

use kube::ResourceExt;

use super::api_handover::{self, Turn};
use crate::crd::Skyhook;
use crate::node::{LabelMatch, NodeView};
use crate::schema::{self, Api, Status};

/// The objects of the other served API, in their canonical keys (see `localize`).
#[derive(Clone, Copy, Debug)]
pub struct Peers<'a> {
    pub api: Api,
    pub objects: &'a [Arc<Skyhook>],
}

impl Peers<'_> {
    /// No other API is served.
    pub const NONE: Peers<'static> = Peers {
        api: Api::NodeWright,
        objects: &[],
    };
}

/// One object of either API, as the rules over the fleet read it.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    pub sk: &'a Skyhook,
    /// `None` for an object of the planning engine's own API.
    peer: Option<Api>,
}

impl<'a> Member<'a> {
    /// The object the pass plans.
    pub fn is(&self, sk: &Skyhook) -> bool {
        self.peer.is_none() && self.sk.name_any() == sk.name_any()
    }

    /// Its status on `node` (read in the planning engine's view).
    pub fn status_on<'n>(&self, node: &'n NodeView) -> Option<&'n str> {
        let key = schema::status_annotation(&self.sk.name_any());
        match self.peer {
            None => node.annotation(&key),
            Some(api) => node.stored_annotations().get(&api.local(&key)),
        }
    }

    /// Complete on `node`.
    pub fn complete_on(&self, node: &NodeView) -> bool {
        self.status_on(node) == Some(Status::Complete.as_str())
    }

    /// The node is ignored for it (its API's `ignore` label).
    pub fn ignores(&self, node: &NodeView) -> bool {
        let value = match self.peer {
            None => node.label(schema::IGNORE_LABEL),
            Some(api) => node.selector_labels().get(&api.local(schema::IGNORE_LABEL)),
        };
        value == Some(schema::TRUE_VALUE)
    }

    /// It selects `node` (matched against the labels as stored, in both APIs; the matcher
    /// `select::selects` wraps, used here directly: `select` reads the fleet).
    pub fn selects(&self, node: &NodeView) -> bool {
        LabelMatch::new(&self.sk.spec.node_selectors)
            .is_some_and(|s| s.matches(node.selector_labels()))
    }
}

/// The planning engine's objects and its peers.
#[derive(Clone, Copy, Debug)]
pub struct Fleet<'a> {
    pub own: &'a [Arc<Skyhook>],
    pub peers: Peers<'a>,
}

impl<'a> Fleet<'a> {
    /// Only the engine's own objects (one API served, or a test of one API's rules).
    pub fn alone(own: &'a [Arc<Skyhook>]) -> Fleet<'a> {
        Fleet {
            own,
            peers: Peers::NONE,
        }
    }

    /// Every object of both APIs, but the silent half of a take-over pair.
    pub fn members(&self) -> impl Iterator<Item = Member<'a>> + '_ {
        let own = self.own.iter().filter_map(|sk| {
            let twin = self.twin(self.peers.objects, sk);
            self.speaks(sk, self.peers.api.other(), twin)
                .then_some(Member { sk, peer: None })
        });
        let peers = self.peers.objects.iter().filter_map(|sk| {
            let twin = self.twin(self.own, sk);
            self.speaks(sk, self.peers.api, twin).then_some(Member {
                sk,
                peer: Some(self.peers.api),
            })
        });
        own.chain(peers)
    }

    fn twin<'o>(&self, among: &'o [Arc<Skyhook>], sk: &Skyhook) -> Option<&'o Skyhook> {
        let name = sk.name_any();
        among.iter().map(|o| &**o).find(|o| o.name_any() == name)
    }

    /// Whether `sk` (of `api`) speaks for its name, given its same-named object of the other API.
    fn speaks(&self, sk: &Skyhook, api: Api, twin: Option<&Skyhook>) -> bool {
        let Some(twin) = twin else {
            return true;
        };
        let (legacy, nodewright) = match api {
            Api::Skyhook => (sk, twin),
            Api::NodeWright => (twin, sk),
        };
        let legacy_runs =
            api_handover::turn(Api::NodeWright, nodewright, Some(legacy)) == Turn::Wait;
        legacy_runs == (api == Api::Skyhook)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::SkyhookStatus;
    use crate::plan::fixtures::{node, skyhook};

    fn with_status(name: &str, s: Status) -> Arc<Skyhook> {
        let mut sk = skyhook(name).build();
        sk.status = Some(SkyhookStatus {
            status: Some(s),
            ..SkyhookStatus::default()
        });
        Arc::new(sk)
    }

    #[test]
    fn a_peer_is_read_under_its_own_prefix_from_the_node_as_stored() {
        let legacy = [Arc::new(skyhook("a").build())];
        let nws = [Arc::new(skyhook("b").build())];
        let fleet = Fleet {
            own: &legacy,
            peers: Peers {
                api: Api::NodeWright,
                objects: &nws,
            },
        };
        let n = node("n")
            .annotation(&schema::status_annotation("a"), "complete")
            .annotation("nodewright.nvidia.com/status_b", "in_progress")
            .build();
        let seen: Vec<(String, Option<&str>)> = fleet
            .members()
            .map(|m| (m.sk.name_any(), m.status_on(&n)))
            .collect();
        assert_eq!(
            seen,
            [
                ("a".to_string(), Some("complete")),
                ("b".to_string(), Some("in_progress"))
            ]
        );
        // The NodeWright engine's view: legacy keys hidden, found as stored.
        let stored = Arc::new(n);
        let view = stored.in_api(Api::NodeWright);
        let fleet = Fleet {
            own: &nws,
            peers: Peers {
                api: Api::Skyhook,
                objects: &legacy,
            },
        };
        let seen: Vec<(String, Option<&str>)> = fleet
            .members()
            .map(|m| (m.sk.name_any(), m.status_on(&view)))
            .collect();
        assert_eq!(
            seen,
            [
                ("b".to_string(), Some("in_progress")),
                ("a".to_string(), Some("complete"))
            ]
        );
    }

    /// The runtime-required taint stays on a node until every runtime-required object of
    /// either API that selects it is complete there; the NodeWright engine reads the legacy
    /// Skyhook's status from the node as stored.
    #[test]
    fn the_runtime_required_taint_waits_for_both_apis() {
        use crate::plan::NodePatch;
        use crate::plan::fixtures::runtime_taint;
        use crate::plan::metadata::{MetaInput, lift_runtime_taint};
        let rt = runtime_taint();
        let rr = |name: &str| {
            Arc::new(
                skyhook(name)
                    .spec(serde_json::json!({"runtimeRequired": true}))
                    .build(),
            )
        };
        let (legacy, nw) = ([rr("toolkit")], [rr("driver")]);
        let taint = serde_json::json!([{"key": "skyhook.nvidia.com", "value": "runtime-required",
            "effect": "NoSchedule"}]);
        let lifted = |legacy_status: &str| {
            let stored = Arc::new(
                node("n")
                    .taints(taint.clone())
                    .annotation(&schema::status_annotation("toolkit"), legacy_status)
                    .annotation("nodewright.nvidia.com/status_driver", "complete")
                    .build(),
            );
            let view = stored.in_api(Api::NodeWright);
            let m = MetaInput {
                skyhook: &nw[0],
                fleet: Fleet {
                    own: &nw,
                    peers: Peers {
                        api: Api::Skyhook,
                        objects: &legacy,
                    },
                },
                runtime_taints: &rt,
                operator_version: "v",
            };
            let mut patch = NodePatch::of(&view);
            lift_runtime_taint(&m, &view, &mut patch);
            patch.taints.is_some()
        };
        assert!(!lifted("in_progress"), "the legacy Skyhook has not run");
        assert!(lifted("complete"));
    }

    /// Priority orders work on a node across the APIs: a priority-1 Skyhook gates a priority-2
    /// NodeWright until it is complete there.
    #[test]
    fn priority_gates_across_the_apis() {
        use crate::plan::select::gated;
        let first = Arc::new(
            skyhook("first")
                .set("priority", serde_json::json!(1))
                .build(),
        );
        let second = Arc::new(
            skyhook("second")
                .set("priority", serde_json::json!(2))
                .build(),
        );
        let (legacy, nws) = ([first], [second.clone()]);
        let fleet = Fleet {
            own: &nws,
            peers: Peers {
                api: Api::Skyhook,
                objects: &legacy,
            },
        };
        let at = |status: &str| {
            Arc::new(
                node("n")
                    .annotation(&schema::status_annotation("first"), status)
                    .build(),
            )
            .in_api(Api::NodeWright)
        };
        assert!(gated(&second, &fleet, &at("in_progress")));
        assert!(!gated(&second, &fleet, &at("complete")));
        assert!(!gated(&second, &Fleet::alone(&nws), &at("in_progress")));
    }

    /// A cordon either API relies on is never lifted by the other; the same name's copy under
    /// the other prefix is the same object's.
    #[test]
    fn a_cordon_of_either_api_is_seen_by_both() {
        let stored = Arc::new(
            node("n")
                .annotation(&schema::cordon_annotation("legacy"), "true")
                .annotation("nodewright.nvidia.com/cordon_nw", "true")
                .build(),
        );
        assert!(
            stored.cordoned_by_another("nw"),
            "legacy view sees the NodeWright's"
        );
        let view = stored.in_api(Api::NodeWright);
        assert!(
            view.cordoned_by_another("nw"),
            "NodeWright view sees the Skyhook's"
        );
        let alone = Arc::new(
            node("n")
                .annotation(&schema::cordon_annotation("x"), "true")
                .annotation("nodewright.nvidia.com/cordon_x", "true")
                .build(),
        );
        assert!(!alone.in_api(Api::NodeWright).cordoned_by_another("x"));
        assert!(!alone.cordoned_by_another("x"));
    }

    #[test]
    fn of_a_take_over_pair_the_one_whose_turn_it_is_speaks() {
        let names = |f: &Fleet| -> Vec<(String, bool)> {
            f.members()
                .map(|m| (m.sk.name_any(), m.peer.is_some()))
                .collect()
        };
        // The Skyhook mid-rollout runs; its NodeWright waits.
        let busy = [with_status("x", Status::InProgress)];
        let nw = [Arc::new(skyhook("x").build())];
        let legacy_engine = Fleet {
            own: &busy,
            peers: Peers {
                api: Api::NodeWright,
                objects: &nw,
            },
        };
        assert_eq!(names(&legacy_engine), [("x".to_string(), false)]);
        // A quiet Skyhook is frozen: the NodeWright speaks.
        let quiet = [with_status("x", Status::Complete)];
        let nodewright_engine = Fleet {
            own: &nw,
            peers: Peers {
                api: Api::Skyhook,
                objects: &quiet,
            },
        };
        assert_eq!(names(&nodewright_engine), [("x".to_string(), false)]);
        let legacy_engine = Fleet {
            own: &quiet,
            peers: Peers {
                api: Api::NodeWright,
                objects: &nw,
            },
        };
        assert_eq!(names(&legacy_engine), [("x".to_string(), true)]);
    }
}
