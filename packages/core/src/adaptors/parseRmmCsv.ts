import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

/** The first line of an RMM replay log, as `LoggingAllocator` writes it. */
export const RMM_CSV_HEADER = 'Thread,Time,Action,Pointer,Size,Stream';

/** What a line of an RMM replay log records. `allocate failure` lines have address 0. */
export type RmmLogAction = 'allocate' | 'free' | 'allocate failure';

/** One line of an RMM replay log (RMM `logging_resource_adaptor`, read by its `replay` benchmark). */
export interface RmmLogRecord {
  /** The Thread column: a small integer naming the thread, 0 for the main thread. */
  readonly thread: number;
  /** The Time column: seconds since the logger was created, to the microsecond. */
  readonly timeSeconds: number;
  readonly action: RmmLogAction;
  /** The Pointer column: the allocation's address (written `0x` + hex). */
  readonly address: number;
  /** The Size column: requested bytes. */
  readonly size: number;
  /** The Stream column. */
  readonly stream: number;
}

const ACTIONS: ReadonlySet<string> = new Set<RmmLogAction>(['allocate', 'free', 'allocate failure']);
const DECIMAL_INTEGER = /^\d+$/;
const DECIMAL_SECONDS = /^\d+(?:\.\d+)?$/;
const HEX_ADDRESS = /^0x[0-9a-f]+$/i;

/**
 * Parses an RMM replay log back into records, in line order. The header line is optional but, when present,
 * must be line 1; an empty last line (a trailing newline) is ignored; `\r\n` line ends are accepted.
 * @throws InvalidArgumentError naming the 1-based line number when a line is not six well-formed fields, or
 *   when `text` is not a string
 */
export function parseRmmCsv(text: string): RmmLogRecord[] {
  if (typeof text !== 'string') throw new InvalidArgumentError('text', text, 'a string holding an RMM replay log');
  const lines = text.split(/\r?\n/);
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  const records: RmmLogRecord[] = [];
  lines.forEach((line, i) => {
    if (i === 0 && line.trim() === RMM_CSV_HEADER) return;
    records.push(parseLine(line, i + 1));
  });
  return records;
}

function parseLine(line: string, lineNumber: number): RmmLogRecord {
  const fail = (expectation: string): never => {
    throw new InvalidArgumentError(`text line ${lineNumber}`, line, `a record ${RMM_CSV_HEADER} ${expectation}`);
  };
  const fields = line.split(',').map((f) => f.trim());
  if (fields.length !== 6) return fail(`of six comma-separated fields (it has ${fields.length})`);
  const [thread, time, action, pointer, size, stream] = fields as [string, string, string, string, string, string];
  const integer = (field: string, name: string): number => {
    const value = DECIMAL_INTEGER.test(field) ? Number(field) : Number.NaN;
    return Number.isSafeInteger(value) ? value : fail(`whose ${name} is a non-negative decimal integer`);
  };
  const record: RmmLogRecord = {
    thread: integer(thread, 'Thread'),
    timeSeconds: DECIMAL_SECONDS.test(time) ? Number(time) : fail('whose Time is non-negative seconds such as 0.000125'),
    action: ACTIONS.has(action) ? (action as RmmLogAction) : fail("whose Action is 'allocate', 'free' or 'allocate failure'"),
    address: HEX_ADDRESS.test(pointer) && Number.isSafeInteger(Number(pointer)) ? Number(pointer) : fail('whose Pointer is 0x followed by hex digits'),
    size: integer(size, 'Size'),
    stream: integer(stream, 'Stream'),
  };
  return record;
}
