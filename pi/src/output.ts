/** Where a command's answer goes in Pi's print and JSON modes. */
import * as fs from "node:fs";
import { shared } from "./shared.ts";

/**
 * @internal Writes a command's answer where print and JSON modes show it: `fd` 1 or 2
 * directly (Pi redirects `process.stdout` to stderr in those modes), or the testing kit's
 * capture.
 */
export function writeOut(stream: "stdout" | "stderr", text: string): void {
  const line = text.endsWith("\n") ? text : `${text}\n`;
  if (shared.printSink) return shared.printSink(stream, line);
  const buf = Buffer.from(line);
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(stream === "stdout" ? 1 : 2, buf, off);
    } catch (e) {
      // A non-blocking pipe that is full: wait for the reader.
      if ((e as NodeJS.ErrnoException).code !== "EAGAIN") throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
    }
  }
}
