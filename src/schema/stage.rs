//! Package `Stage`s with their wire strings, display rank and successor function.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::wire_enum::wire_enum;

wire_enum! {
    // Declared in the order the reference emits its metrics.
    /// A stage of a package on a node. The wire string is also the agent mode the stage runs.
    #[derive(
        Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
    )]
    pub serde enum Stage {
        Uninstall = "uninstall",
        // Upstream v0.16 (delta D12): the interrupt after a requested uninstall (`uninstall`
        // block) of a package that has one. In upstream's order.
        UninstallInterrupt = "uninstall-interrupt",
        Upgrade = "upgrade",
        Apply = "apply",
        Interrupt = "interrupt",
        PostInterrupt = "post-interrupt",
        Config = "config",
    }
    kind = "stage";
}

impl Stage {
    /// Rank in a package's life for sorting displays: uninstall < apply = upgrade < config <
    /// interrupt < post-interrupt.
    pub const fn run_order(self) -> u8 {
        match self {
            Stage::Uninstall | Stage::UninstallInterrupt => 0,
            Stage::Apply | Stage::Upgrade => 1,
            Stage::Config => 2,
            Stage::Interrupt => 3,
            Stage::PostInterrupt => 4,
        }
    }

    /// The reference's `NextStage` for an entry whose state is `complete`; `None` when the
    /// stage is terminal for this package.
    pub const fn next(self, has_interrupt: bool) -> Option<Stage> {
        match (self, has_interrupt) {
            (Stage::Uninstall, _) => Some(Stage::Apply),
            // The entry is removed when it completes: nothing follows.
            (Stage::UninstallInterrupt, _) => None,
            (Stage::Upgrade | Stage::Apply, _) => Some(Stage::Config),
            (Stage::Config, true) => Some(Stage::Interrupt),
            (Stage::Interrupt, true) => Some(Stage::PostInterrupt),
            (Stage::Config | Stage::Interrupt | Stage::PostInterrupt, _) => None,
        }
    }

    /// A stage whose Job runs an interrupt (reboot, service restart): it runs alone on the node.
    pub const fn is_interrupt(self) -> bool {
        matches!(self, Stage::Interrupt | Stage::UninstallInterrupt)
    }

    /// A stage of an uninstall: no spec hash, never stale, always run to the end.
    pub const fn is_uninstall(self) -> bool {
        matches!(self, Stage::Uninstall | Stage::UninstallInterrupt)
    }

    /// The stage a package is complete at: `post-interrupt` with an interrupt, else `config`.
    pub const fn terminal(has_interrupt: bool) -> Stage {
        if has_interrupt {
            Stage::PostInterrupt
        } else {
            Stage::Config
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_uninstall_interrupt_round_trips() {
        let s: Stage = serde_json::from_str("\"uninstall-interrupt\"").unwrap();
        assert_eq!(s, Stage::UninstallInterrupt);
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            "\"uninstall-interrupt\""
        );
    }

    #[test]
    fn wire_strings_roundtrip() {
        let wire: Vec<_> = Stage::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            wire,
            [
                "uninstall",
                "uninstall-interrupt",
                "upgrade",
                "apply",
                "interrupt",
                "post-interrupt",
                "config"
            ]
        );
        for s in Stage::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<Stage>(&json).unwrap(), s);
            assert_eq!(s.as_str().parse::<Stage>().unwrap(), s);
        }
        assert!("post_interrupt".parse::<Stage>().is_err());
        assert!(serde_json::from_str::<Stage>("\"bogus\"").is_err());
    }

    #[test]
    fn run_order() {
        let mut all = Stage::ALL;
        all.sort_by_key(|s| s.run_order());
        assert_eq!(all[0], Stage::Uninstall);
        assert_eq!(Stage::Apply.run_order(), Stage::Upgrade.run_order());
        assert!(Stage::Apply.run_order() < Stage::Config.run_order());
        assert!(Stage::Config.run_order() < Stage::Interrupt.run_order());
        assert!(Stage::Interrupt.run_order() < Stage::PostInterrupt.run_order());
    }

    #[test]
    fn next_stage_table() {
        for hi in [false, true] {
            assert_eq!(Stage::Uninstall.next(hi), Some(Stage::Apply));
            assert_eq!(Stage::Upgrade.next(hi), Some(Stage::Config));
            assert_eq!(Stage::Apply.next(hi), Some(Stage::Config));
            assert_eq!(Stage::PostInterrupt.next(hi), None);
        }
        assert_eq!(Stage::Config.next(false), None);
        assert_eq!(Stage::Config.next(true), Some(Stage::Interrupt));
        assert_eq!(Stage::Interrupt.next(false), None);
        assert_eq!(Stage::Interrupt.next(true), Some(Stage::PostInterrupt));
        assert_eq!(Stage::terminal(true), Stage::PostInterrupt);
        assert_eq!(Stage::terminal(false), Stage::Config);
    }
}
