//! What a fake CLI writes down about how it was run: `--timeline`, `--record-argv`,
//! `--record-env`, `--dump-env`, `--probe`, and the answers of `--mcp-list` and
//! `--mcp-call`.

use std::io::Write;

use crate::mcp;
use crate::opts::Opts;
use crate::probe::probe;

/// `--timeline`: `<unix ns> <what>` appended to the file.
pub fn timeline(file: &Option<String>, what: &str) {
    if let Some(f) = file {
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        append_line(f, &format!("{ns} {what}"));
    }
}

/// One line appended with one `write(2)` on an `O_APPEND` file, so the lines of
/// fakes running at once never interleave (`writeln!` writes piece by piece).
fn append_line(path: &str, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// Everything but the timeline, in order: argv, variables, environment, probe, MCP.
pub fn record(o: &Opts, args: &[String]) {
    if let Some(f) = &o.record_argv {
        append_line(f, &serde_json::to_string(args).unwrap());
    }
    for (var, file) in &o.record_env {
        let line = match std::env::var(var) {
            Ok(v) => format!("{var}={v}"),
            Err(_) => format!("{var} unset"),
        };
        append_line(file, &line);
    }
    if let Some(f) = &o.dump_env {
        let text: String = std::env::vars()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        std::fs::write(f, text).unwrap();
    }
    if let Some(f) = &o.probe {
        std::fs::write(f, probe(args)).unwrap();
    }
    if let Some(f) = &o.mcp_list {
        std::fs::write(f, mcp::list_tools(o.mcp_config.as_deref())).unwrap();
    }
    for (tool, args, file) in &o.mcp_calls {
        let answer = mcp::call_tool(o.mcp_config.as_deref(), tool, args);
        std::fs::write(file, answer).unwrap();
    }
}
