/**
 * session-state for Pi extensions (docs/spec.md §9): the API of pi-session-state, answered by the
 * Rust core through a native addon, with the state kept in Pi's own session log.
 *
 * ```ts
 * import { openSessionState, branchKey } from "@session-state/pi";
 * export default function (pi: ExtensionAPI) {
 *   const role = openSessionState<Role>(pi, { pluginId: "role", scope: "branch" });
 *   pi.registerCommand("role", { handler: async (args, ctx) => role.write(ctx, { name: args }) });
 * }
 * ```
 *
 * - Writes go through `pi.appendEntry` (Pi writes the line) with the §3 envelope, and are
 *   on disk (`fdatasync`) when `write` returns once the file exists. Before Pi has created
 *   the file, they stay in Pi's memory (visible to reads) and are synced when it does.
 * - Reads are always at Pi's in-memory leaf (`ctx.sessionManager.getLeafId()`).
 * - Bad input throws an `Error` with the Rust core's message; nothing is appended.
 * - A state has a version of its shape (`version`, default 1), recorded in every event it
 *   writes; an older value is migrated in memory (`migrate`), a newer one is refused
 *   (`StateVersionError`); `validate` checks values on read and write (`StateValidationError`).
 *
 * This entry exports what an extension uses. What the package's own extension and testing
 * kit share with it is `@session-state/pi/internal` (`internal.ts`): no promise is made
 * about it.
 */
export { STATE_PREFIX } from "./native.ts";
export { branchKey, openSessionState } from "./state.ts";
export { StateMigrationError, StateValidationError, StateVersionError } from "./errors.ts";
export type {
  HistoryEntry,
  PiContext,
  PiHandle,
  Scope,
  SessionState,
  SessionStateOptions,
  StoredValue,
  Validate,
} from "./types.ts";
