//! `--sort-by`: a small JSONPath subset (`.field`, `.a.b`, `{.field}`) over the fields of a
//! listing's JSON output, as kubectl's `--sort-by` reads the object's fields.

use std::cmp::Ordering;

use serde::Serialize;
use serde_json::Value;

/// A checked `--sort-by`: the path of a field in each row's JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey(pub Vec<String>);

/// The fields a listing can be sorted by, and the field `.metadata.name` stands for.
#[derive(Debug, Clone, Copy)]
pub struct Sortable {
    pub fields: &'static [&'static str],
    pub name_field: &'static str,
}

/// The path of `raw` (`.status`, `{.status}`, `status`), unchecked.
pub fn parse_path(raw: &str) -> Result<Vec<String>, String> {
    let s = raw.trim();
    let s = s
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or(s);
    let s = s.strip_prefix('.').unwrap_or(s);
    let parts: Vec<String> = s.split('.').map(str::to_string).collect();
    let valid = |p: &String| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if parts.iter().all(valid) {
        Ok(parts)
    } else {
        Err(format!(
            "{raw:?} is not a field path (use e.g. .status or {{.metadata.name}})"
        ))
    }
}

impl Sortable {
    /// Checks `raw` against these fields (`.metadata.name` is the listing's name field).
    pub fn key(&self, raw: &str) -> Result<SortKey, String> {
        let path = parse_path(raw)?;
        let joined = path.join(".");
        let field = if joined == "metadata.name" {
            self.name_field
        } else {
            self.fields
                .iter()
                .copied()
                .find(|f| *f == joined)
                .ok_or_else(|| format!("unknown field {raw:?}"))?
        };
        Ok(SortKey(field.split('.').map(str::to_string).collect()))
    }

    /// `.a, .b, ... or .metadata.name` for error messages.
    pub fn describe(&self) -> String {
        let fields: Vec<String> = self.fields.iter().map(|f| format!(".{f}")).collect();
        format!("{} (or .metadata.name)", fields.join(", "))
    }
}

/// Stable sort of `items` by the key's field in their JSON: absent and null first, then
/// booleans, numbers (by value) and strings.
pub fn sort_by_key<T: Serialize>(items: &mut Vec<T>, key: &SortKey) {
    let mut keyed: Vec<(Value, T)> = items
        .drain(..)
        .map(|item| {
            let value = serde_json::to_value(&item).unwrap_or(Value::Null);
            let field = key
                .0
                .iter()
                .try_fold(&value, |v, k| v.get(k))
                .cloned()
                .unwrap_or(Value::Null);
            (field, item)
        })
        .collect();
    keyed.sort_by(|(a, _), (b, _)| compare(a, b));
    items.extend(keyed.into_iter().map(|(_, item)| item));
}

fn compare(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            Value::Array(_) | Value::Object(_) => 4,
        }
    }
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

#[cfg(test)]
impl Sortable {
    /// The fields (and name field) missing from `row`'s JSON, so a listing's tests catch a
    /// field list that no longer matches its row struct.
    pub fn absent_from<T: Serialize>(&self, row: &T) -> Vec<&'static str> {
        let value = serde_json::to_value(row).unwrap_or(Value::Null);
        self.fields
            .iter()
            .chain([&self.name_field])
            .copied()
            .filter(|f| f.split('.').try_fold(&value, |v, k| v.get(k)).is_none())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: Sortable = Sortable {
        fields: &["nodeName", "restarts", "status"],
        name_field: "nodeName",
    };

    #[derive(Debug, Serialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Row {
        node_name: &'static str,
        restarts: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'static str>,
    }

    fn row(n: &'static str, r: i64, s: Option<&'static str>) -> Row {
        Row {
            node_name: n,
            restarts: r,
            status: s,
        }
    }

    #[test]
    fn keys_are_checked_against_the_fields() {
        assert_eq!(ROWS.key(".restarts"), Ok(SortKey(vec!["restarts".into()])));
        assert_eq!(ROWS.key("{.status}"), Ok(SortKey(vec!["status".into()])));
        assert_eq!(ROWS.key("status"), Ok(SortKey(vec!["status".into()])));
        assert_eq!(
            ROWS.key(".metadata.name"),
            Ok(SortKey(vec!["nodeName".into()]))
        );
        assert_eq!(
            ROWS.key(".bogus"),
            Err("unknown field \".bogus\"".to_string())
        );
        assert!(
            ROWS.key(".items[0].x")
                .unwrap_err()
                .contains("not a field path")
        );
        assert!(ROWS.key("").is_err());
        assert_eq!(
            ROWS.describe(),
            ".nodeName, .restarts, .status (or .metadata.name)"
        );
    }

    #[test]
    fn absent_fields_are_found() {
        assert_eq!(
            ROWS.absent_from(&row("a", 1, Some("complete"))),
            Vec::<&str>::new()
        );
        assert_eq!(ROWS.absent_from(&row("a", 1, None)), ["status"]);
        let nested = Sortable {
            fields: &["a.b", "a.c"],
            name_field: "id",
        };
        let value = serde_json::json!({"a": {"b": 1}, "id": "x"});
        assert_eq!(nested.absent_from(&value), ["a.c"]);
    }

    #[test]
    fn sorting_is_stable_and_typed() {
        let mut rows = vec![
            row("c", 10, Some("erroring")),
            row("a", 2, None),
            row("b", 2, Some("complete")),
        ];
        sort_by_key(&mut rows, &ROWS.key(".restarts").unwrap());
        // Numbers by value (2 < 10), ties keep their order.
        assert_eq!(
            rows.iter().map(|r| r.node_name).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        sort_by_key(&mut rows, &ROWS.key(".status").unwrap());
        // Absent first, then strings.
        assert_eq!(
            rows.iter().map(|r| r.node_name).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        sort_by_key(&mut rows, &ROWS.key(".metadata.name").unwrap());
        assert_eq!(
            rows.iter().map(|r| r.node_name).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        let mut rows = vec![row("z", 1, None), row("y", 1, None), row("x", 0, None)];
        sort_by_key(&mut rows, &ROWS.key(".metadata.name").unwrap());
        assert_eq!(
            rows.iter().map(|r| r.node_name).collect::<Vec<_>>(),
            ["x", "y", "z"]
        );
    }
}
