//! `aicli login`: the CLI's own interactive login.

use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;

use super::{load_config, registry};

pub(super) async fn login(config_path: Option<&Path>, provider: &str) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let p = reg.get(provider)?;
    let argv = p.login_argv();
    if argv.is_empty() {
        bail!(
            "{provider} has no login command; set its API key in the environment (see `aicli status`)"
        );
    }
    let bin = p.binary_path(None)?;
    let (program, mut args) = bin.command_prefix();
    args.extend(argv);
    // Interactive: the CLI gets our terminal.
    let status = tokio::process::Command::new(program)
        .args(&args)
        .kill_on_drop(true)
        .status()
        .await?;
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}
