use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::HeaderValue;
use serde_json::json;

use super::*;

fn headers(authorization: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(v) = authorization {
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(v).expect("header"),
        );
    }
    h
}

fn user(name: &str) -> UserInfo {
    UserInfo {
        username: Some(name.to_string()),
        groups: Some(vec!["system:serviceaccounts".to_string()]),
        ..Default::default()
    }
}

#[test]
fn only_a_bearer_token_is_read() {
    assert_eq!(bearer_token(&headers(Some("Bearer abc"))), Some("abc"));
    assert_eq!(bearer_token(&headers(Some("bearer  abc "))), Some("abc"));
    for refused in [
        None,
        Some("Basic dTpw"),
        Some("Bearer "),
        Some("Bearer"),
        Some("abc"),
    ] {
        assert_eq!(bearer_token(&headers(refused)), None, "{refused:?}");
    }
}

#[test]
fn a_token_is_valid_only_when_the_review_names_a_user() {
    let status = |authenticated, user, error: Option<&str>| TokenReviewStatus {
        authenticated,
        user,
        error: error.map(str::to_string),
        ..Default::default()
    };
    assert_eq!(
        identity(Some(&status(Some(true), Some(user("u")), None))),
        Ok(user("u"))
    );
    assert_eq!(
        identity(Some(&status(Some(false), None, Some("token expired")))),
        Err("token expired".to_string())
    );
    assert!(identity(Some(&status(Some(true), Some(UserInfo::default()), None))).is_err());
    assert!(identity(Some(&status(None, Some(user("u")), None))).is_err());
    assert!(identity(None).is_err());
}

#[test]
fn the_access_review_asks_for_get_on_the_metrics_url_as_the_user() {
    let review = access_review(&user("system:serviceaccount:mon:prometheus"));
    let spec = review.spec;
    assert_eq!(
        spec.user.as_deref(),
        Some("system:serviceaccount:mon:prometheus")
    );
    assert_eq!(
        spec.groups,
        Some(vec!["system:serviceaccounts".to_string()])
    );
    let attrs = spec
        .non_resource_attributes
        .expect("non-resource attributes");
    assert_eq!(attrs.path.as_deref(), Some("/metrics"));
    assert_eq!(attrs.verb.as_deref(), Some("get"));
    assert!(spec.resource_attributes.is_none());
}

#[test]
fn verdicts_map_to_200_401_and_403() {
    let allowed = SubjectAccessReviewStatus {
        allowed: true,
        ..Default::default()
    };
    assert_eq!(verdict(&user("u"), Some(&allowed)), Verdict::Allowed);
    let denied = verdict(&user("u"), Some(&SubjectAccessReviewStatus::default()));
    assert!(
        matches!(&denied, Verdict::Forbidden(why) if why.contains("\"u\"")),
        "{denied:?}"
    );
    assert!(matches!(verdict(&user("u"), None), Verdict::Forbidden(_)));
    assert!(refusal(&Verdict::Allowed).is_none());
    let unauth = refusal(&Verdict::Unauthenticated("no".into())).expect("refused");
    assert_eq!(unauth.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(unauth.headers()[header::WWW_AUTHENTICATE], "Bearer");
    let forbidden = refusal(&denied).expect("refused");
    assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
}

#[test]
fn the_cache_forgets_after_its_ttl_and_stays_bounded() {
    let mut cache = Cache::default();
    let t0 = Instant::now();
    cache.put("a".into(), Verdict::Allowed, t0);
    assert_eq!(cache.get("a", t0 + CACHE_TTL / 2), Some(Verdict::Allowed));
    assert_eq!(cache.get("a", t0 + CACHE_TTL), None);
    for i in 0..CACHE_ENTRIES * 3 {
        cache.put(i.to_string(), Verdict::Allowed, t0);
    }
    assert!(cache.entries.len() <= CACHE_ENTRIES);
}

/// An API server that authenticates every token when `valid`, allows when `allowed`, and
/// counts the reviews it was asked for.
fn api(valid: bool, allowed: bool, calls: Arc<AtomicUsize>) -> Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let body = if req.uri().path().ends_with("/tokenreviews") {
            let user = valid.then(|| json!({"username": "system:serviceaccount:t:p"}));
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {},
                   "status": {"authenticated": valid, "user": user}})
        } else {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {}, "status": {"allowed": allowed}})
        };
        let response = http::Response::builder()
            .status(201)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body.to_string().into_bytes()));
        async move { response }
    });
    Client::new(service, "default")
}

#[tokio::test]
async fn reviews_decide_and_are_cached_by_token() {
    for (valid, allowed, status, calls_per_token) in [
        (true, true, None, 2),
        (true, false, Some(StatusCode::FORBIDDEN), 2),
        (false, true, Some(StatusCode::UNAUTHORIZED), 1),
    ] {
        let calls = Arc::new(AtomicUsize::new(0));
        let auth = Authorizer::new(api(valid, allowed, calls.clone()));
        for _ in 0..3 {
            let got = auth.refusal(&headers(Some("Bearer one"))).await;
            assert_eq!(
                got.map(|r| r.status()),
                status,
                "valid {valid}, allowed {allowed}"
            );
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            calls_per_token,
            "one review per token"
        );
        auth.refusal(&headers(Some("Bearer two"))).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2 * calls_per_token);
        let none = auth.refusal(&headers(None)).await.map(|r| r.status());
        assert_eq!(none, Some(StatusCode::UNAUTHORIZED));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2 * calls_per_token,
            "no token, no review"
        );
    }
}
