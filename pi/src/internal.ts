/**
 * `@session-state/pi/internal`: what the package's extension (`extension.ts`), its testing
 * kit (`testing.ts`) and its own tests share with the implementation (`state.ts` and the
 * modules beside it), kept out of the main entry. No promise is made about these names:
 * they change with the package.
 */
export { eventOf } from "./event.ts";
export { leafWalk, native, OP_CODE, walkField } from "./native.ts";
export { writeOut } from "./output.ts";
export { eventCountReport, eventCountsOf, historyOf, historyReportOf, newerStatesOf, storedAt, valueAt } from "./queries.ts";
export { closeSession, syncSession } from "./session-file.ts";
export { shared } from "./shared.ts";
export { forgetStoresUnder, invalidateAll, storeFor } from "./stores.ts";
export { registerRenderer, transcriptEnabled } from "./transcript.ts";
export type { EventCount, NewerState, OpenedState, StatusReport } from "./types.ts";
