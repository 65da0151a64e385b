// A Pi process that holds a session until it is killed: starts Pi on a new session in
// the directory given, makes the file, writes state, prints "READY <file>" and waits.
import { startPi, fauxAssistantMessage } from "./harness.ts";

const dir = process.argv[2];
if (!dir) throw new Error("usage: hold.ts <dir>");
const pi = await startPi({ dir });
pi.faux.setResponses([fauxAssistantMessage("hello")]);
await pi.session.prompt("hi");
await pi.command(`/probe {"op":"write","value":["held"]}`);
process.stdout.write(`READY ${pi.sm.getSessionFile()}\n`);
setInterval(() => {}, 1 << 30);
