import type { TraceFile } from './listTraces.js';
import { readRmmCsv } from './readRmmCsv.js';
import { readTrace } from './readTrace.js';
import type { TraceEvent } from './TraceEvent.js';
import { InvalidArgumentError } from '@stowage/core';

/**
 * Reads a trace that `listTraces` found, with the reader its kind needs (`readRmmCsv` for `rmm-csv`, else
 * `readTrace`). Rejects with what that reader throws, and with InvalidArgumentError for a `file` that is not
 * an object.
 */
export async function readTraceFile(file: TraceFile): Promise<TraceEvent[]> {
  if (typeof file !== 'object' || file === null) throw new InvalidArgumentError('file', file, 'a TraceFile from listTraces');
  return file.kind === 'rmm-csv' ? readRmmCsv(file.path) : readTrace(file.path);
}
