//! The operator image, built without a Docker engine by `deploy/image/build` into the target
//! directory; shared by the image test and the tests that run the operator as a pod.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cargo target directory this test binary was built into (`<target>/debug/deps/e2e-…`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .nth(3)
        .expect("target directory above the test binary")
        .to_path_buf()
}

/// Held while a test builds or reads `<target>/image/`: the build rewrites it in place, and
/// tests run in parallel.
pub fn lock() -> std::fs::File {
    let path = target_dir().join("image.lock");
    let file =
        std::fs::File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    file
}

/// Runs `deploy/image/build --reuse-binary` (hold [`lock`]) and returns what it printed on
/// stdout. It packages the musl release binary `.ci/run` builds, and builds it only when there is
/// none (several minutes).
pub fn build() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(repo.join("deploy/image/build"))
        .arg("--reuse-binary")
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("IMAGE")
        .output()
        .expect("run deploy/image/build");
    assert!(
        out.status.success(),
        "deploy/image/build failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The image's OCI layout (after [`build`]).
pub fn layout() -> PathBuf {
    target_dir().join("image/oci")
}
