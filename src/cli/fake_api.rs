//! The embedded fake model APIs (`aicli-testkit`) as a run target: `aicli demo` and
//! `--fake-api` point the real CLIs at them, so aicli can be seen working offline and
//! without an API key.
//!
//! [`FakeApis::start`] starts one fake per vendor on a given address (loopback here; a
//! container runner binds the Docker bridge), [`FakeApis::wire`] rewrites a config so
//! that every provider whose adapter has a fake talks to it (arguments and default
//! model in the provider entries) and returns the rest of the wiring ([`FakeWiring`]: the
//! variables and the home files, e.g. Gemini's `settings.json`). The CLIs then run with
//! [`FakeWiring::env`] as their whole environment, with a `HOME` of their own, so
//! nothing of the user's own logins or settings is read or touched.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use aicli_providers::{AiCliConfig, ProviderConfig};
use aicli_testkit::{FakeApi, FakeApiError, HomeFile, Script, Vendor, WiringOptions};

/// The model a provider runs with against a fake when its config names none: Codex
/// `gpt-5.5` (its default model speaks "code mode", which the fake does not), Gemini
/// `gemini-2.5-flash` (no router call first). Claude keeps its own default.
pub fn default_model(vendor: Vendor) -> Option<&'static str> {
    match vendor {
        Vendor::Anthropic => None,
        Vendor::OpenAi => Some("gpt-5.5"),
        Vendor::Gemini => Some("gemini-2.5-flash"),
    }
}

/// The vendor whose fake serves provider `name` (by its adapter; an ACP agent by its
/// `acp.model_api`), if any.
pub fn vendor_of(name: &str, config: &ProviderConfig) -> Option<Vendor> {
    match config.adapter_name(name) {
        ACP_ADAPTER => config
            .acp
            .as_ref()?
            .model_api
            .as_deref()
            .and_then(Vendor::parse),
        adapter => Vendor::parse(adapter),
    }
}

/// The adapter name of ACP agents.
const ACP_ADAPTER: &str = "acp";

/// Running fakes, one per vendor; dropping them stops them.
#[derive(Debug)]
pub struct FakeApis {
    apis: Vec<FakeApi>,
}

/// What [`FakeApis::wire`] could not put in the config: the CLIs' environment variables
/// and the files their `HOME` needs.
#[derive(Debug, Clone, Default)]
pub struct FakeWiring {
    /// Variables every CLI run gets (keys, base URLs, telemetry off), all vendors merged
    /// (their names do not overlap).
    pub env: BTreeMap<String, String>,
    /// Files to write under the CLIs' `HOME`.
    pub home_files: Vec<HomeFile>,
    /// The providers that were wired, with the URL of their fake.
    pub providers: Vec<(String, String)>,
}

impl FakeApis {
    /// Starts a fake for each of `vendors` on `bind` (ephemeral ports), each answering
    /// `script(vendor)`.
    pub async fn start(
        bind: IpAddr,
        vendors: &[Vendor],
        script: impl Fn(Vendor) -> Script,
    ) -> Result<FakeApis, FakeApiError> {
        let mut apis = Vec::new();
        for v in vendors {
            if apis.iter().any(|a: &FakeApi| a.vendor() == *v) {
                continue;
            }
            let api = FakeApi::start_at(*v, script(*v), SocketAddr::new(bind, 0)).await?;
            // Every task's conversation follows the whole script, not the first alone.
            api.per_conversation();
            apis.push(api);
        }
        Ok(FakeApis { apis })
    }

    /// Starts a fake on 127.0.0.1 for every vendor the config's providers use.
    pub async fn start_for(
        config: &AiCliConfig,
        script: impl Fn(Vendor) -> Script,
    ) -> Result<FakeApis, FakeApiError> {
        let vendors: Vec<Vendor> = config
            .providers
            .iter()
            .filter_map(|(n, p)| vendor_of(n, p))
            .collect();
        FakeApis::start(IpAddr::from([127, 0, 0, 1]), &vendors, script).await
    }

