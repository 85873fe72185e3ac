//! Operator-side validation and defaulting details not covered by the fixture corpora.

use std::collections::BTreeMap;

use crate::crd::policy::{
    DEFAULT_BATCH_THRESHOLD, DEFAULT_GROWTH_FACTOR, DEFAULT_INITIAL_BATCH, DEFAULT_SAFETY_LIMIT,
};
use crate::crd::{
    DeploymentBudget, DeploymentPolicy, DeploymentStrategy, EffectiveStrategy, ExponentialStrategy,
    FixedStrategy, LinearStrategy, Package, Skyhook, SkyhookSpec, StrategyParams,
    dependency_cycles, validate_skyhook,
};

fn package(version: &str, deps: &[(&str, &str)]) -> Package {
    Package {
        version: version.to_owned(),
        image: "ghcr.io/nvidia/skyhook/agentless".to_owned(),
        depends_on: deps
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Package::default()
    }
}

fn packages(list: &[(&str, Package)]) -> BTreeMap<String, Package> {
    list.iter()
        .map(|(k, p)| ((*k).to_owned(), p.clone()))
        .collect()
}

#[test]
fn cycles_are_named_once_from_their_smallest_member() {
    let p = packages(&[
        ("gamma", package("1.0.0", &[("alpha", "1.0.0")])),
        ("alpha", package("1.0.0", &[("beta", "1.0.0")])),
        ("beta", package("1.0.0", &[("gamma", "1.0.0")])),
        ("delta", package("1.0.0", &[("delta", "1.0.0")])),
        ("root", package("1.0.0", &[])),
        ("leaf", package("1.0.0", &[("root", "1.0.0")])),
    ]);
    assert_eq!(
        dependency_cycles(&p),
        vec![
            vec!["alpha", "beta", "gamma", "alpha"],
            vec!["delta", "delta"],
        ]
    );
}

#[test]
fn dependencies_on_other_versions_are_not_edges() {
    // beta depends on alpha 2.0.0, which does not exist: reported as missing, not as a cycle.
    let p = packages(&[
        ("alpha", package("1.0.0", &[("beta", "1.0.0")])),
        ("beta", package("1.0.0", &[("alpha", "2.0.0")])),
    ]);
    assert!(dependency_cycles(&p).is_empty());
    let sh = Skyhook::new(
        "x",
        SkyhookSpec {
            packages: p,
            ..SkyhookSpec::default()
        },
    );
    let errors = validate_skyhook(&sh).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "spec.packages[beta].dependsOn[alpha]");
    assert!(errors[0].message.contains("missing: [alpha|2.0.0]"));
}

#[test]
fn accepted_versions_follow_go_semver() {
    for ok in [
        "1",
        "1.2",
        "1.2.3",
        "v1.2.3",
        "1.2.3-rc.1",
        "1.2.3+meta",
        "2024.7.6",
        "0.0.0",
    ] {
        let sh = Skyhook::new(
            "x",
            SkyhookSpec {
                packages: packages(&[("alpha", package(ok, &[]))]),
                ..SkyhookSpec::default()
            },
        );
        assert_eq!(validate_skyhook(&sh), Ok(()), "{ok}");
    }
}

#[test]
fn cel_semver_pattern_agrees_with_the_operator() {
    let re = regex::Regex::new(crate::crd::admission::SEMVER_PATTERN).unwrap();
    for v in [
        "1",
        "1.2",
        "1.2.3",
        "v1.2.3",
        "1.2.3-rc.1",
        "1.2.3+meta",
        "2024.7.6",
        "0.0.0",
        "1.2.3-0.a-b",
        "1.2.3-rc.1+b.2",
        "2024/07/06",
        "1.02.3",
        "1.2-rc.1",
        "01",
        "vv1",
        "1.2.3-",
        "1.2.3-01",
        "1.2.3+",
        "1.2.3+a..b",
        "",
        "v",
        "1.2.3.4",
        "1.2.3-rc..1",
    ] {
        assert_eq!(
            re.is_match(v),
            crate::schema::is_valid_semver(v),
            "CEL pattern and operator disagree on {v:?}"
        );
    }
}

fn with_grace(grace: &str) -> Skyhook {
    let mut alpha = package("1.0.0", &[]);
    alpha.graceful_shutdown = Some(grace.to_owned());
    Skyhook::new(
        "x",
        SkyhookSpec {
            packages: packages(&[("alpha", alpha)]),
            ..SkyhookSpec::default()
        },
    )
}

