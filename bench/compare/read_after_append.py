#!/usr/bin/env python3
"""A `read` after one foreign append against a warm `read`, whole process.

    read_after_append.py BIN FILE DB RUNS

Warms the projection at DB with one `BIN read`, then RUNS rounds of: a warm `read`
(timed), a foreign `custom` entry appended to FILE as Pi's appendCustomEntry writes it
(not timed), a `read` that must catch it up (timed). Prints the medians of wall and CPU
time (user + system of the child) in ms. Run it with two builds on two copies of a
session to compare them.
"""
import json, os, random, resource, statistics, subprocess, sys, time
bin_, file, db, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def last_id():
    with open(file, "rb") as f:
        f.seek(max(0, os.path.getsize(file) - 65536)); return json.loads(f.read().rstrip(b"\n").split(b"\n")[-1])["id"]
def run(cmd):
    b = resource.getrusage(resource.RUSAGE_CHILDREN); t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
    a = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (time.perf_counter() - t) * 1e3, (a.ru_utime - b.ru_utime + a.ru_stime - b.ru_stime) * 1e3
subprocess.run([bin_, "read", file, "--plugin", "bench", "--db", db], stdout=subprocess.DEVNULL)
w, c, w0, c0 = [], [], [], []
for i in range(runs):
    x = run([bin_, "read", file, "--plugin", "bench", "--db", db]); w0.append(x[0]); c0.append(x[1])
    e = {"type": "custom", "customType": "other-extension", "data": {"i": i}, "id": "%08x" % random.getrandbits(32), "parentId": last_id(), "timestamp": "2026-12-01T00:00:00.000Z"}
    open(file, "a").write(json.dumps(e, separators=(",", ":")) + "\n")
    x = run([bin_, "read", file, "--plugin", "bench", "--db", db]); w.append(x[0]); c.append(x[1])
print(json.dumps({"read_ms": statistics.median(w0), "read_cpu_ms": statistics.median(c0), "after_append_ms": statistics.median(w), "after_append_cpu_ms": statistics.median(c)}))
