//! One module per command (or command group). Commands share code only through `crate::app`.

pub mod completion;
pub mod debug;
pub mod jobs;
pub mod lifecycle;
pub mod logs;
pub mod man;
pub mod node;
pub mod package;
pub mod plan;
pub mod preview;
pub mod release;
pub mod rerun;
pub mod reset;
pub mod version;
