mod engine;
mod mcp;
mod process;
mod support;