#[test]
fn graceful_shutdown_is_a_go_duration_of_at_most_a_day() {
    use crate::crd::admission::{
        MAX_GRACEFUL_SHUTDOWN, MAX_GRACEFUL_SHUTDOWN_TEXT, MSG_GRACEFUL_SHUTDOWN,
    };
    assert_eq!(
        crate::schema::parse_go_duration(MAX_GRACEFUL_SHUTDOWN_TEXT),
        Ok(MAX_GRACEFUL_SHUTDOWN)
    );
    assert!(MSG_GRACEFUL_SHUTDOWN.contains(&format!("at most {MAX_GRACEFUL_SHUTDOWN_TEXT}")));
    for ok in [
        "0",
        "30s",
        "1m30s",
        "1.5h",
        ".5h",
        "1.s",
        "+10m",
        "2µs",
        "0000001h",
        "24h",
        "1440m",
        "86400s",
        "86400000ms",
        "86400000000us",
        "86400000000000ns",
        "23h59m59.999999999s",
        "24.0000000000000001h",
    ] {
        assert_eq!(validate_skyhook(&with_grace(ok)), Ok(()), "{ok}");
    }
    for bad in [
        "",
        "30",
        "1d",
        "abc",
        "-5s",
        "1h 2m",
        "2μs", // Greek mu, which Go also reads; parse_go_duration does not
        "25h",
        "24h1ns",
        "86401s",
        "1000h",
        "2562048h",
        "1000000000h",
        "00000000000000000001h", // 21 characters
    ] {
        let errors = validate_skyhook(&with_grace(bad)).expect_err(bad);
        assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
        assert_eq!(errors[0].field, "spec.packages[alpha].gracefulShutdown");
        assert!(
            errors[0].message.contains(MSG_GRACEFUL_SHUTDOWN)
                && errors[0].message.contains(&format!("{bad:?}")),
            "{bad}: {}",
            errors[0].message
        );
    }
}

/// The CEL rule is `maxLength && matches(pattern) && duration(self) <= 24h`; the operator must
/// decide the same, and `duration()` (Go's `time.ParseDuration`) must never fail on a value the
/// pattern lets through.
#[test]
fn cel_graceful_shutdown_rule_agrees_with_the_operator() {
    use crate::crd::admission::{
        GO_DURATION_PATTERN, MAX_GO_DURATION_LENGTH, MAX_GRACEFUL_SHUTDOWN,
    };
    use crate::schema::{MAX_GO_DURATION, parse_go_duration};
    let re = regex::Regex::new(GO_DURATION_PATTERN).unwrap();
    let cel = |v: &str| {
        v.chars().count() <= MAX_GO_DURATION_LENGTH
            && re.is_match(v)
            && parse_go_duration(v).is_ok_and(|d| d <= MAX_GRACEFUL_SHUTDOWN)
    };
    let mut samples: Vec<String> = [
        "0",
        "00",
        "+0",
        "-0",
        "30s",
        "5ms",
        "5m5s",
        "1h1h",
        ".5s",
        "5.s",
        ".",
        "s",
        "1x",
        "1h ",
        "999h999h999h999h9h",
        "99999m99999m99999m",
        "999999999999999ns",
        "24h",
        "24h0.1s",
    ]
    .map(String::from)
    .to_vec();
    // Per unit: the longest integer the pattern allows, and one digit more (over 24h).
    for (unit, digits) in [
        ("h", 3),
        ("m", 5),
        ("s", 6),
        ("ms", 9),
        ("us", 12),
        ("µs", 12),
        ("ns", 15),
    ] {
        let most = format!("{}{unit}", "9".repeat(digits));
        assert!(re.is_match(&most), "{most}");
        let over = format!("1{}{unit}", "0".repeat(digits));
        assert!(!re.is_match(&over), "{over}");
        assert!(parse_go_duration(&over).unwrap() > MAX_GRACEFUL_SHUTDOWN);
        samples.extend([most, over]);
    }
    for v in &samples {
        if v.chars().count() <= MAX_GO_DURATION_LENGTH && re.is_match(v) {
            let d = parse_go_duration(v).unwrap_or_else(|e| panic!("{v}: {e}"));
            assert!(d < MAX_GO_DURATION / 100, "{v}");
        }
        assert_eq!(
            validate_skyhook(&with_grace(v)).is_ok(),
            cel(v),
            "CEL rule and operator disagree on {v:?}"
        );
    }
}

