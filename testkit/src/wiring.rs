//! How to point each real CLI at a fake, as plain data, plus per-run directories and the
//! location of the pinned CLIs.
//!
//! A [`CliWiring`] is what to add to a CLI run: environment variables, arguments, and
//! JSON files to write under the run's `HOME`. It does not spawn anything; the engine or
//! a test does, with [`RunDirs::base_env`] + [`CliWiring::env`] after `env_clear()`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::{FakeApiError, Vendor};

/// Choices that change the wiring.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WiringOptions {
    /// How often the CLI may retry a failed request. Claude: `CLAUDE_CODE_MAX_RETRIES`;
    /// Codex: the provider's `request_max_retries` and `stream_max_retries`; Gemini:
    /// settings `general.maxAttempts` = retries + 1 (at most 10). Default 0, so error
    /// tests take a second, not minutes.
    pub max_retries: u32,
    /// The model flag. `None`: Claude and Gemini get no flag (their defaults,
    /// `claude-opus-5-5` and Gemini's `auto` router); Codex gets `-m gpt-5.5`, because its
    /// default model uses "code mode" (no `tools[]`), which the fake does not speak.
    pub model: Option<String>,
    /// The API key to send (any value works). `None`: `sk-ant-fake-key`, `sk-fake`,
    /// `fake-gemini-key`, as in the reference transcripts.
    pub api_key: Option<String>,
    /// Codex only: the provider's `stream_idle_timeout_ms` (Codex default 300 s).
    pub stream_idle_timeout: Option<Duration>,
    /// Claude only: sign in as a subscription (a `CLAUDE_CODE_OAUTH_TOKEN`, as `claude
    /// setup-token` makes) instead of with an API key. Claude reads the
    /// `anthropic-ratelimit-unified-*` headers of a subscription only, so this is how a
    /// fake's usage limit reaches it (its `rate_limit_event` lines, "You've hit your
    /// 5-hour limit"). [`crate::FakeApi::wiring_with`] sets it for a script with a
    /// [`crate::Step::UsageLimit`].
    pub subscription: bool,
}

impl WiringOptions {
    /// Sets [`WiringOptions::max_retries`].
    pub fn with_max_retries(mut self, retries: u32) -> WiringOptions {
        self.max_retries = retries;
        self
    }

    /// Sets [`WiringOptions::model`].
    pub fn with_model(mut self, model: impl Into<String>) -> WiringOptions {
        self.model = Some(model.into());
        self
    }

    /// Sets [`WiringOptions::api_key`].
    pub fn with_api_key(mut self, key: impl Into<String>) -> WiringOptions {
        self.api_key = Some(key.into());
        self
    }
}

/// A JSON file to write under the run's `HOME`.
#[derive(Debug, Clone, PartialEq)]
pub struct HomeFile {
    /// Path relative to `HOME` (e.g. `.gemini/settings.json`).
    pub path: PathBuf,
    /// The contents.
    pub json: Value,
}

/// What a CLI run needs to talk only to a fake, with telemetry and update checks off.
#[derive(Debug, Clone, PartialEq)]
pub struct CliWiring {
    /// Which CLI this is for (`Anthropic` = `claude`, `OpenAi` = `codex`, `Gemini` =
    /// `gemini`).
    pub vendor: Vendor,
    /// Variables to set (on top of `HOME`, `TMPDIR`, `PATH`, `LANG`).
    pub env: BTreeMap<String, String>,
    /// Arguments to add. Codex: after the `exec` subcommand (`codex exec ARGS… PROMPT`);
    /// Claude and Gemini: anywhere.
    pub args: Vec<String>,
    /// JSON files to write under `HOME` before the run.
    pub home_files: Vec<HomeFile>,
}

