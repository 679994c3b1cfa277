//! What a CLI can do from inside its container (the real claude, codex and gemini in
//! their images, the probe run as the CLI's own shell tool): it runs as an unprivileged
//! user with no capability, `no-new-privileges` and the engine's seccomp filter; it can
//! write only to `/workspace`, `/aicli`, its home and its scratch `/tmp`; no engine
//! socket is within reach; and what it wrote in the worktree is owned on this machine by
//! the worktree's owner (root, when the tests run as root: then the container's user is
//! not the owner, and the ownership comes through the uid-mapped mounts).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use aicli::providers::SessionStatus;
use aicli_testkit::Script;

use crate::suite::e2e::{Cli, E2e, Setup, describe, kept_worktree};

use super::support;

/// Where the probe may write (besides `/tmp`, a tmpfs that goes with the container).
const WRITABLE: [&str; 3] = ["/workspace", "/aicli", "/home/aicli"];
/// Where it must not: the image's root filesystem.
const READ_ONLY: [&str; 11] = [
    "/",
    "/etc",
    "/usr",
    "/usr/bin",
    "/usr/local/bin",
    "/root",
    "/var",
    "/opt",
    "/home",
    "/srv",
    "/var/tmp",
];

/// The probe, as one shell command: its findings go to `probe.txt` in the worktree.
fn probe() -> String {
    let dirs: Vec<&str> = WRITABLE
        .iter()
        .chain(["/tmp"].iter())
        .chain(READ_ONLY.iter())
        .copied()
        .collect();
    // No `$(…)` (gemini refuses command substitution) and no `rm` (codex refuses it).
    format!(
        "{{ printf 'uid '; id -u; \
         grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; \
         for d in {dirs}; do [ -d \"$d\" ] || echo \"missing $d\"; if ( : > \"$d/.aicli-probe\" ) 2>/dev/null; then echo \"writable $d\"; else echo \"readonly $d\"; fi; done; \
         grep -E ' /tmp ' /proc/mounts | sed 's/^/mount /'; \
         for s in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock /var/run/docker/containerd/containerd.sock; do [ -e \"$s\" ] && echo \"engine-socket $s\"; done; \
         find / \\( -path /proc -o -path /sys \\) -prune -o -type s -printf 'socket %U %p\\n' 2>/dev/null; \
         for p in 2375 2376; do if timeout 3 bash -c \"echo > /dev/tcp/host.docker.internal/$p\" 2>/dev/null; then echo \"engine-port $p open\"; fi; done; \
         mkdir -p made/by/agent && echo x > made/by/agent/file && echo made; \
         }} > probe.txt 2>&1",
        dirs = dirs.join(" ")
    )
}

/// The probe's line that starts with `key`, without it.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

/// Checks what the probe found (see the module docs).
fn assert_confined(text: &str, wt: &Path, owner: (u32, u32)) {
    let uid: u32 = field(text, "uid ")
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no uid in the probe's findings:\n{text}"));
    assert_ne!(uid, 0, "the CLI runs as root:\n{text}");
    // No capability left, even in the bounding set (`--cap-drop ALL`).
    for cap in ["CapEff:", "CapPrm:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(text, cap), Some("0000000000000000"), "{cap}\n{text}");
    }
    assert_eq!(field(text, "NoNewPrivs:"), Some("1"), "{text}");
    // 2: a seccomp filter (the engine's default profile), not unconfined (0).
    assert_eq!(field(text, "Seccomp:"), Some("2"), "{text}");
    for d in WRITABLE.iter().chain(["/tmp"].iter()) {
        assert!(
            text.lines().any(|l| l == format!("writable {d}")),
            "{d} should be writable:\n{text}"
        );
    }
    for d in READ_ONLY {
        assert!(
            text.lines().any(|l| l == format!("readonly {d}")),
            "{d} should not be writable:\n{text}"
        );
    }
    assert!(
        field(text, "mount ").is_some_and(|m| m.contains("tmpfs")),
        "/tmp is not a tmpfs:\n{text}"
    );
    // Sockets the CLI made itself (claude's in /tmp) are its own, and aicli's two egress
    // sockets (its proxy, its MCP server) are the container's ways out; any other one,
    // and any engine socket or port, is within reach of the engine.
    let mine = format!("socket {uid} ");
    let egress = |l: &str| {
        l.ends_with(" /aicli-egress/proxy.sock") || l.ends_with(" /aicli-egress/mcp.sock")
    };
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("socket ") && egress(l))
            .count(),
        2,
        "aicli's egress sockets:\n{text}"
    );
    let sockets: Vec<&str> = text
        .lines()
        .filter(|l| {
            (l.starts_with("socket ") && !l.starts_with(&mine) && !egress(l))
                || l.starts_with("engine-")
        })
        .collect();
    assert!(sockets.is_empty(), "within reach: {sockets:?}\n{text}");
    assert!(text.lines().any(|l| l == "made"), "{text}");
    // Each directory was there to try (a missing one proves nothing).
    assert!(field(text, "missing ").is_none(), "{text}");
    // On this machine, what the CLI made is the worktree owner's.
    for f in ["probe.txt", "made", "made/by/agent", "made/by/agent/file"] {
        let m = std::fs::metadata(wt.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!((m.uid(), m.gid()), owner, "{f} is not the worktree owner's");
    }
    if owner.0 == 0 {
        assert_ne!(uid, owner.0);
    }
}

async fn confined(cli: Cli, test: &str) {
    let Some(docker) = support::local_engine(test).await else {
        return;
    };
    let setup = Setup::in_docker(support::DockerSetup::local(docker).await);
    let t = E2e::start_in(setup, cli, Script::shell(probe()).then_quote_tool_result()).await;
    let owner = aicli::runner::docker::paths::owner_of(t.repo.path()).expect("owner");
    let ran = t
        .run_one(t.shell_task("probe", "Probe the container"))
        .await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
    let wt = kept_worktree(r);
    let text = std::fs::read_to_string(wt.join("probe.txt"))
        .unwrap_or_else(|e| panic!("no probe.txt ({e}): {}", describe(r)));
    assert_confined(&text, &wt, owner);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_in_a_container_is_unprivileged_and_confined() {
    confined(
        Cli::Claude,
        "claude_in_a_container_is_unprivileged_and_confined",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_in_a_container_is_unprivileged_and_confined() {
    confined(
        Cli::Codex,
        "codex_in_a_container_is_unprivileged_and_confined",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_in_a_container_is_unprivileged_and_confined() {
    confined(
        Cli::Gemini,
        "gemini_in_a_container_is_unprivileged_and_confined",
    )
    .await;
}
