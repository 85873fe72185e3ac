//! The one SHA-256 helper: safe names, spec hashes and package hashes all hex-encode a prefix
//! of the same digest.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `input`, cut to its first `hex_len` digits (64 keeps all of it).
pub fn sha256_hex(input: impl AsRef<[u8]>, hex_len: usize) -> String {
    let digest = Sha256::digest(input.as_ref());
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out.truncate(hex_len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_known_digest_and_cuts_prefixes() {
        let full = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        assert_eq!(sha256_hex("hello", 64), full);
        assert_eq!(sha256_hex(b"hello", 12), &full[..12]);
    }
}
