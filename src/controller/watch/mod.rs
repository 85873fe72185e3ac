//! The watch room: reflectors over the API server, decoding only what a pass reads
//! ([`decode`], [`large`] for the Skyhook's large objects), compact caches of records
//! ([`record_cache`]), and the caches and change streams the driver runs on ([`caches`],
//! built from [`streams`]).

pub mod caches;
pub mod decode;
pub mod large;
pub mod record_cache;
pub mod streams;
mod tee;
