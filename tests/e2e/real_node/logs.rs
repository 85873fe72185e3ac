//! The agent's real output, read through the kubelet: `kubectl skyhook logs -f` across stages,
//! `kubectl logs job/<name>` and `kubectl skyhook debug collect`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use skyhook::schema;

use super::{roll_out, setup, shellscript};
use crate::support::plugin::{PLUGIN, plugin};

#[tokio::test]
async fn plugin_logs_kubectl_logs_and_debug_collect_read_the_agents_output() {
    let (env, node) = setup("rn-logs", &[]).await;
    let sk = env.ctx.name("logs");
    let ns = env.ctx.ns.clone();
    let apply_text = format!("apply-on-{}", env.ctx.prefix);
    let config_text = format!("config-on-{}", env.ctx.prefix);
    let pkg = shellscript(
        &env.ctx,
        json!({
            "apply.sh": format!("#!/bin/bash\necho {apply_text}\n"),
            "config.sh": format!("#!/bin/bash\necho {config_text}\n"),
        }),
        json!({}),
    );
    // Followed from before the first Job exists: it waits for apply, moves on to config and
    // exits once the package is complete on the node.
    let mut follower = Command::new(PLUGIN)
        .args([
            "logs",
            "tool",
            "--node",
            &node,
            "--skyhook",
            &sk,
            "-n",
            &ns,
            "-f",
        ])
        .env("KUBECONFIG", &env.ctx.cluster.kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start logs -f");
    roll_out(&env, &sk, json!({"tool": pkg})).await;
    let started = Instant::now();
    while follower.try_wait().expect("poll logs -f").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = follower.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = follower.wait_with_output().expect("logs -f output");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "logs -f:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Where the line from `container` holding `needle` starts: the agent prefixes the script's
    // output with `[out]` and a time stamp.
    let at = |container: &str, needle: &str| {
        let prefix = format!("[{container}] ");
        let mut offset = 0;
        for line in text.split_inclusive('\n') {
            if line.starts_with(&prefix) && line.contains(needle) {
                return offset;
            }
            offset += line.len();
        }
        panic!("no line of {container} holds {needle:?} in the followed logs:\n{text}")
    };
    let apply = at("apply/tool-apply", &apply_text);
    let config = at("config/tool-config", &config_text);
    assert!(apply < config, "apply after config:\n{text}");
    // The agent's own lines too, from both containers of a stage.
    at("apply/tool-apply", "SUCEEDED: shellscript_run.sh apply");
    at("config/tool-configcheck", "mode: config-check");

    // `kubectl logs job/<name>` reaches the kubelet and shows the stage's own container.
    let jobs = env.jobs_of(&sk).await;
    let config_job = jobs
        .iter()
        .find(|j| crate::support::env::label(j, schema::STAGE_LABEL) == "config")
        .expect("a config Job");
    let name = config_job.metadata.name.clone().expect("named");
    let logs = env
        .ctx
        .kubectl(&["logs", &format!("job/{name}"), "-n", &ns]);
    let logs_text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.status.success() && logs_text.contains(&config_text),
        "kubectl logs job/{name}:\n{logs_text}\n{}",
        String::from_utf8_lossy(&logs.stderr)
    );

    // A support bundle carries the same output.
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = dir.path().join("bundle.tar.gz");
    let archive_arg = archive.to_string_lossy().into_owned();
    let ran = plugin(
        &env.ctx,
        &[
            "debug",
            "collect",
            "--skyhook",
            &sk,
            "-n",
            &ns,
            "--output-file",
            &archive_arg,
        ],
    );
    // The operator runs as a local process here, so only its own piece is missing (exit 3).
    assert_eq!(ran.code, 3, "{ran:?}");
    assert!(ran.stdout.contains("operator-errors.json"), "{ran:?}");
    let files = crate::support::bundle::unpack(&archive);
    let found = files.iter().any(|(path, body)| {
        path.starts_with("logs/") && String::from_utf8_lossy(body).contains(&config_text)
    });
    assert!(found, "no log file in the bundle has {config_text:?}");
}
