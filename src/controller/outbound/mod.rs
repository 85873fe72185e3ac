//! Talking to services other than the API server: the HTTP client (`http.rs`), the alert
//! gate's sources (`alerts.rs`) and the notification outboxes and their sender (`notify.rs`).

pub mod alerts;
pub mod http;
pub mod notify;
