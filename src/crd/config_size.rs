//! A package's `configMap` becomes one ConfigMap, and the API server refuses a ConfigMap whose
//! data exceeds 1 MiB. Refused, it would fail the write on every pass; caught here, the Skyhook
//! is marked invalid at once with the field named.

pub use super::admission::MAX_CONFIG_MAP_BYTES;
use super::admission::MSG_CONFIG_MAP_TOO_LARGE;
use super::skyhook::Package;

/// Why the package's `configMap` is too large to write, if it is.
pub fn too_large(package: &Package) -> Option<String> {
    let bytes: usize = package
        .config_map
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    (bytes > MAX_CONFIG_MAP_BYTES).then(|| {
        format!(
            "{MSG_CONFIG_MAP_TOO_LARGE} ({bytes} of {MAX_CONFIG_MAP_BYTES} bytes; the API \
             server's limit is 1 MiB); move large files into the package image"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_map_over_the_limit_is_named() {
        let mut p: Package = serde_json::from_value(serde_json::json!({
            "version": "1.0.0", "image": "example.com/p"
        }))
        .expect("package");
        p.config_map.insert("small.sh".into(), "echo hi".into());
        assert_eq!(too_large(&p), None);
        p.config_map
            .insert("big.bin".into(), "x".repeat(MAX_CONFIG_MAP_BYTES));
        let why = too_large(&p).expect("too large");
        assert!(why.contains("(1000022 of 1000000 bytes"), "{why}");
    }
}
