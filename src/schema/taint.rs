//! Taint specs in kubectl syntax (`key[=value]:Effect`), as used by `RUNTIME_REQUIRED_TAINT`.

use k8s_openapi::api::core::v1::{Taint, Toleration};
use std::fmt;
use std::str::FromStr;

use super::SchemaError;
use super::validation::{is_qualified_name, is_valid_label_value};
use super::wire_enum::wire_enum;

wire_enum! {
    /// Taint effects accepted when adding a taint.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum TaintEffect {
        NoSchedule = "NoSchedule",
        PreferNoSchedule = "PreferNoSchedule",
        NoExecute = "NoExecute",
    }
    parse_error(|s| SchemaError::InvalidTaintEffect(s.to_owned()));
}

/// A taint to add, parsed like `kubectl taint` (removal specs `key-` / `key:Effect-` are
/// rejected, and the effect is mandatory).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaintSpec {
    pub key: String,
    /// `""` when the spec has no `=value`.
    pub value: String,
    pub effect: TaintEffect,
}

impl TaintSpec {
    pub fn parse(spec: &str) -> Result<TaintSpec, SchemaError> {
        let invalid = |reason: Option<String>| SchemaError::InvalidTaint {
            spec: spec.to_owned(),
            reason,
        };
        if spec.ends_with('-') {
            return Err(invalid(Some("removal form is not allowed here".into())));
        }
        let parts: Vec<&str> = spec.split(':').collect();
        let [key_value, effect] = parts[..] else {
            // No effect (or several colons): kubectl refuses to add such a taint.
            return Err(invalid(None));
        };
        let effect: TaintEffect = effect.parse()?;
        let kv: Vec<&str> = key_value.split('=').collect();
        let (key, value) = match kv[..] {
            [key] => (key, ""),
            [key, value] => (key, value),
            _ => return Err(invalid(None)),
        };
        if !is_valid_label_value(value) {
            return Err(invalid(Some(format!("invalid taint value {value:?}"))));
        }
        if !is_qualified_name(key) {
            return Err(invalid(Some(format!("invalid taint key {key:?}"))));
        }
        Ok(TaintSpec {
            key: key.to_owned(),
            value: value.to_owned(),
            effect,
        })
    }

    /// The node taint (no `timeAdded`; the API server sets it for `NoExecute`).
    pub fn to_taint(&self) -> Taint {
        Taint {
            key: self.key.clone(),
            value: (!self.value.is_empty()).then(|| self.value.clone()),
            effect: self.effect.as_str().to_owned(),
            time_added: None,
        }
    }

    /// The toleration our pods carry for it: `Equal`, same value and effect.
    pub fn to_toleration(&self) -> Toleration {
        Toleration {
            key: Some(self.key.clone()),
            operator: Some("Equal".to_owned()),
            value: Some(self.value.clone()),
            effect: Some(self.effect.as_str().to_owned()),
            toleration_seconds: None,
        }
    }

    /// Whether a node taint is this one. Like Kubernetes' `Taint.MatchTaint` (and kubectl's
    /// removal), identity is key + effect; the value is not compared.
    pub fn matches(&self, taint: &Taint) -> bool {
        taint.key == self.key && taint.effect == self.effect.as_str()
    }
}

/// The runtime-required taint the operator puts on new nodes (`RUNTIME_REQUIRED_TAINT`), and
/// every runtime-required taint it recognises: that one, this project's default and upstream's
/// since v0.18 (`nodewright.nvidia.com`), so a node provisioned for either is tolerated and
/// released rather than stranded (delta D31; upstream honours both keys the same way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeTaints {
    applied: TaintSpec,
    recognised: Vec<TaintSpec>,
}

impl RuntimeTaints {
    pub fn new(applied: &TaintSpec) -> RuntimeTaints {
        let mut recognised = vec![applied.clone()];
        let known = [
            super::DEFAULT_RUNTIME_REQUIRED_TAINT,
            super::UPSTREAM_RUNTIME_REQUIRED_TAINT,
        ];
        for spec in known.iter().filter_map(|s| TaintSpec::parse(s).ok()) {
            if !recognised
                .iter()
                .any(|r| r.key == spec.key && r.effect == spec.effect)
            {
                recognised.push(spec);
            }
        }
        RuntimeTaints {
            applied: applied.clone(),
            recognised,
        }
    }

