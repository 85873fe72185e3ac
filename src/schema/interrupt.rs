//! Interrupt types, the agent's interrupt argument, and interrupt merging.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::go_json;
use super::wire_enum::wire_enum;

wire_enum! {
    // Declared in CRD enum order. The wire string is also used in `packages.json` and in
    // interrupt pod/Job names.
    /// Interrupt type as spelled in the CRD (`spec.packages.*.interrupt.type`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub serde enum InterruptType {
        Service = "service",
        Reboot = "reboot",
        Noop = "noop",
        RestartAllServices = "restartAllServices",
    }
    kind = "interrupt type";
}

impl InterruptType {
    /// Spelling the agent expects inside the interrupt argument.
    pub const fn agent_name(self) -> &'static str {
        match self {
            InterruptType::Service => "service_restart",
            InterruptType::Reboot => "node_restart",
            InterruptType::Noop => "no_op",
            InterruptType::RestartAllServices => "restart_all_services",
        }
    }

    /// Merge priority; lower wins (a reboot subsumes every other interrupt).
    pub const fn priority(self) -> u8 {
        match self {
            InterruptType::Reboot => 0,
            InterruptType::RestartAllServices => 1,
            InterruptType::Service => 2,
            InterruptType::Noop => 3,
        }
    }
}

/// An interrupt (CRD and `packages.json` shape: `{"type", "services"?}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Interrupt {
    #[serde(rename = "type")]
    pub kind: InterruptType,
    /// systemd units, meaningful for `service` only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
}

impl Interrupt {
    pub fn new(kind: InterruptType) -> Self {
        Interrupt {
            kind,
            services: Vec::new(),
        }
    }

    /// The fourth argument of the agent's `interrupt` mode.
    pub fn agent_arg(&self) -> String {
        interrupt_arg(self.kind, &self.services)
    }
}

/// The agent's interrupt argument: standard base64 (padded) of the compact JSON
/// `{"type":"<agent name>","services":[...]}`, `services` omitted when empty.
pub fn interrupt_arg(kind: InterruptType, services: &[String]) -> String {
    #[derive(Serialize)]
    struct AgentInterrupt<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        services: &'a [String],
    }
    let json = go_json::to_string_infallible(&AgentInterrupt {
        kind: kind.agent_name(),
        services,
    });
    STANDARD.encode(json)
}

