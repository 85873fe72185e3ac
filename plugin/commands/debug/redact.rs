//! Keeps credentials out of the objects in the archive: env values whose names look secret,
//! package `configMap` contents (hashed, so a changed file still shows), and, in every other
//! string, whatever [`scrub`] recognises.
//!
//! Field-based redaction works on the JSON value before it is serialised, so it cannot be fooled
//! by YAML quoting or line wrapping the way a text filter could; the archive then scrubs every
//! file's text as well (`Archive::add`).

use serde_json::Value;

use super::scrub::{self, REDACTED, hashed_sized, secret_name};

/// kubectl copies the whole applied object, env values included, into this annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Replaces secrets anywhere in `value`: secret-named entries of every `env` array (containers,
/// init containers, Skyhook packages), the values of every package's `configMap` and of a
/// ConfigMap's `data`/`binaryData`, the copy kubectl keeps in the last-applied annotation, and
/// secret-shaped text in every other string.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let config_map = map.get("kind").and_then(Value::as_str) == Some("ConfigMap");
            for (key, child) in map.iter_mut() {
                match (key.as_str(), &mut *child) {
                    ("env", Value::Array(items)) => items.iter_mut().for_each(redact_entry),
                    ("packages", Value::Object(packages)) => {
                        for package in packages.values_mut() {
                            if let Some(files) = package.get_mut("configMap") {
                                hash_values(files);
                            }
                        }
                    }
                    ("data" | "binaryData", files) if config_map => hash_values(files),
                    (LAST_APPLIED, Value::String(text)) => {
                        if let Ok(mut applied) = serde_json::from_str::<Value>(text) {
                            redact(&mut applied);
                            *text = applied.to_string();
                        }
                    }
                    _ => {}
                }
                redact(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(text) => *text = scrub::scrub_str(text),
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

/// Keys kept (file names say what a package is configured with), values replaced by their
/// hash and length.
fn hash_values(files: &mut Value) {
    let Value::Object(files) = files else { return };
    for v in files.values_mut() {
        if let Value::String(text) = v {
            *v = Value::String(hashed_sized(text.as_bytes()));
        }
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

    #[test]
    fn config_maps_are_hashed_with_keys_kept() {
        let pem = "-----BEGIN PRIVATE KEY-----\nMIIsecret\n-----END PRIVATE KEY-----\n";
        let applied =
            json!({"spec": {"packages": {"p": {"configMap": {"tls.key": pem}}}}}).to_string();
        let mut v = json!({
            "metadata": {"annotations": {LAST_APPLIED: applied}},
            "spec": {"packages": {"p": {"configMap": {"tls.key": pem, "empty": ""}}}},
            "volumes": [{"name": "cfg", "configMap": {"name": "p-config"}}],
        });
        let cm =
            json!({"kind": "ConfigMap", "data": {"a": "DB_PASS=x"}, "binaryData": {"b": "AAAA"}});
        let mut cm_v = cm.clone();
        redact(&mut v);
        redact(&mut cm_v);
        let text = format!("{v}{cm_v}");
        assert!(
            !text.contains("MIIsecret") && !text.contains("DB_PASS=x"),
            "{text}"
        );
        let want = format!(
            "[REDACTED sha256:{}, {} bytes]",
            skyhook::schema::sha256_hex(pem, 12),
            pem.len()
        );
        assert_eq!(v["spec"]["packages"]["p"]["configMap"]["tls.key"], want);
        assert_eq!(
            v["spec"]["packages"]["p"]["configMap"]["empty"],
            "[REDACTED sha256:e3b0c44298fc, 0 bytes]"
        );
        assert!(
            v["metadata"]["annotations"][LAST_APPLIED]
                .as_str()
                .is_some_and(|a| a.contains(&want))
        );
        // A volume's configMap names the ConfigMap; nothing secret there.
        assert_eq!(v["volumes"][0]["configMap"]["name"], "p-config");
        assert_eq!(
            cm_v["binaryData"]["b"],
            format!(
                "[REDACTED sha256:{}, 4 bytes]",
                skyhook::schema::sha256_hex("AAAA", 12)
            )
        );
    }

    #[test]
    fn every_string_is_scrubbed() {
        let mut v = json!({"status": {"conditions": [
            {"type": "Failed", "message": "pull from https://bob:hunter2@registry.example/x failed"},
        ]}, "env": [{"name": "LOG_TEXT", "value": "DSN=postgres://u:p@h/db"}]});
        redact(&mut v);
        assert_eq!(
            v["status"]["conditions"][0]["message"],
            "pull from https://[REDACTED]@registry.example/x failed"
        );
        assert_eq!(v["env"][0]["value"], "DSN=[REDACTED]");
    }

    /// The whole path of an object into the archive: fields, YAML, then the file's text.
    #[test]
    fn a_skyhook_as_archived() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIsecret\n-----END RSA PRIVATE KEY-----\n";
        let mut v = json!({"spec": {"packages": {"p": {
            "env": [{"name": "DB_PASS", "value": "hunter2"}, {"name": "DSN", "value": "postgres://u:p4ss@h/db"}],
            "configMap": {"server.pem": pem, "token.jwt": "eyJhbGciOi.eyJzdWIiOi.c2ln", "db.env": "DB_PASS=hunter2\n"},
        }}}});
        redact(&mut v);
        let yaml = crate::app::output::yaml(&v).unwrap();
        let text = String::from_utf8(scrub::scrub(yaml.as_bytes())).unwrap();
        for needle in ["hunter2", "p4ss", "MIIsecret", "BEGIN", "c2ln"] {
            assert!(!text.contains(needle), "{needle} in {text}");
        }
        assert!(
            text.contains("server.pem: '[REDACTED sha256:")
                || text.contains("server.pem: \"[REDACTED sha256:"),
            "{text}"
        );
        assert!(
            text.contains("token.jwt: '[REDACTED sha256:")
                || text.contains("token.jwt: \"[REDACTED sha256:"),
            "{text}"
        );
    }
}
