//! The one kubeconfig loader of both binaries, resolving as kubectl does: an explicit file,
//! else `$KUBECONFIG`, else `~/.kube/config`, else (when no context was asked for) the in-cluster
//! ServiceAccount.

use std::path::Path;

use kube::Config;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError as KubeError};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum KubeconfigError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("context {0:?} is not in the kubeconfig")]
    NoSuchContext(String),
    #[error("{0}")]
    Invalid(String),
}

/// What to load: the file (else the default search), and kubectl's overrides.
#[derive(Debug, Clone, Default)]
pub struct Source<'a> {
    pub path: Option<&'a Path>,
    pub context: Option<String>,
    pub cluster: Option<String>,
    pub user: Option<String>,
}

pub async fn load(src: &Source<'_>) -> Result<Config, KubeconfigError> {
    let options = KubeConfigOptions {
        context: src.context.clone(),
        cluster: src.cluster.clone(),
        user: src.user.clone(),
    };
    match src.path {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| match e {
                KubeError::ReadConfig(io, _) => KubeconfigError::Read {
                    path: path.display().to_string(),
                    reason: io.to_string(),
                },
                other => invalid(other),
            })?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(invalid)
        }
        None => match Config::from_kubeconfig(&options).await {
            Ok(config) => Ok(config),
            // Inside a pod there is usually no kubeconfig: use the ServiceAccount, unless a
            // context was asked for, which only a kubeconfig can provide.
            Err(err) => match (src.context.is_none(), Config::incluster()) {
                (true, Ok(config)) => Ok(config),
                _ => Err(invalid(err)),
            },
        },
    }
}

fn invalid(err: KubeError) -> KubeconfigError {
    match err {
        KubeError::LoadContext(name) => KubeconfigError::NoSuchContext(name),
        other => KubeconfigError::Invalid(other.to_string()),
    }
}
