//! Canonical token usage and cost, with one meaning across vendors.
//!
//! - `input_tokens`: input tokens NOT read from cache (Claude reports it this way; Codex
//!   and Gemini include cached input in their input count, so their adapters subtract).
//! - `cache_read`: input tokens served from the prompt cache.
//! - `cache_write`: input tokens written to the cache (Claude's cache creation).
//! - `output_tokens`: every output token billed, reasoning included.
//! - `reasoning_tokens`: the reasoning ("thinking") part of `output_tokens`.
//! - `request_count`: model API requests the run made, where known.
//!
//! All figures are per run: a resumed run reports what that run used, even where the CLI
//! reports session-cumulative figures.

use std::collections::BTreeMap;
use std::ops::{Add, AddAssign};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Token usage of one run, in the canonical meaning described in the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CanonicalUsage {
    /// Input tokens not read from cache.
    pub input_tokens: u64,
    /// Every output token billed, reasoning included.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
    /// The reasoning part of `output_tokens`.
    pub reasoning_tokens: u64,
    /// Model API requests made.
    pub request_count: u64,
}

impl CanonicalUsage {
    /// All input tokens, cached or not.
    pub fn total_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        *self == CanonicalUsage::default()
    }

    /// `self - earlier`, counter by counter, never below zero: the usage of the last run
    /// of a session when the CLI reports figures cumulative over the session.
    pub fn saturating_sub(&self, earlier: &CanonicalUsage) -> CanonicalUsage {
        CanonicalUsage {
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            cache_read: self.cache_read.saturating_sub(earlier.cache_read),
            cache_write: self.cache_write.saturating_sub(earlier.cache_write),
            reasoning_tokens: self
                .reasoning_tokens
                .saturating_sub(earlier.reasoning_tokens),
            request_count: self.request_count.saturating_sub(earlier.request_count),
        }
    }
}

impl Add for CanonicalUsage {
    type Output = CanonicalUsage;
    fn add(mut self, rhs: CanonicalUsage) -> CanonicalUsage {
        self += rhs;
        self
    }
}

impl AddAssign for CanonicalUsage {
    /// Saturating: a CLI's absurd counter never overflows the sum.
    fn add_assign(&mut self, rhs: CanonicalUsage) {
        self.input_tokens = self.input_tokens.saturating_add(rhs.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(rhs.output_tokens);
        self.cache_read = self.cache_read.saturating_add(rhs.cache_read);
        self.cache_write = self.cache_write.saturating_add(rhs.cache_write);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(rhs.reasoning_tokens);
        self.request_count = self.request_count.saturating_add(rhs.request_count);
    }
}

/// Where a `cost_usd` figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    /// The CLI reported it (Claude's `total_cost_usd` / `costUSD`).
    Reported,
    /// Estimated from the config's price table and the canonical usage.
    Estimated,
    /// Neither: no reported figure and no price for the model. Never treat as 0.
    Unknown,
}

/// Prices of one model, in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Uncached input.
    pub input: f64,
    /// Input read from cache; defaults to `input` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// Input written to cache; defaults to `input` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    /// Output, reasoning included.
    pub output: f64,
}

impl ModelPrice {
    /// The cost of `usage` at these prices.
    pub fn cost(&self, usage: &CanonicalUsage) -> f64 {
        const M: f64 = 1_000_000.0;
        (usage.input_tokens as f64 * self.input
            + usage.cache_read as f64 * self.cached_input.unwrap_or(self.input)
            + usage.cache_write as f64 * self.cache_write.unwrap_or(self.input)
            + usage.output_tokens as f64 * self.output)
            / M
    }
}

/// Model name -> prices. Lookup is exact first, then the longest configured name that is
/// a prefix of the asked model (so `gpt-5.5` prices `gpt-5.5-2026-01-01`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct PriceTable(pub BTreeMap<String, ModelPrice>);

