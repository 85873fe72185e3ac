//! The reference's `operator-agent` scenarios, on a real node with the real agent: what the agent
//! leaves on the host (logs, flags, history, interrupt flags), checked in the node's own root.

use serde_json::json;

use super::{roll_out, setup, shellscript};
use crate::support::env::Env;

/// Log files the agent wrote for the shellscript package of Skyhook `sk` on `node`.
fn package_logs(env: &Env, node: &str, sk: &str, version: &str) -> Vec<String> {
    let dir = format!("/var/log/skyhook/{sk}/shellscript/{version}");
    env.ctx
        .list_on_node(node, &dir)
        .into_iter()
        .filter(|f| f.ends_with(".log"))
        .map(|f| format!("{dir}/{f}"))
        .collect()
}

/// The reference's `simple`: the config script's output is in the agent's log files on the host;
/// the step flags and the history file are written; and what the script writes to /etc lands in
/// the node's root, not the machine's.
#[tokio::test]
async fn simple() {
    let (env, node) = setup("rn-simple", &[]).await;
    let sk = env.ctx.name("simple");
    let marker = format!("/etc/{}-written", env.ctx.prefix);
    let pkg = shellscript(
        &env.ctx,
        json!({
            "apply.sh": format!("#!/bin/bash\necho \"applied on $(hostname)\" > {marker}\n"),
            "config.sh": "#!/bin/bash\necho \"Hello, world!\"\n\ncat $SKYHOOK_DIR/configmaps/extra.txt\n",
            "extra.txt": "This is a test\n",
        }),
        json!({}),
    );
    let version = pkg["version"].as_str().expect("version").to_string();
    roll_out(&env, &sk, json!({"simple": pkg})).await;

    let logs = package_logs(&env, &node, &sk, &version);
    let text: String = logs
        .iter()
        .filter_map(|l| env.ctx.read_on_node(&node, l))
        .collect();
    assert!(
        text.contains("Hello, world!"),
        "no script output in {logs:?}:\n{text}"
    );
    assert!(
        text.contains("This is a test"),
        "no configMap file in {logs:?}:\n{text}"
    );

    let root = format!("/var/lib/skyhook/{sk}");
    let flags = env
        .ctx
        .list_on_node(&node, &format!("{root}/flags/shellscript/{version}"));
    assert!(
        flags.iter().any(|f| f.starts_with("shellscript_run.sh")),
        "no step flags in {root}/flags/shellscript/{version}: {flags:?}"
    );
    let history = env.ctx.list_on_node(&node, &format!("{root}/history"));
    assert!(
        history.iter().any(|f| f == "shellscript.json"),
        "no history file in {root}/history: {history:?}"
    );

    let written = env.ctx.read_on_node(&node, &marker);
    assert_eq!(
        written.as_deref().map(str::trim),
        Some(format!("applied on {node}").as_str()),
        "the apply script's file is not in the node's root"
    );
    assert!(
        !std::path::Path::new(&marker).exists(),
        "{marker} landed in the machine's root"
    );
}

/// The reference's `interrupt`: a `noop` interrupt leaves its completion flag for the package's
/// resource id, and the node ends complete.
#[tokio::test]
async fn interrupt_noop() {
    let (env, node) = setup("rn-noop", &[]).await;
    let sk = env.ctx.name("noop");
    let pkg = shellscript(
        &env.ctx,
        json!({"config.sh": "#!/bin/bash\necho \"Hello, world!\"\n"}),
        json!({"interrupt": {"type": "noop"}}),
    );
    roll_out(&env, &sk, json!({"noop": pkg})).await;
    let flags_dir = format!("/var/lib/skyhook/{sk}/interrupts/flags");
    let ids = env.ctx.list_on_node(&node, &flags_dir);
    let complete: Vec<String> = ids
        .iter()
        .flat_map(|id| {
            env.ctx
                .list_on_node(&node, &format!("{flags_dir}/{id}"))
                .into_iter()
                .filter(|f| f.ends_with(".complete"))
                .map(move |f| format!("{id}/{f}"))
        })
        .collect();
    assert!(
        complete.iter().any(|f| f.contains("noop")),
        "no noop completion flag under {flags_dir}: {complete:?}"
    );
}

/// The reference's `dont_write_logs`: SKYHOOK_AGENT_WRITE_LOGS=false in the package's env and the
/// agent writes no log directory, though the stages ran.
#[tokio::test]
async fn dont_write_logs() {
    let (env, node) = setup("rn-nologs", &[]).await;
    let sk = env.ctx.name("nologs");
    let marker = format!("/var/tmp/{}-ran", env.ctx.prefix);
    let pkg = shellscript(
        &env.ctx,
        json!({"apply.sh": format!("#!/bin/bash\necho \"Hello, world!\"\ntouch {marker}\n")}),
        json!({"env": [{"name": "SKYHOOK_AGENT_WRITE_LOGS", "value": "false"}]}),
    );
    roll_out(&env, &sk, json!({"nologs": pkg})).await;
    assert!(
        env.ctx.read_on_node(&node, &marker).is_some(),
        "the apply script did not run"
    );
    let dirs = env.ctx.list_on_node(&node, "/var/log/skyhook");
    assert!(
        !dirs.contains(&sk),
        "a log directory was written: /var/log/skyhook has {dirs:?}"
    );
}

/// The reference's `reap_old_logs`: a config script that fails until five of its logs exist is
/// retried until it succeeds, and the agent keeps exactly five.
#[tokio::test]
async fn reap_old_logs() {
    let (env, node) = setup("rn-reap", &[]).await;
    let sk = env.ctx.name("reap");
    let imgs = crate::support::real::images(&env.ctx);
    let dir = format!(
        "/var/log/skyhook/{sk}/shellscript/{}",
        imgs.shellscript_version
    );
    let script = format!(
        "#!/bin/bash\nn=$(ls {dir}/*.log | wc -l)\nif [ \"$n\" -ge 5 ]; then echo \"$n logs\"; exit 0; fi\necho \"only $n logs: failing for another\"\nexit 1\n"
    );
    let pkg = shellscript(&env.ctx, json!({"config.sh": script}), json!({}));
    roll_out(&env, &sk, json!({"reap": pkg})).await;
    let logs = package_logs(&env, &node, &sk, &imgs.shellscript_version);
    assert_eq!(logs.len(), 5, "logs kept: {logs:?}");
}
