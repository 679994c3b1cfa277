//! Where CLI runs happen: [`RunnerKind`], and the `engine.docker` section of the config
//! ([`DockerConfig`], [`DockerHostConfig`], [`DockerTls`]).
//!
//! A run goes to the `local` runner (a child process of aicli) or the `docker` runner (a
//! container on a Docker engine, local or remote). The choice is made per task
//! (`"runner"` in the task), per batch (the tasks file's `"runner"`, `--runner`), per
//! provider (`providers.<name>.runner`) or for everything (`engine.runner`), in that
//! order of precedence.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which runner starts a CLI.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RunnerKind {
    /// A child process of aicli, in the task's worktree.
    #[default]
    Local,
    /// A container on a Docker engine (`engine.docker`).
    Docker,
    /// A Docker Swarm job on a swarm manager (the first engine of `engine.docker`): the
    /// container fetches its workspace from aicli and sends its work back over HTTP.
    Swarm,
}

impl RunnerKind {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunnerKind::Local => "local",
            RunnerKind::Docker => "docker",
            RunnerKind::Swarm => "swarm",
        }
    }

    /// Whether the CLI runs in a container (its image, the MCP server reached over a
    /// bridge).
    pub fn is_container(self) -> bool {
        matches!(self, RunnerKind::Docker | RunnerKind::Swarm)
    }

    /// Parses a serialized name.
    pub fn parse(s: &str) -> Option<RunnerKind> {
        match s {
            "local" => Some(RunnerKind::Local),
            "docker" => Some(RunnerKind::Docker),
            "swarm" => Some(RunnerKind::Swarm),
            _ => None,
        }
    }
}

impl std::fmt::Display for RunnerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Docker runner's settings. Every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DockerConfig {
    /// The engines tasks are spread over, by free capacity. Empty: one engine from
    /// `DOCKER_HOST` (with `DOCKER_TLS_VERIFY` / `DOCKER_CERT_PATH`), else the local socket.
    pub hosts: Vec<DockerHostConfig>,
    /// The image per provider. A provider not named here runs in the image of its npm
    /// package, `<image_repository>/<package>:<pinned version>` (`aicli/google-gemini-cli:0.61.0`,
    /// shared by every entry of that package), which `aicli image build <provider>`
    /// makes, and `run` and `batch` build when an engine lacks it.
    pub images: BTreeMap<String, String>,
    /// The repository part of the images aicli names and builds (`aicli`): a registry
    /// path such as `registry.example.com/team/aicli` works too.
    pub image_repository: String,
    /// The image `aicli image build` starts from when none is given: a glibc Linux with a
    /// shell (`local/base` is the debootstrap rootfs of `setup-docker-engine.sh`).
    pub base_image: String,
    /// Memory limit per container, MiB (0: none).
    pub memory_mb: u64,
    /// CPU limit per container, in CPUs (0: none).
    pub cpus: f64,
    /// Most processes per container (0: none).
    pub pids_limit: i64,
    /// CPUs a swarm job reserves on its node (0: none): the swarm places a job only on a
    /// node where that much is not reserved yet, and aicli counts the swarm's room by it.
    pub reserve_cpus: f64,
    /// Memory a swarm job reserves on its node, MiB (0: none).
    pub reserve_memory_mb: u64,
    /// Swarm placement constraints per provider (`{"claude": ["node.labels.gpu==true"]}`),
    /// besides each task's own `constraints`. Only the swarm runner places by them.
    pub constraints: BTreeMap<String, Vec<String>>,
    /// The container network when `egress` is off (`bridge`: the engine's default
    /// bridge, through which the container reaches aicli's MCP server; `none` cuts the
    /// container off entirely, aicli's MCP server and the model API included), and on a
    /// remote engine.
    pub network_mode: String,
    /// The user the CLI runs as in the container (`uid:gid`; never root). Absent: on a
    /// local engine the owner of the task's worktree (so files it writes stay the user's),
    /// or the image's user `aicli` (1000:1000) when root owns it (aicli as root: its files
    /// still land as root's, through uid-mapped mounts); on a remote engine the image's
    /// user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Where `aicli image build` keeps the Debian packages it downloads (git for images
    /// whose base lacks it); `~/.cache/aicli/debs` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deb_cache: Option<PathBuf>,
    /// What a container may reach: aicli's MCP server, and the allowed hosts through
    /// aicli's proxy (see [`crate::egress_config`]).
    pub egress: crate::egress_config::EgressConfig,
    /// Most containers made and started ahead of their tasks' turns (the next queued
    /// tasks of a batch, on a local engine), so that a task's CLI starts at once when its
    /// turn comes (0: none; each is made at the start then).
    pub warm_ahead: usize,
}

