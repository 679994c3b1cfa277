mod engine;
mod mcp;
mod process;
mod schemas;
mod support;
