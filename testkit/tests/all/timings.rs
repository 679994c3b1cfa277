//! Start-to-exit time of each CLI's plain answer against its fake (3 runs each).
//! Ignored by default: `cargo test -p aicli-testkit --test all timings -- --ignored --nocapture`.

use aicli_testkit::{FakeApi, Script, Vendor, WiringOptions};

use crate::common::run;

#[tokio::test]
#[ignore = "measurement; run by hand"]
async fn timings() {
    let gemini_m = WiringOptions::default().with_model("gemini-2.5-flash");
    for (vendor, options, label) in [
        (Vendor::Anthropic, WiringOptions::default(), "claude"),
        (Vendor::OpenAi, WiringOptions::default(), "codex -m gpt-5.5"),
        (Vendor::Gemini, gemini_m, "gemini -m gemini-2.5-flash"),
        (Vendor::Gemini, WiringOptions::default(), "gemini (router)"),
    ] {
        let mut times = Vec::new();
        for _ in 0..3 {
            let fake = FakeApi::start(vendor, Script::new()).await.unwrap();
            let r = run(&fake, &fake.wiring_with(&options), "Say hello", &[]).await;
            assert_eq!(r.code, Some(0), "{}", r.describe());
            times.push(r.elapsed.as_secs_f64());
        }
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        println!(
            "{label:<27} start-to-exit: {} (mean {mean:.2} s)",
            times
                .iter()
                .map(|t| format!("{t:.2} s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}
