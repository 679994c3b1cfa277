//! The command line of a fake CLI run (not `--acp`, not `--sleeper`): every option
//! the crate docs list, into [`Opts`].

/// What the options ask for.
#[derive(Default)]
pub struct Opts {
    pub replay: Option<String>,
    pub stderr_file: Option<String>,
    pub exit_file: Option<String>,
    pub line_delay: u64,
    pub start_delay: u64,
    pub wait_for_file: Option<String>,
    pub session_id: Option<String>,
    pub exit: Option<i32>,
    pub stderr: Option<String>,
    pub hang: bool,
    pub hang_after: Option<usize>,
    pub crash_mid_line: bool,
    pub garbage: usize,
    pub overlong: usize,
    pub invalid_utf8: bool,
    pub grandchildren: usize,
    pub ignore_sigterm: bool,
    pub pid_file: Option<String>,
    pub linger: u64,
    pub require_env: Vec<String>,
    pub require_file: Vec<String>,
    pub require_unset: Vec<String>,
    pub record_env: Vec<(String, String)>,
    pub touch: Vec<String>,
    pub write: Vec<(String, String)>,
    pub record_argv: Option<String>,
    pub record_stdin: Option<String>,
    pub timeline: Option<String>,
    pub repeat_to: Option<u64>,
    pub dump_env: Option<String>,
    pub mcp_calls: Vec<(String, String, String)>,
    pub mcp_config: Option<String>,
    pub mcp_list: Option<String>,
    pub probe: Option<String>,
    pub daemon_exit: bool,
    pub double_fork: Option<String>,
    pub once: Option<String>,
}

/// `args` (without the program name) as options; anything unknown (the provider's own
/// flags, the prompt) is accepted and ignored.
pub fn parse(args: &[String]) -> Opts {
    let mut o = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--replay" => o.replay = Some(val()),
            "--stderr-file" => o.stderr_file = Some(val()),
            "--exit-file" => o.exit_file = Some(val()),
            "--line-delay-ms" => o.line_delay = val().parse().unwrap_or(0),
            "--start-delay-ms" => o.start_delay = val().parse().unwrap_or(0),
            "--wait-for-file" => o.wait_for_file = Some(val()),
            // `--resume ID` is Claude's and Gemini's resume flag: the fake continues "the
            // same session" by printing that id.
            "--session-id" | "--resume" => o.session_id = Some(val()),
            "--exit" => o.exit = Some(val().parse().unwrap_or(1)),
            "--stderr" => o.stderr = Some(val()),
            "--hang" => o.hang = true,
            "--hang-after" => o.hang_after = Some(val().parse().unwrap_or(0)),
            "--crash-mid-line" => o.crash_mid_line = true,
            "--garbage" => o.garbage = val().parse().unwrap_or(0),
            "--overlong" => o.overlong = val().parse().unwrap_or(0),
            "--invalid-utf8" => o.invalid_utf8 = true,
            "--spawn-grandchildren" => o.grandchildren = val().parse().unwrap_or(0),
            "--ignore-sigterm" => o.ignore_sigterm = true,
            "--pid-file" => o.pid_file = Some(val()),
            "--linger-ms" => o.linger = val().parse().unwrap_or(0),
            "--require-env" => o.require_env.push(val()),
            "--require-file" => o.require_file.push(val()),
            "--require-env-unset" => o.require_unset.push(val()),
            "--record-env" => {
                let var = val();
                o.record_env.push((var, val()));
            }
            "--touch" => o.touch.push(val()),
            "--write" => {
                let file = val();
                o.write.push((file, val()));
            }
            "--dump-env" => o.dump_env = Some(val()),
            "--mcp-call" => {
                let tool = val();
                let args = val();
                o.mcp_calls.push((tool, args, val()));
            }
            "--mcp-config" => o.mcp_config = Some(val()),
            "--mcp-list" => o.mcp_list = Some(val()),
            "--probe" => o.probe = Some(val()),
            "--daemon-exit" => o.daemon_exit = true,
            "--double-fork-daemon" => o.double_fork = Some(val()),
            "--once" => o.once = Some(val()),
            "--record-argv" => o.record_argv = Some(val()),
            "--record-stdin" => o.record_stdin = Some(val()),
            "--timeline" => o.timeline = Some(val()),
            "--repeat-to" => o.repeat_to = val().parse().ok(),
            // Anything else (the provider's own flags, the prompt) is accepted and ignored.
            _ => {}
        }
    }
    o
}
