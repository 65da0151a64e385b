// For the terminal test (tests/pi_tui.rs): says when Pi's interactive mode is ready for
// input (session_start runs after the editor takes commands), so the test never types
// into a Pi that is still starting.
export default function (pi: any) {
  pi.on("session_start", (_e: unknown, ctx: any) => {
    ctx.ui.notify("tui-test: ready", "info");
  });
}
