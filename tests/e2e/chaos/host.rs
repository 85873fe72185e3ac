//! The real nodes' own record (issue 52): what the package scripts ran, read from each node's
//! root, and when the node rebooted, read from the node's reboot and boot logs. Checked against
//! the recorded pods and nodes, never against what the operator says.
//!
//! - `host-in-a-pod`: every script run happened while a stage pod of ours for that object,
//!   package, version and stage was on the node.
//! - `host-once`: a script ran again (same node, copy directory and step) only after the run
//!   before it failed: it never ended, the node rebooted in between, or a pod of ours for that
//!   package on that node failed or was deleted unfinished in between.
//! - `host-reboot`: every reboot the agent asked for happened while the node was cordoned and an
//!   interrupt pod of ours ran on it.
//! - `host-post-interrupt`: a reboot package's post-interrupt script ran after its interrupt pod
//!   asked for a reboot, in a later boot than the one that reboot ended.
//! - `host-service`: every call the node's service manager got (a service interrupt's
//!   `daemon-reload` and restarts) came while the node was cordoned and an interrupt pod of ours
//!   ran on it.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::checker::Verdict;
use super::history::{Kind, Record, RunKey, run_key, str_at};

/// The file each test package appends a line to, in the node's root.
pub const STEPS_FILE: &str = "var/log/chaos-steps.log";

/// One line of [`STEPS_FILE`]:
/// `node package version step boot-id epoch start|end object generation`.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub t: Timestamp,
    pub package: String,
    pub version: String,
    pub step: String,
    pub boot: String,
    pub end: bool,
    pub object: String,
    /// The object's generation the agent ran it for (a spec edit runs a stage again).
    pub generation: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Reboot {
    pub t: Timestamp,
    /// Asked for by a package's interrupt (not the campaign's out-of-band reboot).
    pub requested: bool,
}

/// One call of the node's `systemctl`, which only logs (`time args…`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceCall {
    pub t: Timestamp,
    pub args: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Boot {
    pub t: Timestamp,
    pub id: String,
}

/// What one real node recorded.
#[derive(Debug, Clone, Default)]
pub struct Host {
    pub node: String,
    pub steps: Vec<Step>,
    pub reboots: Vec<Reboot>,
    pub boots: Vec<Boot>,
    pub services: Vec<ServiceCall>,
}

fn epoch(s: &str) -> Option<Timestamp> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, "0"));
    let nanos: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
    let total = secs.parse::<i128>().ok()? * 1_000_000_000 + nanos.parse::<i128>().ok()?;
    Timestamp::from_nanosecond(total).ok()
}

/// The lines of a node log written as `<RFC 3339 time> <rest>`, with their times; a line cut by
/// a reboot is skipped.
fn timed(text: &str) -> impl Iterator<Item = (Timestamp, &str)> {
    text.lines().filter_map(|l| {
        let (t, rest) = l.split_once(' ')?;
        Some((t.parse().ok()?, rest))
    })
}

impl Step {
    /// An end line of `run`'s script: same object, package, version, generation, step, boot.
    fn ends(&self, run: &Step) -> bool {
        self.end
            && self.object == run.object
            && self.package == run.package
            && self.version == run.version
            && self.generation == run.generation
            && self.step == run.step
            && self.boot == run.boot
    }
}

