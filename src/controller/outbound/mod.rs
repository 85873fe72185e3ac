//! Talking to services other than the API server: the HTTP client (`http.rs`) and the alert
//! gate's sources (`alerts.rs`).

pub mod alerts;
pub mod http;
