//! Permission checks before a command's first write. A command that writes several objects
//! (`reset`: every node, then the batch state) must not stop half-way for lack of RBAC: it asks
//! the API server (SelfSubjectAccessReview) whether each write it will make is allowed, and
//! refuses before the first one when one is not.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use std::io::{BufRead, Write};

use super::Ctx;
use super::error::CliError;
use super::kube::Kube;
use super::prompt::{ask, dry_run_stop};
use skyhook::crd::GROUP;

/// One write a command is about to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
}

impl Need {
    pub const PATCH_NODES: Need = Need {
        verb: "patch",
        group: "",
        resource: "nodes",
        subresource: None,
    };
    pub const PATCH_SKYHOOKS: Need = Need {
        verb: "patch",
        group: GROUP,
        resource: "skyhooks",
        subresource: None,
    };
    pub const PATCH_SKYHOOK_STATUS: Need = Need {
        verb: "patch",
        group: GROUP,
        resource: "skyhooks",
        subresource: Some("status"),
    };

    /// `patch nodes`, `patch skyhooks/status`: as `kubectl auth can-i` spells it.
    fn spelled(&self) -> String {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        let sub = self
            .subresource
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        format!("{} {}{group}{sub}", self.verb, self.resource)
    }
}

/// Refuses `action` before any write when the caller may not make one of `needs`. When the
/// review itself cannot be made (an API server that does not serve it), the command goes on and
/// the writes report their own errors.
pub async fn require(kube: &Kube, action: &str, needs: &[Need]) -> Result<(), CliError> {
    let api: Api<SelfSubjectAccessReview> = Api::all(kube.client());
    for need in needs {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(need.verb.to_string()),
                    group: Some(need.group.to_string()),
                    resource: Some(need.resource.to_string()),
                    subresource: need.subresource.map(str::to_string),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let allowed = match api.create(&PostParams::default(), &review).await {
            Ok(r) => r.status.is_none_or(|s| s.allowed),
            Err(e) => {
                eprintln!(
                    "Warning: cannot check permissions before writing ({}): {e}",
                    need.spelled()
                );
                true
            }
        };
        if !allowed {
            return Err(denied(action, need));
        }
    }
    Ok(())
}

/// A write a command is about to make: what it is called in errors, the permissions it needs,
/// and the prompt that asks for it.
pub struct Change<'a> {
    pub action: String,
    pub needs: &'a [Need],
    /// `--confirm`: no prompt.
    pub confirm: bool,
    pub prompt: &'a [String],
}

impl<'a> Change<'a> {
    pub fn new(action: String, needs: &'a [Need], confirm: bool, prompt: &'a [String]) -> Self {
        Change {
            action,
            needs,
            confirm,
            prompt,
        }
    }
}

/// Whether `change` goes ahead: false under `--dry-run`; otherwise the permissions are checked
/// ([`require`]), then `--confirm` or the prompt confirms it (a decline is an error).
pub async fn proceed(
    ctx: &Ctx,
    kube: &Kube,
    change: &Change<'_>,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
) -> Result<bool, CliError> {
    if dry_run_stop(ctx.global.dry_run, out)? {
        return Ok(false);
    }
    require(kube, &change.action, change.needs).await?;
    if !change.confirm {
        ask(out, input, change.prompt)?;
    }
    Ok(true)
}

fn denied(action: &str, need: &Need) -> CliError {
    CliError::Forbidden {
        action: action.to_string(),
        message: format!(
            "forbidden: you may not {} (checked before the first write; nothing was changed)",
            need.spelled()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_permission_and_that_nothing_changed() {
        assert_eq!(Need::PATCH_NODES.spelled(), "patch nodes");
        assert_eq!(
            Need::PATCH_SKYHOOK_STATUS.spelled(),
            "patch skyhooks.skyhook.nvidia.com/status"
        );
        let msg = denied("resetting skyhook \"s\"", &Need::PATCH_SKYHOOK_STATUS).to_string();
        assert!(
            msg.starts_with(
                "resetting skyhook \"s\": forbidden: you may not patch skyhooks.skyhook.nvidia.com/status"
            ),
            "{msg}"
        );
        assert!(
            msg.contains("nothing was changed") && msg.contains("skyhook-oncall"),
            "{msg}"
        );
    }
}
