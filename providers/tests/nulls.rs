//! A `null` where a CLI normally prints a number or a flag must not cost the run its
//! final event: the value reads as absent (its default) and the rest of the line counts.

use aicli_providers::{AiCliConfig, ExitStatus, ParseContext, ProviderRegistry, replay};

fn fixture(provider: &str, scenario: &str) -> String {
    let p = format!(
        "{}/../fixtures/{provider}/{scenario}.ndjson",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn run(provider: &str, stream: &str, model: Option<&str>) -> aicli_providers::SessionResult {
    let reg =
        ProviderRegistry::from_config(&AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let p = reg.get(provider).unwrap_or_else(|e| panic!("{e}"));
    let ctx = ParseContext {
        model: model.map(str::to_owned),
        prior: None,
        answered: None,
    };
    replay::replay(p.as_ref(), stream.as_bytes(), "", ExitStatus::Code(0), &ctx)
}

#[test]
fn claude_result_with_null_token_counts_still_finishes_the_run() {
    let s = fixture("claude", "text")
        .replace("\"input_tokens\":12,", "\"input_tokens\":null,")
        .replace("\"inputTokens\":12,", "\"inputTokens\":null,");
    assert!(s.contains("\"input_tokens\":null") && s.contains("\"inputTokens\":null"));
    let r = run("claude", &s, None);
    assert!(r.success, "{r:?}");
    assert_eq!(r.protocol_errors, 0);
    assert_eq!(r.canonical_usage.input_tokens, 0);
    assert_eq!(r.canonical_usage.output_tokens, 7);
    assert_eq!(r.cost_usd, Some(0.0003692));
}

#[test]
fn codex_turn_completed_with_a_null_count_still_finishes_the_run() {
    let s = fixture("codex", "text")
        .replace("\"cached_input_tokens\":30", "\"cached_input_tokens\":null");
    assert!(s.contains("\"cached_input_tokens\":null"));
    let r = run("codex", &s, Some("gpt-5.5"));
    assert!(r.success, "{r:?}");
    assert_eq!(r.protocol_errors, 0);
    assert_eq!(r.canonical_usage.cache_read, 0);
    assert_eq!(r.canonical_usage.input_tokens, 120);
}

#[test]
fn gemini_result_with_null_stats_still_finishes_the_run() {
    let s = fixture("gemini", "text").replacen("\"cached\":100", "\"cached\":null", 1);
    assert!(s.contains("\"cached\":null"));
    let r = run("gemini", &s, None);
    assert!(r.success, "{r:?}");
    assert_eq!(r.protocol_errors, 0);
    assert_eq!(r.response, "Hello from the fake Gemini API.");
}
