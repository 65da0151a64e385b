#!/usr/bin/env python3
"""Whole-process `session-state write` against its floor, and a read after a foreign
append against a warm read (docs/spec.md §10), in one run on the same files.

    cli_write.py WORK BIN FLOOR [--sizes "1000 10000 100000"] [--runs N] [--before BIN]

WORK is a directory on a real disk (fdatasync is free on tmpfs); BIN our binary; FLOOR
`examples/write_floor` (release). For each size: a session is generated (`write_floor
gen`: benches/common's generator, 6.6 KB per entry), the projection warmed by one `read`
and one `write`, then N rounds, each running in turn and timing, as whole processes:
- `floor`: `write_floor raw` of a line as long as our event line (open with O_APPEND, one
  write(), fdatasync, exit) to a file beside the session;
- `write`: `session-state write FILE --plugin bench --value <i> --db DB` (a new value each
  time, so each appends an event);
- `before` (with --before): the same command of another build, on a copy of the session
  with its own database;
- `read`: `session-state read` with a warm projection (nothing new);
- `read_after_append`: a foreign entry (a `custom` line, as Pi's appendCustomEntry writes
  it, without fsync) appended behind the projection's back, then `session-state read`,
  which must catch up that one entry; the append is not timed.
Medians of wall time in ms (and of each child's CPU time, user + system: the disk is
shared, so wall times drift with other load while CPU times do not); prints one JSON
object. Generated files are deleted at the end.
"""
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time


CPU = {}


def run(cmd, ok=(0,), cpu=None):
    """Wall time in ms and stdout; with `cpu`, the child's CPU time (user + system, ms)
    is appended to CPU[cpu]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = (time.perf_counter() - t) * 1e3
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in ok:
        sys.stderr.write(p.stderr.decode(errors="replace"))
        raise SystemExit(f"{cmd[0]} exited with {p.returncode}")
    if cpu:
        used = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3
        CPU.setdefault(cpu, []).append(used)
    return dt, p.stdout.decode().strip()


def last_line(path):
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - 65536))
        return f.read().rstrip(b"\n").split(b"\n")[-1].decode()


def main():
    args = sys.argv[1:]
    work, bin_, floor = args[:3]
    sizes, runs, before = [1000, 10000, 100000], 15, None
    rest = args[3:]
    while rest:
        if rest[0] == "--sizes":
            sizes = [int(s) for s in rest[1].split()]
        elif rest[0] == "--runs":
            runs = int(rest[1])
        elif rest[0] == "--before":
            before = rest[1]
        else:
            raise SystemExit(f"unknown argument {rest[0]}")
        rest = rest[2:]
    out = {"runs": runs, "sizes": []}
    for n in sizes:
        file = os.path.join(work, f"w{n}.jsonl")
        db = os.path.join(work, f"w{n}.sqlite")
        raw = os.path.join(work, f"w{n}.raw")
        run([floor, "gen", file, str(n)])
        size = os.path.getsize(file)
        run([bin_, "read", file, "--plugin", "bench", "--db", db], ok=(0, 1))
        run([bin_, "write", file, "--plugin", "bench", "--value", "0", "--db", db])
        line = last_line(file)
        pad = "x" * max(0, len(line) - 2)
        floor_line = json.dumps(pad)  # a JSON string as long as the event line
        bfile = bdb = None
        if before:
            bfile, bdb = os.path.join(work, f"b{n}.jsonl"), os.path.join(work, f"b{n}.sqlite")
            subprocess.run(["cp", "--reflink=auto", file, bfile], check=True)
            run([before, "read", bfile, "--plugin", "bench", "--db", bdb], ok=(0, 1))
            run([before, "write", bfile, "--plugin", "bench", "--value", "0", "--db", bdb])
        t = {"floor": [], "write": [], "before": [], "read": [], "read_after_append": []}
        for i in range(1, runs + 1):
            t["floor"].append(run([floor, "raw", raw, floor_line], cpu="floor")[0])
            dt, printed = run([bin_, "write", file, "--plugin", "bench", "--value", str(i), "--db", db], cpu="write")
            assert len(printed) == 8, printed
            t["write"].append(dt)
            if before:
                t["before"].append(run([before, "write", bfile, "--plugin", "bench", "--value", str(i), "--db", bdb], cpu="before")[0])
            t["read"].append(run([bin_, "read", file, "--plugin", "bench", "--db", db], cpu="read")[0])
            parent = json.loads(last_line(file))["id"]
            entry = {"type": "custom", "customType": "other-extension", "data": {"i": i},
                     "id": "%08x" % random.getrandbits(32), "parentId": parent,
                     "timestamp": "2026-12-01T00:00:00.000Z"}
            with open(file, "a") as f:
                f.write(json.dumps(entry, separators=(",", ":")) + "\n")
            dt, value = run([bin_, "read", file, "--plugin", "bench", "--db", db], cpu="read_after_append")
            assert json.loads(value) == i, value
            t["read_after_append"].append(dt)
        med = {k: statistics.median(v) for k, v in t.items() if v}
        mins = {k: min(v) for k, v in t.items() if v}
        cpu = {k: statistics.median(v) for k, v in CPU.items()}
        CPU.clear()
        out["sizes"].append({"entries": n, "bytes": size, "line_bytes": len(line) + 1,
                             "median_ms": med, "min_ms": mins, "cpu_median_ms": cpu})
        for p in [file, db, db + "-wal", db + "-shm", raw] + ([bfile, bdb, bdb + "-wal", bdb + "-shm"] if before else []):
            if p and os.path.exists(p):
                os.remove(p)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
