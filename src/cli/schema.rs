//! `aicli schema`: write the JSON Schemas.

use std::path::Path;
use std::process::ExitCode;

pub(super) fn schema(out: &Path) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(out)?;
    for (name, s) in aicli::schema::all() {
        std::fs::write(out.join(name), aicli::schema::render(&s))?;
        outln!("wrote {}", out.join(name).display());
    }
    Ok(ExitCode::SUCCESS)
}
