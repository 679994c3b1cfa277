//! Fuzzing the decoders: every vendor's decoder is fed fixture lines mutated the ways a
//! broken CLI, a cut pipe or a hostile tool output could mangle them (truncations, byte
//! flips, huge numbers, deep nesting, invalid UTF-8, lines spliced together, random
//! bytes), several per run, then finished. It must never panic, and every line must give
//! at least one event or be blank.
//!
//! The default test run is short (`FUZZ_CASES`, default 256 runs per vendor). A long run,
//! each vendor for `FUZZ_SECS` seconds (fresh random seeds every `FUZZ_CASES` runs):
//! `FUZZ_SECS=205 FUZZ_CASES=20000 cargo test --release -p aicli-providers --test fuzz --
//! --nocapture --test-threads 1` (prints the executions per vendor). The 100k-deep nesting and the 50 MB line are
//! also fed once each, deterministically.

use std::sync::atomic::{AtomicU64, Ordering};

use aicli_providers::{
    AiCliConfig, ExitStatus, Line, ParseContext, ProviderRegistry, SharedProvider,
};
use proptest::prelude::*;

fn provider(name: &str) -> SharedProvider {
    ProviderRegistry::from_config(&AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"))
        .get(name)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Every distinct non-blank line of the vendor's fixtures (recorded and hand-written).
fn seeds(vendor: &str) -> Vec<Vec<u8>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(vendor);
    let mut out: Vec<Vec<u8>> = Vec::new();
    for dir in [root.clone(), root.join("hand")] {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
            .collect();
        files.sort();
        for f in files {
            let bytes = std::fs::read(&f).unwrap_or_default();
            for l in bytes.split(|b| *b == b'\n') {
                if !l.iter().all(u8::is_ascii_whitespace) && !out.iter().any(|s| s == l) {
                    out.push(l.to_vec());
                }
            }
        }
    }
    out
}

/// One way to mangle a line.
#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip(usize, u8),
    HugeNumber(usize, &'static str),
    Nest(usize, usize),
    InvalidUtf8(usize, Vec<u8>),
    Splice(usize, usize),
    Bytes(Vec<u8>),
    Keep,
}

const HUGE: [&str; 6] = [
    "1e999999",
    "-1e400",
    "18446744073709551616000",
    "-9223372036854775809",
    "0.0000000000000000000000000000000000001e-400",
    "123456789012345678901234567890.5",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), prop::sample::select(HUGE.to_vec()))
            .prop_map(|(i, n)| Mutation::HugeNumber(i, n)),
        (any::<usize>(), 1usize..300).prop_map(|(i, d)| Mutation::Nest(i, d)),
        (
            any::<usize>(),
            prop::collection::vec(
                prop::sample::select(vec![0x80u8, 0xc3, 0xff, 0xed, 0xa0, 0xfe]),
                1..4
            )
        )
            .prop_map(|(i, b)| Mutation::InvalidUtf8(i, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Splice(a, b)),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(Mutation::Bytes),
        Just(Mutation::Keep),
    ]
}

/// `line` mangled by `m` (`other` is a second seed line for splices).
fn apply(m: &Mutation, line: &[u8], other: &[u8]) -> Vec<u8> {
    let at = |i: usize| {
        if line.is_empty() {
            0
        } else {
            i % (line.len() + 1)
        }
    };
    let mut l = line.to_vec();
    match m {
        Mutation::Truncate(i) => l.truncate(at(*i)),
        Mutation::Flip(i, b) => {
            if !l.is_empty() {
                let k = i % l.len();
                l[k] ^= b | 1;
            }
        }
        Mutation::HugeNumber(i, n) => {
            // In place of a number when the line has one there, else inserted.
            let k = at(*i);
            let start = l[k..].iter().position(u8::is_ascii_digit).map(|p| k + p);
            match start {
                Some(s) => {
                    let end = l[s..]
                        .iter()
                        .position(|c| !c.is_ascii_digit())
                        .map_or(l.len(), |p| s + p);
                    l.splice(s..end, n.bytes());
                }
                None => {
                    l.splice(k..k, n.bytes());
                }
            }
        }
        Mutation::Nest(i, d) => {
            let k = at(*i);
            let deep = format!("{}1{}", "[".repeat(*d), "]".repeat(*d));
            // As the value of a new key at the start of the object, when it is one.
            if l.first() == Some(&b'{') {
                l.splice(1..1, format!("\"zz\":{deep},").bytes());
            } else {
                l.splice(k..k, deep.bytes());
            }
        }
        Mutation::InvalidUtf8(i, b) => {
            let k = at(*i);
            l.splice(k..k, b.iter().copied());
        }
        Mutation::Splice(a, b) => {
            let k = at(*a);
            let j = if other.is_empty() { 0 } else { b % other.len() };
            l.truncate(k);
            l.extend_from_slice(&other[j..]);
        }
        Mutation::Bytes(b) => l = b.clone(),
        Mutation::Keep => {}
    }
    l
}

