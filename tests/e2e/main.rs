mod cluster;
mod operator;
mod support;
