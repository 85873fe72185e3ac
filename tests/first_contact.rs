//! A fresh Debian machine: `tests/demo` and `.ci/run` check the Debian packages the local test
//! cluster needs before anything else (`tests/prerequisites`), and a user who cannot install them
//! is told the exact `apt-get` line at once, not `debootstrap: command not found` minutes later.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `tests/prerequisites` as a user other than root on a PATH holding bash and an `id` that
/// says so, and nothing else: every tool is missing.
#[test]
fn a_user_without_the_packages_is_told_the_apt_get_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path();
    std::os::unix::fs::symlink("/bin/bash", bin.join("bash")).expect("bash");
    std::fs::write(bin.join("id"), "#!/bin/bash\necho 1000\n").expect("id");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(bin.join("id"), mode).expect("chmod");
    let out = Command::new("/bin/bash")
        .arg(root().join("tests/prerequisites"))
        .env_clear()
        .env("PATH", bin)
        .output()
        .expect("run tests/prerequisites");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let line = stderr
        .lines()
        .find_map(|l| l.split_once("install them with: ").map(|(_, cmd)| cmd))
        .unwrap_or_else(|| panic!("no install line in: {stderr}"));
    assert!(line.starts_with("sudo apt-get install -y "), "{line}");
    for pkg in [
        "jq",
        "openssl",
        "curl",
        "util-linux",
        "musl-tools",
        "debootstrap",
        "iptables",
        "iproute2",
        "procps",
    ] {
        assert!(
            line.split_whitespace().any(|w| w == pkg),
            "{pkg} missing from: {line}"
        );
    }
    assert_eq!(
        line.matches("util-linux").count(),
        1,
        "each package once: {line}"
    );
}

/// The demo and CI check the same list, first.
#[test]
fn the_demo_and_ci_check_the_packages_before_anything_else() {
    for script in ["tests/demo", ".ci/run"] {
        let text = std::fs::read_to_string(root().join(script)).expect(script);
        let check = text
            .find("tests/prerequisites")
            .unwrap_or_else(|| panic!("{script} does not run tests/prerequisites"));
        for later in ["tests/cluster/up", "cargo build"] {
            let at = text.find(later).unwrap_or(usize::MAX);
            assert!(check < at, "{script}: {later} runs before the check");
        }
    }
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README");
    assert!(
        readme.contains("tests/prerequisites"),
        "README's Try it names the prerequisites"
    );
}
