//! Package stages run as batch/v1 Jobs: how they are built and how they are read back.

pub mod build;
pub mod view;

pub use build::*;
pub use view::{JobView, Outcome, STUCK_WAITING_REASONS};
