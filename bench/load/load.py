#!/usr/bin/env python3
"""Many writers at once: `session-state write` processes on many sessions, on the three
backends, with a count of lost and duplicated writes. Run it through `bench/load/run`.

    load.py BIN [--backends files,sqlite,postgres] [--sessions 16] [--writers 32]
            [--writes 100] [--db-per-writer] [--json OUT]

For each backend, the same load:
- SESSIONS sessions, copies of fixtures/example.jsonl under new session ids (for a store,
  imported into it with `session-state import`);
- WRITERS threads started together, writer k on session k % SESSIONS, each running WRITES
  `session-state write SESSION --plugin wK --value {"w":K,"i":I}` commands one after
  another, each a whole process (so WRITERS / SESSIONS writers race on every session);
  every process is timed from spawn to exit;
- one projection database for all writers (one machine), or with --db-per-writer one per
  writer (each writer a machine of its own);
- the backends: `files` (the Pi JSONL files themselves), `sqlite` (a SQLite store,
  `--store sqlite:///…`), `postgres` (a PostgreSQL store on a server this script starts
  on loopback with `fsync = on`, and stops).
A write is acknowledged when the command exits 0 and prints the new entry's id. Then every
session is read back (the file itself; `session-state export` for a store) and every
acknowledged id must be there exactly once, in the session it was written to: a missing
one is *lost*; a value (K, I) stored more than once is *duplicated*; a value stored though
its command failed is counted apart (*stored, not acknowledged*: allowed only when the
command said the outcome was unknown).

Prints a table and, with --json, writes every figure. Throughput: acknowledged writes per
second of wall time, from the start of the first writer to the end of the last. Latency:
p50 and p99 of the acknowledged commands. Everything generated is deleted at the end.
"""
import argparse
import collections
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "fixtures", "example.jsonl")


def log(msg):
    sys.stderr.write(f"[load {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def child_env(work):
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.path.join(work, "home"),
        "PI_CODING_AGENT_DIR": os.path.join(work, "agent"),
    }
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def make_sessions(work, n):
    """n copies of the example session under new ids: [(id, path)]."""
    with open(EXAMPLE, encoding="utf-8") as f:
        header, rest = f.read().split("\n", 1)
    sessions = []
    os.makedirs(os.path.join(work, "sessions"), exist_ok=True)
    for _ in range(n):
        h = json.loads(header)
        h["id"] = str(uuid.uuid4())
        path = os.path.join(work, "sessions", f"{h['id']}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(h, separators=(",", ":")) + "\n" + rest)
        sessions.append((h["id"], path))
    return sessions


class Postgres:
    """A PostgreSQL server of our own on loopback (as the `postgres` user when root),
    with a database `load`; stopped and removed by stop()."""

    def __init__(self, parent):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        self.bindir = out.stdout.strip() if out.returncode == 0 else "/usr/lib/postgresql/15/bin"
        if not os.path.isfile(os.path.join(self.bindir, "initdb")):
            raise SystemExit(
                f"no initdb in {self.bindir}: install PostgreSQL's server (postgresql-15)"
            )
        self.root = os.geteuid() == 0
        self.dir = tempfile.mkdtemp(prefix="session-state-load-pg-", dir=parent)
        if self.root:
            subprocess.run(["chown", "postgres:postgres", self.dir], check=True)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        data = os.path.join(self.dir, "data")
        self.run("initdb", "-D", data, "-U", "postgres", "-E", "UTF8", "--auth=trust",
                 "--no-sync", "--locale=C")
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=on "
                f"-c synchronous_commit=on -c max_connections=200")
        self.run("pg_ctl", "start", "-D", data, "-l", os.path.join(self.dir, "server.log"),
                 "-o", opts, "-w", "-t", "60")
        self.started = True
        self.run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "load")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/load"

    def run(self, program, *args):
        cmd = [os.path.join(self.bindir, program), *args]
        if self.root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{program} failed: {p.stdout}{p.stderr}")

    def stop(self):
        if getattr(self, "started", False):
            try:
                self.run("pg_ctl", "stop", "-D", os.path.join(self.dir, "data"), "-m", "fast",
                         "-w", "-t", "60")
            except SystemExit as e:
                log(str(e))
        shutil.rmtree(self.dir, ignore_errors=True)


def percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def stored_events(lines):
    """The state events of a session's lines: [(entry id, writer, i)]."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        e = json.loads(line)
        ct = e.get("customType") or ""
        if e.get("type") != "custom" or not ct.startswith("session-state/w"):
            continue
        value = (e.get("data") or {}).get("value") or {}
        out.append((e.get("id"), value.get("w"), value.get("i")))
    return out


def read_back(backend, bin_path, env, sessions, url):
    """Every session's lines, as stored."""
    result = {}
    for sid, path in sessions:
        if backend == "files":
            with open(path, encoding="utf-8") as f:
                result[sid] = f.read().splitlines()[1:]
        else:
            p = subprocess.run([bin_path, "export", sid, "--store", url], env=env,
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"export {sid}: {p.stderr}")
            result[sid] = p.stdout.splitlines()[1:]
    return result


