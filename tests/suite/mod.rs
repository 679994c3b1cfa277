mod engine;
mod mcp;
mod new_vendor;
mod process;
mod schemas;
mod support;
