#!/usr/bin/env python3
"""Runs a command N times; prints its median and minimum wall time and its peak RSS.

    proc_time.py N command [args...]

Whole-process figures, as a user at a shell sees them: process start, dynamic linking,
the runtime's start-up and exit are included. Peak RSS comes from wait4's ru_maxrss, so
it covers the process itself. Prints one JSON line; the command's exit status must be 0
(or 1 for `session-state read` on an absent value).
"""
import json
import os
import statistics
import sys
import tempfile
import time


def main():
    n = int(sys.argv[1])
    cmd = sys.argv[2:]
    times, rss = [], 0
    out = b""
    tmp = tempfile.mkdtemp(prefix="timeit.")
    out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
    for _ in range(n):
        start = time.perf_counter()
        pid = os.posix_spawnp(cmd[0], cmd, os.environ,
                              file_actions=[(os.POSIX_SPAWN_OPEN, 1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
                                            (os.POSIX_SPAWN_OPEN, 2, err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)])
        _, status, usage = os.wait4(pid, 0)
        times.append((time.perf_counter() - start) * 1e3)
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1):
            sys.stderr.write(open(err_path).read())
            raise SystemExit(f"{cmd[0]} exited with {code}")
        rss = max(rss, usage.ru_maxrss)
        out = open(out_path, "rb").read()
    for p in (out_path, err_path):
        os.remove(p)
    os.rmdir(tmp)
    print(json.dumps({
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "runs": n,
        "peak_rss_kib": rss,
        "stdout": out.decode(errors="replace").strip()[:500],
    }))


if __name__ == "__main__":
    main()
