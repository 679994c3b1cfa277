//! `--fake-api[=SCRIPT]` (run, batch, answer, resume) and the scripts of `aicli record
//! --fake`: the embedded fake model APIs instead of the real ones.

use std::path::{Path, PathBuf};

use crate::cli::fake_api::{FakeApis, FakeWiring};
use crate::providers::AiCliConfig;
use aicli_testkit::{FakeApi, Script};
use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

/// The MCP server name aicli registers in each CLI.
pub const MCP_SERVER: &str = "aicli";

/// `--fake-api`.
#[derive(Debug, Clone, Default, Args)]
pub struct FakeApiArgs {
    /// Point the CLIs at aicli's built-in fake model APIs on loopback (no key, no
    /// network; each CLI gets its own HOME under <repo>/.aicli/fake-api-home). SCRIPT
    /// says what the fake model does: text (default), text:TEXT, shell:COMMAND,
    /// mcp:SERVER/TOOL, ask:QUESTION|OPTION|OPTION, tool:NAME:JSON, error:STATUS, drop,
    /// limit:SECONDS (the account is over its usage limit until SECONDS after the first
    /// request, then the default text); add ;delay=MS to pace the stream.
    #[arg(
        long = "fake-api",
        value_name = "SCRIPT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "text"
    )]
    pub script: Option<String>,
    /// Steps of the script the fakes of an earlier command already served (an answer to
    /// a recorded `ask:` batch starts after the question): not an option.
    #[arg(skip)]
    pub served: usize,
}

/// The steps an `ask:` script serves before the task blocks: the question, then the
/// model's closing words (see [`ask_script`]).
pub const ASK_STEPS_BEFORE_THE_ANSWER: usize = 2;

/// A fake model's script from its spec (see [`FakeApiArgs`]); a `;delay=MS` suffix
/// paces the stream (MS milliseconds before each SSE event), to watch it live.
pub fn script(spec: &str) -> anyhow::Result<Script> {
    if let Some((base, ms)) = spec.rsplit_once(";delay=") {
        let ms: u64 = ms
            .parse()
            .with_context(|| format!("'{spec}': ;delay= wants milliseconds"))?;
        return Ok(script(base)?.with_event_delay(std::time::Duration::from_millis(ms)));
    }
    let (kind, arg) = match spec.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    Ok(match (kind, arg) {
        ("text", None) => Script::default_text(),
        ("text", Some(t)) => Script::text(t),
        ("shell", Some(c)) => Script::shell(c).then_quote_tool_result(),
        ("mcp", Some(st)) => {
            let (server, tool) = st
                .split_once('/')
                .with_context(|| format!("'{spec}': expected mcp:SERVER/TOOL"))?;
            Script::mcp_tool_call(server, tool, json!({})).then_quote_tool_result()
        }
        ("ask", Some(q)) => {
            let mut parts = q.split('|').map(str::trim);
            let question = parts.next().unwrap_or_default();
            if question.is_empty() {
                bail!("'{spec}': expected ask:QUESTION or ask:QUESTION|OPTION|OPTION");
            }
            let options: Vec<&str> = parts.filter(|o| !o.is_empty()).collect();
            ask_script(question, &options)
        }
        ("tool", Some(t)) => {
            let (name, input) = t
                .split_once(':')
                .with_context(|| format!("'{spec}': expected tool:NAME:JSON"))?;
            let input: serde_json::Value = serde_json::from_str(input)
                .with_context(|| format!("'{spec}': the input of tool:NAME:JSON is not JSON"))?;
            Script::tool_call(name, input).then_quote_tool_result()
        }
        ("error", Some(s)) => Script::error(
            s.parse()
                .with_context(|| format!("'{spec}': expected error:STATUS (an HTTP status)"))?,
        ),
        ("drop", None) => Script::drop_mid_stream(),
        ("limit", Some(s)) => Script::usage_limit(std::time::Duration::from_secs(
            s.parse()
                .with_context(|| format!("'{spec}': expected limit:SECONDS (a whole number)"))?,
        )),
        _ => bail!(
            "'{spec}': expected text, text:TEXT, shell:COMMAND, mcp:SERVER/TOOL, ask:QUESTION|OPTION|OPTION, tool:NAME:JSON, error:STATUS, drop or limit:SECONDS"
        ),
    })
}

