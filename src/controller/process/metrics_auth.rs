//! Optional authentication of /metrics, as controller-runtime's secure serving does it
//! (`filters.WithAuthenticationAndAuthorization`): the scraper's bearer token goes to a
//! TokenReview, and the user it names must be allowed `get` on the non-resource URL `/metrics`
//! by a SubjectAccessReview. Answers are cached for a minute, so a scrape every few seconds
//! costs two API calls a minute per scraper, not two a scrape.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use k8s_openapi::api::authentication::v1::{
    TokenReview, TokenReviewSpec, TokenReviewStatus, UserInfo,
};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::Client;
use kube::api::{Api, PostParams};
use tracing::warn;

use crate::schema::digest::sha256_hex;

/// The URL and verb a scraper must be allowed (what `skyhook-metrics-reader` grants).
pub const METRICS_PATH: &str = "/metrics";
const VERB: &str = "get";

/// How long an answer about one token holds. A revoked token or binding still reads /metrics
/// for at most this long.
const CACHE_TTL: Duration = Duration::from_secs(60);
/// Most tokens remembered; beyond, expired answers are dropped, then all, so that a client
/// sending random tokens cannot grow the operator's memory.
const CACHE_ENTRIES: usize = 1024;

/// What a request to /metrics gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// 401: no token, or one the API server does not accept.
    Unauthenticated(String),
    /// 403: a valid token whose user may not `get /metrics`.
    Forbidden(String),
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The user a TokenReview's answer names, or why the token is refused.
pub fn identity(status: Option<&TokenReviewStatus>) -> Result<UserInfo, String> {
    let status = status.ok_or("the TokenReview has no status")?;
    match (&status.authenticated, &status.user) {
        (Some(true), Some(user)) if user.username.is_some() => Ok(user.clone()),
        _ => Err(status
            .error
            .clone()
            .unwrap_or_else(|| "the token is not valid".to_string())),
    }
}

/// May `user` `get /metrics`? Asked with every group and extra the token carries, as the API
/// server would ask for the user's own request.
pub fn access_review(user: &UserInfo) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(METRICS_PATH.to_string()),
                verb: Some(VERB.to_string()),
            }),
            resource_attributes: None,
        },
        ..Default::default()
    }
}

/// The verdict on `user` from a SubjectAccessReview's answer.
pub fn verdict(user: &UserInfo, status: Option<&SubjectAccessReviewStatus>) -> Verdict {
    let name = user.username.as_deref().unwrap_or_default();
    match status {
        Some(s) if s.allowed => Verdict::Allowed,
        _ => Verdict::Forbidden(format!(
            "user \"{name}\" may not {VERB} the non-resource URL {METRICS_PATH}"
        )),
    }
}

/// The answer to a request the verdict refuses; `None` when it is allowed.
pub fn refusal(verdict: &Verdict) -> Option<Response> {
    match verdict {
        Verdict::Allowed => None,
        Verdict::Unauthenticated(why) => Some(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                format!("Unauthorized: {why}\n"),
            )
                .into_response(),
        ),
        Verdict::Forbidden(why) => {
            Some((StatusCode::FORBIDDEN, format!("Forbidden: {why}\n")).into_response())
        }
    }
}

/// Verdicts by token digest (the tokens themselves are not kept), with the time each was made.
#[derive(Default)]
struct Cache {
    entries: HashMap<String, (Instant, Verdict)>,
}

impl Cache {
    fn get(&self, key: &str, now: Instant) -> Option<Verdict> {
        let (at, v) = self.entries.get(key)?;
        (now.saturating_duration_since(*at) < CACHE_TTL).then(|| v.clone())
    }

    fn put(&mut self, key: String, verdict: Verdict, now: Instant) {
        if self.entries.len() >= CACHE_ENTRIES {
            self.entries
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < CACHE_TTL);
        }
        if self.entries.len() >= CACHE_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(key, (now, verdict));
    }
}

/// Decides, with the API server, who may read /metrics.
pub struct Authorizer {
    client: Client,
    cache: Mutex<Cache>,
}

impl Authorizer {
    pub fn new(client: Client) -> Authorizer {
        Authorizer {
            client,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The answer to a request with these headers, when it is refused (500 when the API
    /// server cannot be asked: a scrape then fails, as it would without the operator).
    pub async fn refusal(&self, headers: &HeaderMap) -> Option<Response> {
        match self.verdict(headers).await {
            Ok(v) => refusal(&v),
            Err(e) => {
                warn!(error = %e, "cannot review a /metrics request's token");
                Some(
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "cannot review the token\n",
                    )
                        .into_response(),
                )
            }
        }
    }

    async fn verdict(&self, headers: &HeaderMap) -> Result<Verdict, kube::Error> {
        let Some(token) = bearer_token(headers) else {
            return Ok(Verdict::Unauthenticated("no bearer token".to_string()));
        };
        let key = sha256_hex(token, 64);
        let cached = self.lock().get(&key, Instant::now());
        if let Some(v) = cached {
            return Ok(v);
        }
        let v = self.review(token).await?;
        self.lock().put(key, v.clone(), Instant::now());
        Ok(v)
    }

    /// A TokenReview, then (for a valid token) a SubjectAccessReview.
    async fn review(&self, token: &str) -> Result<Verdict, kube::Error> {
        let pp = PostParams::default();
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&pp, &review)
            .await?;
        let user = match identity(reviewed.status.as_ref()) {
            Ok(user) => user,
            Err(why) => return Ok(Verdict::Unauthenticated(why)),
        };
        let access = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&pp, &access_review(&user))
            .await?;
        Ok(verdict(&user, access.status.as_ref()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // The cache holds no invariant a panic could break halfway.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
#[path = "metrics_auth_tests.rs"]
mod tests;
