//! Both binaries answer `--help` and `--version` without a cluster.

use std::process::Command;

#[test]
fn both_binaries_answer_help_and_version() {
    let version = env!("CARGO_PKG_VERSION");
    for (bin, name) in [
        (env!("CARGO_BIN_EXE_skyhook-operator"), "skyhook-operator"),
        (env!("CARGO_BIN_EXE_kubectl-skyhook"), "kubectl skyhook"),
    ] {
        let help = Command::new(bin)
            .arg("--help")
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .expect("run --help");
        assert!(help.status.success(), "{bin} --help: {help:?}");
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(
            text.contains(&format!("Usage: {name}")),
            "{bin} --help:\n{text}"
        );
        let ver = Command::new(bin)
            .arg("--version")
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .expect("run --version");
        assert!(ver.status.success(), "{bin} --version: {ver:?}");
        let text = String::from_utf8_lossy(&ver.stdout);
        assert!(text.contains(version), "{bin} --version printed {text:?}");
    }
}
