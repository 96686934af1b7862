// @stowage/lab/replay (Node only): the trace readers (PyTorch JSON-lines traces, RMM logs, PyTorch's reference
// figures) and replaying a trace on an allocator: an instrument, not part of the library.
export { findTraceRoot, TRACE_ROOT_ENV } from './findTraceRoot.js';
export type { TraceFile, TraceKind } from './listTraces.js';
export { listTraces } from './listTraces.js';
export { MissingFileError } from './MissingFileError.js';
export { parseRmmCsvLog, readRmmCsv } from './readRmmCsv.js';
export { parseTraceChunks, readTrace } from './readTrace.js';
export { readTraceFile } from './readTraceFile.js';
export type { ReplayOptions, ReplayResult } from './replayTrace.js';
export { replayTrace } from './replayTrace.js';
export { ReplayStoppedError } from './ReplayStoppedError.js';
export type { TraceAction, TraceEvent } from './TraceEvent.js';
export { isTraceAction, TRACE_ACTIONS } from './TraceEvent.js';
export type { TraceSummary } from './traceSummary.js';
export { traceSummary } from './traceSummary.js';
export type { PytorchReference } from './readPytorchReference.js';
export { readPytorchReference } from './readPytorchReference.js';
