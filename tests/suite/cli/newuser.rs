//! A new user's frictions, round 3 (issue 21, section 2), each through the real `aicli`
//! binary: the command as they typed it, what they saw. Where what they saw was on a
//! terminal (a countdown, a prompt, a spinner), the command runs on a pseudo-terminal.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::*;

/// A Docker endpoint that is not there: "a machine without Docker".
const NO_DOCKER: &str = "unix:///nonexistent/aicli-test/docker.sock";

/// A command running with its stdin and stderr on a pseudo-terminal (what a user sees)
/// and its stdout on a pipe.
struct OnTty {
    child: std::process::Child,
    /// Writes what the user types.
    keys: std::fs::File,
    /// Everything the terminal showed so far.
    screen: Arc<Mutex<Vec<u8>>>,
    reader: std::thread::JoinHandle<()>,
}

impl OnTty {
    fn spawn(mut cmd: Command) -> OnTty {
        let size = nix::pty::Winsize {
            ws_row: 50,
            ws_col: 220,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
        let slave = std::fs::File::from(pty.slave);
        cmd.stdin(Stdio::from(slave.try_clone().expect("dup")))
            .stderr(Stdio::from(slave))
            .stdout(Stdio::piped());
        let child = cmd.spawn().expect("spawn aicli");
        // The command holds the terminal's other end: dropped, the child is its only
        // holder, and reading ends when the child does.
        drop(cmd);
        let mut master = std::fs::File::from(pty.master);
        let keys = master.try_clone().expect("dup");
        let screen = Arc::new(Mutex::new(Vec::new()));
        let shown = screen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the child closed the terminal.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                shown.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        OnTty {
            child,
            keys,
            screen,
            reader,
        }
    }

    /// The terminal's text so far, without control sequences, one entry per line or
    /// redraw (split at `\r` and `\n`).
    fn lines(&self) -> Vec<String> {
        screen_lines(&self.screen.lock().unwrap())
    }

    /// Waits until `what` holds for the terminal's lines (panics after `limit`).
    fn wait_for(&self, limit: Duration, what: &str, cond: impl Fn(&[String]) -> bool) {
        let start = Instant::now();
        while !cond(&self.lines()) {
            assert!(
                start.elapsed() < limit,
                "no {what} within {limit:?}; the terminal showed:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Types `line` and Enter.
    fn type_line(&mut self, line: &str) {
        self.keys
            .write_all(format!("{line}\r").as_bytes())
            .expect("type");
    }

    /// Waits for the end: the output (stdout) and the terminal's lines.
    fn finish(self) -> (Output, Vec<String>) {
        let out = self.child.wait_with_output().expect("aicli ends");
        drop(self.keys);
        self.reader.join().expect("reader");
        let lines = screen_lines(&self.screen.lock().unwrap());
        (out, lines)
    }
}

/// `bytes` shown on a terminal as text lines: escape sequences dropped, split at `\r`
/// and `\n`, blank pieces left out.
fn screen_lines(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut plain = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            plain.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters, then one final byte in @..~.
            for d in chars.by_ref() {
                if ('@'..='~').contains(&d) {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    plain
        .split(['\r', '\n'])
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// The answer hint's `BATCH/TASK` in a blocked run's summary.
fn hinted_task(out: &Output) -> String {
    let text = stdout(out);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("answer with: aicli answer "))
        .and_then(|h| h.split_whitespace().next())
        .unwrap_or_else(|| panic!("no answer hint in:\n{text}"))
        .to_owned()
}

#[test]
fn a_bare_task_id_answers_without_docker_and_the_answer_note_has_a_line_of_its_own() {
    let cli = Cli::new();
    let out = cli.run(&[
        "run",
        "Paint the shed",
        "--provider",
        "gemini",
        "--fake-api=ask:Which colour?|red|blue",
    ]);
    assert_code(&out, 3, "a blocked gemini run");
    let task_ref = hinted_task(&out);
    let (_, task) = task_ref.split_once('/').expect("BATCH/TASK");
    // The short form, on a machine where no Docker engine answers.
    let out = cli
        .command(&["answer", task, "red", "--fake-api"])
        .env("DOCKER_HOST", NO_DOCKER)
        .output()
        .expect("aicli answer");
    assert_code(&out, 0, "aicli answer TASK with no Docker engine");
    let text = stdout(&out);
    assert!(
        text.lines().any(|l| l == "(answer to a question)"),
        "the note is not on a line of its own:\n{text}"
    );
    assert!(text.contains("✔ succeeded"), "{text}");
}

/// Waits, when needed, until the wall clock is early in a minute: a gemini-acp session
/// begun then cannot be loaded for most of the minute.
fn early_in_a_minute() {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 60;
    if secs > 5 {
        std::thread::sleep(Duration::from_secs(61 - secs));
    }
}

#[test]
fn gemini_acp_answer_counts_down_its_wait_and_the_summary_times_the_whole_command() {
    let cli = Cli::new();
    let tasks = cli.file(
        "tasks.json",
        r#"{"provider": "gemini-acp", "tasks": [{"id": "ask", "prompt": "Set up the DB"}]}"#,
    );
    early_in_a_minute();
    let out = cli.run(&[
        "batch",
        tasks.to_str().unwrap(),
        "--fake-api=ask:Which database?|Postgres|SQLite",
        "--json",
    ]);
    assert_code(&out, 3, "a blocked gemini-acp batch");
    let batch = only_batch(cli.repo.path());
    let started = Instant::now();
    let tty =
        OnTty::spawn(cli.command(&["answer", &format!("{batch}/ask"), "Postgres", "--fake-api"]));
    let (out, screen) = tty.finish();
    let took = started.elapsed();
    assert_code(&out, 0, "aicli answer");
    // A live countdown, without -v: several seconds counted down.
    let counted: std::collections::BTreeSet<u64> = screen
        .iter()
        .filter_map(|l| {
            l.split_once("continuing the session in ")
                .and_then(|(_, r)| r.split_once("s:"))
                .and_then(|(n, _)| n.parse().ok())
        })
        .collect();
    assert!(
        counted.len() >= 3,
        "no countdown on the terminal (seconds shown: {counted:?}):\n{}",
        screen.join("\n")
    );
    let waited: f64 = screen
        .iter()
        .find_map(|l| {
            l.strip_prefix("aicli: waited ")
                .and_then(|r| r.split_once("s before continuing the session: "))
                .filter(|(_, why)| why.contains("wall-clock minute"))
                .and_then(|(n, _)| n.parse().ok())
        })
        .unwrap_or_else(|| panic!("what it waited for is not said:\n{}", screen.join("\n")));
    // The summary's time is the command's: the wait included.
    let text = stdout(&out);
    let summary: f64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("gemini-acp · "))
        .and_then(|r| r.split_once("s"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary line in:\n{text}"));
    assert!(
        summary >= waited && summary <= took.as_secs_f64() + 0.5,
        "the summary says {summary}s; the wait was {waited}s, the command {took:?}:\n{text}"
    );
    assert!(text.contains("(the CLI ran "), "{text}");
}

/// The worktree of each demo task, from the demo's closing text.
fn demo_worktrees(text: &str) -> Vec<(String, PathBuf)> {
    text.lines()
        .skip_while(|l| !l.starts_with("worktrees ("))
        .skip(1)
        .map_while(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_once(": "))
        .map(|(t, p)| (t.to_owned(), PathBuf::from(p)))
        .collect()
}

/// The cost column of a results table's task rows, as numbers.
fn row_costs(table: &str) -> Vec<f64> {
    let mut lines = table.lines().skip_while(|l| !l.starts_with("task "));
    let header: Vec<&str> = lines
        .next()
        .expect("a header")
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let col = header
        .iter()
        .position(|c| *c == "cost")
        .expect("a cost column");
    lines
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<&str> = l
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect();
            cells[col]
                .trim_start_matches('~')
                .trim_start_matches('$')
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn the_demo_writes_each_answer_into_its_file_takes_an_option_s_number_and_labels_its_total() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("demo");
    let mut cmd = Command::new(aicli_bin());
    cmd.args(["demo", "--dir", repo.to_str().unwrap()]);
    let mut tty = OnTty::spawn(cmd);
    // claude: option 3 by its number; codex: a text of the user's own; gemini: Enter.
    let typed = ["3", "Salut", ""];
    for (i, answer) in typed.iter().enumerate() {
        tty.wait_for(Duration::from_secs(300), "prompt", |lines| {
            lines
                .iter()
                .filter(|l| {
                    l.contains("your answer, a number or text (Enter = 1, \"Hello, world\"):")
                })
                .count()
                > i
        });
        tty.type_line(answer);
    }
    let (out, screen) = tty.finish();
    assert_code(&out, 0, "aicli demo on a terminal");
    assert!(
        screen
            .iter()
            .any(|l| l.contains("1) Hello, world  2) Bonjour  3) Hallo")),
        "the options are not numbered:\n{}",
        screen.join("\n")
    );
    let text = stdout(&out);
    let worktrees = demo_worktrees(&text);
    let want = [
        ("claude-demo", "claude", "Hallo"),
        ("codex-demo", "codex", "Salut"),
        ("gemini-demo", "gemini", "Hello, world"),
    ];
    for (task, cli, greeting) in want {
        let wt = worktrees
            .iter()
            .find(|(t, _)| t == task)
            .unwrap_or_else(|| panic!("no worktree of {task} in:\n{text}"));
        let file = wt.1.join(format!("demo-{cli}.txt"));
        let written = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            written.contains(&format!("written by {cli}"))
                && written
                    .lines()
                    .any(|l| l == format!("greeting: {greeting}")),
            "{} does not hold the answer {greeting:?}:\n{written}",
            file.display()
        );
    }
    // One clear total (issue 37, item 7): each row's cost covers all the task's runs (the
    // question's and the answer's), and the rows add up to the total, which says nothing
    // else about runs.
    let costs = row_costs(&text);
    assert_eq!(costs.len(), 3, "{text}");
    let total_line = text
        .lines()
        .find(|l| l.starts_with("3 tasks: "))
        .unwrap_or_else(|| panic!("no total in:\n{text}"));
    assert!(!total_line.contains("runs"), "{total_line}");
    let total: f64 = total_line
        .split_once("cost $")
        .and_then(|(_, r)| r.split([' ', '(']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no total cost: {total_line}"));
    let sum: f64 = costs.iter().sum();
    assert!(
        (total - sum).abs() < 0.0002,
        "the rows add up to {sum}, the total says {total}: {total_line}"
    );
}

/// A directory with a fake `node` (v20.20.2) and a fake `npm`: `npm view` answers each
/// package's `engines.node` (claude-code >=22.0.0, any other >=16), `npm install`
/// installs each spec as a package whose executable is `claude` (what the test
/// installs), logging its arguments to `$NPM_LOG` and printing npm's EBADENGINE warning
/// for claude-code.
fn fake_node_and_npm(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let node = "#!/bin/sh\necho v20.20.2\n";
    let npm = r#"#!/bin/sh
echo "$@" >> "$NPM_LOG"
case "$1" in
view)
    case "$2" in
    @anthropic-ai/claude-code@*) echo '>=22.0.0' ;;
    *) echo '>=16' ;;
    esac ;;
install)
    shift
    prefix=""
    while [ $# -gt 0 ]; do
        case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --*) shift ;;
        *)
            pkg="${1%@*}"; ver="${1##*@}"
            mkdir -p "$prefix/node_modules/$pkg" "$prefix/node_modules/.bin"
            printf '{"name":"%s","version":"%s","bin":{"claude":"cli.js"}}\n' "$pkg" "$ver" > "$prefix/node_modules/$pkg/package.json"
            printf '#!/bin/sh\necho %s\n' "$ver" > "$prefix/node_modules/$pkg/cli.js"
            chmod +x "$prefix/node_modules/$pkg/cli.js"
            ln -sf "../$pkg/cli.js" "$prefix/node_modules/.bin/claude"
            shift ;;
        esac
    done
    cat >&2 <<'EOF'
npm warn EBADENGINE Unsupported engine {
npm warn EBADENGINE   package: '@anthropic-ai/claude-code@2.1.332',
npm warn EBADENGINE   required: { node: '>=22.0.0' },
npm warn EBADENGINE   current: { node: 'v20.20.2', npm: '11.19.1' }
npm warn EBADENGINE }
EOF
    sleep 1
    echo "added 2 packages in 1s" ;;
esac
"#;
    for (name, script) in [("node", node), ("npm", npm)] {
        let p = bin.join(name);
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

#[test]
fn install_checks_node_first_and_prints_npm_s_warnings_whole_after_its_spinner() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_node_and_npm(dir.path());
    let cache = dir.path().join("cache");
    let log = dir.path().join("npm.log");
    let claude = aicli::providers::AiCliConfig::builtin().unwrap().providers["claude"].clone();
    let version = claude.version.clone().unwrap();
    let mut cmd = Command::new(aicli_bin());
    cmd.args(["install", "claude"])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", dir.path())
        .env("AICLI_CACHE_DIR", &cache)
        .env("NPM_LOG", &log)
        .current_dir(dir.path());
    let (out, screen) = OnTty::spawn(cmd).finish();
    assert_code(&out, 0, "aicli install claude");
    let shown = screen.join("\n");
    assert!(
        screen
            .iter()
            .any(|l| l.starts_with("aicli install: Node.js v20.20.2 (")
                && l.contains(&format!("claude {version} node >=22.0.0"))),
        "the Node.js check is not said:\n{shown}"
    );
    assert!(
        screen.iter().any(|l| l.contains(&format!(
            "claude {version} ({}) needs Node.js >=22.0.0, and this machine's is v20.20.2",
            claude.package
        ))),
        "no warning about the Node.js version:\n{shown}"
    );
    // npm's warning, each of its lines whole, after the spinner (the last of its frames).
    let warned = screen
        .iter()
        .position(|l| l == "aicli install: npm warned:")
        .unwrap_or_else(|| panic!("npm's warnings are not printed:\n{shown}"));
    let block: Vec<&str> = screen[warned + 1..]
        .iter()
        .take(5)
        .map(String::as_str)
        .collect();
    assert_eq!(
        block,
        [
            "  npm warn EBADENGINE Unsupported engine {",
            "  npm warn EBADENGINE   package: '@anthropic-ai/claude-code@2.1.332',",
            "  npm warn EBADENGINE   required: { node: '>=22.0.0' },",
            "  npm warn EBADENGINE   current: { node: 'v20.20.2', npm: '11.19.1' }",
            "  npm warn EBADENGINE }",
        ],
        "{shown}"
    );
    assert!(
        !screen[warned..]
            .iter()
            .any(|l| l.trim_start().starts_with(|c: char| !c.is_ascii())),
        "a spinner frame after the warnings:\n{shown}"
    );
    assert!(
        stdout(&out).contains(&format!(
            "claude={}",
            cache.join("npm/node_modules/.bin/claude").display()
        )),
        "{}",
        stdout(&out)
    );
}

#[test]
fn image_build_installs_what_it_needs_into_aicli_install_s_caches() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    if runtime
        .block_on(crate::suite::docker::support::local_engine(
            "image_build_installs_what_it_needs",
        ))
        .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_node_and_npm(dir.path());
    let cache = dir.path().join("cache");
    let log = dir.path().join("npm.log");
    // A tag no one uses and a base no registry has: the build stops there.
    let tag = format!(
        "aicli-test/newuser-never-built:{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let config = dir.path().join("aicli.json");
    std::fs::write(
        &config,
        serde_json::json!({"engine": {"docker": {
            "hosts": [{"name": "local", "url": "unix:///var/run/docker.sock"}],
            "images": {"claude": tag}
        }}})
        .to_string(),
    )
    .unwrap();
    let out = Command::new(aicli_bin())
        .arg("--config")
        .arg(&config)
        .args([
            "image",
            "build",
            "claude",
            "--base",
            "aicli-test/no-such-base:0",
        ])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", dir.path())
        .env("AICLI_CACHE_DIR", &cache)
        .env("NPM_LOG", &log)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "the pinned CLIs from {}, Debian packages cached in {}",
            cache.join("npm").display(),
            cache.join("debs").display()
        )),
        "{err}"
    );
    let npm = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        npm.lines()
            .any(|l| l.starts_with(&format!("install --prefix {}", cache.join("npm").display()))),
        "image build did not install the pinned claude into $AICLI_CACHE_DIR/npm: npm got {npm:?}\n{err}"
    );
    assert_code(&out, 1, "a build from a base no registry has");
    assert!(!err.contains(".ci/install-clis.sh"), "{err}");
}

