//! Object names, directories and ids derived from Skyhook, package and node names.

use super::digest::sha256_hex;
use super::validation::is_dns1123_subdomain;
use super::{InterruptType, SchemaError, Stage};

/// Longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn truncate_bytes(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The reference's `generateSafeName`: join with `-`, replace `.` with `-`, hash the whole
/// (un-truncated, original-case) string, keep the first `max_len - 9` characters, append `-`
/// and the first 8 hex digits of the hash, lowercase. The result is at most `max_len` long.
pub fn safe_name(max_len: usize, parts: &[&str]) -> String {
    let joined = parts.join("-").replace('.', "-");
    let hash = sha256_hex(&joined, 64);
    let kept = truncate_bytes(&joined, max_len.saturating_sub(9));
    format!("{kept}-{}", &hash[..8]).to_lowercase()
}

/// The reference operator's stage pod name.
pub fn stage_pod_name(
    skyhook: &str,
    package: &str,
    version: &str,
    stage: Stage,
    node: &str,
) -> String {
    safe_name(63, &[skyhook, package, version, stage.as_str(), node])
}

/// The reference operator's interrupt pod name (type in CRD spelling, lowercased by
/// `safe_name`).
pub fn interrupt_pod_name(skyhook: &str, kind: InterruptType, node: &str) -> String {
    safe_name(63, &[skyhook, "interrupt", kind.as_str(), node])
}

/// Highest Job attempt index; keeps `<59 chars>-<attempt>` within the 63-character limit of
/// the `job-name` pod label.
pub const MAX_JOB_ATTEMPT: u32 = 999;

/// Name of the stage Job for one attempt: the reference pod-name formula with a 59-character
/// budget, then `-<attempt>`.
///
/// Characters a DNS-1123 name cannot hold (`+` or `_` from a version's build metadata) become
/// `-`; the reference would have produced a name the API server rejects. The hash is still
/// taken over the original text, so such names stay distinct.
pub fn job_name(
    skyhook: &str,
    package: &str,
    version: &str,
    stage: Stage,
    node: &str,
    attempt: u32,
) -> Result<String, SchemaError> {
    attempt_name(&[skyhook, package, version, stage.as_str(), node], attempt)
}

/// Name of the interrupt Job for one attempt: the reference interrupt pod name's parts plus the
/// owner package and its version, so that the interrupt of another package, or of another
/// version of the same one, can never be taken for this one.
pub fn interrupt_job_name(
    skyhook: &str,
    stage: Stage,
    kind: InterruptType,
    owner: (&str, &str),
    node: &str,
    attempt: u32,
) -> Result<String, SchemaError> {
    let (package, version) = owner;
    attempt_name(
        &[
            skyhook,
            stage.as_str(),
            kind.as_str(),
            package,
            version,
            node,
        ],
        attempt,
    )
}

/// Name of one attempt of a node's health check Job (issue 38), for the gate that began at
/// `since` (a later gate of the same node never adopts an earlier one's Jobs).
pub fn health_check_job_name(
    skyhook: &str,
    node: &str,
    since: &str,
    attempt: u32,
) -> Result<String, SchemaError> {
    let period = sha256_hex(since, 64);
    attempt_name(&[skyhook, "health-check", node, &period[..6]], attempt)
}

fn attempt_name(parts: &[&str], attempt: u32) -> Result<String, SchemaError> {
    if attempt > MAX_JOB_ATTEMPT {
        return Err(SchemaError::AttemptOutOfRange(attempt));
    }
    let base = dash_outside_lower_alnum(&safe_name(59, parts));
    Ok(format!("{base}-{attempt}"))
}

