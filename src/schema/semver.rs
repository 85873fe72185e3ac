//! Package-version semantics of Go's `golang.org/x/mod/semver`, applied after prefixing `v`
//! when absent (what the reference webhook and version-change logic do).
//!
//! Unlike strict SemVer this accepts the shorthands `1` and `1.2` (meaning `1.0.0`, `1.2.0`,
//! without pre-release or build suffix) and compares arbitrarily large numbers.

use std::cmp::Ordering;

struct Parsed<'a> {
    major: &'a str,
    minor: &'a str,
    patch: &'a str,
    /// Including the leading `-`; empty when absent.
    prerelease: &'a str,
}

fn with_v(version: &str) -> String {
    if version.starts_with('v') {
        version.to_owned()
    } else {
        format!("v{version}")
    }
}

/// Go `semver.parse` on a `v`-prefixed string.
fn parse(v: &str) -> Option<Parsed<'_>> {
    let rest = v.strip_prefix('v')?;
    let (major, rest) = parse_int(rest)?;
    if rest.is_empty() {
        return Some(Parsed {
            major,
            minor: "0",
            patch: "0",
            prerelease: "",
        });
    }
    let (minor, rest) = parse_int(rest.strip_prefix('.')?)?;
    if rest.is_empty() {
        return Some(Parsed {
            major,
            minor,
            patch: "0",
            prerelease: "",
        });
    }
    let (patch, mut rest) = parse_int(rest.strip_prefix('.')?)?;
    let mut prerelease = "";
    if rest.starts_with('-') {
        let end = rest.find('+').unwrap_or(rest.len());
        prerelease = &rest[..end];
        if !valid_identifiers(&prerelease[1..], true) {
            return None;
        }
        rest = &rest[end..];
    }
    if let Some(build) = rest.strip_prefix('+') {
        if !valid_identifiers(build, false) {
            return None;
        }
        rest = "";
    }
    rest.is_empty().then_some(Parsed {
        major,
        minor,
        patch,
        prerelease,
    })
}

/// A decimal number without leading zeros, and the rest of the string.
fn parse_int(v: &str) -> Option<(&str, &str)> {
    let digits = v.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || (digits > 1 && v.starts_with('0')) {
        return None;
    }
    Some(v.split_at(digits))
}

/// Non-empty dot-separated `[0-9A-Za-z-]+` identifiers; in a pre-release, numeric identifiers
/// may not have leading zeros.
fn valid_identifiers(s: &str, prerelease: bool) -> bool {
    s.split('.').all(|id| {
        !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !(prerelease && is_num(id) && id.len() > 1 && id.starts_with('0'))
    })
}

fn is_num(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit())
}

fn compare_int(x: &str, y: &str) -> Ordering {
    x.len().cmp(&y.len()).then_with(|| x.cmp(y))
}

fn compare_prerelease(x: &str, y: &str) -> Ordering {
    match (x.is_empty(), y.is_empty()) {
        _ if x == y => return Ordering::Equal,
        (true, _) => return Ordering::Greater,
        (_, true) => return Ordering::Less,
        _ => {}
    }
    let mut xs = x[1..].split('.');
    let mut ys = y[1..].split('.');
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(dx), Some(dy)) if dx != dy => {
                return match (is_num(dx), is_num(dy)) {
                    (true, false) => Ordering::Less,
                    (false, true) => Ordering::Greater,
                    (true, true) => compare_int(dx, dy),
                    (false, false) => dx.cmp(dy),
                };
            }
            _ => {}
        }
    }
}

/// Whether a package version is acceptable (Go `semver.IsValid` after prefixing `v`).
pub fn is_valid_semver(version: &str) -> bool {
    parse(&with_v(version)).is_some()
}

/// Go `semver.Compare` after prefixing `v`: invalid versions sort below valid ones (and equal
/// to each other), pre-releases below their release, build metadata is ignored.
pub fn semver_compare(a: &str, b: &str) -> Ordering {
    let (a, b) = (with_v(a), with_v(b));
    match (parse(&a), parse(&b)) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => compare_int(a.major, b.major)
            .then_with(|| compare_int(a.minor, b.minor))
            .then_with(|| compare_int(a.patch, b.patch))
            .then_with(|| compare_prerelease(a.prerelease, b.prerelease)),
    }
}

/// Go `semver.MajorMinor` on the string as given (no `v` is added): `vX.Y`, or `""` when
/// invalid. Operator version strings (`v0.13.0`, `dev`) are classified this way by the
/// migration logic.
pub fn major_minor(version: &str) -> String {
    let Some(p) = parse(version) else {
        return String::new();
    };
    format!("v{}.{}", p.major, p.minor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ordering::*;

    #[test]
    fn validity() {
        for ok in [
            "1",
            "1.2",
            "1.2.3",
            "1.2.3-rc.1",
            "1.2.3+meta",
            "2024.7.6",
            "v1.2.3",
            "0.0.0",
            "1.2.3-rc.1+build.5",
            "1.2.3-0",
            "1.2.3-0a",
            "1.2.3-a-b.c--d",
            "1.2.3+001",
            "99999999999999999999.0.0",
        ] {
            assert!(is_valid_semver(ok), "{ok}");
        }
        for bad in [
            "",
            "v",
            "2024/07/06",
            "01.2.3",
            "1.02.3",
            "1.2.03",
            "1.2-rc",
            "1-rc",
            "1.2.3-",
            "1.2.3-01",
            "1.2.3-a..b",
            "1.2.3+",
            "1.2.3+a..b",
            "1.2.3.4",
            "1.2.3-a_b",
            "vv1",
            "1.2.3 ",
            " 1.2.3",
            "1.2.",
            "a.b.c",
        ] {
            assert!(!is_valid_semver(bad), "{bad}");
        }
    }

    #[test]
    fn ordering() {
        let cases = [
            ("1.2.3", "1.2.4", Less),
            ("1.10.0", "1.9.0", Greater),
            ("1", "1.0.0", Equal),
            ("1.2", "v1.2.0", Equal),
            ("1.2.3+a", "1.2.3+b", Equal),
            ("1.2.3-rc.1", "1.2.3", Less),
            ("1.2.3-alpha", "1.2.3-alpha.1", Less),
            ("1.2.3-alpha.1", "1.2.3-alpha.beta", Less),
            ("1.2.3-alpha.beta", "1.2.3-beta", Less),
            ("1.2.3-beta.2", "1.2.3-beta.11", Less),
            ("1.2.3-beta.11", "1.2.3-rc.1", Less),
            ("1.2.3-1", "1.2.3-a", Less),
            ("2024.7.6", "2024.10.1", Less),
            (
                "100000000000000000000.0.0",
                "99999999999999999999.0.0",
                Greater,
            ),
            ("garbage", "0.0.1", Less),
            ("0.0.1", "garbage", Greater),
            ("garbage", "other", Equal),
            ("1.2.5", "1.2.6", Less),
        ];
        for (a, b, want) in cases {
            assert_eq!(semver_compare(a, b), want, "{a} vs {b}");
            assert_eq!(semver_compare(b, a), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn major_minor_like_go() {
        assert_eq!(major_minor("v0.13.0"), "v0.13");
        assert_eq!(major_minor("v0.5.2-rc.1"), "v0.5");
        assert_eq!(major_minor("v1"), "v1.0");
        assert_eq!(major_minor("dev"), "");
        assert_eq!(major_minor("0.5.0"), "");
        assert_eq!(major_minor(""), "");
    }
}
