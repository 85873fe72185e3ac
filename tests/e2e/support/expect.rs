//! Expected node and Skyhook state, compared field by field: `check` lists every difference,
//! `assert` panics with that list, and [`wait_node`] and [`wait_skyhook`] poll until one holds
//! (their panic carries the last list).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::{Value, json};
use skyhook::crd::Skyhook;
use skyhook::schema::{self, NodeState, Stage, State};

use super::env::Env;

/// `<sk>/NotReady` of a node done with the Skyhook.
pub const COMPLETE: (&str, &str) = ("False", schema::NOT_READY_REASON_COMPLETE);
/// `<sk>/NotReady` of a node still at work for the Skyhook.
pub const INCOMPLETE: (&str, &str) = ("True", schema::NOT_READY_REASON_INCOMPLETE);
/// `<sk>/Erroring` of a node with no failing package.
pub const NOT_ERRORING: (&str, &str) = ("False", schema::ERRORING_REASON_NOT_ERRORING);
/// `<sk>/Erroring` of a node with a failing package.
pub const ERRORING: (&str, &str) = ("True", schema::ERRORING_REASON_ERRORING);

/// `want` is contained in `got`: objects key by key (extra keys allowed), anything else equal.
/// This is how chainsaw compares an expected object with the live one.
pub fn contains(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| contains(gv, wv))),
        _ => got == want,
    }
}

/// (status, reason) of the node condition `type_`.
pub fn condition(n: &Node, type_: &str) -> Option<(String, String)> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// The differences found so far, one line each.
#[derive(Default)]
struct Diff(Vec<String>);

impl Diff {
    fn push(&mut self, line: String) {
        self.0.push(line);
    }

    fn field<T: PartialEq + Debug>(&mut self, what: &str, got: T, want: T) {
        if got != want {
            self.0.push(format!("{what}: got {got:?}, want {want:?}"));
        }
    }

    fn result(self, whose: String) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!("{whose} differs:\n  {}", self.0.join("\n  ")))
        }
    }
}

/// One package's entry in a node state: its stage and state and, when given, version and image.
#[derive(Clone, Debug)]
pub struct PackageExpect<'a> {
    pub name: &'a str,
    /// `None`: the first entry of that name, whatever its version.
    pub version: Option<&'a str>,
    pub image: Option<&'a str>,
    pub stage: Stage,
    pub state: State,
}

impl<'a> PackageExpect<'a> {
    pub fn new(name: &'a str, stage: Stage, state: State) -> Self {
        PackageExpect {
            name,
            version: None,
            image: None,
            stage,
            state,
        }
    }

    pub fn version(self, version: &'a str) -> Self {
        PackageExpect {
            version: Some(version),
            ..self
        }
    }

    pub fn image(self, image: &'a str) -> Self {
        PackageExpect {
            image: Some(image),
            ..self
        }
    }

    /// What differs in `state` (a node's, or one of `status.nodeState`).
    pub fn check_in(&self, state: &NodeState) -> Result<(), String> {
        let mut diff = Diff::default();
        self.compare(state, &mut diff);
        diff.result("the node state".into())
    }

    fn compare(&self, state: &NodeState, diff: &mut Diff) {
        let entry = match self.version {
            Some(v) => state.get(self.name, v),
            None => state
                .iter()
                .map(|(_, e)| e)
                .find(|e| e.name.as_str() == self.name),
        };
        let tag = match self.version {
            Some(v) => schema::package_key(self.name, v),
            None => self.name.to_string(),
        };
        let Some(e) = entry else {
            let keys: Vec<&str> = state.keys().collect();
            diff.push(format!("{tag}: no entry, only {keys:?}"));
            return;
        };
        diff.field(&format!("{tag} stage"), e.stage, self.stage);
        diff.field(&format!("{tag} state"), e.state, Some(self.state));
        if let Some(image) = self.image {
            diff.field(&format!("{tag} image"), e.image.as_str(), image);
        }
    }
}

