//! Whether a reboot interrupt's successful Job means the node rebooted. Agent v7 ends a reboot
//! with exit 0 when `reboot` dies by SIGTERM, which may be while the host is still going down
//! (`agent-v7-contract.md`): post-interrupt and the uncordon wait until the node reports a boot
//! id other than the one its Job was created in ([`crate::schema::BOOT_ID_ANNOTATION`]).

use jiff::Timestamp;

use super::input::Host;
use crate::jobs::{JobView, Outcome};

pub(super) enum Reboot {
    /// Not a reboot, no boot id to compare, or a new boot: the stage is done.
    Seen,
    /// Still the boot the interrupt began in, within REBOOT_CONFIRM_TIMEOUT; re-checked then.
    Awaited { why: String, until: Timestamp },
    /// Still the same boot past the timeout: the node did not reboot.
    NotSeen(String),
}

pub(super) fn judge(done: &JobView, host: &Host, now: Timestamp) -> Reboot {
    let (Some(began), Some(boot)) = (done.boot_id.as_ref(), host.boot_id) else {
        return Reboot::Seen;
    };
    let Outcome::Complete { at } = done.outcome else {
        return Reboot::Seen;
    };
    if &**began != boot || host.reboot_confirm.is_zero() {
        return Reboot::Seen;
    }
    let waited = now.duration_since(at).unsigned_abs();
    let limit = host.reboot_confirm;
    if waited < limit {
        return Reboot::Awaited {
            why: format!(
                "waiting for the node to come back from its reboot: the interrupt's agent exited \
                 0 {}s ago and the node still reports boot id {boot} (agent v7 exits before the \
                 host is down; gives up after REBOOT_CONFIRM_TIMEOUT={limit:?})",
                waited.as_secs()
            ),
            until: at + limit,
        };
    }
    Reboot::NotSeen(format!(
        "the reboot interrupt's agent exited 0, but the node still reports boot id {boot} after \
         REBOOT_CONFIRM_TIMEOUT={limit:?}: the node did not reboot, so the interrupt runs again \
         (set REBOOT_CONFIRM_TIMEOUT=0 for nodes whose boot id never changes)"
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::interned::Shared;
    use crate::plan::fixtures::{job, package, t};
    use crate::schema::Stage;

    fn done(boot: Option<&str>, at: Timestamp) -> JobView {
        let mut j = job(&package("drv").reboot().build(), Stage::Interrupt).build();
        j.outcome = Outcome::Complete { at };
        j.boot_id = boot.map(Shared::new);
        j
    }

    fn host(boot: Option<&'static str>) -> Host<'static> {
        Host {
            boot_id: boot,
            reboot_confirm: Duration::from_secs(600),
            ..Host::default()
        }
    }

    #[test]
    fn a_new_boot_id_confirms_the_reboot_and_the_old_one_waits_then_gives_up() {
        let at = t(0);
        let soon = at + Duration::from_secs(30);
        let late = at + Duration::from_secs(601);
        let j = done(Some("b1"), at);
        assert!(matches!(judge(&j, &host(Some("b2")), soon), Reboot::Seen));
        match judge(&j, &host(Some("b1")), soon) {
            Reboot::Awaited { why, until } => {
                assert!(why.contains("still reports boot id b1"), "{why}");
                assert_eq!(until, at + Duration::from_secs(600));
            }
            _ => panic!("a reboot not yet seen must wait"),
        }
        match judge(&j, &host(Some("b1")), late) {
            Reboot::NotSeen(why) => assert!(why.contains("did not reboot"), "{why}"),
            _ => panic!("past the timeout the reboot is not seen"),
        }
    }

    #[test]
    fn without_a_boot_id_or_with_the_wait_off_the_agent_is_taken_at_its_word() {
        let at = t(0);
        assert!(matches!(
            judge(&done(None, at), &host(Some("b1")), at),
            Reboot::Seen
        ));
        assert!(matches!(
            judge(&done(Some("b1"), at), &host(None), at),
            Reboot::Seen
        ));
        let off = Host {
            reboot_confirm: Duration::ZERO,
            ..host(Some("b1"))
        };
        assert!(matches!(
            judge(&done(Some("b1"), at), &off, at),
            Reboot::Seen
        ));
    }
}
