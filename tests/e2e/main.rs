mod admission;
mod cluster;
mod deploy;
mod operator;
mod plugin;
mod plugin_completion;
mod plugin_reset;
mod support;
