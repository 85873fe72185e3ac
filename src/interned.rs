//! One shared copy of the strings that thousands of cached records repeat. Every Job of a
//! rollout names its Skyhook, package, version, node and spec hash: at a thousand nodes × four
//! packages that is eight thousand copies of a handful of values, kept as long as the Jobs are
//! (a day after they finish). Every node's state names the same packages, versions and images,
//! and the operator holds every node's state several times at once.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};

/// Values no record holds any more are dropped when the table has doubled since the last sweep,
/// so node names of a churning fleet do not pile up.
const FIRST_SWEEP: usize = 1024;

struct Table {
    set: HashSet<Arc<str>>,
    sweep_at: usize,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// A string shared with every other [`Shared`] of the same value.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shared(Arc<str>);

impl Shared {
    pub fn new(s: &str) -> Shared {
        let mut guard = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
        let table = guard.get_or_insert_with(|| Table {
            set: HashSet::new(),
            sweep_at: FIRST_SWEEP,
        });
        if let Some(found) = table.set.get(s) {
            return Shared(found.clone());
        }
        if table.set.len() >= table.sweep_at {
            table.set.retain(|v| Arc::strong_count(v) > 1);
            table.sweep_at = (table.set.len() * 2).max(FIRST_SWEEP);
        }
        let value: Arc<str> = Arc::from(s);
        table.set.insert(value.clone());
        Shared(value)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Shared {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Shared {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Shared {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Shared {
    fn from(s: &str) -> Shared {
        Shared::new(s)
    }
}

impl From<String> for Shared {
    fn from(s: String) -> Shared {
        Shared::new(&s)
    }
}

impl From<&String> for Shared {
    fn from(s: &String) -> Shared {
        Shared::new(s)
    }
}

impl PartialEq<str> for Shared {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Shared {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Shared {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Shared> for str {
    fn eq(&self, other: &Shared) -> bool {
        *self == *other.0
    }
}

impl PartialEq<Shared> for &str {
    fn eq(&self, other: &Shared) -> bool {
        **self == *other.0
    }
}

impl PartialEq<Shared> for String {
    fn eq(&self, other: &Shared) -> bool {
        **self == *other.0
    }
}

impl Default for Shared {
    fn default() -> Shared {
        Shared::new("")
    }
}

impl serde::Serialize for Shared {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Shared {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Shared, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Shared::new(&s))
    }
}

/// A string in every schema.
impl schemars::JsonSchema for Shared {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        String::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }

    fn inline_schema() -> bool {
        true
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_copy() {
        let a = Shared::new("interned-test-node-1");
        let b = Shared::from(String::from("interned-test-node-1"));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, "interned-test-node-1");
        assert_eq!(a.as_str(), "interned-test-node-1");
        assert_ne!(Shared::new("interned-test-node-2"), a);
    }

    #[test]
    fn deserialized_values_are_shared_and_serialise_as_strings() {
        let a: Shared = serde_json::from_str(r#""interned-serde-1""#).unwrap();
        // An escaped value is decoded into a buffer of its own first.
        let b: Shared = serde_json::from_str(r#""interned-serde-\u0031""#).unwrap();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(serde_json::to_string(&a).unwrap(), r#""interned-serde-1""#);
    }

    #[test]
    fn values_nobody_holds_are_swept() {
        // Other tests intern in parallel: only this test's own values are looked at.
        let kept = Shared::new("interned-sweep-kept");
        for i in 0..(3 * FIRST_SWEEP) {
            drop(Shared::new(&format!("interned-sweep-dropped-{i}")));
        }
        let guard = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
        let set = &guard.as_ref().unwrap().set;
        let left = set
            .iter()
            .filter(|v| v.starts_with("interned-sweep-dropped-"))
            .count();
        assert!(
            left < 2 * FIRST_SWEEP,
            "{left} dropped values still interned"
        );
        assert!(set.contains("interned-sweep-kept"));
        drop(kept);
    }
}