static RUNS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Feeds mangled lines to a new decoder of `vendor` and finishes it.
fn feed(vendor: &str, p: &SharedProvider, seeds: &[Vec<u8>], picks: &[(usize, usize, Mutation)]) {
    let mut d = p.decoder(&ParseContext::default());
    for (a, b, m) in picks {
        let line = apply(m, &seeds[a % seeds.len()], &seeds[b % seeds.len()]);
        let events = d.line(Line::Bytes(&line));
        let blank = line
            .strip_suffix(b"\r")
            .unwrap_or(&line)
            .iter()
            .all(u8::is_ascii_whitespace);
        assert!(
            blank || !events.is_empty(),
            "{vendor}: no event for {:?}",
            String::from_utf8_lossy(&line)
        );
        let _ = d.usage();
        let _ = d.finished();
    }
    let r = d.finish("some stderr\n", ExitStatus::Code(1));
    assert!(!r.provider.is_empty());
    let i = ["claude", "codex", "gemini"]
        .iter()
        .position(|v| *v == vendor)
        .unwrap_or(0);
    RUNS[i].fetch_add(picks.len() as u64, Ordering::Relaxed);
}

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

fn fuzz_vendor(vendor: &'static str) {
    let p = provider(vendor);
    let s = seeds(vendor);
    assert!(s.len() > 20, "{vendor}: {} seed lines", s.len());
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let started = std::time::Instant::now();
    let secs: u64 = std::env::var("FUZZ_SECS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut rounds = 0u32;
    loop {
        proptest!(config.clone(), |(picks in prop::collection::vec((any::<usize>(), any::<usize>(), mutation()), 1..12))| {
            feed(vendor, &p, &s, &picks);
        });
        rounds += 1;
        if started.elapsed().as_secs() >= secs {
            break;
        }
    }
    let i = ["claude", "codex", "gemini"]
        .iter()
        .position(|v| *v == vendor)
        .unwrap_or(0);
    println!(
        "fuzz {vendor}: {} lines decoded in {} runs, {:.1} s, 0 panics",
        RUNS[i].load(Ordering::Relaxed),
        u64::from(cases()) * u64::from(rounds),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn claude_decoder_survives_mangled_lines() {
    fuzz_vendor("claude");
}

#[test]
fn codex_decoder_survives_mangled_lines() {
    fuzz_vendor("codex");
}

#[test]
fn gemini_decoder_survives_mangled_lines() {
    fuzz_vendor("gemini");
}

/// 100k-deep nesting, inside a vendor line and alone, and a 50 MB line: an event each,
/// not a stack overflow or a hang (deep nesting where a field is read is a protocol
/// event; in a field the decoder skips it is skipped like any value).
#[test]
fn deep_nesting_and_a_50_mb_line_are_protocol_events() {
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let big_string = format!(
        r#"{{"type":"message","role":"assistant","content":"{}","delta":true}}"#,
        "x".repeat(50 << 20)
    );
    for vendor in ["claude", "codex", "gemini"] {
        let p = provider(vendor);
        let mut d = p.decoder(&ParseContext::default());
        for line in [
            deep.clone(),
            format!(r#"{{"type":"assistant","zz":{deep}}}"#),
            format!(r#"{{"zz":{deep},"type":"result"}}"#),
            format!(r#"{{"type":"system","subtype":"init","tools":{deep}}}"#),
        ] {
            let evs = d.line(Line::Bytes(line.as_bytes()));
            assert!(!evs.is_empty(), "{vendor}");
        }
        let evs = d.line(Line::Bytes(deep.as_bytes()));
        assert_eq!(
            evs[0].type_name(),
            "protocol",
            "{vendor}: {:?}",
            evs[0].kind
        );
        // A 50 MB line as the decoder sees it uncapped, and as a capped reader gives it.
        let evs = d.line(Line::Bytes(big_string.as_bytes()));
        assert!(!evs.is_empty(), "{vendor}");
        let evs = d.line(Line::Overlong {
            len: big_string.len() as u64,
            prefix: &big_string.as_bytes()[..4096],
            cap: 8 << 20,
        });
        assert_eq!(evs[0].type_name(), "protocol");
        let r = d.finish("", ExitStatus::Code(0));
        assert!(r.protocol_errors >= 3, "{vendor}: {}", r.protocol_errors);
    }
}
