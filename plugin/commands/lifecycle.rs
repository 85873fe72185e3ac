//! `pause`, `resume`, `disable`, `enable`: set or remove a Skyhook annotation.

use std::cmp::Ordering;
use std::io::{BufRead, Write};

use kube::ResourceExt;
use skyhook::schema;

use crate::app::Ctx;
use crate::app::access::{self, Need};
use crate::app::error::CliError;
use crate::app::operator::{OperatorInfo, discover};
use crate::app::prompt::ask_inline;
use crate::cli::LifecycleArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    Disable,
    Enable,
}

impl Action {
    pub fn verb(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Disable => "disable",
            Action::Enable => "enable",
        }
    }

    pub fn past(self) -> &'static str {
        match self {
            Action::Pause => "paused",
            Action::Resume => "resumed",
            Action::Disable => "disabled",
            Action::Enable => "enabled",
        }
    }

    pub fn annotation(self) -> &'static str {
        match self {
            Action::Pause | Action::Resume => schema::PAUSE_ANNOTATION,
            Action::Disable | Action::Enable => schema::DISABLE_ANNOTATION,
        }
    }

    /// The annotation value to write; `None` removes it.
    pub fn value(self) -> Option<&'static str> {
        match self {
            Action::Pause | Action::Disable => Some(schema::TRUE_VALUE),
            Action::Resume | Action::Enable => None,
        }
    }
}

/// Outcome of the operator version check.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    Supported,
    /// No version could be found: warn and go on.
    Unknown,
}

/// The reference's version gate: the Skyhook's `version` annotation if it is valid semver, else
/// the discovered operator Deployment. Operators before v0.8.0 used `spec.pause` and had no
/// disable. This project's operator reads the annotations in every version.
pub fn gate(
    action: Action,
    name: &str,
    annotation: Option<&str>,
    discovered: Option<&OperatorInfo>,
) -> Result<Gate, CliError> {
    let version = match annotation.filter(|v| schema::is_valid_semver(v)) {
        Some(v) => v.to_string(),
        None => match discovered.filter(|d| schema::is_valid_semver(&d.version)) {
            Some(d) if d.this_implementation => return Ok(Gate::Supported),
            Some(d) => d.version.clone(),
            None => return Ok(Gate::Unknown),
        },
    };
    if schema::semver_compare(&version, schema::MIN_OPERATOR_VERSION_FOR_ANNOTATIONS)
        != Ordering::Less
    {
        return Ok(Gate::Supported);
    }
    Err(match action {
        Action::Pause | Action::Resume => CliError::PauseUsesSpec {
            version,
            name: name.to_string(),
            value: action == Action::Pause,
        },
        Action::Disable | Action::Enable => CliError::Unsupported {
            version,
            verb: action.verb(),
            min: schema::MIN_OPERATOR_VERSION_FOR_ANNOTATIONS,
        },
    })
}

pub async fn run(
    ctx: &Ctx,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    action: Action,
    args: &LifecycleArgs,
) -> Result<(), CliError> {
    let name = &args.name;
    let kube = ctx.kube().await?;
    let sk = kube.skyhook(name).await?;

    let annotation = sk
        .annotations()
        .get(schema::VERSION_ANNOTATION)
        .map(String::as_str);
    let discovered = if annotation.is_some_and(schema::is_valid_semver) {
        None
    } else {
        discover(&kube, &ctx.global.namespace).await.ok()
    };
    if gate(action, name, annotation, discovered.as_ref())? == Gate::Unknown {
        eprintln!(
            "Warning: unable to determine operator version; cannot verify compatibility (requires {}+)",
            schema::MIN_OPERATOR_VERSION_FOR_ANNOTATIONS
        );
    }

    // Dry-run before the prompt: a preview needs no confirmation.
    if ctx.global.dry_run {
        writeln!(out, "[dry-run] Would {} Skyhook {name:?}", action.verb())?;
        return Ok(());
    }
    let what = format!("{} skyhook {name:?}", action.verb());
    access::require(&kube, &what, &[Need::PATCH_SKYHOOKS]).await?;
    if !args.confirm {
        let question = format!("This will {} Skyhook {name:?}.", action.verb());
        ask_inline(out, input, &question)?;
    }
    kube.set_skyhook_annotation(name, action.annotation(), action.value())
        .await?;
    writeln!(out, "Skyhook {name:?} {}", action.past())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(version: &str, ours: bool) -> OperatorInfo {
        OperatorInfo {
            version: version.into(),
            this_implementation: ours,
        }
    }

    #[test]
    fn version_gate() {
        use Action::*;
        assert_eq!(
            gate(Pause, "s", Some("v0.8.0"), None).unwrap(),
            Gate::Supported
        );
        assert_eq!(
            gate(Pause, "s", Some("0.13.1"), None).unwrap(),
            Gate::Supported
        );
        assert_eq!(gate(Pause, "s", None, None).unwrap(), Gate::Unknown);
        assert_eq!(gate(Pause, "s", Some("dev"), None).unwrap(), Gate::Unknown);
        assert_eq!(
            gate(Disable, "s", Some("dev"), Some(&found("v0.9.0", false))).unwrap(),
            Gate::Supported
        );
        assert_eq!(
            gate(Pause, "s", None, Some(&found("latest-ish", false))).unwrap(),
            Gate::Unknown
        );
        assert_eq!(
            gate(Pause, "s", Some("v0.7.0"), None)
                .unwrap_err()
                .to_string(),
            "operator version v0.7.0 uses spec.pause instead of annotations; use 'kubectl edit skyhook s' and set spec.pause: true"
        );
        assert_eq!(
            gate(Resume, "s", None, Some(&found("v0.5.0", false)))
                .unwrap_err()
                .to_string(),
            "operator version v0.5.0 uses spec.pause instead of annotations; use 'kubectl edit skyhook s' and set spec.pause: false"
        );
        assert_eq!(
            gate(Enable, "s", Some("0.7.9"), None)
                .unwrap_err()
                .to_string(),
            "operator version 0.7.9 does not support enable; this feature was added in v0.8.0"
        );
        // This project's operator, whatever its own version number.
        assert_eq!(
            gate(Pause, "s", None, Some(&found("v0.1.0", true))).unwrap(),
            Gate::Supported
        );
    }

    /// The reference's one-line prompt; declined or unanswered, the command fails.
    #[test]
    fn confirmation() {
        let run = |input: &str| {
            let mut out = Vec::new();
            let r = ask_inline(
                &mut out,
                &mut input.as_bytes(),
                "This will pause Skyhook \"s\".",
            );
            (
                r.map_err(|e| e.to_string()),
                String::from_utf8(out).unwrap(),
            )
        };
        let prompt = "This will pause Skyhook \"s\". Continue? [y/N]: ";
        assert_eq!(run("y\n"), (Ok(()), prompt.to_string()));
        assert_eq!(run(" Y \n").0, Ok(()));
        assert_eq!(run("yes\n").0, Ok(()));
        let (declined, out) = run("n\n");
        assert!(declined.unwrap_err().starts_with("not confirmed"));
        assert_eq!(out, format!("{prompt}Aborted.\n"));
        let (closed, out) = run("");
        assert!(closed.unwrap_err().starts_with("no answer"));
        assert_eq!(out, prompt);
    }

    #[test]
    fn actions() {
        assert_eq!(Action::Pause.annotation(), schema::PAUSE_ANNOTATION);
        assert_eq!(Action::Resume.value(), None);
        assert_eq!(Action::Disable.value(), Some("true"));
        assert_eq!(Action::Enable.past(), "enabled");
    }
}
