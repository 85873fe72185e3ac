use super::*;

const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJlLXNlY3JldA";
const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzsecretbody0123456789abcdef\nQWxhZGRpbjpvcGVuIHNlc2FtZQ==\n-----END RSA PRIVATE KEY-----";

fn s(text: &str) -> String {
    scrub_str(text)
}

#[test]
fn secret_names() {
    let secret = [
        "API_TOKEN",
        "db_password",
        "DB_PASS",
        "PASSWD",
        "PWD",
        "aws_secret",
        "ssh-key",
        "API_KEY",
        "apiKey",
        "APIKey",
        "ACCESS_KEY",
        "PRIVATE_KEY",
        "Credentials",
        "BASIC_AUTH",
        "tls_cert",
        "DSN",
        "DATABASE_DSN",
        "PGPASSWORD",
        "clientSecret",
        "automountServiceAccountToken",
        "spring.datasource.password",
        "Authorization",
        "NODE_KEYS",
    ];
    for n in secret {
        assert!(secret_name(n), "{n} should be secret");
    }
    let plain = [
        "SLEEP_LEN",
        "EXIT_CODE",
        "LOG_TEXT",
        "PATH",
        "key",
        "keyboard",
        "monkey",
        "MONKEY_COUNT",
        "bypass",
        "compass",
        "author",
        "SECRET_NAME",
        "secretKeyRef",
        "keyFile",
        "tokenPath",
        "ACCESS_KEY_ID",
        "cert",
        "passenger",
    ];
    for n in plain {
        assert!(!secret_name(n), "{n} should not be secret");
    }
}

#[test]
fn name_parts_split_camel_case_and_acronyms() {
    assert_eq!(name_parts("apiKeyID"), ["api", "key", "id"]);
    assert_eq!(name_parts("APIKey"), ["api", "key"]);
    assert_eq!(name_parts("db_PASS-2"), ["db", "pass", "2"]);
}

