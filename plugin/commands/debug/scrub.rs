//! Pattern scrubbing of free text (logs, messages, every file of the archive): what a secret
//! looks like when no field name says where it is. Best effort by nature: a secret with neither
//! a telltale shape nor a telltale name (a bare password in a log line) passes.
//!
//! Works on bytes, so a log that is not valid UTF-8 is still scrubbed rather than skipped.

use std::sync::LazyLock;

use regex::bytes::{Captures, Regex};
use skyhook::schema::sha256_hex;

/// The replacement for a value whose hash would help nobody (a password: short, guessable).
pub const REDACTED: &str = "[REDACTED]";

/// Every marker starts so: a value already replaced is left alone when scrubbed again.
const MARK: &[u8] = b"[REDACTED";

/// Hex digits of SHA-256 in hashed markers: enough to tell two values apart, far too few to
/// give back a high-entropy token.
const HASH_LEN: usize = 12;

/// Shown in place of a file when the patterns could not be compiled: fail closed.
const UNAVAILABLE: &[u8] = b"[REDACTED: the redaction patterns failed to compile]\n";

/// What is scrubbed, one line each, for the archive's `redaction.txt`.
pub const SCRUBBED: [&str; 8] = [
    "PEM blocks (-----BEGIN ...----- to -----END ...-----, or to the end of the text)",
    "Authorization / Proxy-Authorization header values",
    "Bearer tokens",
    "JSON Web Tokens (three base64url segments starting eyJ)",
    "user:password@ in URLs (scheme and host kept)",
    "AWS access key ids and GitHub tokens by their shape",
    "webhook URLs that are their own credential (Slack, Microsoft Teams and Power Automate, \
     Discord): scheme and host kept, the rest hashed",
    "values of NAME=value, NAME: value and \"name\": \"value\" whose name has a secret word \
     (pass, password, passwd, passphrase, pwd, secret, token, credential, creds, dsn, auth, \
     authorization, cert, key as part of a longer name such as API_KEY)",
];

/// `[REDACTED sha256:<12 hex>]`: the same value gives the same marker everywhere, so a support
/// engineer can still tell "the same token" from "another token".
pub fn hashed(value: &[u8]) -> String {
    format!("[REDACTED sha256:{}]", sha256_hex(value, HASH_LEN))
}

/// `[REDACTED sha256:<12 hex>, <n> bytes]`, for whole files (configMap values).
pub fn hashed_sized(value: &[u8]) -> String {
    format!(
        "[REDACTED sha256:{}, {} bytes]",
        sha256_hex(value, HASH_LEN),
        value.len()
    )
}

/// Name parts that mark a value as secret, matched whole (a trailing `s` allowed).
const SECRET_PARTS: [&str; 12] = [
    "pass",
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "credential",
    "creds",
    "dsn",
    "auth",
    "authorization",
];

/// Endings that mark a run-together part (`PGPASSWORD`, `apikey`); `key` and `pass` are not
/// among them, or `monkey` and `bypass` would be secrets.
const SECRET_ENDINGS: [&str; 9] = [
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "apikey",
    "accesskey",
    "privatekey",
];

/// Last parts naming where a secret is rather than the secret itself (`SECRET_NAME`,
/// `keyFile`, `secretKeyRef`): keeping them keeps the archive useful.
const REFERENCE_PARTS: [&str; 8] = ["name", "names", "ref", "path", "file", "dir", "id", "type"];

/// A name's words: split at punctuation and camelCase, lower-cased (`apiKeyID` -> api, key, id).
fn name_parts(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for chunk in name.split(|c: char| !c.is_ascii_alphanumeric()) {
        let chars: Vec<char> = chunk.chars().collect();
        let mut current = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1);
            let lower_to_upper = prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit())
                && c.is_ascii_uppercase();
            let acronym_end = prev.is_some_and(|p| p.is_ascii_uppercase())
                && c.is_ascii_uppercase()
                && next.is_some_and(char::is_ascii_lowercase);
            if (lower_to_upper || acronym_end) && !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            current.push(c.to_ascii_lowercase());
        }
        if !current.is_empty() {
            parts.push(current);
        }
    }
    parts
}