    /// The taint auto-tainting adds.
    pub fn applied(&self) -> &TaintSpec {
        &self.applied
    }

    /// Whether a node taint is one of the recognised runtime-required taints.
    pub fn matches(&self, taint: &Taint) -> bool {
        self.recognised.iter().any(|r| r.matches(taint))
    }

    /// A toleration of each recognised taint, the applied one first.
    pub fn tolerations(&self) -> impl Iterator<Item = Toleration> + '_ {
        self.recognised.iter().map(TaintSpec::to_toleration)
    }
}

impl FromStr for TaintSpec {
    type Err = SchemaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaintSpec::parse(s)
    }
}

impl fmt::Display for TaintSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::DEFAULT_RUNTIME_REQUIRED_TAINT;

    #[test]
    fn both_default_keys_are_recognised_whatever_is_applied() {
        use k8s_openapi::api::core::v1::Taint;
        let taint = |key: &str| Taint {
            key: key.into(),
            value: Some("runtime-required".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let default = TaintSpec::parse(DEFAULT_RUNTIME_REQUIRED_TAINT).unwrap();
        let rt = RuntimeTaints::new(&default);
        assert_eq!(rt.applied(), &default);
        assert!(rt.matches(&taint("skyhook.nvidia.com")));
        assert!(rt.matches(&taint("nodewright.nvidia.com")));
        assert!(!rt.matches(&taint("example.com")));
        assert_eq!(rt.tolerations().count(), 2);
        let custom = TaintSpec::parse("gpu-init=pending:NoExecute").unwrap();
        let rt = RuntimeTaints::new(&custom);
        let keys: Vec<String> = rt.tolerations().filter_map(|t| t.key).collect();
        assert_eq!(
            keys,
            ["gpu-init", "skyhook.nvidia.com", "nodewright.nvidia.com"]
        );
    }

    #[test]
    fn default_runtime_required_taint() {
        let t = TaintSpec::parse(DEFAULT_RUNTIME_REQUIRED_TAINT).unwrap();
        assert_eq!(t.key, "skyhook.nvidia.com");
        assert_eq!(t.value, "runtime-required");
        assert_eq!(t.effect, TaintEffect::NoSchedule);
        assert_eq!(t.to_string(), DEFAULT_RUNTIME_REQUIRED_TAINT);
        let taint = t.to_taint();
        assert_eq!(taint.value.as_deref(), Some("runtime-required"));
        assert_eq!(taint.effect, "NoSchedule");
        assert!(t.matches(&taint));
        let tol = t.to_toleration();
        assert_eq!(tol.operator.as_deref(), Some("Equal"));
        assert_eq!(tol.key.as_deref(), Some("skyhook.nvidia.com"));
        assert_eq!(tol.value.as_deref(), Some("runtime-required"));
        assert_eq!(tol.effect.as_deref(), Some("NoSchedule"));
    }

    #[test]
    fn forms() {
        let t = TaintSpec::parse("example.com/gpu:NoExecute").unwrap();
        assert_eq!((t.key.as_str(), t.value.as_str()), ("example.com/gpu", ""));
        assert_eq!(t.to_taint().value, None);
        assert_eq!(t.to_string(), "example.com/gpu:NoExecute");
        assert!(TaintSpec::parse("k=v:PreferNoSchedule").is_ok());
        assert!(TaintSpec::parse("k=:NoSchedule").is_ok());

        let mut other = t.to_taint();
        other.value = Some("x".into());
        assert!(t.matches(&other));
        other.effect = "NoSchedule".into();
        assert!(!t.matches(&other));
    }

    #[test]
    fn rejections() {
        for bad in [
            "key-",
            "key:NoSchedule-",
            "key",
            "key=value",
            "a:b:NoSchedule",
            "k=v=w:NoSchedule",
            "k=-bad-:NoSchedule",
            "bad key:NoSchedule",
            ":NoSchedule",
            "",
        ] {
            assert!(TaintSpec::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            TaintSpec::parse("k=v:Sometimes").unwrap_err().to_string(),
            "invalid taint effect: Sometimes, unsupported taint effect"
        );
        assert_eq!(
            TaintSpec::parse("key").unwrap_err().to_string(),
            "invalid taint spec: key"
        );
    }
}