#[test]
fn scrubbed_text() {
    let bearer = format!("[REDACTED sha256:{}]", sha256_hex("abc.DEF-123", 12));
    let jwt = format!("[REDACTED sha256:{}]", sha256_hex(JWT, 12));
    let cases: Vec<(String, String)> = vec![
        // name=value, name: value, JSON, quoted, escaped JSON inside a JSON log line
        (
            "DB_PASS=hunter2 next".into(),
            "DB_PASS=[REDACTED] next".into(),
        ),
        (
            "export API_KEY='a b c'".into(),
            "export API_KEY='[REDACTED]'".into(),
        ),
        ("password: hunter2".into(), "password: [REDACTED]".into()),
        (
            r#"{"token": "abc", "user": "bob"}"#.into(),
            r#"{"token": "[REDACTED]", "user": "bob"}"#.into(),
        ),
        (
            r#"{"msg":"{\"password\":\"hunter2\"}"}"#.into(),
            r#"{"msg":"{\"password\":\"[REDACTED]\"}"}"#.into(),
        ),
        (
            "run --db-password=hunter2 -v".into(),
            "run --db-password=[REDACTED] -v".into(),
        ),
        (
            "GET /x?token=abc&page=2".into(),
            "GET /x?token=[REDACTED]&page=2".into(),
        ),
        // a harmless name whose value would swallow a secret assignment
        (
            "msg: DB_PASS=hunter2".into(),
            "msg: DB_PASS=[REDACTED]".into(),
        ),
        // headers and tokens
        (
            "Authorization: Basic dXNlcjpwYXNz".into(),
            "Authorization: [REDACTED]".into(),
        ),
        (
            "curl -H 'Bearer abc.DEF-123'".into(),
            format!("curl -H 'Bearer {bearer}'"),
        ),
        (format!("id_token {JWT} ok"), format!("id_token {jwt} ok")),
        // URLs: scheme and host kept
        (
            "dsn postgres://u:p4ss@h/db".into(),
            "dsn postgres://[REDACTED]@h/db".into(),
        ),
        (
            "https://x:y@z@host:5432/p?q".into(),
            "https://[REDACTED]@host:5432/p?q".into(),
        ),
        ("DSN=postgres://u:p@h/db".into(), "DSN=[REDACTED]".into()),
        // nothing to do
        (
            "keyboard=us monkey: 3 key: node.kubernetes.io/x".into(),
            "keyboard=us monkey: 3 key: node.kubernetes.io/x".into(),
        ),
        (
            "the bearer credentials expired".into(),
            "the bearer credentials expired".into(),
        ),
        (
            "automountServiceAccountToken: false".into(),
            "automountServiceAccountToken: false".into(),
        ),
        (
            "SECRET_NAME=registry-creds".into(),
            "SECRET_NAME=registry-creds".into(),
        ),
        (
            "http://host:8080/path at 12:30:00".into(),
            "http://host:8080/path at 12:30:00".into(),
        ),
        (
            "TOKEN=[REDACTED sha256:0123456789ab]".into(),
            "TOKEN=[REDACTED sha256:0123456789ab]".into(),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(s(&input), want, "scrubbing {input:?}");
    }
}

#[test]
fn pem_blocks_whole_one_line_unterminated_and_cut() {
    let hash = sha256_hex(PEM, 12);
    assert_eq!(
        s(&format!("before\n{PEM}\nafter")),
        format!("before\n[REDACTED PEM RSA PRIVATE KEY sha256:{hash}]\nafter")
    );
    let one_line = PEM.replace('\n', " ");
    let out = s(&format!("key is {one_line} done"));
    assert!(
        out.starts_with("key is [REDACTED PEM RSA PRIVATE KEY"),
        "{out}"
    );
    assert!(out.ends_with("] done"), "{out}");
    let escaped = PEM.replace('\n', "\\n");
    let out = s(&format!(r#"{{"tls.key": "{escaped}"}}"#));
    assert!(!out.contains("secretbody"), "{out}");
    let unterminated = s(&format!("x\n{}", &PEM[..80]));
    assert!(!unterminated.contains("secretbody"), "{unterminated}");
    let cut = s(&format!("[dropped]\n{}", &PEM[40..]));
    assert!(!cut.contains("secretbody"), "{cut}");
    assert!(!cut.contains("QWxhZGRpbjpvcGVu"), "{cut}");
}

#[test]
fn known_token_shapes() {
    for token in [
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    ] {
        let out = s(&format!("using {token} now"));
        assert!(!out.contains(token), "{out}");
        assert!(out.contains("[REDACTED sha256:"), "{out}");
    }
}

#[test]
fn scrubbing_is_stable_and_idempotent() {
    let text = format!("DB_PASS=x {JWT} postgres://u:p@h Bearer tok-1234567\n{PEM}");
    let once = s(&text);
    assert_eq!(s(&once), once);
    assert_eq!(s(&text), once, "same input, same markers");
}

#[test]
fn bytes_that_are_not_utf8_are_still_scrubbed() {
    let mut text = b"\xff\xfe DB_PASS=hunter2 ".to_vec();
    text.extend_from_slice(JWT.as_bytes());
    let out = scrub(&text);
    let lossy = String::from_utf8_lossy(&out);
    assert!(
        !lossy.contains("hunter2") && !lossy.contains(JWT),
        "{lossy}"
    );
    assert!(out.starts_with(b"\xff\xfe"));
}

/// The stage log line of the e2e test (`LOG_TEXT`, one line, as kwok's log agent prints it).
#[test]
fn a_stage_log_line_with_every_kind_of_secret() {
    let line = format!(
        "starting DB_PASS=hunter2 DSN postgres://u:p4ss@h/db bearer {JWT} key {}",
        PEM.replace('\n', " ")
    );
    let want = format!(
        "starting DB_PASS=[REDACTED] DSN postgres://[REDACTED]@h/db bearer {} key [REDACTED PEM RSA PRIVATE KEY sha256:{}]",
        hashed(JWT.as_bytes()),
        sha256_hex(PEM.replace('\n', " "), 12)
    );
    assert_eq!(s(&line), want);
}

/// Webhook URLs of the Slack, Teams and Discord kind are credentials in themselves (whoever has
/// one posts as its owner): planted in a log line, a JSON value and YAML, each is hashed with its
/// host kept, and scrubbing twice changes nothing.
#[test]
fn webhook_urls_are_scrubbed() {
    let planted = [
        "https://hooks.slack.com/services/T0PLANTED/B0PLANTED/PLANTEDslacktoken",
        "https://contoso.webhook.office.com/webhookb2/PLANTED-guid@tenant/IncomingWebhook/PLANTEDteams/owner",
        "https://prod-12.westus.logic.azure.com:443/workflows/PLANTED/triggers/manual/paths/invoke?api-version=1&sig=PLANTEDsig",
        "https://discord.com/api/webhooks/123456PLANTED/PLANTEDdiscordtoken",
        "https://discordapp.com/api/webhooks/123456PLANTED/PLANTEDdiscordtoken",
    ];
    for url in planted {
        for text in [
            format!("level=info msg=\"posting to {url} failed\""),
            format!("{{\"url\": \"{url}\"}}"),
            format!("- name: chat\n  url: {url}\n"),
        ] {
            let out = s(&text);
            assert!(!out.contains("PLANTED"), "{text} -> {out}");
            let host = url.split('/').nth(2).unwrap_or_default();
            assert!(
                out.contains(host.split(':').next().unwrap_or_default()),
                "{out}"
            );
            assert!(out.contains("[REDACTED sha256:"), "{out}");
            assert_eq!(s(&out), out, "scrubbing again changes nothing");
        }
    }
    let plain = "see https://api.slack.com/messaging/webhooks and https://discord.com/developers";
    assert_eq!(s(plain), plain, "documentation links are kept");
}
