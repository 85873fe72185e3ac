//! The operator ↔ agent contract: environment, container names, mounts and arguments of the
//! pods that run the agent image (unchanged agent images must keep working).

use super::Stage;

/// Agent env: per-Skyhook log root on the host.
pub const SKYHOOK_LOG_DIR_ENV: &str = "SKYHOOK_LOG_DIR";
/// Agent env: per-Skyhook bookkeeping root on the host.
pub const SKYHOOK_ROOT_DIR_ENV: &str = "SKYHOOK_ROOT_DIR";
/// Agent env: the operator sets it to `"false"`.
pub const COPY_RESOLV_ENV: &str = "COPY_RESOLV";
/// Value the operator gives `COPY_RESOLV`.
pub const COPY_RESOLV_VALUE: &str = "false";
/// Agent env: `agent_resource_id(..)`, key of the agent's once-only interrupt flags.
pub const SKYHOOK_RESOURCE_ID_ENV: &str = "SKYHOOK_RESOURCE_ID";
/// Upstream v0.15 (delta D7): the node's place in the rollout (0 for the first node picked),
/// so a package can tell the first node from the others (e.g. `kubeadm init` on node 0).
pub const SKYHOOK_NODE_ORDER_ENV: &str = "SKYHOOK_NODE_ORDER";
/// Init (copy) container env: the copy dir relative to the host root.
pub const SKYHOOK_DIR_ENV: &str = "SKYHOOK_DIR";

/// `SKYHOOK_LOG_DIR` value: `<AGENT_LOG_ROOT>/<sh>`.
pub fn agent_log_dir(agent_log_root: &str, skyhook: &str) -> String {
    format!("{agent_log_root}/{skyhook}")
}

/// `SKYHOOK_ROOT_DIR` value: `<COPY_DIR_ROOT>/<sh>`.
pub fn agent_root_dir(copy_dir_root: &str, skyhook: &str) -> String {
    format!("{copy_dir_root}/{skyhook}")
}

/// Name of the interrupt init container; pod/Job outcome handling keys on it.
pub const INTERRUPT_CONTAINER: &str = "interrupt";
/// Name of the placeholder main container.
pub const PAUSE_CONTAINER: &str = "pause";

/// Host-path volume of the host's `/`.
pub const ROOT_MOUNT_VOLUME: &str = "root-mount";
/// Host path of `ROOT_MOUNT_VOLUME`.
pub const ROOT_MOUNT_HOST_PATH: &str = "/";
/// Where the host root is mounted in agent containers (also the agent's root argument).
pub const ROOT_MOUNT_PATH: &str = "/root";
/// Payload directory inside package images.
pub const PACKAGE_PAYLOAD_DIR: &str = "/skyhook-package";
/// Mount path of the node metadata ConfigMap.
pub const NODE_METADATA_MOUNT_PATH: &str = "/skyhook-package/node-metadata";
/// Mount path of the package ConfigMap.
pub const CONFIGMAPS_MOUNT_PATH: &str = "/skyhook-package/configmaps";
/// Command of the copy init container (`/bin/sh -c <COPY_SCRIPT>`).
pub const COPY_SHELL: &str = "/bin/sh";
/// Script of the copy init container: copies the payload onto the host at `$SKYHOOK_DIR`.
/// `-f` where the reference has none: every stage of a package copies into the same directory,
/// and a `cp` built without busybox's non-POSIX default (Debian's, for one) refuses to replace the
/// ConfigMap's symbolic links the previous stage copied, so every stage after the first failed.
pub const COPY_SCRIPT: &str =
    "mkdir -p /root/${SKYHOOK_DIR} && cp -rf /skyhook-package/* /root/${SKYHOOK_DIR}";

/// Package names are capped at 43 characters in container names so that the longest
/// (`-post-interruptcheck`) stays within 63.
const CONTAINER_PACKAGE_MAX: usize = 43;

fn container_package(package: &str) -> &str {
    match package.char_indices().nth(CONTAINER_PACKAGE_MAX) {
        Some((i, _)) => &package[..i],
        None => package,
    }
}

/// Copy init container: `<pkg[:43]>-init`.
pub fn init_container_name(package: &str) -> String {
    format!("{}-init", container_package(package))
}

/// Stage init container: `<pkg[:43]>-<stage>`.
pub fn stage_container_name(package: &str, stage: Stage) -> String {
    format!("{}-{}", container_package(package), stage.as_str())
}

/// Check init container: `<pkg[:43]>-<stage>check` (no dash before `check`).
pub fn check_container_name(package: &str, stage: Stage) -> String {
    format!("{}-{}check", container_package(package), stage.as_str())
}

/// Agent mode of a stage's check: `<stage>-check`.
pub fn check_mode(stage: Stage) -> String {
    format!("{}-check", stage.as_str())
}

/// Arguments of a stage or check container: `[<mode>, "/root", <copy dir>]`.
pub fn agent_args(mode: &str, copy_dir: &str) -> Vec<String> {
    vec![
        mode.to_owned(),
        ROOT_MOUNT_PATH.to_owned(),
        copy_dir.to_owned(),
    ]
}

/// Arguments of the interrupt container: `["interrupt", "/root", <copy dir>, <interrupt arg>]`.
pub fn interrupt_agent_args(copy_dir: &str, interrupt_arg: &str) -> Vec<String> {
    vec![
        Stage::Interrupt.as_str().to_owned(),
        ROOT_MOUNT_PATH.to_owned(),
        copy_dir.to_owned(),
        interrupt_arg.to_owned(),
    ]
}

/// Package image reference: `<image>@<containerSHA>` when a digest is pinned, else
/// `<image>:<version>`.
pub fn package_image(image: &str, version: &str, container_sha: Option<&str>) -> String {
    match container_sha.filter(|sha| !sha.is_empty()) {
        Some(sha) => format!("{image}@{sha}"),
        None => format!("{image}:{version}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values() {
        assert_eq!(agent_log_dir("/log", "skyhook_name"), "/log/skyhook_name");
        assert_eq!(agent_root_dir("/tmp", "skyhook_name"), "/tmp/skyhook_name");
    }

    #[test]
    fn containers() {
        assert_eq!(init_container_name("dexter"), "dexter-init");
        assert_eq!(stage_container_name("dexter", Stage::Apply), "dexter-apply");
        assert_eq!(
            check_container_name("dexter", Stage::Apply),
            "dexter-applycheck"
        );
        assert_eq!(
            check_container_name("dexter", Stage::PostInterrupt),
            "dexter-post-interruptcheck"
        );
        let long = "a".repeat(50);
        let name = check_container_name(&long, Stage::PostInterrupt);
        assert_eq!(name.len(), 63);
        assert_eq!(check_mode(Stage::PostInterrupt), "post-interrupt-check");
        assert_eq!(
            agent_args("apply-check", "/d"),
            ["apply-check", "/root", "/d"]
        );
        assert_eq!(
            interrupt_agent_args("/d", "e30="),
            ["interrupt", "/root", "/d", "e30="]
        );
    }

    #[test]
    fn images() {
        assert_eq!(package_image("alpine", "3.20", None), "alpine:3.20");
        assert_eq!(package_image("alpine", "3.20", Some("")), "alpine:3.20");
        assert_eq!(
            package_image("alpine", "3.20", Some("sha256:ab")),
            "alpine@sha256:ab"
        );
    }
}
