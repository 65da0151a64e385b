/**
 * `@session-state/pi/internal`: what the package's extension (`extension.ts`), its testing
 * kit (`testing.ts`) and its own tests share with the implementation (`state.ts`), kept
 * out of the main entry. No promise is made about these names: they change with the
 * package.
 */
export {
  closeSession,
  eventCountReport,
  eventCountsOf,
  eventOf,
  forgetStoresUnder,
  historyOf,
  historyReportOf,
  invalidateAll,
  native,
  newerStatesOf,
  registerRenderer,
  shared,
  storedAt,
  storeFor,
  syncSession,
  transcriptEnabled,
  valueAt,
  writeOut,
  type EventCount,
  type NewerState,
  type OpenedState,
} from "./state.ts";
