//! The plugin's errors: each renders as one line that names the object and what to do next.

use skyhook::schema::SchemaError;

/// Where to point people whose requests are forbidden.
const RBAC_HINT: &str = "ask a cluster admin to bind the skyhook-viewer roles (reads), and \
     skyhook-oncall beside them for pause, rerun and reset (deploy/rbac-plugin-user.yaml)";

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("skyhook {0:?} not found; list them with: kubectl get skyhooks")]
    SkyhookNotFound(String),

    #[error(
        "the Skyhook CRD (skyhooks.skyhook.nvidia.com) is not installed in the cluster at {0}; install Skyhook first (kubectl apply -k deploy/)"
    )]
    CrdMissing(String),

    #[error("node {0:?} not found; list nodes with: kubectl get nodes")]
    NodeNotFound(String),

    #[error("no node matches {0:?}; list nodes with: kubectl get nodes")]
    NoNodeMatches(String),

    #[error("matching nodes: {0}")]
    InvalidPattern(#[from] SchemaError),

    #[error(
        "package {package:?} not found in skyhook {skyhook:?} (its packages: {known}); see them with: kubectl get skyhook {skyhook} -o yaml"
    )]
    PackageNotFound {
        package: String,
        skyhook: String,
        known: String,
    },

    #[error(
        "package {package:?} (version {version}) has no state on the matched nodes of skyhook {skyhook:?}; see where it ran with: kubectl skyhook package status {package} --skyhook {skyhook}"
    )]
    NoPackageState {
        package: String,
        version: String,
        skyhook: String,
    },

    #[error(
        "cannot reach the Kubernetes API at {server}: {reason}; check that the cluster is up and that --kubeconfig/--context select it"
    )]
    Unreachable { server: String, reason: String },

    #[error(
        "cannot verify the certificate of the Kubernetes API at {server}: {reason}; pass --certificate-authority with the cluster's CA (or --insecure-skip-tls-verify to skip the check)"
    )]
    Certificate { server: String, reason: String },

    #[error(
        "{action}: the Kubernetes API at {server} did not answer in time; retry, or raise --request-timeout"
    )]
    Timeout { action: String, server: String },

    #[error("{action}: {message}; {RBAC_HINT}")]
    Forbidden { action: String, message: String },

    #[error(
        "{action}: the Kubernetes API at {server} rejected the credentials (401 Unauthorized); log in again, or pick another --context or --token"
    )]
    Unauthorized { action: String, server: String },

    #[error("cannot load the kubeconfig: {0}; pass --kubeconfig or set KUBECONFIG")]
    Kubeconfig(String),

    /// An object the API server or the operator's validation refuses, with each problem.
    #[error("{what} is invalid: {}; fix the file and plan again", problems.join("; "))]
    Invalid { what: String, problems: Vec<String> },

    /// A connection flag whose value cannot be used.
    #[error("{flag}: {message}")]
    Flag { flag: &'static str, message: String },

    #[error(
        "context {0:?} not found in the kubeconfig; list them with: kubectl config get-contexts"
    )]
    NoSuchContext(String),

    #[error("{action}: {message}")]
    Api { action: String, message: String },

    #[error(
        "operator version {version} uses spec.pause instead of annotations; use 'kubectl edit skyhook {name}' and set spec.pause: {value}"
    )]
    PauseUsesSpec {
        version: String,
        name: String,
        value: bool,
    },

    #[error("operator version {version} does not support {verb}; this feature was added in {min}")]
    Unsupported {
        version: String,
        verb: &'static str,
        min: &'static str,
    },

    #[error(
        "skyhook {skyhook:?} names deploymentPolicy {policy:?}, which does not exist, so nothing would start; create it (kubectl get deploymentpolicies.skyhook.nvidia.com lists them) or change spec.deploymentPolicy"
    )]
    PolicyNotFound { skyhook: String, policy: String },

    #[error(
        "skyhook {0:?} was not taken over by a NodeWright (it has no skyhook.nvidia.com/taken-over-by-nodewright annotation): the operator reconciles it already, nothing to release"
    )]
    NotTakenOver(String),

    #[error("failed to update {failed} of {total} node(s); see the errors above")]
    PartialFailure { failed: usize, total: usize },

    #[error("reading confirmation: {0}")]
    Confirmation(String),

    #[error(
        "no answer to the confirmation prompt (standard input is closed or empty); nothing was changed; pass --confirm to run without asking"
    )]
    NoAnswer,

    #[error("not confirmed at the prompt; nothing was changed")]
    Declined,

    #[error(
        "no Jobs found for {what} in namespace {namespace:?}; successful Jobs are deleted a day after they finish (COMPLETED_JOB_TTL), and -n must name the operator's namespace"
    )]
    NoJobs { what: String, namespace: String },

    #[error("{0}")]
    Follow(String),

    #[error("completion: {0}")]
    Completion(String),

    #[error("writing man pages: {0}")]
    Man(String),

    #[error("encoding output: {0}")]
    Encode(String),

    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// Classifies a failed API call. `action` says what was attempted (`listing nodes`), and
    /// `server` is the API server URL. Not-found answers are left to callers, who know the
    /// object's name.
    pub fn from_kube(err: kube::Error, action: impl Into<String>, server: &str) -> CliError {
        let action = action.into();
        let server = server.to_string();
        match err {
            kube::Error::Api(status) => match status.code {
                401 => CliError::Unauthorized { action, server },
                403 => CliError::Forbidden {
                    action,
                    message: one_line(&status.message),
                },
                _ => CliError::Api {
                    action,
                    message: one_line(if status.message.is_empty() {
                        &status.reason
                    } else {
                        &status.message
                    }),
                },
            },
            kube::Error::HyperError(_) | kube::Error::Service(_) => {
                let reason = root_cause(&err);
                let lower = format!("{err} {reason}").to_lowercase();
                if lower.contains("timed out")
                    || lower.contains("timeout")
                    || lower.contains("elapsed")
                {
                    CliError::Timeout { action, server }
                } else if lower.contains("certificate") {
                    CliError::Certificate { server, reason }
                } else {
                    CliError::Unreachable { server, reason }
                }
            }
            other => CliError::Api {
                action,
                message: one_line(&format!("{other}: {}", root_cause(&other))),
            },
        }
    }
}