    /// The fake of `vendor`.
    pub fn get(&self, vendor: Vendor) -> Option<&FakeApi> {
        self.apis.iter().find(|a| a.vendor() == vendor)
    }

    /// Points every provider of `config` that has a fake at it, reached at
    /// `base_url(fake)` (its own [`FakeApi::base_url`] on this host; a container gets
    /// the address it can reach): the wiring's arguments go into the provider's
    /// `extra_args` (minus what the adapters pass themselves: the model flag, Gemini's
    /// `--skip-trust`), its model becomes the `default_model` when the entry has none,
    /// and the CLIs get no retries of their own (an error shows at once). Returns the
    /// variables and home files every run needs on top.
    pub fn wire(
        &self,
        config: &mut AiCliConfig,
        base_url: impl Fn(&FakeApi) -> String,
    ) -> FakeWiring {
        let mut out = FakeWiring::default();
        for (name, p) in config.providers.iter_mut() {
            let Some(vendor) = vendor_of(name, p) else {
                continue;
            };
            let Some(api) = self.get(vendor) else {
                continue;
            };
            let url = base_url(api);
            let mut options = WiringOptions {
                subscription: api.plays_subscription(),
                ..WiringOptions::default()
            };
            if let Some(m) = p
                .default_model
                .clone()
                .or(default_model(vendor).map(str::to_owned))
            {
                options = options.with_model(m);
            }
            // An ACP agent takes none of the CLI's own arguments: its model goes through
            // the entry's `acp.model`, codex-acp's provider through CODEX_CONFIG.
            let acp = p.adapter_name(name) == ACP_ADAPTER;
            let wiring = if acp {
                aicli_testkit::CliWiring::for_acp_fake(vendor, &url, &options)
            } else {
                aicli_testkit::CliWiring::for_fake(vendor, &url, &options)
            };
            let mut args = wiring.args.iter();
            while let Some(a) = args.next() {
                match a.as_str() {
                    "-m" | "--model" => {
                        if let Some(m) = args.next()
                            && p.default_model.is_none()
                        {
                            p.default_model = Some(m.clone());
                        }
                    }
                    "--skip-trust" => {}
                    other => p.extra_args.push(other.to_owned()),
                }
            }
            // Claude's and Gemini's model flags come from `options` only when asked;
            // their defaults are what the fake serves.
            if p.default_model.is_none()
                && let Some(m) = default_model(vendor)
            {
                p.default_model = Some(m.to_owned());
            }
            p.npx_fallback = false;
            // The provider's own `env`: a CLI gets nothing of the environment it is given
            // but its base set and what its provider names (see `crate::env`).
            p.env.extend(wiring.env.clone());
            out.env.extend(
                wiring
                    .env
                    .iter()
                    .filter(|(k, _)| k.as_str() != "CODEX_CONFIG")
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            for f in wiring.home_files {
                match out.home_files.iter_mut().find(|h| h.path == f.path) {
                    Some(_) => {}
                    None => out.home_files.push(f),
                }
            }
            out.providers.push((name.clone(), url));
        }
        out
    }
}

impl FakeWiring {
    /// Writes [`FakeWiring::home_files`] under `home` (created when missing), private
    /// as everything aicli makes under `.aicli`: `home` and the directories it makes
    /// there 0700, the files 0600, whatever the umask. (What the CLIs then write in
    /// their HOME follows the CLI and the umask, inside the 0700 `home`.)
    pub fn write_home(&self, home: &Path) -> Result<(), FakeApiError> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let failed = |path: &Path| {
            let path = path.to_owned();
            move |source| FakeApiError::Write { path, source }
        };
        crate::util::ensure_private_dir(home).map_err(failed(home))?;
        for file in &self.home_files {
            let path = home.join(&file.path);
            if let Some(dir) = path.parent() {
                crate::util::create_private_dirs(dir).map_err(failed(dir))?;
            }
            let text = serde_json::to_string_pretty(&file.json).unwrap_or_default();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(crate::util::PRIVATE_FILE_MODE)
                .open(&path)
                .map_err(failed(&path))?;
            // A file an older aicli (or the umask) made wider is narrowed too.
            f.set_permissions(std::fs::Permissions::from_mode(
                crate::util::PRIVATE_FILE_MODE,
            ))
            .map_err(failed(&path))?;
            f.write_all(text.as_bytes()).map_err(failed(&path))?;
        }
        Ok(())
    }

