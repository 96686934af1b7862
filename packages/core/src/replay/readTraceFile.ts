import type { TraceFile } from './listTraces.js';
import { readRmmCsv } from './readRmmCsv.js';
import { readTrace } from './readTrace.js';
import type { TraceEvent } from './TraceEvent.js';

/**
 * Reads a trace that `listTraces` found, with the reader its kind needs (`readRmmCsv` for `rmm-csv`, else
 * `readTrace`). Throws what that reader throws.
 */
export function readTraceFile(file: TraceFile): Promise<TraceEvent[]> {
  return file.kind === 'rmm-csv' ? readRmmCsv(file.path) : readTrace(file.path);
}