/// Whether a variable, field or parameter of this name holds a secret: one of its words is a
/// secret word, or `key` next to another word (`API_KEY`; a field called just `key` is a taint
/// or selector key far more often than a secret).
pub fn secret_name(name: &str) -> bool {
    let parts = name_parts(name);
    if parts.len() > 1
        && parts
            .last()
            .is_some_and(|p| REFERENCE_PARTS.contains(&p.as_str()))
    {
        return false;
    }
    let word = |p: &str, w: &str| p == w || p.strip_suffix('s') == Some(w);
    parts.iter().any(|p| {
        SECRET_PARTS.iter().any(|w| word(p, w))
            || SECRET_ENDINGS.iter().any(|w| p.ends_with(w))
            || (parts.len() > 1 && (word(p, "key") || word(p, "cert")))
    })
}

type Replace = fn(&Captures) -> Vec<u8>;

/// Rules applied in order: whole blocks and tokens by shape first, then names, so that
/// `DSN=postgres://u:p@h` and `TOKEN=eyJ...` are caught whichever comes first.
const SHAPES: [(&str, Replace); 8] = [
    (
        r"(?s)-----BEGIN ([A-Z0-9 ]{1,64})-----(?:.*?-----END [A-Z0-9 ]{1,64}-----|.*)",
        pem,
    ),
    // The body and end of a block whose start was cut off (a truncated log).
    (
        r"(?m)(?:^[ \t]*[A-Za-z0-9+/=]{20,}[ \t]*\r?\n)+[ \t]*-----END ([A-Z0-9 ]{1,64})-----",
        pem,
    ),
    (
        r#"(?i)\b((?:proxy-)?authorization)(\\?["']?[ \t]*[:=][ \t]*\\?["']?)([^\r\n"'\\]+)"#,
        header,
    ),
    (r"(?i)\b(bearer)([ \t]+)([A-Za-z0-9._~+/=-]{8,})", bearer),
    (
        r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
        whole,
    ),
    (
        r#"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@:"'<>]*:[^\s/?#"'<>]*@"#,
        userinfo,
    ),
    (
        r"\b(?:(?:AKIA|ASIA)[A-Z0-9]{16}|gh[pousr]_[A-Za-z0-9]{36,})\b",
        whole,
    ),
    // Whoever has one of these URLs can post as its owner: the path is the token.
    (
        r#"(?i)\b(https?://(?:hooks\.slack\.com|[a-z0-9-]+\.webhook\.office\.com|[a-z0-9.-]+\.logic\.azure\.com(?::[0-9]+)?|(?:[a-z0-9-]+\.)?discord(?:app)?\.com/api/webhooks))(/[^\s"'<>\\]+)"#,
        webhook,
    ),
];

/// `name`, separator, value (marker, escaped-quoted, quoted or bare up to a delimiter).
const ASSIGNMENT: &str = r#"([A-Za-z_][A-Za-z0-9_.\-]*)(\\?["']?[ \t]*[:=][ \t]*)(\[REDACTED[^\]\n]*\]|\\"(?:[^"\\\n]|\\[^"\n])*\\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|(?:\[REDACTED[^\]\n]*\]|[^\s"',;&)}\]])+)"#;

fn pem(c: &Captures) -> Vec<u8> {
    let label = String::from_utf8_lossy(&c[1]).trim().to_string();
    format!(
        "[REDACTED PEM {label} sha256:{}]",
        sha256_hex(&c[0], HASH_LEN)
    )
    .into_bytes()
}

fn header(c: &Captures) -> Vec<u8> {
    [&c[1], &c[2], REDACTED.as_bytes()].concat()
}

