//! How a local container runs its CLI once the command is known: the container is made
//! and started first (ahead of the task's turn, see [`super::DockerRunner`]'s warm
//! placements), its first process waiting for a `go` line on its stdin. The run then
//! writes the launch script into its private directory (mounted at
//! [`super::paths::PRIVATE`]) and sends the go line, then the prompt:
//!
//! 1. the first process reads the go line (`read` takes one byte at a time from a pipe,
//!    so nothing after it is consumed) and `exec`s the script;
//! 2. the script removes itself (it holds the environment, credentials included), goes to
//!    the CLI's directory, exports the CLI's environment and `exec`s the CLI, which reads
//!    the rest of stdin: the prompt.
//!
//! The CLI is then the process the container's init signals, as when it was the
//! container's command. Neither its argv nor its environment is in what `docker inspect`
//! shows. A closed stdin before the go line (aicli gone, a warm container never used)
//! ends the container.

use std::path::Path;

use super::DockerError;
use super::paths::PRIVATE;

/// The launch script's name in the run's private directory.
const SCRIPT: &str = ".aicli-launch";

/// What the run writes on the container's stdin first.
pub const GO: &str = "go\n";

/// What only the waiting first process's command line holds (`aicli containers` tells a
/// warm container by it).
pub const WAIT_MARK: &str = "read -r go";

/// The first process's script (`$0`: the launch script's path in the container).
const WAIT_FOR_GO: &str = r#"IFS= read -r go || exit 0
[ "$go" = go ] || exit 0
exec /bin/sh "$0"
"#;

/// The container's command: waits for the go line, then runs the launch script.
pub fn first_process() -> Vec<String> {
    vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        WAIT_FOR_GO.to_owned(),
        format!("{PRIVATE}/{SCRIPT}"),
    ]
}

/// The launch script: run `argv` in `cwd` with `env` (on top of the image's), all as the
/// container sees them.
pub fn script(cwd: &str, argv: &[String], env: &[(String, String)]) -> Result<String, DockerError> {
    let quote = |s: &str| -> Result<String, DockerError> {
        shlex::try_quote(s).map(|q| q.into_owned()).map_err(|_| {
            DockerError::Work(format!(
                "a NUL byte in the CLI's command or environment: {:?}",
                s.chars().take(60).collect::<String>()
            ))
        })
    };
    let mut script = format!(
        "rm -f {}\ncd {} || exit 126\n",
        quote(&format!("{PRIVATE}/{SCRIPT}"))?,
        quote(cwd)?
    );
    for (k, v) in env {
        if !is_name(k) {
            // Docker takes any name; a POSIX shell exports only these.
            tracing::warn!(variable = %k, "a variable whose name a shell cannot export is left out of the container's environment");
            continue;
        }
        script.push_str(&format!("export {k}={}\n", quote(v)?));
    }
    script.push_str("exec");
    for a in argv {
        script.push(' ');
        script.push_str(&quote(a)?);
    }
    script.push('\n');
    Ok(script)
}

/// Whether `k` is a variable name a POSIX shell exports.
fn is_name(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Writes `script` into the run's private directory `private_dir`, readable by this
/// process's user only (the container's user reads it through the directory's mount,
/// uid-mapped when aicli is root).
pub fn write(private_dir: &Path, script: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = private_dir.join(SCRIPT);
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    f.write_all(script.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script, run by this machine's `/bin/sh` with `/aicli` replaced by a
    /// temporary directory: the CLI (here `sh -c` printing its arguments and two
    /// variables) gets every argument and value byte for byte, quotes, newlines, `$`
    /// and backquotes included, and the script is gone once it ran.
    #[test]
    fn the_launch_script_passes_argv_and_env_through_a_real_shell() {
        let dir = tempfile::tempdir().unwrap();
        let tricky = "it's \"quoted\"\n$HOME `id` \\ ✓";
        let argv: Vec<String> = [
            "/bin/sh",
            "-c",
            r#"printf '%s|' "$@"; printf '%s|%s' "$A_VAR" "$B_VAR""#,
            "sh",
            tricky,
            "",
            "--flag=a b",
        ]
        .map(String::from)
        .to_vec();
        let env = vec![
            ("A_VAR".to_owned(), tricky.to_owned()),
            ("B_VAR".to_owned(), String::new()),
            ("bad-name".to_owned(), "left out".to_owned()),
        ];
        let cwd = dir.path().join("work dir");
        std::fs::create_dir(&cwd).unwrap();
        let text = script(cwd.to_str().unwrap(), &argv, &env).unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        let text = text.replace(PRIVATE, private.to_str().unwrap());
        write(&private, &text).unwrap();
        let out = std::process::Command::new("/bin/sh")
            .arg(private.join(SCRIPT))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{tricky}||--flag=a b|{tricky}|")
        );
        assert!(!private.join(SCRIPT).exists(), "the script removed itself");
        let nul = script("/", &["a\0b".to_owned()], &[]).unwrap_err();
        assert!(nul.to_string().contains("NUL"), "{nul}");
    }

    #[test]
    fn the_first_process_is_told_by_its_mark() {
        assert!(first_process()[2].contains(WAIT_MARK));
        let script = script("/w", &["cli".to_owned()], &[]).unwrap();
        assert!(!script.contains(WAIT_MARK), "{script}");
    }

    #[test]
    fn names_a_shell_exports() {
        assert!(is_name("HTTP_PROXY") && is_name("_x1"));
        assert!(!is_name("1X") && !is_name("a-b") && !is_name(""));
    }
}
