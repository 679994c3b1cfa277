//! What the benches share beyond the harness: their command lines.

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
