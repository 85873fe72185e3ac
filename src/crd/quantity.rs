//! Just enough of Kubernetes' `resource.Quantity` to validate package resource overrides
//! (sign and ordering), which k8s-openapi leaves as an opaque string.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Parses a quantity into an approximate value.
///
/// `f64` is enough here: the only uses are "is it zero / negative" (exact) and "is the limit at
/// least the request", where values closer than 1 part in 10^15 are irrelevant for CPU and
/// memory amounts.
pub(crate) fn parse(q: &Quantity) -> Option<f64> {
    let s = q.0.trim();
    let (negative, s) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let mantissa: f64 = if let Some(rest) = number.strip_prefix('.') {
        format!("0.{rest}").parse().ok()?
    } else {
        number.trim_end_matches('.').parse().ok()?
    };
    let multiplier = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().ok()?;
            10f64.powi(e)
        }
        _ => return None,
    };
    let v = mantissa * multiplier;
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Option<f64> {
        parse(&Quantity(s.to_owned()))
    }

    #[test]
    fn forms() {
        assert_eq!(p("1"), Some(1.0));
        assert_eq!(p("500m"), Some(0.5));
        assert_eq!(p("1Gi"), Some(1_073_741_824.0));
        assert_eq!(p("1.5"), Some(1.5));
        assert_eq!(p(".5"), Some(0.5));
        assert_eq!(p("2."), Some(2.0));
        assert_eq!(p("1e3"), Some(1000.0));
        assert_eq!(p("-1"), Some(-1.0));
        assert_eq!(p("0"), Some(0.0));
        assert_eq!(p("+64Mi"), Some(67_108_864.0));
        assert_eq!(p("abc"), None);
        assert_eq!(p("1Xi"), None);
        assert_eq!(p(""), None);
        assert_eq!(p("1.2.3"), None);
    }
}
