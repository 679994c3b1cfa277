//! The Gemini command and decoder.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::config::AiCliConfig;
use crate::error::ErrorKind;
use crate::event::EventKind;
use crate::provider::{BinaryLocation, McpEndpoint};
use crate::replay;
use crate::task::TaskSpec;

fn provider() -> GeminiProvider {
    GeminiProvider::new(
        "gemini",
        AiCliConfig::builtin().unwrap().providers["gemini"].clone(),
    )
}

fn command(task: &TaskSpec, home: &Path, mcp: Option<&McpEndpoint>) -> CommandSpec {
    let binary = BinaryLocation::Path("/bin/gemini".into());
    let env = BTreeMap::from([("HOME".to_owned(), home.display().to_string())]);
    let ctx = LaunchContext {
        env: &env,
        task,
        binary: &binary,
        workdir: Path::new("/w"),
        private_dir: Path::new("/p"),
        mcp,
        budget_remaining_usd: None,
        is_root: false,
        search_path: None,
        in_container: false,
    };
    provider().command(&ctx).unwrap()
}

#[test]
fn the_prompt_goes_on_stdin_and_the_settings_into_the_runs_own_home() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".gemini")).unwrap();
    std::fs::write(
        home.path().join(".gemini/settings.json"),
        r#"{"ui": {"theme": "dark"}, // the user's own
            "tools": {"exclude": ["web_fetch"]}}"#,
    )
    .unwrap();
    let mut t = TaskSpec::new("-x the secret");
    t.max_turns = Some(3);
    t.resume_session_id = Some("0199-uuid".into());
    t.disallowed_tools = vec!["run_shell_command".into()];
    let ep = McpEndpoint {
        name: "aicli".into(),
        url: "http://127.0.0.1:4000/mcp".into(),
        token: "tok-123".into(),
        tools: vec![],
    };
    let c = command(&t, home.path(), Some(&ep));
    assert_eq!(
        c.args,
        [
            "--output-format",
            "stream-json",
            "--skip-trust",
            "--approval-mode",
            "auto_edit",
            "--resume",
            "0199-uuid"
        ]
    );
    assert_eq!(c.stdin.as_deref(), Some("-x the secret"));
    assert_eq!(c.env[HOME_ENV], "/p/gemini-home");
    let settings: serde_json::Value = serde_json::from_str(&c.files[0].contents).unwrap();
    assert_eq!(c.files[0].mode, 0o600);
    assert_eq!(settings["ui"]["theme"], "dark");
    assert_eq!(settings["model"]["maxSessionTurns"], 3);
    assert_eq!(
        settings["tools"]["exclude"],
        serde_json::json!(["web_fetch", "run_shell_command"])
    );
    assert_eq!(
        settings["mcpServers"]["aicli"]["headers"]["Authorization"],
        "Bearer tok-123"
    );
    assert!(
        !c.args
            .iter()
            .any(|a| a.contains("tok-123") || a.contains("secret"))
    );
}

#[test]
fn exit_codes_classify_a_run_without_a_result_and_no_exit_code_says_nothing() {
    let stdout = br#"{"type":"init","session_id":"s1","model":"gemini-2.5-flash"}
{"type":"message","role":"user","content":"hi"}
"#;
    let ctx = ParseContext::default();
    let r = |stderr: &str, exit| replay::replay(&provider(), stdout, stderr, exit, &ctx);
    assert_eq!(
        r("", ExitStatus::Code(41)).error_kind,
        Some(ErrorKind::Auth)
    );
    assert_eq!(
        r("Error resuming session: not found", ExitStatus::Code(42)).error_kind,
        Some(ErrorKind::InvalidResume)
    );
    assert_eq!(
        r("", ExitStatus::Code(53)).error_kind,
        Some(ErrorKind::MaxTurns)
    );
    assert_eq!(
        r("", ExitStatus::Code(55)).error_kind,
        Some(ErrorKind::Permission)
    );
    assert_eq!(
        r("", ExitStatus::Code(173)).error_kind,
        Some(ErrorKind::RateLimit)
    );
    assert_eq!(
        r(
            "ModelNotFoundError: Requested entity was not found.",
            ExitStatus::Code(1)
        )
        .error_kind,
        Some(ErrorKind::BadRequest)
    );
    let unknown = r("", ExitStatus::Unknown);
    assert_eq!(unknown.provider_data.get("exit_code_meaning"), None);
    let m = unknown.error.unwrap();
    assert!(!m.contains("signal") && !m.contains("exit code"), "{m}");
    let killed = r("", ExitStatus::Signal);
    assert_eq!(
        killed.provider_data["exit_code_meaning"],
        "killed by a signal"
    );
}