impl Default for DockerConfig {
    fn default() -> DockerConfig {
        DockerConfig {
            hosts: Vec::new(),
            images: BTreeMap::new(),
            image_repository: "aicli".to_owned(),
            base_image: "local/base".to_owned(),
            memory_mb: 4096,
            cpus: 2.0,
            pids_limit: 1024,
            reserve_cpus: 0.0,
            reserve_memory_mb: 0,
            constraints: BTreeMap::new(),
            network_mode: "bridge".to_owned(),
            user: None,
            deb_cache: None,
            egress: crate::egress_config::EgressConfig::default(),
            warm_ahead: 8,
        }
    }
}

/// Whether `r` can prefix an image name: `/`-separated parts of lowercase letters, digits
/// and `.`, `_`, `-` (starting and ending alphanumeric), the first part possibly a
/// registry host with a `:port`.
fn valid_repository(r: &str) -> bool {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-'))
            && p.starts_with(|c: char| c.is_ascii_alphanumeric())
            && p.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    r.split('/')
        .enumerate()
        .all(|(i, p)| match p.split_once(':') {
            Some((host, port)) if i == 0 && r.contains('/') => {
                part_ok(host) && !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())
            }
            _ => part_ok(p),
        })
}

/// One Docker engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DockerHostConfig {
    /// A short name (in labels, logs and `aicli containers`).
    pub name: String,
    /// The engine's address as `DOCKER_HOST` spells it: `unix:///var/run/docker.sock`,
    /// `tcp://HOST:PORT` (`tls` for TLS), `https://HOST:PORT`, `ssh://USER@HOST`.
    pub url: String,
    /// Client certificates for a TLS engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<DockerTls>,
    /// How `ssh` reaches an `ssh://` engine beyond the user's own ssh configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<DockerSsh>,
    /// Whether the engine shares no filesystem with aicli: the worktree is uploaded and
    /// the work comes back as a git bundle. Default: `false` for `unix://`, else `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<bool>,
    /// Most aicli containers at once on this engine. Default: from the engine's CPUs and
    /// memory (two per CPU, at most memory / `memory_mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_containers: Option<usize>,
    /// The address containers on this engine reach aicli's machine under (its MCP server,
    /// and `host.docker.internal` inside them). Required for a remote engine; for a local
    /// one the engine's bridge gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_address: Option<String>,
    /// The local IP aicli's MCP server listens on for this engine's containers. Default:
    /// `mcp_address` (which must then be an address of this machine); for a local engine
    /// the bridge gateway. Never `0.0.0.0` unless set so here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_bind: Option<String>,
}

impl DockerHostConfig {
    /// Whether the engine is remote (see [`DockerHostConfig::remote`]).
    pub fn is_remote(&self) -> bool {
        self.remote.unwrap_or(!self.url.starts_with("unix://"))
    }
}

/// The `ssh` options of an `ssh://` engine. aicli runs the system's `ssh` with
/// `BatchMode=yes` (never a prompt) and `docker system dial-stdio` on the other side, so
/// the remote account needs the `docker` CLI, and `DOCKER_HOST` there when its engine is
/// not the default one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DockerSsh {
    /// The private key to log in with (`ssh -i`, and no other key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<PathBuf>,
    /// The known-hosts file that holds the host's key (`UserKnownHostsFile`); the host
    /// must be in it (`StrictHostKeyChecking=yes`). Default: ssh's own files and setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_hosts: Option<PathBuf>,
    /// An ssh configuration file instead of `~/.ssh/config` (`ssh -F`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<PathBuf>,
}

/// TLS client material for a Docker engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DockerTls {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The client certificate (PEM).
    pub cert: PathBuf,
    /// The client key (PEM).
    pub key: PathBuf,
}

