//! Package lookups several commands share.

use skyhook::crd::Skyhook;

use super::error::CliError;

/// The spec version of `package`, or `PackageNotFound` listing the Skyhook's packages.
pub fn spec_version(sk: &Skyhook, skyhook: &str, package: &str) -> Result<String, CliError> {
    match sk.spec.packages.get(package) {
        Some(p) => Ok(p.version.clone()),
        None => {
            let known: Vec<&str> = sk.spec.packages.keys().map(String::as_str).collect();
            Err(CliError::PackageNotFound {
                package: package.to_string(),
                skyhook: skyhook.to_string(),
                known: if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                },
            })
        }
    }
}
