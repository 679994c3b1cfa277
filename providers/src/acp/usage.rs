//! Token usage and cost over ACP.
//!
//! - Tokens come with the prompt's response, per turn (so per run: aicli sends one
//!   prompt per process), from the first of: `_meta.quota.model_usage` (per model; it
//!   includes side calls such as claude's session-title request, which `usage` leaves
//!   out), `usage` (`PromptResponse.usage`, unstable in ACP), `_meta.quota.token_count`.
//!   ACP's `inputTokens` excludes cache reads (claude-agent-acp, codex-acp, OpenCode);
//!   `outputTokens` includes reasoning (`thoughtTokens` is its reasoning part), as the
//!   canonical figures do. Gemini's `_meta.quota` gives only `input_tokens` (cache
//!   included, no figure for it) and `output_tokens` (thinking not included, no figure):
//!   its estimate is a little high on input and low on output.
//! - Cost comes only in `usage_update.cost` (stable ACP), which ACP defines as the
//!   session's cumulative cost (claude-agent-acp: Claude Code's `total_cost_usd`, which
//!   stays cumulative across `session/resume`): a run's cost is the last figure minus
//!   what the resumed session had reported ([`crate::SessionTotals::cost_usd`]).
//! - `usage_update.used` / `size` are the context window's fill, not spend: kept in
//!   `provider_data.acp.context`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::wire::at;
use crate::usage::CanonicalUsage;

/// The model name Gemini's router reports for some calls (`auto`): counted under the
/// run's model when that is known.
pub const ROUTER_MODEL: &str = "auto";

/// The first figure of `v` among `keys`.
fn num(v: &Value, keys: &[&str]) -> u64 {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_u64))
        .unwrap_or(0)
}

/// A `token_count` / `usage` object in the canonical meaning (camelCase or snake_case
/// field names, as the agents write them).
pub fn tokens(v: &Value) -> CanonicalUsage {
    CanonicalUsage {
        input_tokens: num(v, &["inputTokens", "input_tokens"]),
        output_tokens: num(v, &["outputTokens", "output_tokens"]),
        cache_read: num(
            v,
            &[
                "cachedReadTokens",
                "cachedInputTokens",
                "cached_read_tokens",
                "cached_input_tokens",
            ],
        ),
        cache_write: num(
            v,
            &[
                "cachedWriteTokens",
                "cacheWriteInputTokens",
                "cached_write_tokens",
                "cache_write_input_tokens",
            ],
        ),
        reasoning_tokens: num(
            v,
            &[
                "thoughtTokens",
                "reasoningOutputTokens",
                "thought_tokens",
                "reasoning_output_tokens",
            ],
        ),
        request_count: 0,
    }
}

/// Where a turn's token figures came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `_meta.quota.model_usage`.
    ModelUsage,
    /// `PromptResponse.usage`.
    Usage,
    /// `_meta.quota.token_count`.
    TokenCount,
}

impl Source {
    /// The name kept in `provider_data`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::ModelUsage => "_meta.quota.model_usage",
            Source::Usage => "usage",
            Source::TokenCount => "_meta.quota.token_count",
        }
    }
}

/// A turn's usage by model (`None`: no model named) from a prompt response `result`,
/// and where it came from; `None` when the response carries none (or `usage: null`).
/// `model` is the run's model, for the router's `auto` rows.
pub fn turn_usage(
    result: &Value,
    model: Option<&str>,
) -> Option<(BTreeMap<Option<String>, CanonicalUsage>, Source)> {
    let quota = at(result, &["_meta", "quota"]);
    if let Some(rows) = quota
        .and_then(|q| q.get("model_usage"))
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
    {
        let mut out: BTreeMap<Option<String>, CanonicalUsage> = BTreeMap::new();
        for row in rows {
            let name = row.get("model").and_then(Value::as_str);
            let name = match (name, model) {
                (Some(ROUTER_MODEL), Some(m)) => Some(m.to_owned()),
                (n, _) => n.map(str::to_owned),
            };
            let t = row.get("token_count").map(tokens).unwrap_or_default();
            *out.entry(name).or_default() += t;
        }
        return Some((out, Source::ModelUsage));
    }
    if let Some(u) = result.get("usage").filter(|u| u.is_object()) {
        return Some((BTreeMap::from([(None, tokens(u))]), Source::Usage));
    }
    quota
        .and_then(|q| q.get("token_count"))
        .filter(|t| t.is_object())
        .map(|t| (BTreeMap::from([(None, tokens(t))]), Source::TokenCount))
}

/// The run's cost from the session's cumulative figure `last` and the figure the
/// resumed session had reported (`prior`): their difference, or `last` when there was
/// none (or the agent's counter went back, a new process of its own).
pub fn run_cost(last: f64, prior: Option<f64>) -> f64 {
    match prior {
        Some(p) if p <= last => last - p,
        Some(_) | None => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn model_usage_wins_then_usage_then_token_count() {
        let claude = json!({"stopReason":"end_turn","usage":{"inputTokens":24,"outputTokens":14,"cachedReadTokens":112,"cachedWriteTokens":68,"totalTokens":218},"_meta":{"quota":{"token_count":{"totalTokens":218,"inputTokens":24,"cachedInputTokens":112,"cachedWriteTokens":68,"outputTokens":14,"reasoningOutputTokens":0},"model_usage":[{"model":"claude-opus-5-5","token_count":{"totalTokens":230,"inputTokens":30,"cachedInputTokens":112,"cachedWriteTokens":68,"outputTokens":20,"reasoningOutputTokens":0}}]}}});
        let (u, src) = turn_usage(&claude, None).unwrap();
        assert_eq!(src, Source::ModelUsage);
        assert_eq!(
            u[&Some("claude-opus-5-5".to_owned())],
            CanonicalUsage {
                input_tokens: 30,
                output_tokens: 20,
                cache_read: 112,
                cache_write: 68,
                reasoning_tokens: 0,
                request_count: 0
            }
        );
        let opencode = json!({"stopReason":"end_turn","usage":{"inputTokens":12,"outputTokens":7,"totalTokens":109,"cachedReadTokens":56,"cachedWriteTokens":34},"_meta":{}});
        let (u, src) = turn_usage(&opencode, None).unwrap();
        assert_eq!(src, Source::Usage);
        assert_eq!(u[&None].total_input(), 102);
        let gemini = json!({"stopReason":"end_turn","_meta":{"quota":{"token_count":{"input_tokens":400,"output_tokens":22},"model_usage":[{"model":"gemini-3.8-flash","token_count":{"input_tokens":200,"output_tokens":11}},{"model":"auto","token_count":{"input_tokens":200,"output_tokens":11}}]}}});
        let (u, _) = turn_usage(&gemini, Some("gemini-3.8-flash")).unwrap();
        assert_eq!(u.len(), 1, "the router's row counts under the run's model");
        assert_eq!(u[&Some("gemini-3.8-flash".to_owned())].input_tokens, 400);
        let codex_error = json!({"stopReason":"end_turn","usage":null,"_meta":{"quota":{"token_count":null,"model_usage":[]}}});
        assert_eq!(turn_usage(&codex_error, None), None);
        assert!((run_cost(0.0011076, Some(0.0007384)) - 0.0003692).abs() < 1e-12);
        assert_eq!(run_cost(0.2, Some(0.5)), 0.2);
    }
}
