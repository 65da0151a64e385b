// An npm registry on loopback: verdaccio with its storage in the directory given, no
// uplinks (it serves only what is published to it, and a package it does not hold is a
// 404, never a request elsewhere), anyone may publish. tests/pi_install.rs starts it, and
// pi/RELEASING.md shows how to start it by hand.
//
//   node serve.mjs <absolute storage dir> [port]
//
// verdaccio must be installed beside this file (`npm ci` here, from package-lock.json), and
// it needs Node 22 or newer. Listens on 127.0.0.1, on `port` (default 0: a port the system
// picks), and prints `{"port":N}` once it accepts connections. Runs until killed.
import * as path from "node:path";
import { runServer } from "verdaccio";

const dir = process.argv[2];
const port = Number(process.argv[3] ?? 0);
if (!dir || !path.isAbsolute(dir) || !Number.isInteger(port) || port < 0 || port > 65535) {
  throw new Error("usage: node serve.mjs <absolute storage dir> [port]");
}

const server = await runServer({
  self_path: dir,
  storage: path.join(dir, "storage"),
  uplinks: {},
  packages: { "**": { access: "$all", publish: "$all", unpublish: "$all" } },
  auth: { htpasswd: { file: path.join(dir, "htpasswd") } },
  log: { type: "stdout", format: "json", level: "warn" },
  web: { enable: false },
});
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`);
});
