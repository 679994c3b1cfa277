//! `aicli-fake-cli`: a stand-in for a real AI coding CLI in tests and benches.
//!
//! It replays a recorded transcript (stdout lines, stderr, exit code) with a delay
//! between lines, and can misbehave on purpose. It is a real process, so everything the
//! engine does to processes (groups, signals, pipes) is exercised for real.
//!
//! ```text
//! aicli-fake-cli [--replay FILE.ndjson] [--stderr-file F] [--exit-file F] [options]
//!   --line-delay-ms N        sleep N ms before each line (default 0)
//!   --start-delay-ms N       sleep N ms before the first line
//!   --wait-for-file PATH     before the first line (after --start-delay-ms), wait until
//!                            PATH exists (at most 60 s, then exit 3)
//!   --session-id ID          replace the recorded session id with ID in every line
//!   --resume ID              the same (so Claude's and Gemini's resume flag works)
//!   --exit CODE              exit with CODE (overrides --exit-file)
//!   --stderr TEXT            write TEXT to stderr first
//!   --hang                   after the transcript, sleep forever
//!   --hang-after N           sleep forever after N lines
//!   --crash-mid-line         after the transcript, print half a JSON line and abort
//!   --garbage N              print N lines of garbage before the transcript
//!   --overlong BYTES         print one line of BYTES bytes before the transcript
//!   --invalid-utf8           print one line with invalid UTF-8 before the transcript
//!   --spawn-grandchildren N  start N grandchildren (sleepers), one of them in its own
//!                            session (setsid), before the transcript
//!   --ignore-sigterm         this process and its grandchildren ignore SIGTERM
//!   --pid-file F             write this process's pid and the grandchildren's to F
//!   --linger-ms N            after the transcript, keep running N ms before exiting
//!   --require-env K=V        exit 3 with a message when the env var K is not V
//!   --require-file PATH      exit 3 when PATH does not exist (after --start-delay-ms)
//!   --require-env-unset K    exit 3 with a message when the env var K is set
//!   --record-env K FILE      append `K=value` or `K unset` to FILE
//!   --dump-env FILE          write the whole environment to FILE (`K=V` lines)
//!   --mcp-call TOOL ARGS F   call TOOL with ARGS (JSON) on aicli's MCP server (found in
//!                            `--mcp-config FILE`, the Claude wiring, or
//!                            AICLI_MCP_URL/AICLI_MCP_TOKEN), before the transcript;
//!                            write the tool result's JSON to F (a JSON-RPC error as
//!                            `{"rpc_error": {...}}`)
//!   --mcp-list F             write the `tools` of aicli's MCP server's tools/list to F
//!                            (before the calls)
//!   --probe F                write everything this process was handed as JSON to F:
//!                            its argv, its environment, and the contents of every file
//!                            (and of the files under every directory, not following
//!                            symlinks) that an argument or a variable's value names
//!   --daemon-exit            start one `setsid` daemon grandchild (a sleeper) and exit
//!                            at once, before the transcript: the parent is gone
//!                            before anyone can see the grandchild's ancestry
//!   --once FILE              misbehave (daemons, grandchildren, linger, hang,
//!                            hang-after) only when FILE does not exist yet (it is
//!                            created): a resumed run of the same task behaves
//!   --double-fork-daemon F   start a child that runs `--daemon-exit --pid-file F` (so F
//!                            lists that child and its daemon) and wait for it; then go
//!                            on: the daemon's parent died at once, the CLI lives on
//!   --touch FILE             create FILE (relative to the cwd) — "the tool ran"
//!   --write FILE TEXT        write TEXT to FILE (relative to the cwd; its directories
//!                            made), before the transcript — the agent's work
//!   --record-argv FILE       append this process's argv as one JSON line to FILE
//!   --record-stdin FILE      read stdin to its end and write it to FILE (first of all)
//!   --timeline FILE          append "<unix ns> start" at start and "<unix ns> end" at exit
//!   --repeat-to BYTES        print the transcript's lines but its last over and over
//!                            until BYTES bytes are out, then its last line (a stream of
//!                            any length from a short transcript)
//!   --acp MODE               be a minimal ACP agent on stdio instead (see the `acp`
//!                            module: ok, garbage, unknown-id, early-notification,
//!                            silent, hang); with `--prompted FILE` it creates FILE when
//!                            it gets `session/prompt`
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "fake_cli/acp.rs"]
mod acp;
#[path = "fake_cli/mcp.rs"]
mod mcp;
#[path = "fake_cli/opts.rs"]
mod opts;
#[path = "fake_cli/probe.rs"]
mod probe;
#[path = "fake_cli/procs.rs"]
mod procs;
#[path = "fake_cli/record.rs"]
mod record;
#[path = "fake_cli/replay.rs"]
mod replay;
#[path = "fake_cli/run.rs"]
mod run;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--acp") {
        let prompted = args
            .iter()
            .position(|a| a == "--prompted")
            .and_then(|j| args.get(j + 1));
        acp::run(
            args.get(i + 1).map(String::as_str).unwrap_or("ok"),
            prompted.map(String::as_str),
        );
        return;
    }
    if args.first().map(String::as_str) == Some("--sleeper") {
        procs::sleeper(args.get(1).map(String::as_str) == Some("--ignore-sigterm"));
    }
    let o = opts::parse(&args);
    run::run(o, &args);
}
