//! Go `path/filepath.Match` (Unix flavour), used to match `configInterrupts` keys against
//! changed configMap keys.
//!
//! `*` matches any run of non-`/` characters, `?` one non-`/` character, `[...]` a class (`^`
//! negates, `a-z` ranges, `\` escapes), `\x` a literal `x`. Like Go, a malformed pattern is
//! reported even when the name fails to match earlier.

use super::SchemaError;

const SEPARATOR: u8 = b'/';

/// Whether `name` matches the shell pattern `pattern` (Go `filepath.Match`).
pub fn glob_match(pattern: &str, name: &str) -> Result<bool, SchemaError> {
    let mut pattern = pattern.as_bytes();
    let mut name = name.as_bytes();
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing `*` matches the rest of the name unless it crosses a separator.
            return Ok(!name.contains(&SEPARATOR));
        }
        let attempt = match_chunk(chunk, name);
        // The last chunk must consume the whole name; otherwise a later star may still help.
        if let Ok(Some(t)) = attempt
            && (t.is_empty() || !pattern.is_empty())
        {
            name = t;
            continue;
        }
        attempt?;
        if star {
            let mut i = 0;
            while i < name.len() && name[i] != SEPARATOR {
                match match_chunk(chunk, &name[i + 1..])? {
                    Some(t) if pattern.is_empty() && !t.is_empty() => {}
                    Some(t) => {
                        name = t;
                        continue 'pattern;
                    }
                    None => {}
                }
                i += 1;
            }
        }
        // Before reporting a mismatch, make sure the rest of the pattern is well-formed.
        while !pattern.is_empty() {
            let (_, chunk, rest) = scan_chunk(pattern);
            pattern = rest;
            match_chunk(chunk, b"")?;
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off leading stars and the following chunk up to the next star outside a class.
fn scan_chunk(pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let stars = pattern.iter().take_while(|&&b| b == b'*').count();
    let pattern = &pattern[stars..];
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            b'\\' if i + 1 < pattern.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (stars > 0, &pattern[..i], &pattern[i..])
}

/// Decodes one UTF-8 character like Go's `utf8.DecodeRune`: invalid input yields `None` and
/// a width of 1; empty input yields `None` and width 0.
fn decode(s: &[u8]) -> (Option<char>, usize) {
    let Some(&first) = s.first() else {
        return (None, 0);
    };
    let width = match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => return (None, 1),
    };
    match s.get(..width).and_then(|b| std::str::from_utf8(b).ok()) {
        Some(text) => (text.chars().next(), width),
        None => (None, 1),
    }
}

/// Matches `chunk` (no unescaped top-level `*`) at the start of `s`; `Ok(Some(rest))` on
/// success. Keeps scanning the chunk after a mismatch so syntax errors are still reported.
fn match_chunk<'s>(mut chunk: &[u8], mut s: &'s [u8]) -> Result<Option<&'s [u8]>, SchemaError> {
    let mut failed = false;
    while let Some(&c) = chunk.first() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match c {
            b'[' => {
                let mut r: Option<char> = None;
                if !failed {
                    let (decoded, n) = decode(s);
                    r = decoded;
                    s = &s[n..];
                }
                chunk = &chunk[1..];
                let negated = chunk.first() == Some(&b'^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if chunk.first() == Some(&b']') && ranges > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = get_esc(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if chunk.first() == Some(&b'-') {
                        let (h, rest) = get_esc(&chunk[1..])?;
                        hi = h;
                        chunk = rest;
                    }
                    // An undecodable name byte compares as U+FFFD, as in Go.
                    let rc = r.unwrap_or(char::REPLACEMENT_CHARACTER);
                    if !failed && lo <= rc && rc <= hi {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            b'?' => {
                if !failed {
                    if s[0] == SEPARATOR {
                        failed = true;
                    }
                    let (_, n) = decode(s);
                    s = &s[n..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                if c == b'\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return Err(SchemaError::BadGlobPattern);
                    }
                }
                if !failed {
                    if chunk[0] != s[0] {
                        failed = true;
                    }
                    s = &s[1..];
                }
                chunk = &chunk[1..];
            }
        }
    }
    Ok((!failed).then_some(s))
}

