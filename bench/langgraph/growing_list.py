"""Storage growth of a 1,000-step growing list: LangGraph's SqliteSaver against session-state.

    growing_list.py <compare_inproc example binary> <work dir> [steps]

Each step adds one item (a ~300-byte to-do record, the same bytes on both sides) to a list.

- LangGraph: a StateGraph whose `items` channel has no reducer, so the node returns the
  full list every step, checkpointed by SqliteSaver after every superstep: a full
  snapshot per step (LangGraph stores the channel's whole value in each checkpoint).
- session-state with `patch`: RFC 7396 replaces arrays wholesale, so a list cannot be
  appended to by a merge patch. The list is kept as an object keyed by index,
  {"0": item, "1": item, ...}, and each step patches in one key: `{"<i>": item}`.
- session-state with `set`: each step writes the whole array (a full snapshot per step,
  like LangGraph), for reference.

Both session-state variants run in one process, as a host would (`compare_inproc grow`:
`SessionState::patch` / `write`, each step durable and projected). Reported: the bytes the
events add to the session file (the store), and the size of the SQLite projection beside
it (a cache, rebuilt from the log at will). Prints one JSON object.
"""

import json
import os
import sqlite3
import subprocess
import sys
import time
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

WORDS = ("the session log keeps every entry as one line and branches form a tree so state "
         "follows the path from root to leaf while siblings never see writes").split()


def item(i):
    words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(30))
    return {"id": i, "title": f"task {i}: {words[:60]}", "note": words[:170],
            "done": False, "tags": ["bench", f"t{i % 7}"]}


def db_bytes(path):
    """The database's size once its WAL is checkpointed into it."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))


def langgraph(work, steps):
    path = os.path.join(work, "langgraph.sqlite")

    class State(TypedDict):
        items: list

    def step(state):
        return {"items": state["items"] + [item(len(state["items"]))]}

    def route(state):
        return END if len(state["items"]) >= steps else "step"

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", route)
    conn = sqlite3.connect(path, check_same_thread=False)
    app = g.compile(checkpointer=SqliteSaver(conn))
    t = time.perf_counter()
    cfg = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
    out = app.invoke({"items": []}, cfg)
    secs = time.perf_counter() - t
    assert len(out["items"]) == steps
    checkpoints = conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
    conn.close()
    return {"bytes": db_bytes(path), "checkpoints": checkpoints, "seconds": secs}


HEADER = ('{"type":"session","version":3,"id":"0199b000-0000-7000-8000-00000000beef",'
          '"timestamp":"2025-11-24T16:00:00.000Z","cwd":"/home/dev/acme-api"}\n')


def ours(binary, work, steps, mode):
    file = os.path.join(work, f"{mode}.jsonl")
    db = os.path.join(work, f"{mode}.sqlite")
    with open(file, "w") as f:
        f.write(HEADER)
    base = os.path.getsize(file)
    items = "".join(json.dumps(item(i), separators=(",", ":")) + "\n" for i in range(steps))
    out = subprocess.run([binary, "grow", file, db, mode], input=items.encode(),
                         check=True, capture_output=True)
    result = json.loads(out.stdout)
    assert result["steps"] == steps
    return {"log_bytes": os.path.getsize(file) - base, "projection_bytes": db_bytes(db),
            "seconds": result["seconds"]}


def main():
    binary, work = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    os.makedirs(work, exist_ok=True)
    lg = langgraph(work, steps)
    patch = ours(binary, work, steps, "patch")
    full = ours(binary, work, steps, "set")
    item_bytes = len(json.dumps(item(0), separators=(",", ":")))
    print(json.dumps({
        "steps": steps,
        "item_bytes": item_bytes,
        "langgraph_sqlitesaver": lg,
        "session_state_patch": patch,
        "session_state_set": full,
        "patch_log_vs_langgraph": patch["log_bytes"] / lg["bytes"],
        "patch_log_plus_projection_vs_langgraph":
            (patch["log_bytes"] + patch["projection_bytes"]) / lg["bytes"],
    }, indent=2))


if __name__ == "__main__":
    main()
