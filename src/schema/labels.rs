//! Label-safe forms of values that can be longer than 63 characters or contain characters a
//! label value may not (node names, resource ids, versions with `+build` metadata).
//!
//! Full values go into annotations; labels carry these deterministic forms, so a selector can
//! be computed from the full value alone.

use super::digest::sha256_hex;
use super::validation::is_valid_label_value;

/// Prefix budget: 52 + `-` + 10 hex digits = 63.
const HASHED_PREFIX_MAX: usize = 52;
const HASH_HEX_LEN: usize = 10;

/// `<sanitised prefix>-<first 10 hex of SHA-256(value)>`: characters outside `[A-Za-z0-9._-]`
/// become `_`, the prefix is cut to 52 characters and stripped of non-alphanumerics at both
/// ends (a label value must start and end alphanumeric; if nothing is left the label is the
/// bare hash). Always a valid label value of at most 63 characters; the hash covers the whole
/// value, so values that share a prefix or differ only in replaced characters stay distinct.
fn hashed_label(value: &str) -> String {
    let hash = sha256_hex(value, 64);
    let hash = &hash[..HASH_HEX_LEN];
    let sanitised: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(HASHED_PREFIX_MAX)
        .collect();
    let prefix = sanitised.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if prefix.is_empty() {
        hash.to_owned()
    } else {
        format!("{prefix}-{hash}")
    }
}

/// Label form of a full resource id (`<sh>-<uid>-<generation>`), always hashed even when the
/// id would fit, so every Job of a generation carries the same, predictable value.
///
/// This is the only mapping from a full id to the `skyhook.nvidia.com/resource-id` Job label:
/// the operator labels Jobs with it and the plugin finds a generation's Jobs by selecting on
/// `resource_id_label(<full id>)`. The full id is in the annotation of the same key.
pub fn resource_id_label(full_id: &str) -> String {
    hashed_label(full_id)
}

/// `value` itself when it already is a valid label value, otherwise its hashed form (see
/// `resource_id_label`). Used for the node label of Jobs (node names can exceed 63
/// characters) and for package labels.
pub fn label_value(value: &str) -> String {
    if is_valid_label_value(value) {
        value.to_owned()
    } else {
        hashed_label(value)
    }
}

/// Value of the `skyhook.nvidia.com/package` label: `<pkg>-<ver>` (e.g. `spencer-3.2.3`),
/// verbatim whenever it is a valid label value, as the reference writes it.
pub fn package_label(package: &str, version: &str) -> String {
    label_value(&format!("{package}-{version}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn assert_valid(label: &str) {
        assert!(label.len() <= 63, "{label} is {} long", label.len());
        assert!(is_valid_label_value(label), "{label}");
    }

    #[test]
    fn resource_id_labels_are_valid_and_deterministic() {
        let id = "simple-skyhook-6f1c7b0e-8a3d-4d5e-9b2a-0c1d2e3f4a5b-12";
        let label = resource_id_label(id);
        assert_valid(&label);
        assert_eq!(label, resource_id_label(id));
        // The 52-character cut ends in `-`, which is trimmed.
        assert_eq!(
            label,
            format!(
                "simple-skyhook-6f1c7b0e-8a3d-4d5e-9b2a-0c1d2e3f4a5b-{}",
                &sha256_hex(id, 10)
            )
        );
        let full = resource_id_label(&"a".repeat(80));
        assert_eq!(full.len(), 63);

        let short = resource_id_label("a-b-1");
        assert_eq!(short, format!("a-b-1-{}", &sha256_hex("a-b-1", 10)));
        for odd in [
            "",
            "-",
            "+++",
            "-a-",
            "é",
            "a/b:c",
            &"z".repeat(300),
            "x----------------------------------------------------y",
        ] {
            assert_valid(&resource_id_label(odd));
        }
        assert_eq!(resource_id_label("+++").len(), 10);
    }

    #[test]
    fn label_value_verbatim_or_hashed() {
        assert_eq!(label_value("kind-worker"), "kind-worker");
        let long = "ip-100-96-5-57.eu-central-1.compute.internal.with.a.very.long.suffix";
        let l = label_value(long);
        assert_valid(&l);
        assert_ne!(l, long);
        assert_eq!(l, label_value(long));
        assert_eq!(package_label("spencer", "3.2.3"), "spencer-3.2.3");
        let plus = package_label("p", "1.0.0+meta");
        assert_valid(&plus);
        assert!(plus.starts_with("p-1.0.0_meta-"), "{plus}");
        assert_ne!(plus, package_label("p", "1.0.0_meta"));
    }

    #[test]
    fn no_collisions() {
        let mut ids = Vec::with_capacity(100_000);
        let shared = "s".repeat(60);
        for i in 0..25_000 {
            // Identical in the first 52 characters: only the hash separates them.
            ids.push(format!("{shared}-{i}"));
            ids.push(format!("sh-{i}+build"));
            ids.push(format!("sh-{i}_build"));
            ids.push(format!("skyhook-{i:08x}-0b5e-4c1d-{}", i % 7));
        }
        let unique: HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());

        let mut labels = HashSet::with_capacity(ids.len());
        for id in &ids {
            let label = resource_id_label(id);
            assert_valid(&label);
            assert!(labels.insert(label), "collision for {id}");
        }
        let values: HashSet<String> = ids.iter().map(|id| label_value(id)).collect();
        assert_eq!(values.len(), ids.len());
    }
}
