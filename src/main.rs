//! The `aicli` command: [`aicli::cli_main`].

/// See the `mimalloc` entry in Cargo.toml.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    aicli::cli_main()
}