#[test]
fn the_answer_is_the_chunks_and_usage_comes_per_model_at_the_result() {
    let stdout = std::fs::read(format!(
        "{}/../fixtures/gemini/text.ndjson",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let (events, r) = replay::replay_events(
        &provider(),
        &stdout,
        "",
        ExitStatus::Code(0),
        &ParseContext::default(),
    );
    assert_eq!(r.response, "Hello from the fake Gemini API.");
    let models: Vec<Option<String>> = events
        .iter()
        .filter_map(|e| {
            let EventKind::Usage { model, .. } = &e.kind else {
                return None;
            };
            Some(model.clone())
        })
        .collect();
    assert_eq!(
        models,
        [
            Some("gemini-3.5-flash-lite".to_owned()),
            Some("gemini-3.8-flash".to_owned()),
            None
        ],
        "per model, then the requests the stream counted"
    );
    assert_eq!(r.canonical_usage.request_count, 2);
    assert_eq!(r.usage_by_model.len(), 2);
}

/// Gemini turns every API 404 into a `ModelNotFoundError`: its `result` line says only
/// `error.type` `unknown` and the message, exit 1; the class and the 404 are on stderr
/// (issue 21 §4, the shape of `fixtures/gemini/model_not_found_entity`).
#[test]
fn a_404_gemini_reports_only_on_stderr_is_bad_request() {
    let stdout = br#"{"type":"init","session_id":"s1","model":"gemini-nope"}
{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: Requested entity was not found.]"}}
"#;
    let stderr = "Warning: 256-color support not detected.\n\
        Error when talking to Gemini API Full report available at: /tmp/gemini-client-error-Turn.run.json ModelNotFoundError: Requested entity was not found.\n    \
        at classifyGoogleError (file:///x/chunk.js:307292:12)\n    \
        at async main (file:///x/gemini.js:17627:5) {\n  code: 404\n}\n";
    let ctx = ParseContext::default();
    let (events, r) = replay::replay_events(&provider(), stdout, stderr, ExitStatus::Code(1), &ctx);
    assert_eq!(r.error_kind, Some(ErrorKind::BadRequest));
    assert_eq!(
        r.error.as_deref(),
        Some("[API Error: Requested entity was not found.]")
    );
    assert_eq!(r.provider_data["http_status"], 404);
    assert_eq!(
        r.provider_data["stderr_error"],
        serde_json::json!({"class": "ModelNotFoundError", "http_status": 404})
    );
    // Live, before stderr is known, the words of the message say it.
    let live = events.iter().find_map(|e| match &e.kind {
        EventKind::Final { error_kind, .. } => Some(*error_kind),
        _ => None,
    });
    assert_eq!(live, Some(Some(ErrorKind::BadRequest)));
    // Parsed without stderr or exit code (`aicli parse FILE`), the words too; and the
    // Gemini API's own wording of the same 404.
    let bare = replay::replay(&provider(), stdout, "", ExitStatus::Unknown, &ctx);
    assert_eq!(bare.error_kind, Some(ErrorKind::BadRequest));
    assert_eq!(bare.provider_data.get("stderr_error"), None);
    let api_words = br#"{"type":"init","session_id":"s1","model":"gemini-nope"}
{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: models/gemini-nope is not found for API version v1beta, or is not supported for generateContent.]"}}
"#;
    let r = replay::replay(&provider(), api_words, "", ExitStatus::Unknown, &ctx);
    assert_eq!(r.error_kind, Some(ErrorKind::BadRequest));
}

/// The structured fields decide before stderr: a quoted 429 stays a rate limit whatever
/// stderr reports, and a report's status counts only when its class says nothing.
#[test]
fn the_result_lines_fields_come_before_the_error_on_stderr() {
    let stdout = br#"{"type":"init","session_id":"s1","model":"gemini-2.5-flash"}
{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":429,\"message\":\"Resource has been exhausted\",\"status\":\"RESOURCE_EXHAUSTED\"}}]"}}
"#;
    let ctx = ParseContext::default();
    let r = replay::replay(
        &provider(),
        stdout,
        "ModelNotFoundError: nope\n  code: 404\n}\n",
        ExitStatus::Code(173),
        &ctx,
    );
    assert_eq!(r.error_kind, Some(ErrorKind::RateLimit));
    assert_eq!(r.provider_data["http_status"], 429);
    assert_eq!(r.provider_data.get("stderr_error"), None);

    let unknown = br#"{"type":"init","session_id":"s1","model":"gemini-2.5-flash"}
{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: something odd]"}}
"#;
    let stderr = "_GaxiosError: something odd\n    at x (file:///a.js:1:1) {\n  status: 403,\n}\n";
    let r = replay::replay(&provider(), unknown, stderr, ExitStatus::Code(1), &ctx);
    assert_eq!(r.error_kind, Some(ErrorKind::Permission));
    assert_eq!(
        r.provider_data["stderr_error"],
        serde_json::json!({"class": "_GaxiosError", "http_status": 403})
    );
    // No report on stderr: nothing is made up.
    let r = replay::replay(
        &provider(),
        unknown,
        "Warning: 256-color support not detected.\n",
        ExitStatus::Code(1),
        &ctx,
    );
    assert_eq!(r.error_kind, Some(ErrorKind::Unknown));
}

#[test]
fn the_error_stderr_reports_is_the_last_one_with_its_own_status() {
    use super::classify::Thrown;
    let thrown = |class: &str, http_status| Thrown {
        class: class.to_owned(),
        http_status,
    };
    assert_eq!(Thrown::from_stderr(""), None);
    assert_eq!(
        Thrown::from_stderr("Ripgrep is not available.\n    at classifyGoogleError (x:1:1)\n"),
        None,
        "a stack frame names no error"
    );
    let two = "Attempt 1 failed with status 429. Retrying with backoff... _ApiError: {\"error\":{}}\n  \
        at throwErrorIfNotOK (x:1:1) {\n  status: 429\n}\n\
        Error when talking to Gemini API Full report available at: /tmp/r.json ModelNotFoundError: gone\n  \
        at classifyGoogleError (x:1:1) {\n  code: 404\n}\n";
    assert_eq!(
        Thrown::from_stderr(two),
        Some(thrown("ModelNotFoundError", Some(404)))
    );
    // A number after the report's closing brace is not its field; 200 is no error.
    assert_eq!(
        Thrown::from_stderr("TypeError: x is undefined\n}\ncode: 404\n"),
        Some(thrown("TypeError", None))
    );
    assert_eq!(
        Thrown::from_stderr("_ApiError: ok\n  code: 200\n}\n"),
        Some(thrown("_ApiError", None))
    );
}
