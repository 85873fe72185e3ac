//! Go's `int` in the CRD schemas.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// Schema stand-in for Go's `int`: a bare `integer` without a `format`, as controller-gen emits
/// it (Rust's `i64` would add `format: int64`, which upstream does not have).
pub(crate) struct GoInt;

impl JsonSchema for GoInt {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "GoInt".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "integer" })
    }
}
