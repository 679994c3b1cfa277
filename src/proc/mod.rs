//! Process supervision: spawn a command in its own process group, stream its stdout as
//! capped lines, drain its stderr into a bounded tail, and shut the whole tree down —
//! SIGTERM, a grace period, SIGKILL — on cancel, timeout and drop.
//!
//! "The whole tree" is every process of the run ([`tree::RunTree`]): its process group,
//! its cgroup where one can be made (every descendant is born in it), and the orphans
//! aicli adopts as their subreaper — a daemon that left the group and whose parent
//! exited at once is reparented to aicli and killed with its run. If aicli itself is
//! killed, the kernel kills the direct child (parent-death signal) and `aicli resume`
//! kills the rest from the run's recorded processes (its cgroup, or its marker). The child starts
//! the way `posix_spawn` starts one (a vfork'd clone, no copy of aicli's address space,
//! so spawning stays cheap however large aicli gets), and takes its containment steps
//! before its exec.
//!
//! - [`spawn`]: [`spawn::LocalProcess`], a running child and its shutdown;
//! - [`direct`]: how the child starts (parent-death signal, group, cgroup joined first);
//! - [`lines`]: stdout as bounded lines, stderr as a bounded tail;
//! - [`stdin`]: a two-way run's stdin and the stdout record it shares;
//! - [`capture`]: short commands, output captured;
//! - [`tree`]: every process of one run, signalled and killed;
//! - [`reaper`]: aicli as subreaper, and the zombies it reaps;
//! - [`procfs`]: what `/proc` says of processes;
//! - [`cgroup`]: per-run cgroups;
//! - [`leftovers`]: a run's recorded processes, and killing what a dead aicli left.

pub mod capture;
pub mod cgroup;
mod direct;
pub mod leftovers;
pub mod lines;
pub mod procfs;
pub mod reaper;
pub mod spawn;
pub mod stdin;
pub mod tree;
