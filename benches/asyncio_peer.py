"""The orchestrator users would otherwise write: Python asyncio, run by the benches.

`benches/pool.rs` and `benches/batch_binary.rs` run this script next to aicli, in the
same run, on the same child binary, transcript and parallelism. It is the original
design's shape: `asyncio.create_subprocess_exec` under a semaphore, the prompt on the
child's stdin, stderr drained concurrently, every NDJSON line of stdout read and
`json.loads`-ed, each task's events written to a file and its result written as JSON.

    python3 asyncio_peer.py MODE --tasks N --parallel P --out DIR [--repo REPO] -- CMD...

MODE is `pool` (each task runs in DIR/<task>: no worktrees, as the pool bench's engine
runs) or `worktree` (each task gets `git worktree add` of REPO's HEAD on a branch of
its own, runs there, and the worktree is removed with `git worktree remove` at its end,
as `aicli batch` does by default). CMD is the child's argv. Prints one JSON object on
stdout: wall and CPU seconds (this process alone, its children excluded), peak RSS,
tasks succeeded, and each task's spawn-to-first-line latency (ms).
"""

import argparse
import asyncio
import json
import os
import resource
import sys
import time


async def git(repo, *args):
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=repo,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {err.decode(errors='replace')}")


async def run_task(task_id, prompt, cmd, task_dir, cwd):
    """One task: spawn, read every line, write its events and its result."""
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE if prompt is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    if prompt is not None:
        try:
            proc.stdin.write(prompt.encode())
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child did not read it: its exit code says what happened
        proc.stdin.close()
    stderr_task = asyncio.ensure_future(proc.stderr.read())
    first_line_ms = None
    session_id = None
    result = None
    text = []
    n_events = 0
    with open(os.path.join(task_dir, "events.ndjson"), "wb") as events:
        async for line in proc.stdout:
            if first_line_ms is None:
                first_line_ms = (time.monotonic() - t0) * 1000.0
            events.write(line)
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            n_events += 1
            session_id = ev.get("session_id", session_id)
            kind = ev.get("type")
            if kind == "assistant":
                for block in ev.get("message", {}).get("content", []):
                    if block.get("type") == "text":
                        text.append(block.get("text", ""))
            elif kind == "result" or "total_cost_usd" in ev:
                result = ev
    stderr = await stderr_task
    code = await proc.wait()
    ok = code == 0 and result is not None and not result.get("is_error", False)
    with open(os.path.join(task_dir, "result.json"), "w") as f:
        json.dump(
            {
                "task_id": task_id,
                "status": "succeeded" if ok else "failed",
                "exit_code": code,
                "session_id": session_id,
                "answer": (result or {}).get("result") or "".join(text),
                "cost_usd": (result or {}).get("total_cost_usd"),
                "usage": (result or {}).get("usage"),
                "events": n_events,
                "stderr": stderr.decode(errors="replace")[-4096:],
                "duration_ms": (time.monotonic() - t0) * 1000.0,
            },
            f,
        )
    return ok, first_line_ms


REPO_LOCK = asyncio.Lock()


async def task(i, args, sem):
    async with sem:
        task_id = f"t{i}"
        task_dir = os.path.join(args.out, task_id)
        os.makedirs(task_dir, exist_ok=True)
        cwd = task_dir
        try:
            if args.mode == "worktree":
                cwd = os.path.join(args.out, "worktrees", task_id)
                # One worktree change at a time: concurrent `git worktree add`s read each
                # other's half-made metadata and fail ("failed to read .../commondir").
                async with REPO_LOCK:
                    await git(args.repo, "worktree", "add", "--quiet", "-b",
                              f"peer/{os.path.basename(args.out)}/{task_id}", cwd, "HEAD")
            try:
                # The prompt on stdin in worktree mode (the CLI of `aicli batch` reads
                # it); the pool bench's child gets none, as the engine's replay provider.
                prompt = f"task {task_id}: say hello" if args.mode == "worktree" else None
                return await run_task(task_id, prompt, args.cmd, task_dir, cwd)
            finally:
                if args.mode == "worktree":
                    async with REPO_LOCK:
                        await git(args.repo, "worktree", "remove", "--force", cwd)
        except Exception as e:  # one task's failure is its own, as in a batch
            print(f"{task_id}: {e}", file=sys.stderr)
            return False, None


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["pool", "worktree"])
    p.add_argument("--tasks", type=int, required=True)
    p.add_argument("--parallel", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--repo")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.cmd = argv[cut + 1:]
    if not args.cmd:
        p.error("give the child's command after --")
    sem = asyncio.Semaphore(args.parallel)
    t0 = time.monotonic()
    outcomes = await asyncio.gather(*(task(i, args, sem) for i in range(args.tasks)))
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    json.dump(
        {
            "wall_s": wall,
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "peak_rss_mib": ru.ru_maxrss / 1024.0,
            "succeeded": sum(1 for ok, _ in outcomes if ok),
            "first_line_ms": [ms for _, ms in outcomes if ms is not None],
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    asyncio.run(main())