/// Replaces every character other than `[a-z0-9]` with `-`.
fn dash_outside_lower_alnum(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Node metadata ConfigMap name.
pub fn node_metadata_configmap_name(skyhook: &str, node: &str) -> String {
    safe_name(253, &[skyhook, node, "metadata"])
}

/// Pod volume that mounts the node metadata ConfigMap.
pub fn metadata_volume_name(node: &str) -> String {
    safe_name(63, &["metadata", node])
}

/// Package ConfigMap name: `lower(<sh>-<pkg>-<ver>)`, dots kept, as the reference.
///
/// When that is not a valid DNS-1123 subdomain (a version with `+build` metadata, or a
/// pre-release identifier starting with `-`), the reference's create fails forever; we instead
/// replace every character other than `[a-z0-9]` with `-`, append `-<8 hex of SHA-256 of the
/// unmodified name>` so distinct versions stay distinct, and truncate to fit 253 characters.
pub fn package_configmap_name(skyhook: &str, package: &str, version: &str) -> String {
    let original = format!("{skyhook}-{package}-{version}");
    let lowered = original.to_lowercase();
    if is_dns1123_subdomain(&lowered) {
        return lowered;
    }
    let hash = sha256_hex(&original, 64);
    let sanitised = dash_outside_lower_alnum(&lowered);
    let kept = truncate_bytes(&sanitised, 253 - 9);
    format!("{kept}-{}", &hash[..8])
}

/// Pod volume that mounts the package ConfigMap.
pub fn package_configmap_volume_name(package: &str) -> &str {
    package
}

/// Host directory the package payload is copied to (relative to the host root):
/// `<copy_dir_root>/<sh>/<pkg>-<ver>-<uid>-<generation>`.
pub fn copy_dir(
    copy_dir_root: &str,
    skyhook: &str,
    package: &str,
    version: &str,
    uid: &str,
    generation: i64,
) -> String {
    format!("{copy_dir_root}/{skyhook}/{package}-{version}-{uid}-{generation}")
}

/// Resource id of one Skyhook generation: `<sh>-<uid>-<generation>`. Changes on every spec
/// edit, which re-arms the agent's once-per-id interrupts.
pub fn resource_id(skyhook: &str, uid: &str, generation: i64) -> String {
    format!("{skyhook}-{uid}-{generation}")
}

/// Value of the agent's `SKYHOOK_RESOURCE_ID`: `<resource id>_<pkg>_<ver>`.
pub fn agent_resource_id(resource_id: &str, package: &str, version: &str) -> String {
    format!("{resource_id}_{package}_{version}")
}

/// Splits a `SKYHOOK_RESOURCE_ID` into (resource id, package, version) the way the agent does:
/// exactly three `_`-separated parts, otherwise an error (the agent would crash).
pub fn parse_agent_resource_id(value: &str) -> Result<(&str, &str, &str), SchemaError> {
    let mut parts = value.split('_');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(id), Some(package), Some(version), None) => Ok((id, package, version)),
        _ => Err(SchemaError::InvalidAgentResourceId(value.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::validation::is_dns1123_label;

    #[test]
    fn reference_examples() {
        assert_eq!(
            safe_name(
                63,
                &["simple-skyhook", "dexter", "1.2.3", "apply", "kind-worker"]
            ),
            "simple-skyhook-dexter-1-2-3-apply-kind-worker-2555fea2"
        );
        assert_eq!(
            stage_pod_name(
                "simple-skyhook",
                "dexter",
                "1.2.3",
                Stage::Apply,
                "kind-worker"
            ),
            "simple-skyhook-dexter-1-2-3-apply-kind-worker-2555fea2"
        );
        assert_eq!(
            interrupt_pod_name("interrupt", InterruptType::Reboot, "kind-worker"),
            "interrupt-interrupt-reboot-kind-worker-c82cb111"
        );
        assert_eq!(
            node_metadata_configmap_name("simple-skyhook", "kind-worker"),
            "simple-skyhook-kind-worker-metadata-52688a8e"
        );
        assert_eq!(
            metadata_volume_name("kind-worker"),
            "metadata-kind-worker-8bfc3f3a"
        );
        assert_eq!(safe_name(63, &["test", "node1"]).len(), 19);
        let dotted = safe_name(63, &["test.name", "node.1"]);
        assert_eq!(dotted.len(), 25);
        assert!(dotted.starts_with("test-name-node-1-"), "{dotted}");
        assert_eq!(&dotted[17..], &sha256_hex("test-name-node-1", 8));
    }

    #[test]
    fn safe_name_truncates_and_hashes_original_case() {
        let long_node = "ip-100-96-5-57.eu-central-1.compute.internal";
        let n = safe_name(
            63,
            &[
                "a-rather-long-skyhook-name",
                "package",
                "1.2.3",
                "post-interrupt",
                long_node,
            ],
        );
        assert_eq!(n.len(), 63);
        let upper = safe_name(63, &["ABC"]);
        let lower = safe_name(63, &["abc"]);
        assert_eq!(&upper[..4], "abc-");
        assert_ne!(upper, lower);
        assert_eq!(safe_name(5, &["abcdef"]).len(), 9);
    }

    #[test]
    fn job_names() {
        let long_node = "ip-100-96-5-57.eu-central-1.compute.internal";
        let name = job_name(
            "a-rather-long-skyhook-name",
            "package",
            "1.2.3",
            Stage::PostInterrupt,
            long_node,
            999,
        )
        .unwrap();
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("-999"));
        assert!(is_dns1123_label(&name), "{name}");
        assert_eq!(
            job_name(
                "simple-skyhook",
                "dexter",
                "1.2.3",
                Stage::Apply,
                "kind-worker",
                0
            )
            .unwrap(),
            format!(
                "{}-0",
                safe_name(
                    59,
                    &["simple-skyhook", "dexter", "1.2.3", "apply", "kind-worker"]
                )
            )
        );
        let plus = job_name("sh", "p", "1.0.0+build_1", Stage::Apply, "n", 1).unwrap();
        let minus = job_name("sh", "p", "1.0.0-build-1", Stage::Apply, "n", 1).unwrap();
        assert!(is_dns1123_label(&plus), "{plus}");
        assert_ne!(plus, minus);
        assert!(matches!(
            job_name("sh", "p", "1", Stage::Apply, "n", 1000),
            Err(SchemaError::AttemptOutOfRange(1000))
        ));
        let owner = ("drv", "1.2.0");
        let int = interrupt_job_name(
            "sh",
            Stage::Interrupt,
            InterruptType::RestartAllServices,
            owner,
            long_node,
            12,
        )
        .unwrap();
        assert!(
            int.starts_with("sh-interrupt-restartallservices-drv-1-2-0-ip-100-9"),
            "{int}"
        );
        assert!(int.len() <= 63 && is_dns1123_label(&int));
        // Another version or another package never shares an interrupt Job's name.
        let reboot = |owner| {
            interrupt_job_name(
                "sh",
                Stage::Interrupt,
                InterruptType::Reboot,
                owner,
                "n1",
                0,
            )
            .unwrap()
        };
        let names = [
            reboot(("drv", "1.2.0")),
            reboot(("drv", "1.1.0")),
            reboot(("fw", "1.2.0")),
        ];
        assert_ne!(names[0], names[1]);
        assert_ne!(names[0], names[2]);
        assert_ne!(names[1], names[2]);
    }

    #[test]
    fn package_configmaps() {
        assert_eq!(
            package_configmap_name("simple-skyhook", "dexter", "1.2.3"),
            "simple-skyhook-dexter-1.2.3"
        );
        assert_eq!(
            package_configmap_name("sh", "p", "1.0.0-RC.1"),
            "sh-p-1.0.0-rc.1"
        );
        let plus = package_configmap_name("sh", "p", "1.0.0+meta");
        let minus = package_configmap_name("sh", "p", "1.0.0-meta");
        assert!(is_dns1123_subdomain(&plus), "{plus}");
        assert!(plus.starts_with("sh-p-1-0-0-meta-"), "{plus}");
        assert_ne!(plus, minus);
        assert_eq!(package_configmap_volume_name("dexter"), "dexter");
    }

    #[test]
    fn ids_and_dirs() {
        assert_eq!(
            copy_dir("/var/lib/skyhook", "sh", "dexter", "1.2.3", "uid-1", 4),
            "/var/lib/skyhook/sh/dexter-1.2.3-uid-1-4"
        );
        let rid = resource_id("sh", "0b5e-11", 2);
        assert_eq!(rid, "sh-0b5e-11-2");
        let agent = agent_resource_id(&rid, "dexter", "1.2.3");
        assert_eq!(agent, "sh-0b5e-11-2_dexter_1.2.3");
        assert_eq!(
            parse_agent_resource_id(&agent).unwrap(),
            ("sh-0b5e-11-2", "dexter", "1.2.3")
        );
        assert_eq!(
            agent_resource_id("id", "package", "version"),
            "id_package_version"
        );
        assert!(parse_agent_resource_id("a_b").is_err());
        assert!(parse_agent_resource_id("a_b_c_d").is_err());
        assert_eq!(parse_agent_resource_id("__").unwrap(), ("", "", ""));
    }
}
