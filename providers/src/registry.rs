//! [`ProviderRegistry`]: provider names -> `Arc<dyn AiCliProvider>`.
//!
//! Two levels: *adapters* are implementations (`claude`, `codex`, `gemini`, or any a
//! user registers with [`ProviderRegistry::register_adapter`]); *providers* are config
//! entries bound to an adapter (`claude`, or `claude-sonnet` with `"adapter": "claude"`).
//! [`ProviderRegistry::register`] adds a ready-made provider directly.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{AiCliConfig, ProviderConfig};
use crate::error::ConfigError;
use crate::provider::AiCliProvider;

/// Builds a provider called `name` from its config entry.
pub type AdapterFactory =
    Arc<dyn Fn(&str, &ProviderConfig) -> Arc<dyn AiCliProvider> + Send + Sync>;

/// Provider names -> providers, and adapter names -> factories.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    adapters: BTreeMap<String, AdapterFactory>,
    providers: BTreeMap<String, Arc<dyn AiCliProvider>>,
    default_provider: Option<String>,
}

impl std::fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderRegistry")
            .field("adapters", &self.adapters.keys().collect::<Vec<_>>())
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .field("default_provider", &self.default_provider)
            .finish()
    }
}

impl ProviderRegistry {
    /// An empty registry (no adapters, no providers).
    pub fn empty() -> ProviderRegistry {
        ProviderRegistry::default()
    }

    /// A registry with the built-in adapters (claude, codex, gemini, acp) and no
    /// providers.
    pub fn with_builtin_adapters() -> ProviderRegistry {
        let mut r = ProviderRegistry::empty();
        r.register_adapter("claude", |name, cfg| {
            Arc::new(crate::claude::ClaudeProvider::new(name, cfg.clone()))
        });
        r.register_adapter("codex", |name, cfg| {
            Arc::new(crate::codex::CodexProvider::new(name, cfg.clone()))
        });
        r.register_adapter("gemini", |name, cfg| {
            Arc::new(crate::gemini::GeminiProvider::new(name, cfg.clone()))
        });
        r.register_adapter("acp", |name, cfg| {
            Arc::new(crate::acp::AcpProvider::new(name, cfg.clone()))
        });
        r
    }

    /// The built-in adapters, with a provider for every entry of `config`.
    pub fn from_config(config: &AiCliConfig) -> Result<ProviderRegistry, ConfigError> {
        let mut r = ProviderRegistry::with_builtin_adapters();
        r.configure(config)?;
        Ok(r)
    }

    /// Adds an adapter (an implementation config entries can name).
    pub fn register_adapter<F>(&mut self, adapter: impl Into<String>, factory: F) -> &mut Self
    where
        F: Fn(&str, &ProviderConfig) -> Arc<dyn AiCliProvider> + Send + Sync + 'static,
    {
        self.adapters.insert(adapter.into(), Arc::new(factory));
        self
    }

    /// Adds (or replaces) a ready-made provider under its own name.
    pub fn register(&mut self, provider: Arc<dyn AiCliProvider>) -> &mut Self {
        self.providers.insert(provider.name().to_owned(), provider);
        self
    }

    /// Builds a provider for every entry of `config` through its adapter (replacing
    /// providers of the same name) and takes its default provider.
    pub fn configure(&mut self, config: &AiCliConfig) -> Result<&mut Self, ConfigError> {
        let mut built = Vec::with_capacity(config.providers.len());
        for (name, entry) in &config.providers {
            let adapter = entry.adapter_name(name);
            let factory =
                self.adapters
                    .get(adapter)
                    .ok_or_else(|| ConfigError::UnknownAdapter {
                        origin: "config".to_owned(),
                        provider: name.clone(),
                        adapter: adapter.to_owned(),
                        known: self.adapters.keys().cloned().collect(),
                    })?;
            built.push(factory(name, entry));
        }
        for p in built {
            self.register(p);
        }
        self.default_provider = Some(config.default_provider.clone());
        Ok(self)
    }

    /// The provider called `name`, or an error listing the known ones.
    pub fn get(&self, name: &str) -> Result<Arc<dyn AiCliProvider>, ConfigError> {
        self.providers
            .get(name)
            .cloned()
            .ok_or_else(|| ConfigError::UnknownProvider {
                name: name.to_owned(),
                known: self.names(),
            })
    }

    /// `name`, or the default provider when `None`.
    pub fn get_or_default(
        &self,
        name: Option<&str>,
    ) -> Result<Arc<dyn AiCliProvider>, ConfigError> {
        match name.or(self.default_provider.as_deref()) {
            Some(n) => self.get(n),
            None => Err(ConfigError::UnknownProvider {
                name: "(none given and no default_provider)".to_owned(),
                known: self.names(),
            }),
        }
    }

    /// Provider names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }

    /// Adapter names, sorted.
    pub fn adapter_names(&self) -> Vec<String> {
        self.adapters.keys().cloned().collect()
    }

    /// All providers, by name.
    pub fn providers(&self) -> impl Iterator<Item = &Arc<dyn AiCliProvider>> {
        self.providers.values()
    }

    /// The default provider's name.
    pub fn default_provider(&self) -> Option<&str> {
        self.default_provider.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_config_gives_the_three_clis_and_three_acp_agents() {
        let cfg = AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}"));
        let r = ProviderRegistry::from_config(&cfg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.names(),
            [
                "claude",
                "claude-acp",
                "codex",
                "codex-acp",
                "gemini",
                "gemini-acp"
            ]
        );
        assert_eq!(
            r.get_or_default(None).map(|p| p.name().to_owned()).ok(),
            Some("claude".to_owned())
        );
        let err = r
            .get("clade")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "unknown provider 'clade'; known providers: claude, claude-acp, codex, codex-acp, gemini, gemini-acp"
        );
    }

    #[test]
    fn an_entry_with_an_unknown_adapter_is_an_error_naming_the_known_ones() {
        let cfg = AiCliConfig::from_user_json(
            r#"{"providers": {"acme": {"adapter": "acme", "package": "acme-cli", "binary_name": "acme"}}}"#,
            "u.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let err = ProviderRegistry::from_config(&cfg)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(
                r#"at providers.acme.adapter: unknown adapter "acme" (known: acp, claude, codex, gemini)"#
            ),
            "{err}"
        );
    }

    #[test]
    fn the_builtin_adapters_are_the_ones_config_errors_list() {
        let r = ProviderRegistry::with_builtin_adapters();
        let mut listed = crate::config::BUILTIN_ADAPTERS.map(str::to_owned).to_vec();
        listed.sort();
        assert_eq!(r.adapters.keys().cloned().collect::<Vec<_>>(), listed);
    }

    #[test]
    fn a_derived_entry_uses_its_adapter() {
        let cfg = AiCliConfig::from_user_json(
            r#"{"providers": {"claude-sonnet": {"adapter": "claude", "default_model": "sonnet"}}}"#,
            "u.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let r = ProviderRegistry::from_config(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let p = r.get("claude-sonnet").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.name(), "claude-sonnet");
        assert_eq!(p.binary_name(), "claude");
    }
}
