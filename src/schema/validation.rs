//! Kubernetes name and label validators (apimachinery `validation` semantics), so we never send
//! the API server a value it will reject.

const LABEL_VALUE_MAX: usize = 63;
const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?`, at most 63 characters (empty is valid).
/// Also the rule for the name part of a qualified key.
pub fn is_valid_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    if b.is_empty() {
        return true;
    }
    b.len() <= LABEL_VALUE_MAX
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| is_alnum(c) || matches!(c, b'-' | b'_' | b'.'))
}

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(value: &str) -> bool {
    let b = value.as_bytes();
    let lower_alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= DNS1123_LABEL_MAX
        && lower_alnum(b[0])
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| lower_alnum(c) || c == b'-')
}

/// RFC 1123 subdomain: dot-separated RFC 1123 labels, at most 253 characters (the name rule
/// for ConfigMaps, Jobs, Pods).
pub fn is_dns1123_subdomain(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= DNS1123_SUBDOMAIN_MAX
        // Unlike a standalone label, a subdomain part is not limited to 63 characters.
        && value
            .split('.')
            .all(|part| !part.is_empty() && is_dns1123_label_chars(part))
}

fn is_dns1123_label_chars(part: &str) -> bool {
    let b = part.as_bytes();
    let lower_alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    lower_alnum(b[0])
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| lower_alnum(c) || c == b'-')
}

/// Qualified name (label/annotation/taint key): `[<dns1123 subdomain>/]<name>` where `<name>`
/// is a non-empty label-value-shaped string of at most 63 characters.
pub fn is_qualified_name(value: &str) -> bool {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    !name.is_empty()
        && !name.contains('/')
        && is_valid_label_value(name)
        && prefix.is_none_or(is_dns1123_subdomain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values() {
        for ok in ["", "a", "a-b_c.d", "A9", &"x".repeat(63)] {
            assert!(is_valid_label_value(ok), "{ok}");
        }
        for bad in ["-a", "a-", "a+b", "a b", "é", &"x".repeat(64), "_a", "a."] {
            assert!(!is_valid_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("kind-worker"));
        assert!(!is_dns1123_label("Kind"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label(""));
        assert!(is_dns1123_subdomain("simple-skyhook-dexter-1.2.3"));
        assert!(!is_dns1123_subdomain("sh-p-1.2.3+meta"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain("a.-b"));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    }

    #[test]
    fn qualified_names() {
        assert!(is_qualified_name("skyhook.nvidia.com"));
        assert!(is_qualified_name("skyhook.nvidia.com/nodeState_x"));
        assert!(is_qualified_name("node.kubernetes.io/unschedulable"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("Bad_Prefix/x"));
        assert!(!is_qualified_name("x/"));
        assert!(!is_qualified_name(""));
        assert!(!is_qualified_name(&"x".repeat(64)));
    }
}
