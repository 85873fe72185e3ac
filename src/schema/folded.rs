//! The node annotation `folded_<skyhook>` (new in this implementation): per package version and
//! stage, the newest attempt whose outcome the node state holds. It is written in the same node
//! patch as that state, so the two never disagree, and it costs no write of its own: it replaces
//! a patch of every finished Job. A Job whose attempt it covers was folded; a later run of the
//! same stage (a `package rerun`, a config change) has higher attempts and is never taken for the
//! old one. An entry is dropped once no Job of its stage is left.

use std::collections::BTreeMap;

use super::Stage;

/// `<pkg>|<ver>|<stage>` → newest folded attempt.
pub type Folded = BTreeMap<String, u32>;

pub fn folded_key(package: &str, version: &str, stage: Stage) -> String {
    format!(
        "{}|{}",
        super::package_key(package, version),
        stage.as_str()
    )
}

/// `key == folded_key(package, version, stage)`, without building the key: a pass asks it for
/// every Job of every node.
pub fn is_folded_key(key: &str, package: &str, version: &str, stage: Stage) -> bool {
    key.strip_prefix(package)
        .and_then(|k| k.strip_prefix('|'))
        .and_then(|k| k.strip_prefix(version))
        .and_then(|k| k.strip_prefix('|'))
        == Some(stage.as_str())
}

/// Whether attempt `attempt` of (package, version, stage) is folded.
pub fn is_folded(
    folded: &Folded,
    package: &str,
    version: &str,
    stage: Stage,
    attempt: u32,
) -> bool {
    folded
        .get(&folded_key(package, version, stage))
        .is_some_and(|&a| attempt <= a)
}

/// Records attempt `attempt` of (package, version, stage) as folded.
pub fn fold(folded: &mut Folded, package: &str, version: &str, stage: Stage, attempt: u32) {
    let e = folded
        .entry(folded_key(package, version, stage))
        .or_insert(attempt);
    *e = (*e).max(attempt);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_up_to_the_newest_folded_one_are_folded() {
        let mut f = Folded::new();
        assert!(!is_folded(&f, "p", "1", Stage::Apply, 0));
        fold(&mut f, "p", "1", Stage::Apply, 2);
        fold(&mut f, "p", "1", Stage::Apply, 1);
        assert_eq!(f.get("p|1|apply"), Some(&2), "never lowered");
        assert!(is_folded(&f, "p", "1", Stage::Apply, 0));
        assert!(is_folded(&f, "p", "1", Stage::Apply, 2));
        assert!(!is_folded(&f, "p", "1", Stage::Apply, 3), "a later run");
        assert!(!is_folded(&f, "p", "1", Stage::Config, 0), "another stage");
        assert!(!is_folded(&f, "p", "2", Stage::Apply, 0), "another version");
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"p|1|apply":2}"#);
        for (package, version, stage) in [
            ("p", "1", Stage::Apply),
            ("p", "1", Stage::Config),
            ("p|1", "", Stage::Apply),
            ("p", "11", Stage::Apply),
            ("", "1", Stage::Apply),
        ] {
            let key = "p|1|apply";
            assert_eq!(
                is_folded_key(key, package, version, stage),
                key == folded_key(package, version, stage),
                "{package} {version} {stage:?}"
            );
        }
    }
}
