//! Names completed from the live cluster (clap's dynamic completion calls these while the user
//! types): Skyhooks, nodes, and packages. Any failure yields no candidates.

use std::path::PathBuf;
use std::time::Duration;

use clap_complete::engine::CompletionCandidate;
use kube::ResourceExt;
use kube::api::ListParams;
use skyhook::crd::Skyhook;

use super::error::CliError;
use super::global::{DEFAULT_NAMESPACE, GlobalArgs, Timeout};
use super::kube::Kube;
use super::output::OutputFormat;

/// A completion lookup must answer while the user waits at the prompt.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// The value of `--<flag> V` or `--<flag>=V` on the command line being completed.
pub(crate) fn typed_flag(args: &[String], flag: &str) -> Option<String> {
    let long = format!("--{flag}");
    let with_eq = format!("--{flag}=");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if *a == long {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix(&with_eq) {
            return Some(v.to_string());
        }
    }
    None
}

/// Runs one cluster lookup for a completer, with the `--kubeconfig`/`--context` typed so far.
/// Any failure yields no candidates: a shell prompt is no place for errors.
fn lookup<F, Fut>(query: F) -> Vec<CompletionCandidate>
where
    F: FnOnce(Kube, Vec<String>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>, CliError>>,
{
    let args: Vec<String> = std::env::args().collect();
    let global = GlobalArgs {
        kubeconfig: typed_flag(&args, "kubeconfig").map(PathBuf::from),
        context: typed_flag(&args, "context"),
        cluster: typed_flag(&args, "cluster"),
        user: typed_flag(&args, "user"),
        server: typed_flag(&args, "server"),
        token: typed_flag(&args, "token"),
        as_user: typed_flag(&args, "as"),
        as_group: typed_flag(&args, "as-group").into_iter().collect(),
        certificate_authority: typed_flag(&args, "certificate-authority").map(PathBuf::from),
        insecure_skip_tls_verify: args.iter().any(|a| a == "--insecure-skip-tls-verify"),
        namespace: DEFAULT_NAMESPACE.to_string(),
        output_arg: None,
        output: OutputFormat::Table,
        no_headers: false,
        sort_by: None,
        sort_key: None,
        no_color: true,
        request_timeout: Timeout(Some(LOOKUP_TIMEOUT)),
        verbose: false,
        dry_run: false,
        api: skyhook::schema::Api::Skyhook,
        namespace_given: false,
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let names = runtime.block_on(async {
        let kube = Kube::connect(&global).await?;
        tokio::time::timeout(LOOKUP_TIMEOUT, query(kube, args))
            .await
            .unwrap_or_else(|_| Ok(Vec::new()))
    });
    names
        .unwrap_or_default()
        .into_iter()
        .map(CompletionCandidate::new)
        .collect()
}

/// The Skyhooks, and the NodeWrights where their API is served.
async fn skyhook_objects(kube: &Kube) -> Result<Vec<Skyhook>, CliError> {
    let lp = ListParams::default();
    let mut all = kube
        .skyhooks(&lp)
        .await
        .map_err(|e| kube.fail(e, "listing skyhooks"))?;
    let nodewrights = kube.clone().in_api(skyhook::schema::Api::NodeWright);
    all.extend(nodewrights.skyhooks(&lp).await.unwrap_or_default());
    Ok(all)
}

/// Skyhook names.
pub fn skyhooks() -> Vec<CompletionCandidate> {
    lookup(|kube, _| async move {
        Ok(skyhook_objects(&kube)
            .await?
            .iter()
            .map(|s| s.name_any())
            .collect())
    })
}

/// Node names.
pub fn nodes() -> Vec<CompletionCandidate> {
    lookup(|kube, _| async move { Ok(kube.nodes().await?.into_iter().map(|n| n.name).collect()) })
}

/// Package names of the `--skyhook` typed so far, else of every Skyhook.
pub fn packages() -> Vec<CompletionCandidate> {
    lookup(|kube, args| async move {
        let only = typed_flag(&args, "skyhook");
        let mut names: Vec<String> = skyhook_objects(&kube)
            .await?
            .iter()
            .filter(|s| only.as_deref().is_none_or(|o| s.name_any() == o))
            .flat_map(|s| s.spec.packages.keys().cloned())
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    })
}
