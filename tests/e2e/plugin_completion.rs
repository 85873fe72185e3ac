//! Shell completion against the local cluster: Skyhook, node and package names come from the
//! live cluster through bash's completion function and through kubectl's plugin protocol.

use std::path::Path;
use std::process::Command;

use kube::api::{Api, PostParams};
use serde_json::json;
use skyhook::crd::Skyhook;

use crate::support::TestCtx;
use crate::support::plugin::{PLUGIN, plugin};

/// What bash offers after `words` (the last one being completed), using the script printed by
/// `completion bash` and the real `complete -F` function it registers.
fn bash_candidates(ctx: &TestCtx, words: &[&str]) -> Vec<String> {
    let bin_dir = Path::new(PLUGIN).parent().expect("plugin dir");
    let script = plugin(ctx, &["completion", "bash"]).ok().to_string();
    let line = words.join(" ");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "{script}\n\
         COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{line}'; COMP_POINT={point}; COMP_TYPE=9\n\
         fn=$(complete -p kubectl-skyhook | sed -E 's/.* -F ([^ ]+) .*/\\1/')\n\
         \"$fn\" kubectl-skyhook '{cur}' '{prev}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = quoted.join(" "),
        cword = words.len() - 1,
        point = line.len(),
        cur = words[words.len() - 1],
        prev = words[words.len() - 2],
    );
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .env("PATH", path)
        .env("KUBECONFIG", &ctx.cluster.kubeconfig)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "bash completion failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[tokio::test]
async fn names_complete_from_the_cluster() {
    crate::support::install_crds();
    let mut ctx = TestCtx::new("plugin-complete").await;
    let nodes = ctx.add_test_nodes(1);
    let sk = ctx.name("sk");
    let object: Skyhook = serde_json::from_value(json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook",
        "metadata": {"name": sk},
        "spec": {"nodeSelectors": {"matchLabels": {"skyhook-e2e": ctx.prefix.clone()}},
                 "packages": {"zeta-tuning": {"version": "1.0.0", "image": "ghcr.io/x/y"}}},
    }))
    .expect("valid Skyhook");
    Api::<Skyhook>::all(ctx.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create Skyhook");

    // bash: Skyhook names, node names and the packages of the typed --skyhook.
    let got = bash_candidates(&ctx, &["kubectl-skyhook", "pause", &ctx.prefix]);
    assert_eq!(got, vec![sk.clone()], "pause <TAB>");
    let got = bash_candidates(
        &ctx,
        &[
            "kubectl-skyhook",
            "node",
            "status",
            &nodes[0][..nodes[0].len() - 1],
        ],
    );
    assert!(got.contains(&nodes[0]), "node status <TAB>: {got:?}");
    let got = bash_candidates(
        &ctx,
        &[
            "kubectl-skyhook",
            "package",
            "status",
            "--skyhook",
            &sk,
            "ze",
        ],
    );
    assert_eq!(got, vec!["zeta-tuning".to_string()], "package status <TAB>");

    // kubectl's protocol, through the helper `completion kubectl-plugin` writes.
    let dir = tempfile::tempdir().expect("temp dir");
    let dir_arg = dir.path().to_string_lossy().into_owned();
    let out = plugin(&ctx, &["completion", "kubectl-plugin", "--dir", &dir_arg]);
    let helper = dir.path().join("kubectl_complete-skyhook");
    assert!(out.ok().contains(&helper.display().to_string()), "{out:?}");
    let bin_dir = Path::new(PLUGIN).parent().expect("plugin dir");
    let ran = Command::new(&helper)
        .args(["dp", "reset", &ctx.prefix])
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("KUBECONFIG", &ctx.cluster.kubeconfig)
        .output()
        .expect("run kubectl_complete-skyhook");
    let text = String::from_utf8_lossy(&ran.stdout);
    assert_eq!(text, format!("{sk}\n:4\n"), "{ran:?}");

    // No cluster: no candidates and no noise, never an error.
    let ran = Command::new(PLUGIN)
        .args(["__complete", "pause", ""])
        .env("KUBECONFIG", dir.path().join("missing"))
        .output()
        .expect("run kubectl-skyhook");
    assert!(ran.status.success());
    assert_eq!(String::from_utf8_lossy(&ran.stdout), ":4\n");
}
