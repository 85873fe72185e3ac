//! Reference scenarios: see mod.rs.
