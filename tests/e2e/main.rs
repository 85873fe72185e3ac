mod admission;
mod cluster;
mod deploy;
mod operator;
mod plugin;
mod support;
