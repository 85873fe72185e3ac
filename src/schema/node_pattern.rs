//! Node name patterns of the plugin's node commands: exact names, or anchored regexes when the
//! pattern contains a regex metacharacter.

use regex::Regex;

use super::SchemaError;

const REGEX_METACHARACTERS: &str = ".*+?^${}[]|()\\";

/// One node pattern given on the command line.
#[derive(Debug, Clone)]
pub struct NodePattern {
    pattern: String,
    regex: Option<Regex>,
}

impl NodePattern {
    /// A pattern containing any of `.*+?^${}[]|()\` is a regex that must match the whole name;
    /// anything else is an exact name. (Node names with dots are therefore regexes whose `.`
    /// also matches the dot itself, as in the reference.)
    pub fn new(pattern: &str) -> Result<NodePattern, SchemaError> {
        let regex = if pattern.contains(|c| REGEX_METACHARACTERS.contains(c)) {
            // The group keeps the anchors around the whole alternation (`a|b` must not
            // become `^a|b$`).
            let anchored = format!("^(?:{pattern})$");
            Some(
                Regex::new(&anchored).map_err(|e| SchemaError::InvalidNodePattern {
                    pattern: pattern.to_owned(),
                    message: e.to_string(),
                })?,
            )
        } else {
            None
        };
        Ok(NodePattern {
            pattern: pattern.to_owned(),
            regex,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    pub fn is_regex(&self) -> bool {
        self.regex.is_some()
    }

    pub fn matches(&self, node: &str) -> bool {
        match &self.regex {
            Some(re) => re.is_match(node),
            None => self.pattern == node,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_regex() {
        let exact = NodePattern::new("kind-worker").unwrap();
        assert!(!exact.is_regex());
        assert!(exact.matches("kind-worker"));
        assert!(!exact.matches("kind-worker2"));

        let re = NodePattern::new("kind-worker.*").unwrap();
        assert!(re.is_regex());
        assert!(re.matches("kind-worker"));
        assert!(re.matches("kind-worker2"));
        assert!(!re.matches("my-kind-worker"));

        let alt = NodePattern::new("a|b").unwrap();
        assert!(alt.matches("a") && alt.matches("b"));
        assert!(!alt.matches("ab") && !alt.matches("xb"));

        let dotted = NodePattern::new("node.1").unwrap();
        assert!(dotted.matches("node.1") && dotted.matches("nodex1"));
    }

    #[test]
    fn invalid_regex_error_text() {
        let err = NodePattern::new("worker[").unwrap_err().to_string();
        assert!(
            err.starts_with("invalid regex pattern \"worker[\": "),
            "{err}"
        );
    }
}