def run_backend(backend, args, parent):
    work = tempfile.mkdtemp(prefix=f"session-state-load-{backend}-", dir=parent)
    pg = None
    try:
        env = child_env(work)
        sessions = make_sessions(work, args.sessions)
        url = None
        if backend == "sqlite":
            url = f"sqlite://{os.path.join(work, 'store.sqlite')}"
        elif backend == "postgres":
            pg = Postgres(parent)
            url = pg.url
        if url:
            for sid, path in sessions:
                p = subprocess.run([args.bin, "import", path, "--store", url], env=env,
                                   capture_output=True, text=True)
                if p.returncode != 0 or p.stdout.strip() != sid:
                    raise SystemExit(f"import {path}: {p.stdout}{p.stderr}")
        targets = [sid if url else path for sid, path in sessions]

        acked = []  # (latency s, writer, i, entry id, session index)
        failed = []  # (latency s, writer, i, first line of stderr, session index)
        lock = threading.Lock()
        barrier = threading.Barrier(args.writers + 1)

        def writer(k):
            s = k % args.sessions
            db = os.path.join(work, f"db-{k}" if args.db_per_writer else "db", "states.sqlite")
            os.makedirs(os.path.dirname(db), exist_ok=True)
            base = [args.bin, "write", targets[s], "--plugin", f"w{k}", "--db", db]
            if url:
                base += ["--store", url]
            barrier.wait()
            for i in range(args.writes):
                cmd = base + ["--value", json.dumps({"w": k, "i": i}, separators=(",", ":"))]
                t = time.perf_counter()
                p = subprocess.run(cmd, env=env, capture_output=True, text=True)
                dt = time.perf_counter() - t
                with lock:
                    if p.returncode == 0 and p.stdout.strip():
                        acked.append((dt, k, i, p.stdout.strip(), s))
                    else:
                        first = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[0]
                        failed.append((dt, k, i, first, s))

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(args.writers)]
        for t in threads:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start

        stored = read_back(backend, args.bin, env, sessions, url)
        by_id = collections.defaultdict(list)  # (session, id) -> [(w, i)]
        by_value = collections.Counter()  # (session, w, i) -> copies
        for s, (sid, _) in enumerate(sessions):
            for eid, w, i in stored_events(stored[sid]):
                by_id[(s, eid)].append((w, i))
                by_value[(s, w, i)] += 1
        lost = sum(1 for (_, k, i, eid, s) in acked if (k, i) not in by_id.get((s, eid), []))
        duplicated = sum(c - 1 for c in by_value.values() if c > 1)
        acked_values = {(s, k, i) for (_, k, i, _, s) in acked}
        unacked_stored = sum(1 for (_, k, i, _, s) in failed if by_value.get((s, k, i)))
        reasons = collections.Counter(reason_of(f[3]) for f in failed)
        lat = [a[0] for a in acked]
        return {
            "backend": backend,
            "sessions": args.sessions,
            "writers": args.writers,
            "writes_each": args.writes,
            "db_per_writer": args.db_per_writer,
            "attempted": args.writers * args.writes,
            "acknowledged": len(acked),
            "failed": len(failed),
            "failure_reasons": dict(reasons),
            "wall_s": round(wall, 3),
            "throughput_per_s": round(len(acked) / wall, 1) if wall else None,
            "p50_ms": round(1e3 * statistics.median(lat), 1) if lat else None,
            "p99_ms": round(1e3 * percentile(lat, 99), 1) if lat else None,
            "lost": lost,
            "duplicated": duplicated,
            "stored_not_acknowledged": unacked_stored,
            "acknowledged_distinct": len(acked_values),
        }
    finally:
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


def reason_of(line):
    """A refusal's kind, for the summary."""
    for needle, kind in [
        ("expected first_seq", "lost races (sequence)"),
        ("is locked by", "lock held"),
        ("being written by", "lock busy (store)"),
        ("database is locked", "database is locked"),
        ("unknown", "outcome unknown"),
        ("too many clients", "too many clients"),
    ]:
        if needle in line:
            return kind
    return line[:120]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bin")
    ap.add_argument("--backends", default="files,sqlite,postgres")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--writers", type=int, default=32)
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--db-per-writer", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    parent = os.environ.get("BENCH_DIR", tempfile.gettempdir())
    results = []
    for backend in args.backends.split(","):
        log(f"{backend}: {args.sessions} sessions, {args.writers} writers x {args.writes} writes")
        r = run_backend(backend, args, parent)
        log(json.dumps(r))
        results.append(r)
    print("| backend | acknowledged | failed | wall (s) | writes/s | p50 (ms) | p99 (ms) "
          "| lost | duplicated | stored, not acknowledged |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['backend']} | {r['acknowledged']} / {r['attempted']} | {r['failed']} "
              f"| {r['wall_s']} | {r['throughput_per_s']} | {r['p50_ms']} | {r['p99_ms']} "
              f"| {r['lost']} | {r['duplicated']} | {r['stored_not_acknowledged']} |")
    for r in results:
        if r["failure_reasons"]:
            print(f"{r['backend']}: failures: {json.dumps(r['failure_reasons'])}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    bad = [r for r in results if r["lost"] or r["duplicated"]]
    if bad:
        raise SystemExit(f"lost or duplicated writes: {[r['backend'] for r in bad]}")


if __name__ == "__main__":
    main()