#[test]
fn strategy_defaults_at_read_time() {
    let params = |initial| StrategyParams {
        initial_batch: initial,
        batch_threshold: DEFAULT_BATCH_THRESHOLD,
        failure_threshold: None,
        safety_limit: DEFAULT_SAFETY_LIMIT,
    };
    let fixed = DeploymentStrategy {
        fixed: Some(FixedStrategy::default()),
        ..DeploymentStrategy::default()
    };
    assert_eq!(
        fixed.effective(),
        Some(EffectiveStrategy::Fixed(params(DEFAULT_INITIAL_BATCH)))
    );
    let linear = DeploymentStrategy {
        linear: Some(LinearStrategy {
            initial_batch: Some(3),
            ..LinearStrategy::default()
        }),
        ..DeploymentStrategy::default()
    };
    assert_eq!(
        linear.effective(),
        Some(EffectiveStrategy::Linear {
            params: params(3),
            delta: 1
        })
    );
    let exponential = DeploymentStrategy {
        exponential: Some(ExponentialStrategy {
            failure_threshold: Some(2),
            ..ExponentialStrategy::default()
        }),
        ..DeploymentStrategy::default()
    };
    assert_eq!(
        exponential.effective(),
        Some(EffectiveStrategy::Exponential {
            params: StrategyParams {
                failure_threshold: Some(2),
                ..params(1)
            },
            growth_factor: DEFAULT_GROWTH_FACTOR
        })
    );
    assert_eq!(DeploymentStrategy::default().effective(), None);

    // In-place defaulting gives the same values as the Go mutating webhook.
    let mut policy: DeploymentPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "skyhook.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": { "name": "p" },
        "spec": {
            "default": { "budget": { "count": 1 }, "strategy": { "linear": {} } },
            "compartments": [{
                "name": "c", "selector": {}, "budget": { "percent": 10 },
                "strategy": { "exponential": { "initialBatch": 4 } }
            }]
        }
    }))
    .unwrap();
    policy.spec.apply_defaults();
    let spec = serde_json::to_value(&policy.spec).unwrap();
    assert_eq!(
        spec["default"]["strategy"]["linear"],
        serde_json::json!({ "initialBatch": 1, "delta": 1, "batchThreshold": 100, "safetyLimit": 50 })
    );
    assert_eq!(
        spec["compartments"][0]["strategy"]["exponential"],
        serde_json::json!({ "initialBatch": 4, "growthFactor": 2, "batchThreshold": 100, "safetyLimit": 50 })
    );
}

#[test]
fn ceiling_uses_go_float_arithmetic() {
    let percent = |p| DeploymentBudget {
        percent: Some(p),
        count: None,
    };
    assert_eq!(percent(29).ceiling(100), 28);
    assert_eq!(percent(20).ceiling(2), 1);
    assert_eq!(percent(20).ceiling(15), 3);
    assert_eq!(percent(50).ceiling(0), 0);
    let count = DeploymentBudget {
        percent: None,
        count: Some(3),
    };
    assert_eq!(count.ceiling(1), 3);
    assert_eq!(DeploymentBudget::default().ceiling(10), 0);
}

#[test]
fn batch_state_reset_precedence() {
    use crate::crd::{DeploymentPolicyOptions, DeploymentPolicySpec};
    let policy = |v| DeploymentPolicySpec {
        reset_batch_state_on_completion: v,
        ..DeploymentPolicySpec::default()
    };
    let spec = |v| SkyhookSpec {
        deployment_policy_options: Some(DeploymentPolicyOptions {
            reset_batch_state_on_completion: v,
        }),
        ..SkyhookSpec::default()
    };
    assert!(!SkyhookSpec::default().reset_batch_state_on_completion(None));
    assert!(SkyhookSpec::default().reset_batch_state_on_completion(Some(&policy(Some(true)))));
    assert!(!spec(Some(false)).reset_batch_state_on_completion(Some(&policy(Some(true)))));
    assert!(spec(Some(true)).reset_batch_state_on_completion(Some(&policy(None))));
    assert!(spec(None).reset_batch_state_on_completion(Some(&policy(Some(true)))));
    assert!(!spec(None).reset_batch_state_on_completion(Some(&policy(None))));
}

/// Issue 51: the cordon choice for nodes waiting on protected pods is an annotation; an unknown
/// value makes the Skyhook invalid with a message naming the annotation and its values.
#[test]
fn an_unknown_cordon_choice_names_the_annotation_and_its_values() {
    let mut sh = Skyhook::new("x", SkyhookSpec::default());
    let key = crate::schema::NON_INTERRUPT_CORDON_ANNOTATION;
    for ok in ["wait-start", "pods-gone"] {
        sh.metadata.annotations = Some([(key.to_string(), ok.to_string())].into());
        assert!(validate_skyhook(&sh).is_ok(), "{ok}");
    }
    sh.metadata.annotations = Some([(key.to_string(), "eventually".to_string())].into());
    let errs = validate_skyhook(&sh).unwrap_err();
    let text = errs
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains(&format!("metadata.annotations[{key}]"))
            && text.contains("\"eventually\"")
            && text.contains("pods-gone"),
        "{text}"
    );
}
