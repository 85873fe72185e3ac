//! Keeps credentials out of the archive: env values whose names look secret become `REDACTED`.
//!
//! Redaction works on the JSON value before it is serialised, so it cannot be fooled by YAML
//! quoting or line wrapping the way a text filter could.

use serde_json::Value;

/// The replacement for a redacted value.
pub const REDACTED: &str = "REDACTED";

/// Name fragments that mark an env var as secret (matched case-insensitively).
const SECRET_WORDS: [&str; 8] = [
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "SECRET",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "CERT",
];

/// kubectl copies the whole applied object, env values included, into this annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

pub fn secret_name(name: &str) -> bool {
    let upper = name.to_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
}

/// Replaces secret-looking env values anywhere in `value`: every `{"name", "value"}` object in
/// an array under an `env` key (containers, init containers, Skyhook packages), including the
/// copy kubectl keeps in the last-applied annotation.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if key == "env"
                    && let Value::Array(items) = child
                {
                    items.iter_mut().for_each(redact_entry);
                }
                if key == LAST_APPLIED
                    && let Value::String(text) = child
                    && let Ok(mut applied) = serde_json::from_str::<Value>(text)
                {
                    redact(&mut applied);
                    *text = applied.to_string();
                }
                redact(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

fn redact_entry(entry: &mut Value) {
    let Value::Object(map) = entry else { return };
    let secret = map
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(secret_name);
    if secret && let Some(v) = map.get_mut("value") {
        *v = Value::String(REDACTED.into());
    }
}

/// Drops `metadata.managedFields`: server bookkeeping that only makes the files longer.
pub fn strip_noise(value: &mut Value) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_names() {
        for n in [
            "API_TOKEN",
            "db_password",
            "PASSWD",
            "aws_secret",
            "ssh-key",
            "Credentials",
            "BASIC_AUTH",
            "tls_cert",
        ] {
            assert!(secret_name(n), "{n}");
        }
        for n in ["SLEEP_LEN", "EXIT_CODE", "LOG_TEXT", "PATH"] {
            assert!(!secret_name(n), "{n}");
        }
    }

    #[test]
    fn env_values_are_redacted_everywhere() {
        let applied = json!({"spec": {"packages": {"p": {"env": [
            {"name": "API_TOKEN", "value": "s3cr3t"}]}}}})
        .to_string();
        let mut v = json!({
            "metadata": {"annotations": {LAST_APPLIED: applied}, "managedFields": [{}]},
            "spec": {
                "packages": {"p": {"env": [
                    {"name": "API_TOKEN", "value": "s3cr3t"},
                    {"name": "SLEEP_LEN", "value": "1"},
                ]}},
                "template": {"spec": {"initContainers": [{"env": [
                    {"name": "DB_PASSWORD", "value": "s3cr3t"},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}},
                ]}]}},
            },
            "data": {"name": "API_KEY", "value": "not an env entry"},
        });
        redact(&mut v);
        strip_noise(&mut v);
        let text = v.to_string();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert_eq!(v["spec"]["packages"]["p"]["env"][0]["value"], REDACTED);
        assert_eq!(v["spec"]["packages"]["p"]["env"][1]["value"], "1");
        assert_eq!(
            v["spec"]["template"]["spec"]["initContainers"][0]["env"][1]["valueFrom"]["secretKeyRef"]
                ["key"],
            "k"
        );
        assert_eq!(v["data"]["value"], "not an env entry");
        assert!(v["metadata"].get("managedFields").is_none());
    }
}
