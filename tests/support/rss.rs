//! Peak resident memory of a child process, read from `/proc`.

use std::process::{Child, ExitStatus};
use std::time::Duration;

/// The peak RSS (`VmHWM`, KiB) of a running `child`, polled every `every` until it
/// exits, and how it exited.
pub fn peak_rss_kib(child: &mut Child, every: Duration) -> (u64, ExitStatus) {
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib);
        }
        if let Some(s) = child.try_wait().expect("wait") {
            return (peak, s);
        }
        std::thread::sleep(every);
    }
}