fn bearer(c: &Captures) -> Vec<u8> {
    let token = &c[3];
    // A prose word after "bearer" ("bearer credentials") has no digit or punctuation.
    if token.iter().all(u8::is_ascii_alphabetic) || token.starts_with(MARK) {
        return c[0].to_vec();
    }
    [&c[1], &c[2], hashed(token).as_bytes()].concat()
}

fn whole(c: &Captures) -> Vec<u8> {
    hashed(&c[0]).into_bytes()
}

fn webhook(c: &Captures) -> Vec<u8> {
    if c[2].starts_with(b"/[REDACTED") {
        return c[0].to_vec();
    }
    [&c[1], b"/", hashed(&c[2]).as_bytes()].concat()
}

fn userinfo(c: &Captures) -> Vec<u8> {
    [&c[1], REDACTED.as_bytes(), b"@"].concat()
}

struct Rules {
    shapes: Vec<(Regex, Replace)>,
    assignment: Regex,
}

static RULES: LazyLock<Option<Rules>> = LazyLock::new(|| {
    let shapes = SHAPES
        .iter()
        .map(|(re, f)| Regex::new(re).ok().map(|r| (r, *f)))
        .collect::<Option<Vec<_>>>()?;
    Some(Rules {
        shapes,
        assignment: Regex::new(ASSIGNMENT).ok()?,
    })
});

/// `text` with every secret-looking piece replaced by a marker.
pub fn scrub(text: &[u8]) -> Vec<u8> {
    let Some(rules) = RULES.as_ref() else {
        return UNAVAILABLE.to_vec();
    };
    let mut out = text.to_vec();
    for (re, replace) in &rules.shapes {
        if re.is_match(&out) {
            out = re.replace_all(&out, |c: &Captures| replace(c)).into_owned();
        }
    }
    assignments(&rules.assignment, &out)
}

/// [`scrub`] of a string (the replacements are ASCII, so UTF-8 stays UTF-8).
pub fn scrub_str(text: &str) -> String {
    let out = scrub(text.as_bytes());
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Replaces the values of secret-named assignments. A hand-rolled scan, not `replace_all`:
/// after a harmless `name:` it resumes right after the separator, so `msg: password=x` still
/// has its password found inside what `msg`'s value would have swallowed.
fn assignments(re: &Regex, text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while let Some(c) = re.captures_at(text, at) {
        let (Some(all), Some(name), Some(sep), Some(value)) =
            (c.get(0), c.get(1), c.get(2), c.get(3))
        else {
            break;
        };
        let secret = std::str::from_utf8(name.as_bytes()).is_ok_and(secret_name)
            && !harmless(value.as_bytes());
        if !secret {
            at = sep.end();
            continue;
        }
        out.extend_from_slice(&text[copied..value.start()]);
        let v = value.as_bytes();
        let quote: &[u8] = match v.first() {
            Some(b'"') | Some(b'\'') => &v[..1],
            Some(b'\\') => b"\\\"",
            _ => b"",
        };
        out.extend_from_slice(&[quote, REDACTED.as_bytes(), quote].concat());
        copied = all.end();
        at = all.end();
    }
    out.extend_from_slice(&text[copied..]);
    out
}

/// Values that cannot be a secret, kept so `automountServiceAccountToken: false` still reads.
fn harmless(value: &[u8]) -> bool {
    let unquoted = value
        .strip_prefix(b"\\\"")
        .or_else(|| value.strip_prefix(b"\""))
        .or_else(|| value.strip_prefix(b"'"))
        .unwrap_or(value);
    let unquoted = unquoted
        .strip_suffix(b"\\\"")
        .or_else(|| unquoted.strip_suffix(b"\""))
        .or_else(|| unquoted.strip_suffix(b"'"))
        .unwrap_or(unquoted);
    unquoted.is_empty()
        || unquoted.starts_with(MARK)
        || [&b"true"[..], b"false", b"null", b"~"].contains(&unquoted)
}

#[cfg(test)]
#[path = "scrub_tests.rs"]
mod tests;
