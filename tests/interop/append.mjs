// append.mjs — let Pi append to an existing (or new) session file.
//
//   node append.mjs <major> <file> <n> [customType]
//
// Opens <file> with Pi <major> (1 or 0) and appends n entries at Pi's leaf (the last entry in
// file order), alternating: a user message, then a custom entry of customType (default
// "session-state/append") with data {"v":1,"scope":"branch","op":"set","value":<k>}, where k
// counts the custom entries written by this call, from 1.
// Prints {"ids": [...appended ids], "leafId": getLeafId()}.
//
// Pi's own rules apply: 1.x creates a missing file at the first user message; 0.73 writes
// nothing until the session holds an assistant message, so on a file without one its
// appends stay in memory.

import { loadPi, main, setEv, usageError, user } from "./lib.mjs";

const USAGE = "append.mjs <1|0> <file> <n> [customType]";

await main(USAGE, async ([major, file, nArg, customType = "session-state/append"]) => {
  const n = Number(nArg);
  if (!major || !file || !Number.isInteger(n) || n < 0) throw usageError("bad arguments");
  const SessionManager = await loadPi(major);
  const sm = SessionManager.open(file);
  const ids = [];
  let k = 0;
  for (let i = 0; i < n; i++) {
    ids.push(i % 2 === 0
      ? sm.appendMessage(user(`Appended message ${i + 1} of ${n}.`))
      : sm.appendCustomEntry(customType, setEv("branch", ++k)));
  }
  return { ids, leafId: sm.getLeafId() };
});
