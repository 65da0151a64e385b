// A Pi process that holds a session until it is killed: starts Pi on a new session in
// the folder given, makes the file, writes state, prints `READY {"file","db"}` and waits.
import { startPi } from "@session-state/pi/testing";
import { TEST_EXTENSION } from "./helpers.ts";

const dir = process.argv[2];
if (!dir) throw new Error("usage: hold.ts <dir>");
const pi = await startPi({ dir, extensions: [TEST_EXTENSION] });
await pi.prompt("hi");
await pi.command(`/probe {"op":"write","value":["held"]}`);
process.stdout.write(`READY ${JSON.stringify({ file: pi.file, db: pi.databasePath })}\n`);
setInterval(() => {}, 1 << 30);
