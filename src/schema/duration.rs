//! Go `time.ParseDuration` syntax (`30s`, `1h30m`, `1.5s`, `300ms`), used by the reference's
//! settings, the CRD's `gracefulShutdown` and the plugin's time flags. Parsed in integer
//! nanoseconds with Go's own ceiling (`math.MaxInt64` ns, about 2,562,047 h), so an out-of-range
//! value is an error, never a panic or a silent saturation.

use std::time::Duration;

use thiserror::Error;

/// The longest duration Go can represent: `math.MaxInt64` nanoseconds.
pub const MAX_GO_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    #[error("invalid duration {0:?} (use Go syntax such as 30s, 10m, 1h30m)")]
    Syntax(String),
    #[error("duration {0:?} is out of range (at most 2562047h)")]
    OutOfRange(String),
}

const NANOS: [(&str, u128); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a non-negative Go duration. `"0"` is the only unit-less value Go accepts.
pub fn parse_go_duration(s: &str) -> Result<Duration, DurationError> {
    let syntax = || DurationError::Syntax(s.to_string());
    let range = || DurationError::OutOfRange(s.to_string());
    let body = s.strip_prefix('+').unwrap_or(s);
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    if body.is_empty() {
        return Err(syntax());
    }
    let mut rest = body;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(syntax)?;
        let (number, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = NANOS
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, n)| *n)
            .ok_or_else(syntax)?;
        total = total
            .checked_add(component_nanos(number, scale).ok_or_else(syntax)?)
            .ok_or_else(range)?;
        if total > MAX_GO_DURATION.as_nanos() {
            return Err(range());
        }
        rest = tail;
    }
    let nanos = u64::try_from(total).map_err(|_| range())?;
    Ok(Duration::from_nanos(nanos))
}

/// `number` × `scale` nanoseconds, for `12`, `1.5` or `.5` (Go accepts each); `None` on bad
/// syntax. Saturates far above the Go ceiling, which the caller then rejects.
fn component_nanos(number: &str, scale: u128) -> Option<u128> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let mut value: u128 = 0;
    for d in int.bytes() {
        value = value
            .saturating_mul(10)
            .saturating_add(u128::from(d - b'0'));
    }
    let mut out = value.saturating_mul(scale);
    // Fraction digits beyond nanosecond precision change nothing, as in Go.
    let mut unit = scale;
    for d in frac.bytes().take(30) {
        unit /= 10;
        out = out.saturating_add(u128::from(d - b'0') * unit);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_syntax_parses_like_go() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("30s", 30_000_000_000),
            ("1h30m", 5_400_000_000_000),
            ("1.5s", 1_500_000_000),
            (".5s", 500_000_000),
            ("300ms", 300_000_000),
            ("2us", 2_000),
            ("2µs", 2_000),
            ("7ns", 7),
            ("+10m", 600_000_000_000),
            ("2562047h", 2_562_047 * 3_600_000_000_000),
        ];
        for (input, nanos) in cases {
            assert_eq!(
                parse_go_duration(input),
                Ok(Duration::from_nanos(*nanos)),
                "{input}"
            );
        }
    }

    #[test]
    fn bad_and_huge_values_are_errors_not_panics() {
        for bad in ["", "10", "s", "1x", "1..5s", "-5s", "1h 2m", "."] {
            assert!(
                matches!(parse_go_duration(bad), Err(DurationError::Syntax(_))),
                "{bad}"
            );
        }
        for huge in [
            "1000000000h",
            "2562048h",
            "99999999999999999999999999999999999999h",
        ] {
            assert!(
                matches!(parse_go_duration(huge), Err(DurationError::OutOfRange(_))),
                "{huge}"
            );
        }
    }
}
