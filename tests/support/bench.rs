//! What the benches share beyond the harness: their command lines, this process's CPU.

/// A bench's positional arguments `[TASKS [PARALLEL...]]` (flags such as cargo's
/// `--bench` left out), with these defaults.
pub fn tasks_and_parallels(
    default_tasks: usize,
    default_parallels: &[usize],
) -> (usize, Vec<usize>) {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(default_tasks);
    let mut parallels: Vec<usize> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    if parallels.is_empty() {
        parallels = default_parallels.to_vec();
    }
    (n, parallels)
}

/// This process's own CPU (user + system) so far.
pub fn self_cpu() -> std::time::Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