    /// The whole environment of a CLI run against the fakes: `HOME=home`, `PATH`,
    /// `LANG`, `TMPDIR` (from `inherited`, or defaults), `TERM` when set, and the
    /// wiring's variables. Nothing else of the user's environment: no real keys, no
    /// `CODEX_HOME` or `CLAUDE_CONFIG_DIR` pointing at real logins.
    pub fn env(
        &self,
        home: &Path,
        inherited: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        env.insert("HOME".to_owned(), home.display().to_string());
        env.insert(
            "PATH".to_owned(),
            inherited
                .get("PATH")
                .cloned()
                .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".to_owned()),
        );
        env.insert(
            "LANG".to_owned(),
            inherited
                .get("LANG")
                .cloned()
                .unwrap_or_else(|| "C.UTF-8".to_owned()),
        );
        for k in ["TMPDIR", "TERM"] {
            if let Some(v) = inherited.get(k) {
                env.insert(k.to_owned(), v.clone());
            }
        }
        env.extend(self.env.clone());
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_builtin_provider_is_wired_to_its_own_fake() {
        let mut config = AiCliConfig::builtin().expect("config");
        let apis = FakeApis::start_for(&config, |_| Script::text("hi"))
            .await
            .expect("fakes");
        let w = apis.wire(&mut config, FakeApi::base_url);
        let names: Vec<&str> = w.providers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "claude",
                "claude-acp",
                "codex",
                "codex-acp",
                "gemini",
                "gemini-acp"
            ]
        );
        // The ACP agents get their fake's variables, none of the CLIs' arguments.
        let codex_acp = &config.providers["codex-acp"];
        assert!(
            codex_acp.extra_args.is_empty(),
            "{:?}",
            codex_acp.extra_args
        );
        let cfg: serde_json::Value =
            serde_json::from_str(&codex_acp.env["CODEX_CONFIG"]).expect("CODEX_CONFIG");
        assert_eq!(cfg["model"], "gpt-5.5");
        assert_eq!(
            config.providers["gemini-acp"].extra_args,
            ["--acp", "--skip-trust"]
        );
        assert_eq!(
            config.providers["gemini-acp"].default_model.as_deref(),
            Some("gemini-2.5-flash")
        );
        let claude = apis.get(Vendor::Anthropic).expect("anthropic fake");
        assert_eq!(w.env["ANTHROPIC_BASE_URL"], claude.base_url());
        let codex = &config.providers["codex"];
        assert_eq!(codex.default_model.as_deref(), Some("gpt-5.5"));
        let openai = apis.get(Vendor::OpenAi).expect("openai fake").base_url();
        assert!(
            codex
                .extra_args
                .iter()
                .any(|a| a.contains(&format!("{openai}/v1"))),
            "{:?}",
            codex.extra_args
        );
        let gemini = &config.providers["gemini"];
        assert!(
            !gemini
                .extra_args
                .iter()
                .any(|a| a == "--skip-trust" || a == "-m")
        );
        assert_eq!(gemini.default_model.as_deref(), Some("gemini-2.5-flash"));
        assert_eq!(w.home_files.len(), 1, "Gemini's settings.json");
        let home = tempfile::tempdir().expect("tempdir");
        w.write_home(home.path()).expect("write");
        assert!(home.path().join(".gemini/settings.json").is_file());
        let env = w.env(
            home.path(),
            &BTreeMap::from([("OPENAI_API_KEY".into(), "sk-real".into())]),
        );
        assert!(!env.contains_key("OPENAI_API_KEY"), "no real key passes");
        assert_eq!(env["HOME"], home.path().display().to_string());
    }
}