impl PriceTable {
    /// The prices of `model`, if the table has them.
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        if let Some(p) = self.0.get(model) {
            return Some(p);
        }
        self.0
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| p)
    }

    /// Estimated cost of per-model usage; `None` if any model with non-zero usage has no
    /// price (a partial sum would under-report, which is worse than "unknown").
    pub fn estimate<'a>(
        &self,
        per_model: impl IntoIterator<Item = (&'a str, &'a CanonicalUsage)>,
    ) -> Option<f64> {
        let mut total = 0.0;
        for (model, usage) in per_model {
            if usage.is_zero() {
                continue;
            }
            total += self.get(model)?.cost(usage);
        }
        Some(total)
    }

    /// [`PriceTable::estimate`] of a run: its per-model split, or, without one, its
    /// whole `total` as `model`'s.
    pub fn estimate_run(
        &self,
        model: Option<&str>,
        by_model: &BTreeMap<String, CanonicalUsage>,
        total: &CanonicalUsage,
    ) -> Option<f64> {
        if by_model.is_empty() {
            self.estimate([(model.unwrap_or_default(), total)])
        } else {
            self.estimate(by_model.iter().map(|(m, u)| (m.as_str(), u)))
        }
    }
}

/// A cost figure and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Cost {
    /// USD, or `None` when unknown.
    pub cost_usd: Option<f64>,
    /// Where the figure came from.
    pub cost_source: CostSource,
}

impl Cost {
    /// A figure the CLI reported.
    pub fn reported(usd: f64) -> Cost {
        Cost {
            cost_usd: Some(usd),
            cost_source: CostSource::Reported,
        }
    }

    /// An estimate from a price table, or unknown when there was none.
    pub fn estimated(usd: Option<f64>) -> Cost {
        match usd {
            Some(v) => Cost {
                cost_usd: Some(v),
                cost_source: CostSource::Estimated,
            },
            None => Cost::unknown(),
        }
    }

    /// No figure.
    pub fn unknown() -> Cost {
        Cost {
            cost_usd: None,
            cost_source: CostSource::Unknown,
        }
    }
}

/// A run's spend as its stream reports it, while it runs: the sum of its
/// [`EventKind::Usage`](crate::EventKind::Usage) increments, each priced at the price of
/// the model that used the tokens (the run's model for an increment that names none).
///
/// The one place an increment is priced: the engine's live budget accounting and the
/// progress display both add the stream's increments here. What it gives is an
/// estimate at the config's prices; the run's result has the final figure (the CLI's
/// own where it reports one).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LiveSpend {
    usage: CanonicalUsage,
    priced_usd: f64,
    unpriced: bool,
}

impl LiveSpend {
    /// Adds one increment used by `model` (or, when it names none, by `run_model`),
    /// priced from `prices`; returns its cost, `None` when no price covers the model.
    pub fn add(
        &mut self,
        prices: &PriceTable,
        model: Option<&str>,
        run_model: Option<&str>,
        usage: &CanonicalUsage,
    ) -> Option<f64> {
        self.usage += *usage;
        if usage.is_zero() {
            return Some(0.0);
        }
        let price = model
            .filter(|m| !m.is_empty())
            .or(run_model.filter(|m| !m.is_empty()))
            .and_then(|m| prices.get(m));
        match price {
            Some(p) => {
                let c = p.cost(usage);
                if c.is_finite() {
                    self.priced_usd += c;
                }
                Some(c)
            }
            None => {
                self.unpriced = true;
                None
            }
        }
    }

    /// The tokens so far.
    pub fn usage(&self) -> CanonicalUsage {
        self.usage
    }

    /// The cost of the tokens that have a price, USD (a lower bound when
    /// [`LiveSpend::has_unpriced`]).
    pub fn priced_usd(&self) -> f64 {
        self.priced_usd
    }

    /// Whether some tokens used a model the price table does not cover.
    pub fn has_unpriced(&self) -> bool {
        self.unpriced
    }

