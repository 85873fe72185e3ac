//! JSON output byte-identical to Go's `encoding/json`.
//!
//! The old operator and the Go plugin compare and rewrite annotation values as strings, so what
//! we write must match what `json.Marshal` would have written for the same data. With derived
//! `Serialize` impls (struct fields in declaration order, `BTreeMap` for Go maps so keys sort
//! bytewise) the only remaining difference from `serde_json` is string escaping: Go escapes
//! `<`, `>` and `&` (HTML safety) and U+2028/U+2029 (JavaScript safety) by default.

use serde::Serialize;
use serde_json::ser::{CharEscape, CompactFormatter, Formatter, PrettyFormatter};
use std::io;

use super::SchemaError;

/// `json.Marshal(v)`.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, SchemaError> {
    write_with(value, GoFormatter(CompactFormatter))
}

/// `json.MarshalIndent(v, "", "  ")`, as the Go plugin prints `-o json`.
pub fn to_string_pretty<T: Serialize + ?Sized>(value: &T) -> Result<String, SchemaError> {
    write_with(value, GoFormatter(PrettyFormatter::with_indent(b"  ")))
}

/// For the fixed-shape documents of the contract (plain derived structs, string map keys).
/// Serialising those into memory has no failure path, so the empty-object fallback exists only
/// to avoid a panic path and is never taken.
pub(crate) fn to_string_infallible<T: Serialize + ?Sized>(value: &T) -> String {
    to_string(value).unwrap_or_else(|_| String::from("{}"))
}

/// Go's `omitempty` on a `string` field held as `Option<String>`: absent and `""` are both left
/// out (`#[serde(skip_serializing_if = "go_json::is_none_or_empty")]`).
pub(crate) fn is_none_or_empty(v: &Option<String>) -> bool {
    v.as_deref().is_none_or(str::is_empty)
}

fn write_with<T: Serialize + ?Sized, F: Formatter>(
    value: &T,
    formatter: GoFormatter<F>,
) -> Result<String, SchemaError> {
    let mut out = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    value
        .serialize(&mut ser)
        .map_err(|source| SchemaError::Json {
            what: "output",
            source,
        })?;
    // serde_json only ever emits UTF-8 and our escapes are ASCII, so the lossy path is dead.
    Ok(String::from_utf8(out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// Delegates layout to the wrapped formatter and adds Go's extra string escapes.
struct GoFormatter<F>(F);

/// `Formatter` methods of `GoFormatter` that only hand over to the wrapped layout; the trait's
/// defaults would instead lay out compactly, which is wrong for the pretty formatter.
macro_rules! forward_to_inner {
    ($($method:ident($($arg:ident: $ty:ty)?);)+) => {
        $(
            fn $method<W: ?Sized + io::Write>(
                &mut self,
                writer: &mut W,
                $($arg: $ty)?
            ) -> io::Result<()> {
                self.0.$method(writer $(, $arg)?)
            }
        )+
    };
}

fn write_go_fragment<W: ?Sized + io::Write>(writer: &mut W, fragment: &str) -> io::Result<()> {
    let mut start = 0;
    for (i, c) in fragment.char_indices() {
        let escape: &[u8] = match c {
            '<' => b"\\u003c",
            '>' => b"\\u003e",
            '&' => b"\\u0026",
            '\u{2028}' => b"\\u2028",
            '\u{2029}' => b"\\u2029",
            _ => continue,
        };
        writer.write_all(&fragment.as_bytes()[start..i])?;
        writer.write_all(escape)?;
        start = i + c.len_utf8();
    }
    writer.write_all(&fragment.as_bytes()[start..])
}

impl<F: Formatter> Formatter for GoFormatter<F> {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        write_go_fragment(writer, fragment)
    }

    forward_to_inner! {
        write_char_escape(char_escape: CharEscape);
        begin_array();
        end_array();
        begin_array_value(first: bool);
        end_array_value();
        begin_object();
        end_object();
        begin_object_key(first: bool);
        end_object_key();
        begin_object_value();
        end_object_value();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn escapes_like_go() {
        let s = "a<b>c&d\u{2028}e\u{2029}f\"g\\h\ni\u{1}j\u{7f}k/é";
        assert_eq!(
            to_string(s).unwrap(),
            r#""a\u003cb\u003ec\u0026d\u2028e\u2029f\"g\\h\ni\u0001j"#.to_owned() + "\u{7f}k/é\""
        );
    }

    #[test]
    fn map_keys_sorted_and_escaped() {
        let m: BTreeMap<&str, &str> = [("b", "1"), ("a<", "2"), ("B", "3")].into();
        assert_eq!(to_string(&m).unwrap(), r#"{"B":"3","a\u003c":"2","b":"1"}"#);
    }

    #[test]
    fn pretty_matches_marshal_indent() {
        let m: BTreeMap<&str, Vec<u8>> = [("a", vec![1, 2]), ("b", vec![])].into();
        assert_eq!(
            to_string_pretty(&m).unwrap(),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": []\n}"
        );
    }
}