impl DockerConfig {
    /// The image `provider` (configured as `p`) runs in: `images.<provider>`, else its
    /// npm package's image (`<image_repository>/<package without @, / as ->:<version>`,
    /// `-slim` after the version when installed without optional dependencies), else
    /// (no package) `<image_repository>/<provider>:<version>`; `latest` when unpinned.
    pub fn image_for(&self, provider: &str, p: &crate::ProviderConfig) -> String {
        if let Some(i) = self.images.get(provider) {
            return i.clone();
        }
        let name = if p.package.is_empty() {
            provider
        } else {
            p.package.as_str()
        };
        let name: String = name
            .trim_start_matches('@')
            .chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9' | '.' | '_' | '-') => c,
                _ => '-',
            })
            .collect();
        let version: String = p
            .version
            .as_deref()
            .unwrap_or("latest")
            .chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
                _ => '_',
            })
            .collect();
        let slim = if p.npm_omit_optional && !p.package.is_empty() {
            "-slim"
        } else {
            ""
        };
        format!("{}/{name}:{version}{slim}", self.image_repository)
    }

    /// Checks what types cannot; errors name the JSON path (under `engine.docker`).
    pub fn check(&self) -> Result<(), (String, String)> {
        crate::placement::Resources::of(self, None).check()?;
        for (provider, list) in &self.constraints {
            for (i, c) in list.iter().enumerate() {
                crate::placement::check_constraint(c)
                    .map_err(|m| (format!("constraints.{provider}[{i}]"), m))?;
            }
        }
        if self.pids_limit < 0 {
            return Err(("pids_limit".into(), "must not be negative".into()));
        }
        if !valid_repository(&self.image_repository) {
            return Err((
                "image_repository".into(),
                format!(
                    "'{}' is not an image repository: lowercase letters, digits, `.`, `_` and `-` in `/`-separated parts (a registry host may carry a `:port`)",
                    self.image_repository
                ),
            ));
        }
        if self.network_mode.trim().is_empty() {
            return Err(("network_mode".into(), "must not be empty".into()));
        }
        self.egress.check()?;
        if let Some(u) = &self.user
            && !valid_user(u)
        {
            return Err((
                "user".into(),
                format!("'{u}' is not `uid:gid` (numbers) or a user name"),
            ));
        }
        if let Some(u) = &self.user
            && (u == "root" || u.split(':').next() == Some("0"))
        {
            return Err((
                "user".into(),
                format!("'{u}' is root: a container never runs its CLI as root"),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, h) in self.hosts.iter().enumerate() {
            let at = |f: &str| format!("hosts[{i}].{f}");
            if h.name.is_empty()
                || !h
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err((
                    at("name"),
                    format!("'{}': use letters, digits, '-', '_' and '.'", h.name),
                ));
            }
            if !names.insert(h.name.as_str()) {
                return Err((at("name"), format!("'{}' names two hosts", h.name)));
            }
            let scheme_ok = ["unix://", "tcp://", "http://", "https://", "ssh://"]
                .iter()
                .any(|s| h.url.starts_with(s));
            if !scheme_ok {
                return Err((
                    at("url"),
                    format!(
                        "'{}' is not unix://, tcp://, http://, https:// or ssh://",
                        h.url
                    ),
                ));
            }
            if h.max_containers == Some(0) {
                return Err((at("max_containers"), "must be at least 1".into()));
            }
            if h.ssh.is_some() && !h.url.starts_with("ssh://") {
                return Err((at("ssh"), format!("'{}' is not an ssh:// engine", h.url)));
            }
            if let Some(ssh) = &h.ssh {
                for (field, path) in [
                    ("identity_file", &ssh.identity_file),
                    ("known_hosts", &ssh.known_hosts),
                    ("config", &ssh.config),
                ] {
                    if let Some(p) = path.as_ref().filter(|p| !p.is_file()) {
                        return Err((
                            at(&format!("ssh.{field}")),
                            format!("{} is not a file", p.display()),
                        ));
                    }
                }
            }
            if h.is_remote() && h.mcp_address.is_none() {
                return Err((
                    at("mcp_address"),
                    "a remote engine needs the address its containers reach aicli's machine under"
                        .into(),
                ));
            }
        }
        Ok(())
    }
}