/// What a node carries for one Skyhook; `None` (or empty) fields are not checked.
#[derive(Default, Clone, Debug)]
pub struct NodeExpect<'a> {
    /// `status_<sk>`, as label and as annotation.
    pub status: Option<&'a str>,
    /// Entries of the parsed `nodeState_<sk>` annotation.
    pub packages: Vec<PackageExpect<'a>>,
    /// Contained in the `nodeState_<sk>` annotation read as JSON (see [`contains`]).
    pub state: Option<Value>,
    /// The exact keys of `nodeState_<sk>`.
    pub keys: Option<Vec<&'a str>>,
    /// The exact `nodeState_<sk>` annotation text.
    pub raw_state: Option<&'a str>,
    /// (status, reason) of `<sk>/NotReady` and `<sk>/Erroring`.
    pub not_ready: Option<(&'a str, &'a str)>,
    pub erroring: Option<(&'a str, &'a str)>,
    /// `Some(true)`: tainted `node.kubernetes.io/unschedulable:NoSchedule` (cordoned);
    /// `Some(false)`: no taints at all.
    pub cordoned: Option<bool>,
}

impl<'a> NodeExpect<'a> {
    /// Only the status: `status_<sk>` label and annotation both say `status`.
    pub fn at(status: &'a str) -> Self {
        NodeExpect {
            status: Some(status),
            ..Default::default()
        }
    }

    /// Done with the Skyhook: status `complete`, NotReady False, not erroring.
    pub fn complete() -> Self {
        NodeExpect {
            status: Some("complete"),
            not_ready: Some(COMPLETE),
            erroring: Some(NOT_ERRORING),
            ..Default::default()
        }
    }

    /// Every way `n` differs from this expectation for Skyhook `sk`.
    pub fn check(&self, n: &Node, sk: &str) -> Result<(), String> {
        let mut diff = Diff::default();
        if let Some(s) = self.status {
            let label = n.labels().get(&schema::status_label(sk));
            let annotation = n.annotations().get(&schema::status_annotation(sk));
            diff.field("status label", label.map(String::as_str), Some(s));
            diff.field("status annotation", annotation.map(String::as_str), Some(s));
        }
        self.compare_state(n, sk, &mut diff);
        for (kind, want) in [
            (schema::node_not_ready_condition(sk), self.not_ready),
            (schema::node_erroring_condition(sk), self.erroring),
        ] {
            if let Some((status, reason)) = want {
                let want = Some((status.to_string(), reason.to_string()));
                diff.field(&format!("condition {kind}"), condition(n, &kind), want);
            }
        }
        self.compare_cordon(n, &mut diff);
        diff.result(format!("node {}", n.name_any()))
    }

    /// Panics, naming `step`, with every difference.
    pub fn assert(&self, n: &Node, sk: &str, step: &str) {
        if let Err(diff) = self.check(n, sk) {
            panic!("{step}: {diff}");
        }
    }

