// The core's memo of a state's last event, as the package drives it through the addon: a
// write on top of the event Pi appended for the last decision starts from the value after
// it (the addon's one `decide` answers through the memo: its `way` is `"memo"`) once the
// addon is told which entry that is, and only then; otherwise it decides as a read reads.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { leafWalk, native, OP_CODE, walkField } from "@session-state/pi/internal";
import { removeTmpDir } from "./helpers.ts";

const ts = "2026-12-01T10:00:00.000Z";

/** A session file with one foreign entry `m1`, a store and a `todo` state on it. */
function setup() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "session-state-memo-"));
  const file = path.join(dir, "s.jsonl");
  const lines = [
    { type: "session", version: 3, id: "memo-1", timestamp: ts, cwd: dir },
    { type: "custom", customType: "other", data: {}, id: "m1", parentId: null, timestamp: ts },
  ];
  fs.writeFileSync(file, lines.map((l) => JSON.stringify(l) + "\n").join(""));
  const store = new native.NativeStore(path.join(dir, "db.sqlite"), dir, "trusted");
  const state = new native.NativeState("todo", "branch", 1);
  return { dir, file, store, state };
}

/** Appends what Pi would for a decided event's `data`: an entry `id` under `parent`. */
function appendEvent(file: string, data: string, id: string, parent: string) {
  const entry = { type: "custom", customType: "session-state/todo", data: JSON.parse(data), id, parentId: parent, timestamp: ts };
  fs.appendFileSync(file, JSON.stringify(entry) + "\n");
}

/**
 * `decide` with a walk that asks the memo, as the package calls it, from the parts: Pi's
 * `leaf`, its entries from the leaf up as pairs of values (each one's `parentId` and
 * `customType`), the entry told and its parent (`null`: none to tell).
 */
function onLast(
  store: InstanceType<typeof native.NativeStore>,
  state: InstanceType<typeof native.NativeState>,
  file: string,
  leaf: string,
  since: (string | undefined)[],
  op: keyof typeof OP_CODE,
  argument: string | null,
  told: string | null,
  toldParent: string | null,
) {
  const fields = [told === null ? "-\0-" : `${walkField(told)}\0${walkField(toldParent)}`, walkField(leaf)];
  for (let i = 0; i + 1 < since.length; i += 2) fields.push((since[i + 1] === "session-state/todo" ? "c" : "o") + walkField(since[i]));
  return store.decide(state, file, fields.join("\0"), OP_CODE[op], argument);
}

/** The data the core prints for `set` of `argument` in a branch-scope state of version 1. */
const setData = (argument: string) => `{"v":1,"scope":"branch","op":"set","value":${argument}}`;

test("told which entry Pi appended, the memo answers the next write without reading the file", () => {
  const { dir, file, store, state } = setup();
  try {
    // The core's data is the envelope of the caller's text: `true`, as the memo answers.
    assert.equal(store.decide(state, file, leafWalk("m1"), OP_CODE.set, "[1]"), true);
    appendEvent(file, setData("[1]"), "e1", "m1");
    const second = onLast(store, state, file, "e1", [], "set", "[2]", "e1", "m1");
    assert.equal(second, true, "the memo answers once told: the envelope of the caller's text");
    assert.equal(state.way, "memo");
    appendEvent(file, setData("[2]"), "e2", "e1");
    // A message of Pi's on top; the equal value changes nothing, told or not.
    fs.appendFileSync(file, JSON.stringify({ type: "custom", customType: "other", data: {}, id: "m2", parentId: "e2", timestamp: ts }) + "\n");
    assert.equal(onLast(store, state, file, "m2", ["e2", undefined], "set", "[2]", "e2", "e1"), null);
    // Told once: the next write on the same event answers without telling it again.
    const third = onLast(store, state, file, "m2", ["e2", undefined], "set", "[3]", null, null);
    assert.equal(third, true, "the memo still answers");
    assert.equal(state.way, "memo");
  } finally {
    removeTmpDir(dir);
  }
});

test("a text the core prints otherwise gets the core's data, not the envelope of the text", () => {
  const { dir, file, store, state } = setup();
  try {
    assert.equal(store.decide(state, file, leafWalk("m1"), OP_CODE.set, "[1]"), true);
    appendEvent(file, setData("[1]"), "e1", "m1");
    // Spaces, and a key order JavaScript does not keep: printed as JSON.stringify would.
    const data = onLast(store, state, file, "e1", [], "set", '{ "b": [ 2 ], "1": 0 }', "e1", "m1");
    assert.equal(data, setData('{"1":0,"b":[2]}'));
    appendEvent(file, data as string, "e2", "e1");
    // A patch printed as its text: confirmed as well.
    assert.equal(onLast(store, state, file, "e2", [], "patch", '{"a":1}', "e2", "e1"), true);
  } finally {
    removeTmpDir(dir);
  }
});

test("not told, told twice, or told an entry under another parent, the memo does not answer", () => {
  for (const tell of [null, "twice", "wrong-parent"] as const) {
    const { dir, file, store, state } = setup();
    try {
      assert.equal(store.decide(state, file, leafWalk("m1"), OP_CODE.set, "[1]"), true);
      appendEvent(file, setData("[1]"), "e1", "m1");
      let answer;
      if (tell === null) {
        answer = onLast(store, state, file, "e1", [], "set", "[2]", null, null);
      } else if (tell === "wrong-parent") {
        answer = onLast(store, state, file, "e1", [], "set", "[2]", "e1", "x");
      } else {
        assert.equal(onLast(store, state, file, "e1", [], "set", "[1]", "e1", "m1"), null);
        answer = onLast(store, state, file, "e1", [], "set", "[2]", "e1", "m1");
      }
      assert.equal(answer, true, `${tell}: the same decision`);
      assert.equal(state.way, "store", `${tell}: the write reads the file`);
      // The file's way, asked for, gives the same decision.
      assert.equal(store.decide(state, file, leafWalk("e1"), OP_CODE.set, "[2]"), true);
      // A text the core prints otherwise: its data.
      assert.equal(store.decide(state, file, leafWalk("e1"), OP_CODE.set, "[ 2 ]"), setData("[2]"));
    } finally {
      removeTmpDir(dir);
    }
  }
});

test("the walk carries ids as `-` or `+id`; an id with a NUL is never put in one, and a malformed walk is refused", () => {
  assert.equal(walkField(null), "-");
  assert.equal(walkField(undefined), "-");
  assert.equal(walkField(""), "+");
  assert.equal(walkField("a-b"), "+a-b");
  assert.equal(walkField("a\0b"), undefined);
  assert.equal(leafWalk(null), "=-");
  assert.equal(leafWalk("a\0b"), "=+a\0b");
  const { dir, file, store, state } = setup();
  try {
    for (const walk of ["", "-\0-", "x\0-\0+e1", "-\0-\0+e1\0z+m1", "-\0-\0+e1\0", "=", "=m1"]) {
      assert.throws(() => store.decide(state, file, walk, OP_CODE.set, "[1]"), /a malformed walk of Pi's entries/, JSON.stringify(walk));
    }
    // Well formed, nothing kept yet: the memo cannot answer, the file is read.
    assert.equal(store.decide(state, file, "-\0-\0+m1", OP_CODE.set, "[1]"), true);
    assert.equal(state.way, "store");
    assert.throws(() => store.decide(state, file, "-\0-\0+m1", 7, "[1]"), /no such operation: 7/);
  } finally {
    removeTmpDir(dir);
  }
});
