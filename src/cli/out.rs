//! Standard output that ends quietly when the reader goes away (`aicli runs | head -3`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `s` to stdout and flushes; `false` once stdout is closed (a broken pipe),
/// after which nothing more is written.
pub fn write_str(s: &str) -> bool {
    if CLOSED.load(Ordering::Relaxed) {
        return false;
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                CLOSED.store(true, Ordering::Relaxed);
            }
            false
        }
    }
}

/// Whether the reader of stdout went away.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Whether `e` is (caused by) a closed stdout: a broken pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