    fn compare_state(&self, n: &Node, sk: &str, diff: &mut Diff) {
        let raw = n.annotations().get(&schema::node_state_annotation(sk));
        if let Some(want) = self.raw_state {
            diff.field("nodeState", raw.map(String::as_str), Some(want));
        }
        if self.state.is_none() && self.keys.is_none() && self.packages.is_empty() {
            return;
        }
        let Some(raw) = raw else {
            diff.push("no nodeState annotation".into());
            return;
        };
        match serde_json::from_str::<Value>(raw) {
            Err(e) => diff.push(format!("nodeState is not JSON: {e}")),
            Ok(got) => {
                if let Some(want) = &self.state
                    && !contains(&got, want)
                {
                    diff.push(format!("nodeState {got} does not contain {want}"));
                }
                if let Some(keys) = &self.keys {
                    let have: BTreeSet<&str> = got
                        .as_object()
                        .map(|o| o.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    let want: BTreeSet<&str> = keys.iter().copied().collect();
                    diff.field("nodeState keys", have, want);
                }
            }
        }
        if !self.packages.is_empty() {
            match NodeState::parse(raw) {
                Err(e) => diff.push(format!("nodeState: {e}")),
                Ok(state) => self.packages.iter().for_each(|p| p.compare(&state, diff)),
            }
        }
    }

    fn compare_cordon(&self, n: &Node, diff: &mut Diff) {
        let Some(want) = self.cordoned else {
            return;
        };
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let cordon = taints
            .iter()
            .any(|t| t.key == schema::UNSCHEDULABLE_TAINT_KEY && t.effect == "NoSchedule");
        if want && !cordon {
            diff.push(format!("not tainted unschedulable: {taints:?}"));
        }
        if !want && !taints.is_empty() {
            diff.push(format!("taints {taints:?}, want none"));
        }
    }
}

/// What a Skyhook's status says; `None` (or empty) fields are not checked.
#[derive(Default, Clone, Debug)]
pub struct SkyhookExpect<'a> {
    pub status: Option<&'a str>,
    pub observed_generation: Option<i64>,
    /// Contained in `status.nodeState[<node>]`, per node.
    pub node_state: BTreeMap<String, Value>,
    /// Exact keys of `status.nodeState[<node>]`, for every node listed.
    pub node_state_keys: Option<Vec<&'a str>>,
    /// Every `status.nodeStatus` value, and how many there are.
    pub node_status: Option<(&'a str, usize)>,
    pub complete_nodes: Option<&'a str>,
    pub package_list: Option<&'a str>,
    pub nodes_in_progress: Option<i64>,
}

impl SkyhookExpect<'_> {
    /// Every way the status of `sk` differs from this expectation.
    pub fn check(&self, sk: &Skyhook) -> Result<(), String> {
        let st = serde_json::to_value(&sk.status).expect("status as JSON");
        let field = |k: &str| st.get(k).cloned().unwrap_or(Value::Null);
        let mut diff = Diff::default();
        if let Some(s) = self.status {
            diff.field("status.status", field("status"), json!(s));
        }
        if let Some(g) = self.observed_generation {
            diff.field(
                "status.observedGeneration",
                field("observedGeneration"),
                json!(g),
            );
        }
        self.compare_node_state(&st, &mut diff);
        if let Some((s, n)) = self.node_status {
            let got: Vec<Value> = field("nodeStatus")
                .as_object()
                .map(|o| o.values().cloned().collect())
                .unwrap_or_default();
            if got.len() != n || got.iter().any(|v| v != s) {
                diff.push(format!("status.nodeStatus {got:?}, want {n} × {s}"));
            }
        }
        if let Some(c) = self.complete_nodes {
            diff.field("status.completeNodes", field("completeNodes"), json!(c));
        }
        // The operator omits an empty package list and a zero count.
        if let Some(p) = self.package_list
            && !(p.is_empty() && field("packageList").is_null())
        {
            diff.field("status.packageList", field("packageList"), json!(p));
        }
        if let Some(n) = self.nodes_in_progress
            && !(n == 0 && field("nodesInProgress").is_null())
        {
            diff.field("status.nodesInProgress", field("nodesInProgress"), json!(n));
        }
        diff.result(format!("Skyhook {}", sk.name_any()))
    }

    /// Panics, naming `step`, with every difference.
    pub fn assert(&self, sk: &Skyhook, step: &str) {
        if let Err(diff) = self.check(sk) {
            panic!("{step}: {diff}");
        }
    }

    fn compare_node_state(&self, st: &Value, diff: &mut Diff) {
        for (node, want) in &self.node_state {
            let mut got = st.pointer(&format!("/nodeState/{node}")).cloned();
            // An empty node state may be listed as `{}` or not at all.
            if got.is_none() && want == &json!({}) {
                got = Some(json!({}));
            }
            if !got.as_ref().is_some_and(|g| contains(g, want)) {
                diff.push(format!(
                    "status.nodeState[{node}] {got:?} does not contain {want}"
                ));
            }
            if let Some(keys) = &self.node_state_keys {
                let have: BTreeSet<String> = got
                    .as_ref()
                    .and_then(Value::as_object)
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                let want: BTreeSet<String> = keys.iter().map(|k| k.to_string()).collect();
                diff.field(&format!("status.nodeState[{node}] keys"), have, want);
            }
        }
    }
}

/// Waits up to `timeout` until node `node` matches `want` for Skyhook `sk`, and returns it.
pub async fn wait_node(
    env: &Env,
    step: &str,
    node: &str,
    sk: &str,
    want: &NodeExpect<'_>,
    timeout: Duration,
) -> Node {
    env.ctx
        .eventually(step, timeout, || async {
            let n = env.node_api.get(node).await.map_err(|e| e.to_string())?;
            want.check(&n, sk).map(|()| n)
        })
        .await
}

/// Waits up to `timeout` until the Skyhook `name` matches `want`, and returns it.
pub async fn wait_skyhook(
    env: &Env,
    step: &str,
    name: &str,
    want: &SkyhookExpect<'_>,
    timeout: Duration,
) -> Skyhook {
    env.ctx
        .eventually(step, timeout, || async {
            let sk = env.skyhooks.get(name).await.map_err(|e| e.to_string())?;
            want.check(&sk).map(|()| sk)
        })
        .await
}