impl Host {
    /// Parses the four files' texts; lines that do not parse (a write cut by a reboot) are
    /// skipped.
    pub fn parse(node: &str, steps: &str, reboots: &str, boots: &str, systemctl: &str) -> Host {
        let steps = steps
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let [
                    _node,
                    package,
                    version,
                    step,
                    boot,
                    t,
                    edge,
                    object,
                    generation,
                ] = f.as_slice()
                else {
                    return None;
                };
                Some(Step {
                    t: epoch(t)?,
                    package: package.to_string(),
                    version: version.to_string(),
                    step: step.to_string(),
                    boot: boot.to_string(),
                    end: *edge == "end",
                    object: object.to_string(),
                    generation: generation.to_string(),
                })
            })
            .collect();
        let reboots = timed(reboots)
            .map(|(t, rest)| Reboot {
                t,
                requested: !rest.contains("out-of-band"),
            })
            .collect();
        let boots = timed(boots)
            .filter_map(|(t, rest)| {
                let id = rest.split_once("boot id ")?.1.trim_end_matches(')');
                Some(Boot {
                    t,
                    id: id.to_string(),
                })
            })
            .collect();
        let services = timed(systemctl)
            .map(|(t, args)| ServiceCall {
                t,
                args: args.to_string(),
            })
            .collect();
        Host {
            node: node.to_string(),
            steps,
            reboots,
            boots,
            services,
        }
    }
}

/// The stage whose pod runs a script of `step`.
fn stages_of(step: &str) -> &'static [&'static str] {
    match step.trim_end_matches("_check") {
        "apply" => &["apply", "upgrade"],
        "config" => &["config"],
        "post_interrupt" => &["post-interrupt"],
        "uninstall" => &["uninstall"],
        _ => &[],
    }
}

/// A stage pod of ours, from its creation to its end (terminal phase or deletion). The API
/// server's own times where the pod has them: a watch that lists again after an API server
/// restart records a pod late.
struct Window {
    key: RunKey,
    name: String,
    first: Timestamp,
    end: Option<Timestamp>,
    succeeded: bool,
}

/// Clocks: the harness stamps a record when it arrives, the node when it writes the line.
const SLACK: SignedDuration = SignedDuration::from_secs(3);

impl Window {
    fn holds(&self, t: Timestamp) -> bool {
        self.first - SLACK <= t && self.end.is_none_or(|e| t <= e + SLACK)
    }
}

fn windows(history: &[&Record]) -> Vec<Window> {
    let mut by_uid: BTreeMap<&str, Window> = BTreeMap::new();
    for r in history.iter().filter(|r| r.kind == Kind::Pod) {
        let Some(key) = run_key(&r.obj) else { continue };
        let created = server_time(&r.obj, "/metadata/creationTimestamp").unwrap_or(r.t);
        let w = by_uid.entry(r.uid()).or_insert(Window {
            key,
            name: r.name().to_string(),
            first: created.min(r.t),
            end: None,
            succeeded: false,
        });
        if w.end.is_some() {
            continue;
        }
        let phase = str_at(&r.obj, "/status/phase");
        if r.deleted || phase == "Succeeded" || phase == "Failed" {
            let server =
                server_time(&r.obj, "/metadata/deletionTimestamp").or_else(|| finished_at(&r.obj));
            w.end = Some(server.map_or(r.t, |t| t.min(r.t)));
            w.succeeded = phase == "Succeeded" && !r.deleted;
        }
    }
    by_uid.into_values().collect()
}

fn server_time(obj: &Value, pointer: &str) -> Option<Timestamp> {
    str_at(obj, pointer).parse().ok()
}