impl CliWiring {
    /// The wiring of `vendor`'s CLI for a fake at `base_url` (`http://127.0.0.1:PORT`).
    pub fn for_fake(vendor: Vendor, base_url: &str, options: &WiringOptions) -> CliWiring {
        let mut env = BTreeMap::new();
        let mut args = Vec::new();
        let mut home_files = Vec::new();
        let mut set = |k: &str, v: &str| {
            env.insert(k.to_owned(), v.to_owned());
        };
        match vendor {
            Vendor::Anthropic => {
                set("ANTHROPIC_BASE_URL", base_url);
                if options.subscription {
                    set(
                        "CLAUDE_CODE_OAUTH_TOKEN",
                        options
                            .api_key
                            .as_deref()
                            .unwrap_or("sk-ant-oat01-fake-token"),
                    );
                } else {
                    set(
                        "ANTHROPIC_API_KEY",
                        options.api_key.as_deref().unwrap_or("sk-ant-fake-key"),
                    );
                }
                // The one that matters: stops `HEAD /api/hello` and the DNS lookup of
                // api.anthropic.com. The others are belt and braces.
                set("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
                set("DISABLE_TELEMETRY", "1");
                set("DISABLE_AUTOUPDATER", "1");
                set("DISABLE_ERROR_REPORTING", "1");
                set("CLAUDE_CODE_MAX_RETRIES", &options.max_retries.to_string());
                if let Some(m) = &options.model {
                    args.extend(["--model".to_owned(), m.clone()]);
                }
            }
            Vendor::OpenAi => {
                set(
                    "FAKE_OPENAI_KEY",
                    options.api_key.as_deref().unwrap_or("sk-fake"),
                );
                let mut provider = format!(
                    "model_providers.fake={{name=\"fake\",base_url=\"{base_url}/v1\",env_key=\"FAKE_OPENAI_KEY\",wire_api=\"responses\",request_max_retries={r},stream_max_retries={r}",
                    r = options.max_retries
                );
                if let Some(t) = options.stream_idle_timeout {
                    provider.push_str(&format!(",stream_idle_timeout_ms={}", t.as_millis()));
                }
                provider.push('}');
                for c in [
                    "model_provider=fake".to_owned(),
                    provider,
                    "analytics.enabled=false".to_owned(),
                    "check_for_update_on_startup=false".to_owned(),
                ] {
                    args.extend(["-c".to_owned(), c]);
                }
                args.extend(["--disable".to_owned(), "plugins".to_owned()]);
                args.extend([
                    "-m".to_owned(),
                    options
                        .model
                        .clone()
                        .unwrap_or_else(|| "gpt-5.5".to_owned()),
                ]);
            }
            Vendor::Gemini => {
                set("GOOGLE_GEMINI_BASE_URL", base_url);
                set(
                    "GEMINI_API_KEY",
                    options.api_key.as_deref().unwrap_or("fake-gemini-key"),
                );
                // One node process instead of two (the CLI re-spawns itself otherwise).
                set("GEMINI_CLI_NO_RELAUNCH", "true");
                args.push("--skip-trust".to_owned());
                if let Some(m) = &options.model {
                    args.extend(["-m".to_owned(), m.clone()]);
                }
                home_files.push(HomeFile {
                    path: PathBuf::from(".gemini/settings.json"),
                    json: json!({
                        // Without it GOOGLE_GEMINI_BASE_URL makes the auth type "gateway",
                        // which headless mode rejects (exit 41).
                        "security": {"auth": {"selectedType": "gemini-api-key"}},
                        // Stops the play.googleapis.com usage statistics.
                        "privacy": {"usageStatisticsEnabled": false},
                        "telemetry": {"enabled": false},
                        "general": {
                            "enableAutoUpdate": false,
                            "enableAutoUpdateNotification": false,
                            "maxAttempts": (options.max_retries + 1).min(10),
                        },
                    }),
                });
            }
        }
        CliWiring {
            vendor,
            env,
            args,
            home_files,
        }
    }

    /// The wiring of an ACP agent that calls `vendor`'s model API (gemini `--acp`,
    /// claude-agent-acp, codex-acp): the same variables and home files as the CLI's,
    /// and no arguments (an agent is started with its config entry's own argv and
    /// takes its model through the entry's `acp.model`). codex-acp takes no `-c`
    /// options: the same provider settings go, as JSON, in `CODEX_CONFIG`, which it
    /// passes to `codex app-server` as the session's config.
    pub fn for_acp_fake(vendor: Vendor, base_url: &str, options: &WiringOptions) -> CliWiring {
        let mut w = CliWiring::for_fake(vendor, base_url, options);
        w.args.clear();
        if vendor == Vendor::OpenAi {
            w.env.insert(
                "CODEX_CONFIG".to_owned(),
                codex_acp_config(base_url, options),
            );
        }
        w
    }

    /// Deep-merges `value` into the JSON file at `path` (relative to `HOME`), creating the
    /// file if the wiring has none: e.g. `.gemini/settings.json` + `{"mcpServers": …}` or
    /// `{"model": {"maxSessionTurns": 2}}`.
    pub fn merge_json(&mut self, path: impl AsRef<Path>, value: Value) {
        let path = path.as_ref();
        match self.home_files.iter_mut().find(|f| f.path == path) {
            Some(file) => merge(&mut file.json, value),
            None => self.home_files.push(HomeFile {
                path: path.to_owned(),
                json: value,
            }),
        }
    }

    /// Writes [`CliWiring::home_files`] under `home`.
    pub fn write_files(&self, home: &Path) -> Result<(), FakeApiError> {
        for file in &self.home_files {
            let path = home.join(&file.path);
            let write = |p: &Path| -> std::io::Result<()> {
                if let Some(dir) = p.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(
                    p,
                    serde_json::to_string_pretty(&file.json).unwrap_or_default(),
                )
            };
            write(&path).map_err(|source| FakeApiError::Write {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

/// codex-acp's `CODEX_CONFIG` for the fake at `base_url`: the provider block `codex
/// exec` gets as `-c` options (see [`CliWiring::for_fake`]), as JSON.
pub fn codex_acp_config(base_url: &str, options: &WiringOptions) -> String {
    let mut provider = json!({
        "name": "fake",
        "base_url": format!("{base_url}/v1"),
        "env_key": "FAKE_OPENAI_KEY",
        "wire_api": "responses",
        "request_max_retries": options.max_retries,
        "stream_max_retries": options.max_retries,
    });
    if let Some(t) = options.stream_idle_timeout {
        provider["stream_idle_timeout_ms"] = json!(t.as_millis() as u64);
    }
    json!({
        "model": options.model.clone().unwrap_or_else(|| "gpt-5.5".to_owned()),
        "model_provider": "fake",
        "model_providers": {"fake": provider},
        "analytics": {"enabled": false},
        "check_for_update_on_startup": false,
        "features": {"plugins": false},
    })
    .to_string()
}

/// Deep merge: objects merge key by key, anything else replaces.
fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The directories of one CLI run, in a temp dir removed on drop: `home/` (HOME),
/// `tmp/` (TMPDIR) and `work/` (the working directory).
///
/// Where to put them: Codex prints "Refusing to create helper binaries under temporary
/// dir" on stderr when `CODEX_HOME` (default `$HOME/.codex`) is under `/tmp`, so tests
/// that check stderr should use [`RunDirs::new_in`] with a base outside `/tmp` (e.g.
/// `env!("CARGO_TARGET_TMPDIR")`). Keep the base short: Claude puts a Unix socket under
/// `$TMPDIR/cc-socks/`, and socket paths are limited to 107 bytes.
#[derive(Debug)]
pub struct RunDirs {
    root: tempfile::TempDir,
    /// The run's `HOME`.
    pub home: PathBuf,
    /// The run's `TMPDIR`.
    pub tmp: PathBuf,
    /// The working directory.
    pub work: PathBuf,
}

impl RunDirs {
    /// Run directories under the system temp dir.
    pub fn new() -> Result<RunDirs, FakeApiError> {
        RunDirs::new_in(&std::env::temp_dir())
    }

    /// Run directories under `base` (created if missing).
    pub fn new_in(base: &Path) -> Result<RunDirs, FakeApiError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| FakeApiError::Write { path, source }
        };
        std::fs::create_dir_all(base).map_err(io(base))?;
        let root = tempfile::Builder::new()
            .prefix("run")
            .tempdir_in(base)
            .map_err(io(base))?;
        let home = root.path().join("home");
        let tmp = root.path().join("tmp");
        let work = root.path().join("work");
        for d in [&home, &tmp, &work] {
            std::fs::create_dir_all(d).map_err(io(d))?;
        }
        Ok(RunDirs {
            root,
            home,
            tmp,
            work,
        })
    }

    /// The root of the run directories.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// `HOME`, `TMPDIR`, `PATH` (this process's, or a standard one), `LANG=C.UTF-8`: the
    /// whole environment of a run apart from the wiring.
    pub fn base_env(&self) -> BTreeMap<String, String> {
        let path =
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned());
        BTreeMap::from([
            ("HOME".to_owned(), self.home.display().to_string()),
            ("TMPDIR".to_owned(), self.tmp.display().to_string()),
            ("PATH".to_owned(), path),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ])
    }

    /// [`RunDirs::base_env`] plus the wiring's variables.
    pub fn env_with(&self, wiring: &CliWiring) -> BTreeMap<String, String> {
        let mut env = self.base_env();
        env.extend(wiring.env.clone());
        env
    }
}

/// Where `aicli install` (and so `.ci/install-clis.sh`) installs the CLIs:
/// `$AICLI_CLI_CACHE`, else `$AICLI_CACHE_DIR/npm`, else `$XDG_CACHE_HOME/aicli/npm`, else
/// `$HOME/.cache/aicli/npm` (the rule of the engine's `cache::cli_cache_dir`, which this
/// crate cannot call).
pub fn cli_cache_dir() -> PathBuf {
    let set = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    set("AICLI_CLI_CACHE")
        .or_else(|| set("AICLI_CACHE_DIR").map(|d| d.join("npm")))
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("aicli/npm")))
        .unwrap_or_else(|| set("HOME").unwrap_or_default().join(".cache/aicli/npm"))
}

/// The installed binary of `vendor`'s CLI (`<cache>/node_modules/.bin/<name>`), or an
/// error that says to run `.ci/install-clis.sh`.
pub fn installed_cli(vendor: Vendor) -> Result<PathBuf, FakeApiError> {
    installed_binary(vendor.cli_name())
}

/// The installed executable `name` of any package `aicli install` put in its cache:
/// `<cache>/node_modules/.bin/<name>`, else `<cache>/slim/node_modules/.bin/<name>`
/// (the prefix of the packages installed with `--omit=optional`, such as the ACP
/// wrappers claude-agent-acp and codex-acp); or an error that says to run
/// `.ci/install-clis.sh`.
pub fn installed_binary(name: &str) -> Result<PathBuf, FakeApiError> {
    let cache = cli_cache_dir();
    let main = cache.join("node_modules/.bin").join(name);
    let slim = cache.join("slim/node_modules/.bin").join(name);
    if main.exists() {
        return Ok(main);
    }
    if slim.exists() {
        return Ok(slim);
    }
    Err(FakeApiError::CliNotInstalled {
        cli: name.to_owned(),
        path: main,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn codex_args_carry_the_provider() {
        let w = CliWiring::for_fake(
            Vendor::OpenAi,
            "http://127.0.0.1:9",
            &WiringOptions::default(),
        );
        assert_eq!(
            w.args,
            vec![
                "-c",
                "model_provider=fake",
                "-c",
                "model_providers.fake={name=\"fake\",base_url=\"http://127.0.0.1:9/v1\",env_key=\"FAKE_OPENAI_KEY\",wire_api=\"responses\",request_max_retries=0,stream_max_retries=0}",
                "-c",
                "analytics.enabled=false",
                "-c",
                "check_for_update_on_startup=false",
                "--disable",
                "plugins",
                "-m",
                "gpt-5.5",
            ]
        );
        assert_eq!(w.env["FAKE_OPENAI_KEY"], "sk-fake");
    }

    #[test]
    fn acp_wiring_has_no_arguments_and_codex_acp_gets_its_config_as_json() {
        let w = CliWiring::for_acp_fake(
            Vendor::OpenAi,
            "http://127.0.0.1:9",
            &WiringOptions::default(),
        );
        assert!(w.args.is_empty(), "{:?}", w.args);
        let c: Value = serde_json::from_str(&w.env["CODEX_CONFIG"]).unwrap();
        assert_eq!(c["model_provider"], "fake");
        assert_eq!(
            c["model_providers"]["fake"]["base_url"],
            "http://127.0.0.1:9/v1"
        );
        assert_eq!(c["model_providers"]["fake"]["request_max_retries"], 0);
        assert_eq!(w.env["FAKE_OPENAI_KEY"], "sk-fake");
        let g = CliWiring::for_acp_fake(
            Vendor::Gemini,
            "http://127.0.0.1:9",
            &WiringOptions::default().with_model("gemini-2.5-flash"),
        );
        assert!(g.args.is_empty());
        assert_eq!(g.home_files[0].path, PathBuf::from(".gemini/settings.json"));
        assert!(!g.env.contains_key("CODEX_CONFIG"));
    }

    #[test]
    fn gemini_settings_merge() {
        let mut w = CliWiring::for_fake(
            Vendor::Gemini,
            "http://127.0.0.1:9",
            &WiringOptions::default().with_max_retries(2),
        );
        w.merge_json(
            ".gemini/settings.json",
            json!({"model": {"maxSessionTurns": 2}, "privacy": {"x": 1}}),
        );
        let s = &w.home_files[0].json;
        assert_eq!(s["model"]["maxSessionTurns"], 2);
        assert_eq!(s["privacy"]["usageStatisticsEnabled"], false);
        assert_eq!(s["general"]["maxAttempts"], 3);
        assert_eq!(s["security"]["auth"]["selectedType"], "gemini-api-key");
    }

    #[test]
    fn claude_env() {
        let w = CliWiring::for_fake(
            Vendor::Anthropic,
            "http://127.0.0.1:9",
            &WiringOptions::default().with_model("sonnet"),
        );
        assert_eq!(w.env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:9");
        assert_eq!(w.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"], "1");
        assert_eq!(w.env["CLAUDE_CODE_MAX_RETRIES"], "0");
        assert_eq!(w.args, vec!["--model", "sonnet"]);
    }
}
