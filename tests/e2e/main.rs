mod cluster;
mod support;