/// One (possibly escaped) class character, and the rest of the chunk.
fn get_esc(chunk: &[u8]) -> Result<(char, &[u8]), SchemaError> {
    let mut chunk = match chunk.first() {
        None | Some(b'-') | Some(b']') => return Err(SchemaError::BadGlobPattern),
        Some(_) => chunk,
    };
    if chunk[0] == b'\\' {
        chunk = &chunk[1..];
        if chunk.is_empty() {
            return Err(SchemaError::BadGlobPattern);
        }
    }
    let (r, n) = decode(chunk);
    let rest = &chunk[n..];
    match r {
        Some(r) if !rest.is_empty() => Ok((r, rest)),
        _ => Err(SchemaError::BadGlobPattern),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cases from Go's `filepath` match tests.
    #[test]
    fn go_match_table() {
        let ok = |p: &str, s: &str, want: bool| {
            assert_eq!(glob_match(p, s).unwrap(), want, "{p:?} vs {s:?}");
        };
        ok("abc", "abc", true);
        ok("*", "abc", true);
        ok("*c", "abc", true);
        ok("a*", "a", true);
        ok("a*", "abc", true);
        ok("a*", "ab/c", false);
        ok("a*/b", "abc/b", true);
        ok("a*/b", "a/c/b", false);
        ok("a*b*c*d*e*/f", "axbxcxdxe/f", true);
        ok("a*b*c*d*e*/f", "axbxcxdxexxx/f", true);
        ok("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", false);
        ok("a*b*c*d*e*/f", "axbxcxdxexxx/fff", false);
        ok("a*b?c*x", "abxbbxdbxebxczzx", true);
        ok("a*b?c*x", "abxbbxdbxebxczzy", false);
        ok("ab[c]", "abc", true);
        ok("ab[b-d]", "abc", true);
        ok("ab[e-g]", "abc", false);
        ok("ab[^c]", "abc", false);
        ok("ab[^b-d]", "abc", false);
        ok("ab[^e-g]", "abc", true);
        ok("a\\*b", "a*b", true);
        ok("a\\*b", "ab", false);
        ok("a?b", "a☺b", true);
        ok("a[^a]b", "a☺b", true);
        ok("a???b", "a☺b", false);
        ok("a[^a][^a][^a]b", "a☺b", false);
        ok("[a-ζ]*", "α", true);
        ok("*[a-ζ]", "A", false);
        ok("a?b", "a/b", false);
        ok("a*b", "a/b", false);
        ok("[\\]a]", "]", true);
        ok("[\\-]", "-", true);
        ok("[x\\-]", "x", true);
        ok("[x\\-]", "-", true);
        ok("[x\\-]", "z", false);
        ok("[\\-x]", "x", true);
        ok("[\\-x]", "-", true);
        ok("[\\-x]", "a", false);
        ok("*x", "xxx", true);
        ok("*.conf", "kubelet.conf", true);
        ok("*.conf", "dir/kubelet.conf", false);
        ok("", "", true);
        ok("", "a", false);
    }

    #[test]
    fn go_bad_patterns() {
        for (p, s) in [
            ("[]a]", "]"),
            ("[-]", "-"),
            ("[x-]", "x"),
            ("[x-]", "-"),
            ("[x-]", "z"),
            ("[-x]", "x"),
            ("[-x]", "-"),
            ("[-x]", "a"),
            ("\\", "a"),
            ("[a-b-c]", "a"),
            ("[", "a"),
            ("[^", "a"),
            ("[^bc", "a"),
            ("a[", "a"),
            ("a[", "ab"),
            ("a[", "x"),
            ("a/b[", "x"),
            ("*x[", "x"),
        ] {
            assert!(
                matches!(glob_match(p, s), Err(SchemaError::BadGlobPattern)),
                "{p:?} vs {s:?}"
            );
        }
    }
}
