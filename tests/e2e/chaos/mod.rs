//! A fault campaign with an independent checker (issue 52). `tests/chaos` runs it; the checker
//! and its planted violations run with the other tests.

pub mod audit;
#[cfg(test)]
mod audit_tests;
mod campaign;
pub mod checker;
#[cfg(test)]
mod checker_tests;
pub mod faults;
pub mod history;
pub mod host;
#[cfg(test)]
mod host_tests;
mod planted;
mod recorder;
