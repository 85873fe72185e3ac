//! In-memory normalisation of a Skyhook, replacing what the Go mutating webhook persisted.
//!
//! The Go operator decoded every package with two side effects (and its webhook stored the
//! result): an empty `name` became the map key, and everything after the first `:` of `image`
//! was dropped. Objects that reach this operator without that webhook get the same treatment
//! here, in memory only — except that a tag is cut only after the last `/`, so a registry port
//! is not mistaken for a tag (the Go operator cut `myreg:5000/ns/img` to `myreg`; upstream fixed
//! it in v0.18, delta D29), and a digest is kept.

use super::Skyhook;

/// Normalises every package: `name` defaults to the key, and the image loses its tag (a
/// digest moves to `containerSHA` unless that is already set).
pub fn normalize(skyhook: &mut Skyhook) {
    for (key, package) in &mut skyhook.spec.packages {
        if package.name.is_empty() {
            package.name.clone_from(key);
        }
        let (image, digest) = normalize_image(&package.image);
        if let Some(digest) = digest
            && package.container_sha.is_none()
        {
            package.container_sha = Some(digest.to_owned());
        }
        if image != package.image {
            package.image = image.to_owned();
        }
    }
}

/// Splits an image reference into the repository (tag removed) and its digest, if any.
///
/// `ghcr.io/a/b:1.2` → (`ghcr.io/a/b`, None); `b@sha256:..` → (`b`, Some(`sha256:..`));
/// `myreg:5000/ns/img` → unchanged (the `:` is before the last `/`, so it is a port).
pub fn normalize_image(image: &str) -> (&str, Option<&str>) {
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let repo = match name[last_slash..].find(':') {
        Some(colon) => &name[..last_slash + colon],
        None => name,
    };
    (repo, digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Package, SkyhookSpec};

    #[test]
    fn image_forms() {
        assert_eq!(normalize_image("alpine"), ("alpine", None));
        assert_eq!(normalize_image("alpine:3.21"), ("alpine", None));
        assert_eq!(
            normalize_image("ghcr.io/nvidia/skyhook/agentless:latest"),
            ("ghcr.io/nvidia/skyhook/agentless", None)
        );
        assert_eq!(
            normalize_image("myreg:5000/ns/img"),
            ("myreg:5000/ns/img", None)
        );
        assert_eq!(
            normalize_image("myreg:5000/ns/img:1.0"),
            ("myreg:5000/ns/img", None)
        );
        assert_eq!(
            normalize_image("ghcr.io/a/b@sha256:abcd"),
            ("ghcr.io/a/b", Some("sha256:abcd"))
        );
        assert_eq!(
            normalize_image("ghcr.io/a/b:1.0@sha256:abcd"),
            ("ghcr.io/a/b", Some("sha256:abcd"))
        );
    }

    #[test]
    fn packages_get_name_and_lose_tag() {
        let mut sh = Skyhook::new(
            "x",
            SkyhookSpec {
                packages: [
                    (
                        "dax".to_owned(),
                        Package {
                            version: "1.2.3".into(),
                            image: "ghcr.io/nvidia/skyhook/agentless:latest".into(),
                            ..Package::default()
                        },
                    ),
                    (
                        "pinned".to_owned(),
                        Package {
                            version: "1.0.0".into(),
                            image: "repo/pinned@sha256:feed".into(),
                            ..Package::default()
                        },
                    ),
                ]
                .into(),
                ..SkyhookSpec::default()
            },
        );
        normalize(&mut sh);
        let dax = &sh.spec.packages["dax"];
        assert_eq!(dax.name, "dax");
        assert_eq!(dax.image, "ghcr.io/nvidia/skyhook/agentless");
        assert_eq!(dax.container_sha, None);
        let pinned = &sh.spec.packages["pinned"];
        assert_eq!(pinned.image, "repo/pinned");
        assert_eq!(pinned.container_sha.as_deref(), Some("sha256:feed"));
    }
}
