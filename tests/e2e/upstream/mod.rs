//! What upstream (NVIDIA Skyhook / NodeWright v0.14 to v0.20) changed on the `skyhook.nvidia.com`
//! API, as this operator honours it (issue 37). Each module names the delta section
//! (`../shared/reference/nodewright-delta.md`, D<n>) it checks; `cargo test --test e2e upstream`
//! runs them all.

mod batch;
mod configmaps;
mod cordons;
mod drain;
mod drain_config;
mod images;
mod node_order;
mod ready;
mod sequencing;
mod serial;
mod stage_timeout;
mod startup;
mod taints;
mod uninstall;
mod uninstall_interrupt;
