//! Running the `kubectl-skyhook` binary from e2e tests.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use super::TestCtx;

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-skyhook");

/// One plugin run.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Exit 0; returns stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "plugin failed: {self:?}");
        &self.stdout
    }

    /// Exit `code`, nothing on stdout, exactly one line on stderr, containing `needle`.
    pub fn fails(&self, code: i32, needle: &str) {
        assert_eq!(self.code, code, "{self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        assert_eq!(self.stderr.lines().count(), 1, "{self:?}");
        assert!(self.stderr.ends_with('\n'), "{self:?}");
        assert!(self.stderr.starts_with("error: "), "{self:?}");
        assert!(self.stderr.contains(needle), "want {needle:?} in {self:?}");
        assert!(!self.stderr.contains("panicked"), "{self:?}");
    }
}

/// Runs the plugin with the test cluster's kubeconfig, no colour variables inherited, and the
/// given stdin (none: closed).
pub fn plugin_with(ctx: &TestCtx, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Ran {
    run(&ctx.kubeconfig, args, env, stdin)
}

/// [`plugin`] on a blocking thread: the test's runtime, and whatever it serves (a proxy in front
/// of the operator), keeps running meanwhile.
pub async fn plugin_async(ctx: &TestCtx, args: &[&str]) -> Ran {
    let kubeconfig = ctx.kubeconfig.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&kubeconfig, &args, &[], None)
    })
    .await
    .expect("the plugin thread")
}

/// [`plugin_with`] on a blocking thread, for a plugin that talks to something the test's
/// runtime serves (a fault proxy).
pub async fn plugin_with_async(ctx: &TestCtx, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let kubeconfig = ctx.kubeconfig.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        run(&kubeconfig, &args, &env, None)
    })
    .await
    .expect("the plugin thread")
}

/// The plugin run as `kubectl-nodewright` (a symlink to it, as a user would install upstream's
/// name).
pub fn nodewright_plugin(ctx: &TestCtx, args: &[&str], stdin: Option<&str>) -> Ran {
    run_as(
        &nodewright_executable(),
        &ctx.cluster.kubeconfig,
        args,
        &[],
        stdin,
    )
}

fn nodewright_executable() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("skyhook-e2e-nodewright-{}", std::process::id()));
    let link = dir.join("kubectl-nodewright");
    if !link.exists() {
        std::fs::create_dir_all(&dir).expect("a directory for the symlink");
        // Another test of this process may have made it meanwhile.
        let _ = std::os::unix::fs::symlink(PLUGIN, &link);
    }
    link
}

fn run(kubeconfig: &Path, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Ran {
    run_as(Path::new(PLUGIN), kubeconfig, args, env, stdin)
}

fn run_as(
    exe: &Path,
    kubeconfig: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> Ran {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("FORCE_COLOR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start kubectl-skyhook");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("write stdin");
        }
    }
    let out = child.wait_with_output().expect("run kubectl-skyhook");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the plugin with closed stdin.
pub fn plugin(ctx: &TestCtx, args: &[&str]) -> Ran {
    plugin_with(ctx, args, &[], None)
}

/// Writes a kubeconfig for the test cluster that authenticates with a bearer `token` (e.g. a
/// ServiceAccount token), to run the plugin with that account's RBAC.
pub fn token_kubeconfig(ctx: &TestCtx, file: &Path, token: &str) {
    let kc = kube::config::Kubeconfig::read_from(&ctx.cluster.kubeconfig).expect("kubeconfig");
    let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
    let server = cluster.server.clone().expect("server");
    let ca = cluster
        .certificate_authority_data
        .clone()
        .expect("certificate-authority-data");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
    );
    std::fs::write(file, text).expect("write kubeconfig");
}
