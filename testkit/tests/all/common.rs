//! Running a real CLI against a fake: own run dirs, a clean environment, a timeout, and
//! the whole process group killed afterwards.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use aicli_testkit::{CliWiring, FakeApi, RunDirs, Vendor, installed_cli};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// Longest a single CLI run may take before the test fails.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// How long to wait for the fake to see a request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The installed CLI, or a panic that says how to install it.
pub fn cli(vendor: Vendor) -> PathBuf {
    installed_cli(vendor).unwrap_or_else(|e| panic!("{e}"))
}

/// Run directories under the target dir (not /tmp: Codex warns about CODEX_HOME there).
pub fn run_dirs() -> RunDirs {
    RunDirs::new_in(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("clis")).unwrap()
}

/// The headless argv of each CLI with NDJSON output, the wiring args and `extra`.
pub fn argv(vendor: Vendor, wiring: &CliWiring, prompt: &str, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    match vendor {
        Vendor::Anthropic => {
            a.extend(s(&[
                "-p",
                prompt,
                "--output-format",
                "stream-json",
                "--verbose",
            ]));
            a.extend(wiring.args.clone());
            a.extend(s(extra));
        }
        Vendor::OpenAi => {
            a.extend(s(&["exec", "--json", "--skip-git-repo-check"]));
            a.extend(wiring.args.clone());
            a.extend(s(extra));
            a.push(prompt.to_owned());
        }
        Vendor::Gemini => {
            a.extend(s(&["-p", prompt, "--output-format", "stream-json"]));
            a.extend(wiring.args.clone());
            a.extend(s(extra));
        }
    }
    a
}

/// What a CLI run left behind.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub dirs: RunDirs,
}

impl Run {
    /// The stdout lines that are JSON.
    pub fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The last JSON line.
    pub fn last_event(&self) -> Value {
        self.events()
            .pop()
            .unwrap_or_else(|| panic!("no JSON on stdout; {}", self.describe()))
    }

    /// Exit code, stdout and stderr, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs the real CLI of `fake`'s vendor with `wiring`, the prompt and `extra` args.
pub async fn run(fake: &FakeApi, wiring: &CliWiring, prompt: &str, extra: &[&str]) -> Run {
    run_in(run_dirs(), fake, wiring, prompt, extra).await
}

/// [`run`] in given directories (e.g. a second run in the same HOME).
pub async fn run_in(
    dirs: RunDirs,
    fake: &FakeApi,
    wiring: &CliWiring,
    prompt: &str,
    extra: &[&str],
) -> Run {
    let vendor = fake.vendor();
    wiring.write_files(&dirs.home).unwrap();
    let mut cmd = Command::new(cli(vendor));
    cmd.args(argv(vendor, wiring, prompt, extra))
        .env_clear()
        .envs(dirs.env_with(wiring))
        .current_dir(&dirs.work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pgid = Pid::from_raw(child.id().unwrap() as i32);
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_task = tokio::spawn(async move {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s).await;
        s
    });
    let err_task = tokio::spawn(async move {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s).await;
        s
    });
    let waited = tokio::time::timeout(RUN_TIMEOUT, child.wait()).await;
    let elapsed = start.elapsed();
    // Whatever is left of the group (helpers, grandchildren) goes now.
    let _ = killpg(pgid, Signal::SIGKILL);
    let status = match waited {
        Ok(s) => Some(s.unwrap()),
        Err(_) => {
            let _ = child.wait().await;
            None
        }
    };
    let stdout = tokio::time::timeout(Duration::from_secs(5), out_task)
        .await
        .map(|r| r.unwrap_or_default())
        .unwrap_or_default();
    let stderr = tokio::time::timeout(Duration::from_secs(5), err_task)
        .await
        .map(|r| r.unwrap_or_default())
        .unwrap_or_default();
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout,
        stderr,
        elapsed,
        dirs,
    };
    dump_log(fake);
    if status.is_none() {
        let log: Vec<String> = fake.requests().iter().map(|r| r.summary()).collect();
        panic!(
            "{} did not exit within {RUN_TIMEOUT:?}; fake saw: {log:?}\n{}",
            vendor.cli_name(),
            run.describe()
        );
    }
    run
}

/// With `AICLI_TESTKIT_DUMP=DIR`, writes the fake's request log to `DIR/<test>.jsonl`.
fn dump_log(fake: &FakeApi) {
    let Some(dir) = std::env::var_os("AICLI_TESTKIT_DUMP") else {
        return;
    };
    let name = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .replace("::", "-");
    let lines: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.jsonl")), lines.join("\n")).unwrap();
}
