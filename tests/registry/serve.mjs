// An npm registry on loopback for tests/pi_install.rs: verdaccio with its storage in the
// directory given, no uplinks (it serves only what the test publishes, and a package it
// does not hold is a 404, never a request elsewhere), anyone may publish.
//
//   node serve.mjs <dir>
//
// Listens on 127.0.0.1 on a port the system picks and prints `{"port":N}` once it accepts
// connections. Runs until killed.
import * as path from "node:path";
import { runServer } from "verdaccio";

const dir = process.argv[2];
if (!dir || !path.isAbsolute(dir)) throw new Error("usage: node serve.mjs <absolute storage dir>");

const server = await runServer({
  self_path: dir,
  storage: path.join(dir, "storage"),
  uplinks: {},
  packages: { "**": { access: "$all", publish: "$all", unpublish: "$all" } },
  auth: { htpasswd: { file: path.join(dir, "htpasswd") } },
  log: { type: "stdout", format: "json", level: "warn" },
  web: { enable: false },
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`);
});