/// When the pod's last container ended, by the kubelet's account.
fn finished_at(pod: &Value) -> Option<Timestamp> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|list| {
            pod.pointer(&format!("/status/{list}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .filter_map(|c| server_time(c, "/state/terminated/finishedAt"))
        .max()
}

/// Whether `node` was cordoned at `t`, by the last Node record at or before it.
pub(super) fn cordoned_at(history: &[&Record], node: &str, t: Timestamp) -> bool {
    history
        .iter()
        .rfind(|r| r.kind == Kind::Node && r.name() == node && r.t <= t)
        .is_some_and(|r| {
            r.obj
                .pointer("/spec/unschedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        })
}

/// The interrupt type of `package` in `object`, by the last record of the object.
fn interrupt_type(history: &[&Record], object: &str, package: &str) -> String {
    history
        .iter()
        .rfind(|r| r.kind == Kind::Object && r.name() == object && !r.deleted)
        .map(|r| str_at(&r.obj, &format!("/spec/packages/{package}/interrupt/type")).to_string())
        .unwrap_or_default()
}

fn boot_at(host: &Host, t: Timestamp) -> Option<&str> {
    host.boots.iter().rfind(|b| b.t < t).map(|b| b.id.as_str())
}

/// Checks every invariant above for each of `hosts`.
pub fn check(v: &mut Verdict, history: &[Record], hosts: &[Host]) {
    let mut sorted: Vec<&Record> = history.iter().collect();
    sorted.sort_by_key(|r| r.t);
    let pods = windows(&sorted);
    for host in hosts {
        let node = host.node.as_str();
        let mine: Vec<&Window> = pods.iter().filter(|w| w.key.node == node).collect();
        let mut starts: Vec<&Step> = host.steps.iter().filter(|s| !s.end).collect();
        starts.sort_by_key(|s| s.t);
        v.host_steps += starts.len() as u64;
        for s in &starts {
            let stages = stages_of(&s.step);
            let inside = mine.iter().any(|w| {
                w.key.object == s.object
                    && w.key.package == s.package
                    && w.key.version == s.version
                    && stages.contains(&w.key.stage.as_str())
                    && w.holds(s.t)
            });
            v.check("host-in-a-pod", inside, || {
                format!(
                    "at {}: {node} ran {} of {}@{} ({}) with no stage pod of ours there",
                    s.t, s.step, s.package, s.version, s.object
                )
            });
        }
        once(v, host, &starts, &mine);
        reboots(v, host, &sorted, &mine);
        services(v, host, &sorted, &mine);
        post_interrupt(v, host, &sorted, &starts, &mine);
    }
}

fn once(v: &mut Verdict, host: &Host, starts: &[&Step], mine: &[&Window]) {
    let node = host.node.as_str();
    type Run<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);
    let mut runs: BTreeMap<Run, Vec<&Step>> = BTreeMap::new();
    for s in starts {
        runs.entry((&s.object, &s.package, &s.version, &s.generation, &s.step))
            .or_default()
            .push(s);
    }
    for ((object, package, version, generation, step), runs) in runs {
        if runs.len() == 1 {
            v.check("host-once", true, String::new);
        }
        for pair in runs.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            let ended =
                (host.steps.iter()).any(|e| e.ends(before) && e.t >= before.t && e.t <= after.t);
            // Both runs ended, the first after the second began: two at once.
            let ends_after = host
                .steps
                .iter()
                .filter(|e| e.ends(before) && e.boot == after.boot && e.t > after.t)
                .count();
            let overlapped = !ended && ends_after >= 2;
            let rebooted = before.boot != after.boot;
            // A pod of ours for this stage that failed or went unfinished while these ran.
            let pod_failed = mine.iter().any(|w| {
                w.key.object == object
                    && w.key.package == package
                    && stages_of(step).contains(&w.key.stage.as_str())
                    && !w.succeeded
                    && w.first - SLACK <= after.t
                    && w.end.is_some_and(|e| e + SLACK >= before.t)
            });
            v.check("host-once", !(ended || overlapped) || rebooted || pod_failed, || {
                format!(
                    "{node}: {step} of {package}@{version} ({object}, generation {generation}) ran \
                     at {} and again at {} with no failure between (it ended, same boot, no pod \
                     of ours for it failed)",
                    before.t, after.t
                )
            });
        }
    }
}

fn reboots(v: &mut Verdict, host: &Host, sorted: &[&Record], mine: &[&Window]) {
    let node = host.node.as_str();
    for r in host.reboots.iter().filter(|r| r.requested) {
        v.host_reboots += 1;
        let cordoned = cordoned_at(sorted, node, r.t);
        v.check("host-reboot", cordoned, || {
            format!(
                "at {}: {node} rebooted for an interrupt while schedulable",
                r.t
            )
        });
        let interrupt = mine
            .iter()
            .any(|w| w.key.stage == "interrupt" && w.holds(r.t));
        v.check("host-reboot", interrupt, || {
            format!(
                "at {}: {node} rebooted for an interrupt with no interrupt pod of ours there",
                r.t
            )
        });
    }
}

fn services(v: &mut Verdict, host: &Host, sorted: &[&Record], mine: &[&Window]) {
    let node = host.node.as_str();
    for call in &host.services {
        v.host_service_calls += 1;
        let cordoned = cordoned_at(sorted, node, call.t);
        let interrupt = mine
            .iter()
            .any(|w| w.key.stage == "interrupt" && w.holds(call.t));
        v.check("host-service", cordoned && interrupt, || {
            format!(
                "at {}: {node}'s service manager got `systemctl {}` {}",
                call.t,
                call.args,
                match (cordoned, interrupt) {
                    (false, false) => "while schedulable, with no interrupt pod of ours there",
                    (false, true) => "while schedulable",
                    _ => "with no interrupt pod of ours there",
                }
            )
        });
    }
}

fn post_interrupt(
    v: &mut Verdict,
    host: &Host,
    sorted: &[&Record],
    starts: &[&Step],
    mine: &[&Window],
) {
    let node = host.node.as_str();
    for s in starts.iter().filter(|s| s.step == "post_interrupt") {
        if interrupt_type(sorted, &s.object, &s.package) != "reboot" {
            continue;
        }
        // The first pod of the last interrupt run before it: the reboot kills that pod and
        // its Job's next pod finds the reboot done. On a real node the agent reboots inside an
        // init container, often before the kubelet reported it running, so creation counts.
        let interrupts: Vec<&&Window> = mine
            .iter()
            .filter(|w| {
                w.key.object == s.object
                    && w.key.package == s.package
                    && w.key.stage == "interrupt"
                    && w.first <= s.t
            })
            .collect();
        let last = interrupts.iter().max_by_key(|w| w.first).map(|w| &w.key);
        let interrupt = interrupts
            .iter()
            .filter(|w| Some(&w.key) == last)
            .min_by_key(|w| w.first);
        let reboot = interrupt.and_then(|w| {
            host.reboots
                .iter()
                .rfind(|r| r.requested && r.t + SLACK >= w.first && r.t <= s.t)
        });
        let (Some(w), Some(r)) = (interrupt, reboot) else {
            v.check("host-post-interrupt", false, || {
                format!(
                    "at {}: {node} ran post_interrupt of {}@{} with no interrupt pod and reboot \
                     of ours before it",
                    s.t, s.package, s.version
                )
            });
            continue;
        };
        let rebooted_from = boot_at(host, r.t).unwrap_or("");
        v.check("host-post-interrupt", rebooted_from != s.boot, || {
            format!(
                "at {}: {node} ran post_interrupt of {}@{} in boot {}, the boot its interrupt pod \
                 {} rebooted at {}",
                s.t, s.package, s.version, s.boot, w.name, r.t
            )
        });
    }
}

/// The script a test package runs for `step`: it appends a start and an end line to
/// [`STEPS_FILE`], taking the package, version and object from the copy directory the agent
/// runs it in (`…/<object>/<package>-<version>-<uid>-<generation>`). `CHAOS_ROOT` moves the
/// root for the unit test.
pub fn script(step: &str) -> String {
    format!(
        r#"b=${{SKYHOOK_DIR##*/}}; o=${{SKYHOOK_DIR%/*}}; o=${{o##*/}}; p=${{b%%-*}}; v=${{b#*-}}; v=${{v%%-*}}; g=${{b##*-}}
r=${{CHAOS_ROOT:-}}
rec() {{ echo "$(cat $r/etc/hostname) $p $v {step} $(cat /proc/sys/kernel/random/boot_id) $(date +%s.%N) $1 $o $g" >>$r/{STEPS_FILE}; }}
rec start
sleep 1
rec end
"#
    )
}

/// The steps of the reference's shellscript package, each a `<step>.sh` in its ConfigMap.
pub const STEPS: [&str; 8] = [
    "apply",
    "apply_check",
    "config",
    "config_check",
    "post_interrupt",
    "post_interrupt_check",
    "uninstall",
    "uninstall_check",
];