/// The model asks the user `question` through aicli's `ask_user` tool (as `askUser`,
/// the name every CLI shows: Gemini hides tools named `ask_user`), ends its turn, and
/// after the answer says it goes on with it.
pub fn ask_script(question: &str, options: &[&str]) -> Script {
    Script::mcp_tool_call(
        MCP_SERVER,
        "askUser",
        json!({"question": question, "options": options}),
    )
    .then_text("I asked the user and will wait for the answer.")
    .then_text("Thanks for the answer: I carried on with it and the task is done.")
}

/// The fakes of one command and where the CLIs' own HOME is.
#[derive(Debug)]
pub struct FakeSetup {
    /// The running fakes (stopped on drop).
    _apis: FakeApis,
    /// The wiring that is not in the config.
    pub wiring: FakeWiring,
    /// The CLIs' HOME.
    pub home: PathBuf,
}

impl FakeSetup {
    /// Starts the fakes answering `script`, wires `config`'s providers to them, and
    /// writes the home files into `home`.
    pub async fn start(
        config: &mut AiCliConfig,
        script: Script,
        home: &Path,
    ) -> anyhow::Result<FakeSetup> {
        let apis = FakeApis::start_for(config, |_| script.clone()).await?;
        let wiring = apis.wire(config, FakeApi::base_url);
        wiring.write_home(home)?;
        tracing::info!(providers = ?wiring.providers, home = %home.display(), "CLIs wired to the fake model APIs");
        Ok(FakeSetup {
            _apis: apis,
            wiring,
            home: home.to_owned(),
        })
    }

    /// As [`FakeSetup::start`] for CLIs in containers: the fakes listen on `bind` (the
    /// bridge gateway) and are reached as `host.docker.internal`; the wiring's variables
    /// go into each wired provider's `env` (a container gets none of aicli's own).
    pub async fn start_in_containers(
        config: &mut AiCliConfig,
        script: Script,
        home: &Path,
        bind: std::net::IpAddr,
    ) -> anyhow::Result<FakeSetup> {
        let vendors: Vec<_> = config
            .providers
            .iter()
            .filter_map(|(n, p)| crate::cli::fake_api::vendor_of(n, p))
            .collect();
        let apis = FakeApis::start(bind, &vendors, |_| script.clone()).await?;
        let wiring = apis.wire(config, |api| {
            format!("http://host.docker.internal:{}", api.addr().port())
        });
        for (name, _) in &wiring.providers {
            if let Some(p) = config.providers.get_mut(name) {
                p.env.extend(wiring.env.clone());
            }
        }
        wiring.write_home(home)?;
        tracing::info!(providers = ?wiring.providers, %bind, home = %home.display(), "CLIs in containers wired to the fake model APIs");
        Ok(FakeSetup {
            _apis: apis,
            wiring,
            home: home.to_owned(),
        })
    }

    /// The CLIs' environment (see [`FakeWiring::env`]).
    pub fn env(&self) -> std::collections::BTreeMap<String, String> {
        let inherited: std::collections::BTreeMap<String, String> = std::env::vars().collect();
        self.wiring.env(&self.home, &inherited)
    }
}

/// The CLIs' HOME for `--fake-api` runs of `repo`: kept between commands, so `aicli
/// answer --fake-api` resumes a session that `aicli run --fake-api` started.
pub fn home_of(repo: &Path) -> PathBuf {
    repo.join(".aicli").join("fake-api-home")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aicli_testkit::Step;

    #[test]
    fn scripts_parse_and_bad_ones_say_what_is_expected() {
        let s = script("ask:Which one?|red|blue").expect("ask");
        match &s.steps()[0] {
            Step::McpToolCall {
                server,
                tool,
                input,
            } => {
                assert_eq!((server.as_str(), tool.as_str()), ("aicli", "askUser"));
                assert_eq!(input["options"], json!(["red", "blue"]));
                assert_eq!(input["question"], "Which one?");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            script("text:hi").expect("text").steps(),
            [Step::Text("hi".into())]
        );
        let e = script("nope").expect_err("bad").to_string();
        assert!(e.contains("ask:QUESTION"), "{e}");
        assert!(script("error:x").is_err());
        match &script(r#"tool:Write:{"file_path":"a.txt"}"#)
            .expect("tool")
            .steps()[0]
        {
            Step::ToolCall { name, input, .. } => {
                assert_eq!(name, "Write");
                assert_eq!(input["file_path"], "a.txt");
            }
            other => panic!("{other:?}"),
        }
        assert!(script("tool:Write:{nope").is_err());
        assert!(script("ask:").is_err());
    }
}
