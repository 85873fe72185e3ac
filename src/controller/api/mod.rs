//! Talking to the API server: the HTTP stack and how many writes go at once ([`client`]), the request counter behind
//! `skyhook_api_requests_total` ([`counter`]), and what is worth another try and when
//! ([`retry`]).

pub mod client;
pub mod counter;
pub mod retry;
