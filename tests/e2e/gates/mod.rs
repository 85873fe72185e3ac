//! Rollout gates (issue 38): `cargo test --test e2e gates` runs them all.

mod alerts;
mod health;
mod notifications;
mod soak;
mod windows;
