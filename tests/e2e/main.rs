mod admission;
mod cluster;
mod deploy;
mod operator;
mod support;