    /// The estimate as a [`Cost`]: estimated when every token had a price, unknown when
    /// some had none (a partial sum would under-report), and an estimated 0 before any
    /// usage was reported.
    pub fn cost(&self) -> Cost {
        if self.unpriced {
            Cost::unknown()
        } else {
            Cost::estimated(Some(self.priced_usd))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(i: u64, o: u64, cr: u64, cw: u64) -> CanonicalUsage {
        CanonicalUsage {
            input_tokens: i,
            output_tokens: o,
            cache_read: cr,
            cache_write: cw,
            reasoning_tokens: 0,
            request_count: 1,
        }
    }

    #[test]
    fn price_applies_each_rate() {
        let p = ModelPrice {
            input: 5.0,
            cached_input: Some(0.5),
            cache_write: Some(6.25),
            output: 25.0,
        };
        // 12 * 5 + 7 * 25 + 56 * 0.5 + 34 * 6.25 = 475.5 per million.
        let c = p.cost(&usage(12, 7, 56, 34));
        assert!((c - 0.0004755).abs() < 1e-12, "{c}");
        let flat = ModelPrice {
            input: 1.0,
            cached_input: None,
            cache_write: None,
            output: 2.0,
        };
        assert!((flat.cost(&usage(1_000_000, 1_000_000, 1_000_000, 0)) - 4.0).abs() < 1e-9);
    }

    #[test]
    fn lookup_prefers_exact_then_longest_prefix() {
        let mut t = BTreeMap::new();
        let p = |x: f64| ModelPrice {
            input: x,
            cached_input: None,
            cache_write: None,
            output: x,
        };
        t.insert("gpt-5".to_owned(), p(1.0));
        t.insert("gpt-5.5".to_owned(), p(2.0));
        let t = PriceTable(t);
        assert_eq!(t.get("gpt-5.5").map(|p| p.input), Some(2.0));
        assert_eq!(t.get("gpt-5.5-mini").map(|p| p.input), Some(2.0));
        assert_eq!(t.get("gpt-5-nano").map(|p| p.input), Some(1.0));
        assert_eq!(t.get("o3"), None);
    }

    #[test]
    fn estimate_is_unknown_when_a_used_model_has_no_price() {
        let mut t = BTreeMap::new();
        t.insert(
            "a".to_owned(),
            ModelPrice {
                input: 1.0,
                cached_input: None,
                cache_write: None,
                output: 1.0,
            },
        );
        let t = PriceTable(t);
        let u = usage(1_000_000, 0, 0, 0);
        let zero = CanonicalUsage::default();
        assert_eq!(t.estimate([("a", &u), ("b", &zero)]), Some(1.0));
        assert_eq!(t.estimate([("a", &u), ("b", &u)]), None);
    }

    #[test]
    fn saturating_sub_gives_the_last_run_of_a_cumulative_session() {
        let a = usage(120, 9, 30, 0);
        let b = usage(240, 18, 60, 0);
        let mut expect = usage(120, 9, 30, 0);
        expect.request_count = 0;
        assert_eq!(b.saturating_sub(&a), expect);
        assert_eq!(a.saturating_sub(&b), CanonicalUsage::default());
    }

    #[test]
    fn live_spend_prices_each_increment_at_its_model_else_the_runs() {
        let mut t = BTreeMap::new();
        let p = |i: f64, o: f64| ModelPrice {
            input: i,
            cached_input: None,
            cache_write: None,
            output: o,
        };
        t.insert("big".to_owned(), p(10.0, 20.0));
        t.insert("small".to_owned(), p(1.0, 2.0));
        let t = PriceTable(t);
        let mut live = LiveSpend::default();
        assert_eq!(live.cost(), Cost::estimated(Some(0.0)));
        // An increment naming its model: priced at it, not at the run's.
        let c = live.add(&t, Some("small"), Some("big"), &usage(1_000_000, 0, 0, 0));
        assert_eq!(c, Some(1.0));
        // One naming none: the run's model.
        let c = live.add(&t, None, Some("big"), &usage(0, 1_000_000, 0, 0));
        assert_eq!(c, Some(20.0));
        assert!((live.priced_usd() - 21.0).abs() < 1e-9);
        assert_eq!(live.usage().total_input(), 1_000_000);
        assert_eq!(live.usage().request_count, 2);
        assert!(!live.has_unpriced());
        // A model without a price: the estimate becomes unknown, the priced part stays.
        assert_eq!(live.add(&t, Some("other"), None, &usage(5, 0, 0, 0)), None);
        assert!(live.has_unpriced());
        assert_eq!(live.cost(), Cost::unknown());
        assert!((live.priced_usd() - 21.0).abs() < 1e-9);
    }
}