#[test]
fn doctor_finds_the_fixtures_outside_the_repository_says_docker_once_and_strict_says_why() {
    let elsewhere = tempfile::tempdir().unwrap();
    let doctor = |config: Option<&Path>, args: &[&str]| {
        let mut c = Command::new(aicli_bin());
        if let Some(cfg) = config {
            c.arg("--config").arg(cfg);
        }
        c.arg("doctor")
            .args(args)
            .env("DOCKER_HOST", NO_DOCKER)
            .current_dir(elsewhere.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = doctor(None, &[]);
    assert_code(&out, 0, "aicli doctor");
    let text = stdout(&out);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let first = format!(
        "fixtures: {} (the source tree aicli was built from)",
        fixtures.display()
    );
    assert_eq!(text.lines().next(), Some(first.as_str()), "{text}");
    let builtin = aicli::providers::AiCliConfig::builtin().unwrap();
    let pin = builtin.providers["claude"].version.clone().unwrap();
    assert!(
        text.lines()
            .any(|l| l == format!("claude: installed {pin} · pinned {pin} · fixtures {pin}")),
        "{text}"
    );
    let both = format!("{text}{}", stderr(&out));
    assert_eq!(
        both.matches("no docker engine is available").count(),
        1,
        "the Docker note is not said once:\n{both}"
    );
    // A CLI that is not there: --strict fails, and says why on stderr, JSON or not.
    let config = elsewhere.path().join("aicli.json");
    std::fs::write(
        &config,
        r#"{"providers": {"codex": {"binary_path": "/no/such/codex"}}}"#,
    )
    .unwrap();
    let out = doctor(Some(&config), &["--strict", "--json"]);
    assert_code(&out, 1, "aicli doctor --strict with codex missing");
    let err = stderr(&out);
    assert!(
        err.contains("aicli doctor --strict: exit 1: ")
            && err
                .lines()
                .any(|l| l.starts_with("  codex: ") && l.contains("/no/such/codex")),
        "{err}"
    );
}

#[test]
fn log_lines_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let cli = Cli::new();
    let out = cli
        .command(&["-v", "run", "hello"])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert_code(&out, 0, "aicli -v run");
    let err = stderr(&out);
    assert!(err.contains(" INFO "), "no log lines at -v: {err}");
    assert!(!err.contains('\x1b'), "colour codes in a pipe: {err:?}");
}

#[test]
fn the_flag_the_not_a_repository_error_suggests_is_in_the_readme() {
    let cli = Cli::new();
    let not_a_repo = tempfile::tempdir().unwrap();
    let out = cli.run(&[
        "run",
        "hello",
        "--repo",
        not_a_repo.path().to_str().unwrap(),
    ]);
    assert_code(&out, 2, "a run outside a repository");
    let err = stderr(&out);
    let flags: Vec<&str> = err
        .split(|c: char| c.is_whitespace() || "(),;".contains(c))
        .filter(|w| w.starts_with("--"))
        .collect();
    assert!(flags.contains(&"--no-worktree"), "{err}");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for f in flags {
        assert!(
            readme.contains(f),
            "the error suggests {f}, which README.md never mentions"
        );
    }
}

#[test]
fn runs_sizes_its_columns_to_their_content() {
    let cli = Cli::new();
    let out = cli.run(&["run", "hello", "--no-mcp"]);
    assert_code(&out, 0, "a run");
    let tasks = cli.file(
        "tasks.json",
        r#"[{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y", "provider": "fakegem"}]"#,
    );
    let out = cli.run(&["batch", tasks.to_str().unwrap(), "--no-mcp"]);
    assert_code(&out, 0, "a batch of two providers");
    let text = stdout(&cli.run(&["runs"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let mixed = lines
        .iter()
        .find(|l| l.contains("fake,fakegem"))
        .unwrap_or_else(|| panic!("no mixed batch in:\n{text}"));
    // Every line as long as the others (the last column is aligned right), and each
    // column starting where its header does.
    let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
    assert!(
        widths.iter().all(|w| *w == widths[0]),
        "misaligned:\n{text}"
    );
    assert_eq!(
        lines[0].find("provider"),
        mixed.find("fake,fakegem"),
        "misaligned:\n{text}"
    );
}

#[test]
fn one_change_and_one_file_are_said_in_the_singular() {
    let cli = Cli::new();
    std::fs::write(cli.repo.path().join("one.txt"), "untracked\n").unwrap();
    // The task leaves one new file in its worktree: one commit on its branch.
    let tasks = cli.file(
        "tasks.json",
        r#"[{"id": "t", "prompt": "x", "extra_args": ["--touch", "made.txt"]}]"#,
    );
    let out = cli.run(&["batch", tasks.to_str().unwrap(), "--no-mcp"]);
    assert_code(&out, 0, "a batch in a dirty repository");
    let err = stderr(&out);
    assert!(err.contains("uncommitted changes (1 file)"), "{err}");
    let text = stdout(&cli.run(&["worktrees"]));
    assert!(
        text.contains("1 commit not on any other branch") && !text.contains("1 commits"),
        "{text}"
    );
    // One change left in the worktree after that.
    let list = git(cli.repo.path(), &["worktree", "list", "--porcelain"]);
    let wt = list
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .nth(1)
        .unwrap();
    std::fs::write(Path::new(wt).join("later.txt"), "later\n").unwrap();
    let text = stdout(&cli.run(&["worktrees"]));
    assert!(
        text.contains("1 uncommitted change") && !text.contains("1 uncommitted changes"),
        "{text}"
    );
}

#[test]
fn the_fake_api_home_is_private_under_a_permissive_umask() {
    let cli = Cli::new();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$0\" \"$@\"")
        .arg(aicli_bin())
        .arg("--config")
        .arg(&cli.config)
        .args(["run", "hello", "--fake-api", "--no-mcp"])
        .current_dir(cli.repo.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_code(&out, 0, "a --fake-api run");
    let home = cli.repo.path().join(".aicli/fake-api-home");
    let mut seen = 0;
    let mut stack = vec![home.clone()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode, 0o700, "{} is {mode:o}", p.display());
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            assert_eq!(mode, 0o600, "{} is {mode:o}", p.display());
            seen += 1;
        }
    }
    assert!(seen > 0, "aicli wrote no file into {}", home.display());
    let aicli_dir = std::fs::metadata(cli.repo.path().join(".aicli")).unwrap();
    assert_eq!(aicli_dir.permissions().mode() & 0o777, 0o700);
}

#[test]
fn gemini_s_not_logged_in_message_names_each_variable_once() {
    let cli = Cli::new();
    let home = tempfile::tempdir().unwrap();
    let mut c = cli.command(&["run", "hello", "--provider", "gemini", "--no-mcp"]);
    // A HOME without a login; the installed gemini still found in aicli's cache.
    c.env("HOME", home.path())
        .env("AICLI_CLI_CACHE", aicli_testkit::cli_cache_dir());
    for v in [
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_USE_GCA",
        "GEMINI_CLI_USE_COMPUTE_ADC",
        "CLOUD_SHELL",
    ] {
        c.env_remove(v);
    }
    let out = c.output().unwrap();
    assert_code(&out, 10, "gemini without a login");
    let text = format!("{}{}", stdout(&out), stderr(&out));
    let line = text
        .lines()
        .find(|l| l.contains("not logged in"))
        .unwrap_or_else(|| panic!("no not-logged-in message in:\n{text}"));
    for v in ["GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "CLOUD_SHELL"] {
        assert_eq!(line.matches(v).count(), 1, "{v} named twice: {line}");
    }
}