/// Whether an API answer is 404.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

/// The innermost error's message (e.g. `Connection refused (os error 111)`).
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: &(dyn std::error::Error + 'static) = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    one_line(&cur.to_string())
}

/// Collapses whitespace runs (including newlines) so a message fits on one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: message.into(),
            reason: "Reason".into(),
            ..Default::default()
        }))
    }

    #[test]
    fn classification_is_one_line() {
        let forbidden = CliError::from_kube(
            api(
                403,
                "nodes is forbidden: User \"u\" cannot list resource \"nodes\"",
            ),
            "listing nodes",
            "https://k:6443",
        );
        assert_eq!(
            forbidden.to_string(),
            format!(
                "listing nodes: nodes is forbidden: User \"u\" cannot list resource \"nodes\"; {RBAC_HINT}"
            )
        );
        let unauthorized = CliError::from_kube(api(401, ""), "listing nodes", "https://k:6443");
        assert!(unauthorized.to_string().contains("401 Unauthorized"));
        let other = CliError::from_kube(api(500, "boom\nagain"), "getting x", "s");
        assert_eq!(other.to_string(), "getting x: boom again");
        assert!(is_not_found(&api(404, "nope")));
        assert!(!is_not_found(&api(403, "nope")));
    }

    #[test]
    fn messages_name_the_object_and_the_next_step() {
        assert_eq!(
            CliError::SkyhookNotFound("x".into()).to_string(),
            "skyhook \"x\" not found; list them with: kubectl get skyhooks"
        );
        assert_eq!(
            CliError::NodeNotFound("n1".into()).to_string(),
            "node \"n1\" not found; list nodes with: kubectl get nodes"
        );
        let pkg = CliError::PackageNotFound {
            package: "p".into(),
            skyhook: "s".into(),
            known: "a, b".into(),
        };
        assert_eq!(
            pkg.to_string(),
            "package \"p\" not found in skyhook \"s\" (its packages: a, b); see them with: kubectl get skyhook s -o yaml"
        );
    }
}