/// Picks the single interrupt to run for a node's work list (reference
/// `fudgeInterruptWithPriority`), returning it with its owner package.
///
/// `candidates` pairs each package name with its candidate interrupts: `[package.interrupt]`
/// (or none) for packages without pending config updates, the matched `configInterrupts`
/// otherwise. Packages are visited in name order; the first candidate primes the choice, a
/// `reboot` wins immediately, a strictly higher-priority type replaces the choice and its
/// owner, and two `service` interrupts union their (sorted, de-duplicated) service lists
/// without changing the owner.
pub fn merge_interrupts<'a, 'i, C>(
    candidates: impl IntoIterator<Item = (&'a str, C)>,
) -> Option<(Interrupt, &'a str)>
where
    C: IntoIterator<Item = &'i Interrupt>,
{
    let mut packages: Vec<(&'a str, C)> = candidates.into_iter().collect();
    packages.sort_by(|a, b| a.0.cmp(b.0));
    let mut chosen: Option<(Interrupt, &'a str)> = None;
    for (package, interrupts) in packages {
        for candidate in interrupts {
            let (current, owner) = chosen.get_or_insert_with(|| (candidate.clone(), package));
            if candidate.kind == InterruptType::Reboot {
                return Some((candidate.clone(), package));
            }
            if candidate.kind.priority() < current.kind.priority() {
                *current = candidate.clone();
                *owner = package;
            } else if candidate.kind == current.kind && candidate.kind == InterruptType::Service {
                // The reference also merges the priming candidate with itself, so a lone
                // service interrupt comes out sorted and de-duplicated too.
                current.services.extend(candidate.services.iter().cloned());
                current.services.sort();
                current.services.dedup();
            }
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(s: &[&str]) -> Interrupt {
        Interrupt {
            kind: InterruptType::Service,
            services: s.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn wire_and_agent_names() {
        for t in InterruptType::ALL {
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{t}\""));
            assert_eq!(t.as_str().parse::<InterruptType>().unwrap(), t);
        }
        assert_eq!(InterruptType::Reboot.agent_name(), "node_restart");
        assert_eq!(InterruptType::Service.agent_name(), "service_restart");
        assert_eq!(InterruptType::Noop.agent_name(), "no_op");
        assert_eq!(
            InterruptType::RestartAllServices.agent_name(),
            "restart_all_services"
        );
        assert!("restartallservices".parse::<InterruptType>().is_err());
    }

    #[test]
    fn interrupt_json_shape() {
        assert_eq!(
            serde_json::to_string(&Interrupt::new(InterruptType::Reboot)).unwrap(),
            r#"{"type":"reboot"}"#
        );
        assert_eq!(
            serde_json::to_string(&service(&["a"])).unwrap(),
            r#"{"type":"service","services":["a"]}"#
        );
        let parsed: Interrupt = serde_json::from_str(r#"{"type":"noop"}"#).unwrap();
        assert_eq!(parsed, Interrupt::new(InterruptType::Noop));
    }

    #[test]
    fn interrupt_arg_golden() {
        assert_eq!(
            interrupt_arg(InterruptType::Reboot, &[]),
            "eyJ0eXBlIjoibm9kZV9yZXN0YXJ0In0="
        );
        let arg = service(&["containerd", "kubelet"]).agent_arg();
        let decoded = STANDARD.decode(arg).unwrap();
        assert_eq!(
            String::from_utf8(decoded).unwrap(),
            r#"{"type":"service_restart","services":["containerd","kubelet"]}"#
        );
    }

    #[test]
    fn merge_services_union_owned_by_first_name() {
        let foo = [service(&["foo", "bar"])];
        let bar = [service(&["ducks", "kittens"])];
        let buz = [service(&["foo", "log"])];
        let list = vec![("foo", &foo[..]), ("bar", &bar[..]), ("buz", &buz[..])];
        let (merged, owner) = merge_interrupts(list.clone()).unwrap();
        assert_eq!(owner, "bar");
        assert_eq!(merged, service(&["bar", "ducks", "foo", "kittens", "log"]));

        let omg = [Interrupt::new(InterruptType::Reboot)];
        let mut with_reboot = list;
        with_reboot.push(("omg", &omg[..]));
        let (merged, owner) = merge_interrupts(with_reboot).unwrap();
        assert_eq!(owner, "omg");
        assert_eq!(merged, Interrupt::new(InterruptType::Reboot));
    }

    #[test]
    fn merge_priority_and_empty() {
        let none: [Interrupt; 0] = [];
        assert_eq!(merge_interrupts([("a", &none[..])]), None);
        assert_eq!(merge_interrupts(Vec::<(&str, &[Interrupt])>::new()), None);

        let noop = [Interrupt::new(InterruptType::Noop)];
        let svc = [service(&["b", "a", "a"])];
        let all = [Interrupt::new(InterruptType::RestartAllServices)];
        let (m, owner) = merge_interrupts([("a", &noop[..]), ("b", &svc[..])]).unwrap();
        // A replacing candidate is taken as is (not sorted), like the reference.
        assert_eq!((m, owner), (service(&["b", "a", "a"]), "b"));
        let (m, owner) =
            merge_interrupts([("c", &all[..]), ("b", &svc[..]), ("a", &noop[..])]).unwrap();
        assert_eq!((m.kind, owner), (InterruptType::RestartAllServices, "c"));
        // A lone service interrupt is self-merged: sorted and de-duplicated.
        let (m, _) = merge_interrupts([("b", &svc[..])]).unwrap();
        assert_eq!(m, service(&["a", "b"]));
    }
}
