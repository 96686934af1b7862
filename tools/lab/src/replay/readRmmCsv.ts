import { readFile } from 'node:fs/promises';
import { parseRmmCsvLines } from '@stowage/core/plugin-kit';
import { InvalidArgumentError } from '@stowage/core';
import { checkString } from '@stowage/core/plugin-kit';
import { checkInputFile, inputFileError } from './checkInputFile.js';
import type { TraceEvent } from './TraceEvent.js';

/**
 * Reads a replay log written by RMM's `logging_resource_adaptor` (see {@link parseRmmCsvLog}).
 * @throws InvalidArgumentError naming the file and line of a malformed row, or for a `path` that is not a non-empty
 * string, that is a directory or that this process may not read
 * @throws MissingFileError (`FILE_NOT_FOUND`) when there is no file at `path`
 * @throws the file system's error for any other failure to read the file
 */
export async function readRmmCsv(path: string): Promise<TraceEvent[]> {
  checkString('path', path, 'the path of an RMM log (a non-empty string)');
  const expected = "an RMM log (the CSV of RMM's logging_resource_adaptor)";
  await checkInputFile(path, expected);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw inputFileError(path, expected, error);
  }
  return parseRmmCsvLog(text, path);
}

/**
 * The trace events of an RMM replay log, parsed by core's one RMM reader (`parseRmmCsv`): `allocate` rows become
 * `alloc` events with fresh ids 0, 1, 2…; a `free` row becomes a `free_requested` event for the live allocation at
 * its pointer. `allocate failure` rows are ignored, and so are frees of pointers the log never allocated (the log
 * began after them). `stream` keeps the stream handle's value; `timeUs` is relative to the first row, or null
 * when the log has no Time column.
 * @param source the file name to cite in errors
 * @throws InvalidArgumentError naming `source` and the line for a malformed row (see `parseRmmCsv`) or a non-null
 * pointer allocated while still live
 */
export function parseRmmCsvLog(text: string, source = 'the RMM log'): TraceEvent[] {
  if (typeof text !== 'string') throw new InvalidArgumentError('text', text, "the text of an RMM log (readRmmCsv reads a file's)");
  const events: TraceEvent[] = [];
  /** Ids of live allocations by pointer; the null pointer (zero-byte allocations) may repeat. */
  const live = new Map<number, number[]>();
  let nextId = 0;
  let firstTimeUs: number | undefined;
  for (const { record, line } of parseRmmCsvLines(text, source)) {
    if (record.action === 'allocate failure') continue;
    let timeUs: number | null = null;
    if (record.timeSeconds !== null) {
      const absoluteUs = Math.round(record.timeSeconds * 1e6);
      firstTimeUs ??= absoluteUs;
      timeUs = absoluteUs - firstTimeUs;
    }
    const { size, stream, address: addr } = record;
    const ids = live.get(addr);
    if (record.action === 'allocate') {
      if (ids !== undefined && addr !== 0) {
        throw new InvalidArgumentError(`Pointer on line ${line} of ${source}`, `0x${addr.toString(16)}`, 'an address that is not live (it was allocated and not yet freed)');
      }
      const id = nextId++;
      if (ids) ids.push(id);
      else live.set(addr, [id]);
      events.push({ action: 'alloc', id, size, stream, addr, timeUs });
    } else if (ids !== undefined) {
      const id = ids.pop()!;
      if (ids.length === 0) live.delete(addr);
      events.push({ action: 'free_requested', id, size, stream, addr, timeUs });
    }
  }
  return events;
}
