import { readFile } from 'node:fs/promises';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import type { TraceEvent } from './TraceEvent.js';

/** Columns of RMM's `logging_resource_adaptor` CSV; Thread and Time are optional for replay. */
const REQUIRED_COLUMNS = ['Action', 'Pointer', 'Size'] as const;

/**
 * Reads a replay log written by RMM's `logging_resource_adaptor` (see {@link parseRmmCsvLog}).
 * @throws InvalidArgumentError naming the file and line of a malformed row
 * @throws the file system's error when the file cannot be read
 */
export async function readRmmCsv(path: string): Promise<TraceEvent[]> {
  return parseRmmCsvLog(await readFile(path, 'utf8'), path);
}

/**
 * Parses the CSV text of an RMM replay log: a header `Thread,Time,Action,Pointer,Size,Stream` and one row per
 * call. `allocate` rows become `alloc` events with fresh ids 0, 1, 2…; a `free` (or `deallocate`) row becomes a
 * `free_requested` event for the live allocation at its pointer. `allocate failure` rows are ignored, and so are
 * frees of pointers the log never allocated (the log began after them). Pointers and streams may be hex (`0x…`)
 * or decimal; `stream` keeps the stream handle's value. `Time` (seconds, or `HH:MM:SS.ffffff`) becomes `timeUs`
 * relative to the first row, or null when it is absent or unreadable.
 * @param source the file name to cite in errors
 * @throws InvalidArgumentError naming `source` and the line when the header lacks a required column, a row has
 * too few fields, an unknown action, a size that is not a byte count, a pointer that is not a number, or
 * allocates a non-null pointer that is still live
 */
export function parseRmmCsvLog(text: string, source = 'the RMM log'): TraceEvent[] {
  const lines = text.split(/\r?\n/);
  const headerIndex = lines.findIndex((l) => l.trim() !== '');
  if (headerIndex < 0) return [];
  const header = lines[headerIndex]!.split(',').map((c) => c.trim());
  const column = (name: string): number => header.findIndex((c) => c.toLowerCase() === name.toLowerCase());
  for (const name of REQUIRED_COLUMNS) {
    if (column(name) < 0) {
      throw new InvalidArgumentError(`the header on line ${headerIndex + 1} of ${source}`, lines[headerIndex], 'Thread,Time,Action,Pointer,Size,Stream');
    }
  }
  const at = { action: column('Action'), pointer: column('Pointer'), size: column('Size'), stream: column('Stream'), time: column('Time') };
  const events: TraceEvent[] = [];
  /** Ids of live allocations by normalized pointer; the null pointer (zero-byte allocations) may repeat. */
  const live = new Map<string, number[]>();
  let nextId = 0;
  let firstTimeUs: number | undefined;
  for (let i = headerIndex + 1; i < lines.length; i++) {
    const row = lines[i]!;
    if (row.trim() === '') continue;
    const where = `line ${i + 1} of ${source}`;
    const fields = row.split(',').map((f) => f.trim());
    if (fields.length < header.length) throw new InvalidArgumentError(where, row, `a row of ${header.length} comma-separated fields (${header.join(',')})`);
    const action = fields[at.action]!.toLowerCase();
    if (action === 'allocate failure') continue;
    if (action !== 'allocate' && action !== 'free' && action !== 'deallocate') {
      throw new InvalidArgumentError(`Action on ${where}`, fields[at.action], "'allocate', 'allocate failure' or 'free'");
    }
    const size = fields[at.size]!;
    if (!/^\d+$/.test(size) || !Number.isSafeInteger(Number(size))) throw new InvalidArgumentError(`Size on ${where}`, size, 'a byte count');
    const pointer = parseInteger(fields[at.pointer]!);
    if (pointer === undefined) throw new InvalidArgumentError(`Pointer on ${where}`, fields[at.pointer], 'a hex (0x…) or decimal address');
    const stream = at.stream < 0 ? 0 : parseInteger(fields[at.stream]!);
    if (stream === undefined) throw new InvalidArgumentError(`Stream on ${where}`, fields[at.stream], 'a hex (0x…) or decimal stream handle');
    let timeUs: number | null = null;
    const absoluteUs = at.time < 0 ? undefined : parseTimeUs(fields[at.time]!);
    if (absoluteUs !== undefined) {
      firstTimeUs ??= absoluteUs;
      timeUs = absoluteUs - firstTimeUs;
    }
    const key = pointer.toString();
    const ids = live.get(key);
    if (action === 'allocate') {
      if (ids !== undefined && pointer !== 0n) {
        throw new InvalidArgumentError(`Pointer on ${where}`, fields[at.pointer], 'an address that is not live (it was allocated and not yet freed)');
      }
      const id = nextId++;
      if (ids) ids.push(id);
      else live.set(key, [id]);
      events.push({ action: 'alloc', id, size: Number(size), stream: Number(stream), addr: Number(pointer), timeUs });
    } else if (ids !== undefined) {
      const id = ids.pop()!;
      if (ids.length === 0) live.delete(key);
      events.push({ action: 'free_requested', id, size: Number(size), stream: Number(stream), addr: Number(pointer), timeUs });
    }
  }
  return events;
}

/** `0x1f` or `31` as a bigint; undefined otherwise. */
function parseInteger(text: string): bigint | undefined {
  return /^(0x[0-9a-f]+|\d+)$/i.test(text) ? BigInt(text) : undefined;
}

/** Seconds (`1634567890.123456`) or a time of day (`08:20:17.637045`, `08:20:17:637045`) in microseconds. */
function parseTimeUs(text: string): number | undefined {
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1e6);
  const match = /^(\d+):(\d+):(\d+)(?:[.:](\d{1,6}))?$/.exec(text);
  if (!match) return undefined;
  const micros = Number((match[4] ?? '0').padEnd(6, '0'));
  return ((Number(match[1]) * 60 + Number(match[2])) * 60 + Number(match[3])) * 1e6 + micros;
}