fn valid_user(u: &str) -> bool {
    match u.split_once(':') {
        Some((a, b)) => {
            !a.is_empty()
                && !b.is_empty()
                && a.chars().all(|c| c.is_ascii_digit())
                && b.chars().all(|c| c.is_ascii_digit())
        }
        None => {
            !u.is_empty()
                && u.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, url: &str) -> DockerHostConfig {
        DockerHostConfig {
            name: name.into(),
            url: url.into(),
            tls: None,
            ssh: None,
            remote: None,
            max_containers: None,
            mcp_address: None,
            mcp_bind: None,
        }
    }

    #[test]
    fn checks_name_the_bad_field() {
        let mut c = DockerConfig::default();
        assert_eq!(c.check(), Ok(()));
        c.hosts = vec![host("local", "unix:///var/run/docker.sock")];
        assert_eq!(c.check(), Ok(()));
        c.hosts.push(host("far", "tcp://10.0.0.2:2376"));
        assert_eq!(
            c.check().map_err(|(p, _)| p),
            Err("hosts[1].mcp_address".to_owned())
        );
        c.hosts[1].mcp_address = Some("10.0.0.1".into());
        assert_eq!(c.check(), Ok(()));
        c.hosts[1].url = "ftp://x".into();
        assert_eq!(
            c.check().map_err(|(p, _)| p),
            Err("hosts[1].url".to_owned())
        );
        c.hosts[1].url = "tcp://x:1".into();
        c.hosts[1].name = "local".into();
        assert_eq!(
            c.check(),
            Err((
                "hosts[1].name".to_owned(),
                "'local' names two hosts".to_owned()
            ))
        );
        c.hosts.pop();
        c.user = Some("1000:x".into());
        assert_eq!(c.check().map_err(|(p, _)| p), Err("user".to_owned()));
        for root in ["root", "0", "0:0", "0:1000"] {
            c.user = Some(root.into());
            assert_eq!(c.check().map_err(|(p, _)| p), Err("user".to_owned()));
        }
        c.user = Some("1000:1000".into());
        c.cpus = -1.0;
        assert_eq!(c.check().map_err(|(p, _)| p), Err("cpus".to_owned()));
    }

    #[test]
    fn ssh_options_belong_to_an_ssh_engine_and_name_files_that_exist() {
        let mut c = DockerConfig::default();
        let mut h = host("far", "tcp://10.0.0.2:2376");
        h.mcp_address = Some("10.0.0.1".into());
        h.ssh = Some(DockerSsh::default());
        c.hosts = vec![h];
        assert_eq!(
            c.check().map_err(|(p, _)| p),
            Err("hosts[0].ssh".to_owned())
        );
        c.hosts[0].url = "ssh://me@far:2222".into();
        assert_eq!(c.check(), Ok(()));
        c.hosts[0].ssh = Some(DockerSsh {
            identity_file: Some("/nonexistent/id".into()),
            ..DockerSsh::default()
        });
        assert_eq!(
            c.check(),
            Err((
                "hosts[0].ssh.identity_file".to_owned(),
                "/nonexistent/id is not a file".to_owned()
            ))
        );
    }

    #[test]
    fn remote_defaults_from_the_scheme() {
        assert!(!host("a", "unix:///run/docker.sock").is_remote());
        assert!(host("a", "tcp://127.0.0.1:2375").is_remote());
        assert!(host("a", "ssh://u@h").is_remote());
        let mut h = host("a", "tcp://127.0.0.1:2375");
        h.remote = Some(false);
        assert!(!h.is_remote());
        assert_eq!(RunnerKind::parse("docker"), Some(RunnerKind::Docker));
        assert_eq!(RunnerKind::parse("swarm"), Some(RunnerKind::Swarm));
        assert!(RunnerKind::Swarm.is_container() && !RunnerKind::Local.is_container());
        assert_eq!(RunnerKind::parse("k8s"), None);
    }

    /// Entries of one npm package share its image; an override, a slim install, a
    /// package-less provider and the repository each change the name as documented.
    #[test]
    fn images_are_named_by_package() {
        let builtin = crate::AiCliConfig::builtin().unwrap();
        let d = &builtin.engine.docker;
        let image = |name: &str| d.image_for(name, &builtin.providers[name]);
        let gemini = image("gemini");
        assert_eq!(
            gemini,
            format!(
                "aicli/google-gemini-cli:{}",
                builtin.providers["gemini"].version.as_deref().unwrap()
            )
        );
        assert_eq!(image("gemini-acp"), gemini);
        assert!(image("claude").starts_with("aicli/anthropic-ai-claude-code:"));
        assert!(
            image("claude-acp").ends_with("-slim"),
            "{}",
            image("claude-acp")
        );
        let mut own = builtin.providers["gemini"].clone();
        own.package = String::new();
        own.version = Some("1.0+build".into());
        let mut c = d.clone();
        c.image_repository = "registry.example.com:5000/team/aicli".into();
        assert_eq!(c.check(), Ok(()));
        assert_eq!(
            c.image_for("mine", &own),
            "registry.example.com:5000/team/aicli/mine:1.0_build"
        );
        c.images.insert("mine".into(), "my/image:1".into());
        assert_eq!(c.image_for("mine", &own), "my/image:1");
        for bad in ["", "Aicli", "aicli/", "-x", "a:1"] {
            c.image_repository = bad.into();
            assert_eq!(
                c.check().map_err(|(p, _)| p),
                Err("image_repository".to_owned()),
                "{bad:?}"
            );
        }
    }
}
