import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { InvalidArgumentError } from '@stowage/core';
import { checkString } from '@stowage/core/plugin-kit';
import { checkInputFile, inputFileError } from './checkInputFile.js';
import type { TraceEvent } from './TraceEvent.js';
import { isTraceAction, TRACE_ACTIONS } from './TraceEvent.js';

/** What readTrace reads, for messages. */
const TRACE_FILE = 'a trace file (JSON lines, gzipped when the name ends in .gz)';

/** Longest stretch of a bad line quoted in an error message. */
const QUOTE_CHARS = 120;

/**
 * Reads a trace in the JSON-lines format of `shared/traces` (one event object per line, recorded order), gzipped
 * when the path ends in `.gz`. Streams the file line by line; blank lines are skipped. Fields: `action`, `id`
 * (null or absent for `segment_*` and `oom`, read as -1), `size`, `stream` (default 0), `addr`, `pre`, `device`, `t_us`;
 * others are ignored.
 * @throws InvalidArgumentError naming the file and line when a line is not a trace event, or the file is not gzip;
 * for a `path` that is not a non-empty string, that is a directory or that this process may not read (as a rejection)
 * @throws MissingFileError (`FILE_NOT_FOUND`) when there is no file at `path`
 * @throws the file system's error for any other failure to read the file
 */
export async function readTrace(path: string): Promise<TraceEvent[]> {
  checkString('path', path, 'the path of a trace file (a non-empty string)');
  await checkInputFile(path, TRACE_FILE);
  // The callback form of pipeline destroys every stage on error, and parseTraceChunks sees the error (a read or
  // gunzip failure) or, when it throws itself, the loop's exit destroys the stages.
  const source: Readable = path.endsWith('.gz') ? pipeline(createReadStream(path), createGunzip(), () => {}) : createReadStream(path);
  try {
    return await parseTraceChunks(source as AsyncIterable<Buffer>, path);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('Z_')) {
      throw new InvalidArgumentError(`the trace file ${path}`, (error as Error).message, 'gzip-compressed JSON lines', { cause: error });
    }
    throw inputFileError(path, TRACE_FILE, error);
  }
}

/**
 * Parses a trace in the JSON-lines format of `shared/traces` from its (decompressed) bytes, given in chunks that
 * may split lines and characters anywhere: what {@link readTrace} does once it has opened the file, for bytes
 * that come from elsewhere (standard input, a buffer already read).
 * @param source names the input in error messages (a path, `standard input`)
 * @throws InvalidArgumentError naming `source` and the line when a line is not a trace event
 * @throws whatever iterating `chunks` throws
 */
export async function parseTraceChunks(chunks: AsyncIterable<Uint8Array> | Iterable<Uint8Array>, source: string): Promise<TraceEvent[]> {
  const events: TraceEvent[] = [];
  let line = 0;
  const decoder = new TextDecoder();
  let rest = '';
  for await (const chunk of chunks) {
    rest += decoder.decode(chunk, { stream: true });
    const lines = rest.split('\n');
    rest = lines.pop()!;
    for (const text of lines) {
      line++;
      const event = parseTraceLine(text, source, line);
      if (event) events.push(event);
    }
  }
  rest += decoder.decode();
  const event = parseTraceLine(rest, source, line + 1);
  if (event) events.push(event);
  return events;
}

/** Parses one line of a trace; undefined for a blank line. `line` is 1-based. */
function parseTraceLine(text: string, path: string, line: number): TraceEvent | undefined {
  const trimmed = text.trim();
  if (trimmed === '') return undefined;
  const where = `line ${line} of ${path}`;
  let record: unknown;
  try {
    record = JSON.parse(trimmed);
  } catch (error) {
    throw new InvalidArgumentError(where, quote(trimmed), 'one JSON object (a trace event)', { cause: error });
  }
  if (typeof record !== 'object' || record === null || Array.isArray(record)) {
    throw new InvalidArgumentError(where, quote(trimmed), 'one JSON object (a trace event)');
  }
  const r = record as Record<string, unknown>;
  if (!isTraceAction(r.action)) throw new InvalidArgumentError(`action on ${where}`, r.action, `one of ${TRACE_ACTIONS.join(', ')}`);
  const action = r.action;
  const size = r.size;
  if (!isByteCount(size)) throw new InvalidArgumentError(`size on ${where}`, size, 'a non-negative safe integer');
  const ownsId = action === 'alloc' || action === 'free_requested' || action === 'free_completed';
  let id = -1;
  if (ownsId || (r.id !== null && r.id !== undefined)) {
    if (!isByteCount(r.id)) throw new InvalidArgumentError(`id on ${where}`, r.id, `a non-negative safe integer (an ${action} event names its allocation)`);
    id = r.id;
  }
  const stream = r.stream ?? 0;
  if (!isByteCount(stream)) throw new InvalidArgumentError(`stream on ${where}`, stream, 'a non-negative safe integer');
  const event: { -readonly [K in keyof TraceEvent]: TraceEvent[K] } = { action, id, size, stream };
  if (r.addr !== null && r.addr !== undefined) {
    if (!isByteCount(r.addr)) throw new InvalidArgumentError(`addr on ${where}`, r.addr, 'a non-negative safe integer or null');
    event.addr = r.addr;
  }
  if (r.pre === true) event.pre = true;
  if (r.device !== null && r.device !== undefined) {
    if (!isByteCount(r.device)) throw new InvalidArgumentError(`device on ${where}`, r.device, 'a non-negative safe integer (a device index) or null');
    event.device = r.device;
  }
  if (typeof r.device_free === 'number') event.deviceFree = r.device_free;
  if (r.t_us !== undefined) {
    if (r.t_us !== null && typeof r.t_us !== 'number') throw new InvalidArgumentError(`t_us on ${where}`, r.t_us, 'a number or null');
    event.timeUs = r.t_us;
  }
  return event;
}

function isByteCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function quote(text: string): string {
  return text.length <= QUOTE_CHARS ? text : `${text.slice(0, QUOTE_CHARS)}…`;
}
