import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

/** The first line of an RMM replay log, as `LoggingAllocator` writes it. */
export const RMM_CSV_HEADER = 'Thread,Time,Action,Pointer,Size,Stream';

/** What a line of an RMM replay log records. `allocate failure` lines have address 0. */
export type RmmLogAction = 'allocate' | 'free' | 'allocate failure';

/** One line of an RMM replay log (RMM `logging_resource_adaptor`, read by its `replay` benchmark). */
export interface RmmLogRecord {
  /** The Thread column: an integer naming the thread (0 for the main thread in LoggingAllocator's logs). */
  readonly thread: number;
  /** The Time column in seconds (RMM writes seconds or a time of day); null when the log has no Time column. */
  readonly timeSeconds: number | null;
  readonly action: RmmLogAction;
  /** The Pointer column: the allocation's address (`0x` + hex, or decimal). */
  readonly address: number;
  /** The Size column: requested bytes. */
  readonly size: number;
  /** The Stream column (hex or decimal stream handle); 0 when the log has none. */
  readonly stream: number;
}

/** A record and the 1-based line it came from, for readers that report later faults by line. */
export interface RmmLogLine {
  readonly record: RmmLogRecord;
  readonly line: number;
}

const COLUMNS = ['Thread', 'Time', 'Action', 'Pointer', 'Size', 'Stream'] as const;
const REQUIRED: readonly (typeof COLUMNS)[number][] = ['Action', 'Pointer', 'Size'];
const DECIMAL_INTEGER = /^\d+$/;
const INTEGER = /^(0x[0-9a-f]+|\d+)$/i;

/**
 * Parses an RMM replay log into records, in line order: the log `LoggingAllocator` writes, and logs RMM's
 * `logging_resource_adaptor` wrote. The header names the columns (any order; Action, Pointer and Size
 * required, Thread, Time and Stream optional); without one, the six columns of {@link RMM_CSV_HEADER} are
 * assumed. Blank lines are skipped and `\r\n` line ends accepted. Pointers and streams are hex (`0x…`) or
 * decimal; Time is seconds or a time of day (`08:20:17.637045`); a `deallocate` row reads as `free`.
 * @param source what to call the text in errors (a file name); default `'text'`
 * @throws InvalidArgumentError naming `source` and the 1-based line of a malformed line, or when `text` is not
 *   a string
 */
export function parseRmmCsv(text: string, source = 'text'): RmmLogRecord[] {
  return parseRmmCsvLines(text, source).map((l) => l.record);
}

/** As {@link parseRmmCsv}, with each record's line number. */
export function parseRmmCsvLines(text: string, source = 'text'): RmmLogLine[] {
  if (typeof text !== 'string') throw new InvalidArgumentError('text', text, 'a string holding an RMM replay log');
  if (typeof source !== 'string') throw new InvalidArgumentError('source', source, 'a string naming the text in errors (a file name)');
  const lines = text.split(/\r?\n/);
  const first = lines.findIndex((l) => l.trim() !== '');
  if (first < 0) return [];
  const firstFields = splitFields(lines[first]!);
  const hasHeader = firstFields.some((f) => COLUMNS.some((c) => c.toLowerCase() === f.toLowerCase()));
  const header = hasHeader ? firstFields : [...COLUMNS];
  const at = (name: string): number => header.findIndex((c) => c.toLowerCase() === name.toLowerCase());
  if (REQUIRED.some((name) => at(name) < 0)) {
    throw new InvalidArgumentError(`the header on line ${first + 1} of ${source}`, lines[first], `columns ${RMM_CSV_HEADER} (Action, Pointer and Size at least)`);
  }
  const columns = { thread: at('Thread'), time: at('Time'), action: at('Action'), pointer: at('Pointer'), size: at('Size'), stream: at('Stream') };
  const out: RmmLogLine[] = [];
  for (let i = hasHeader ? first + 1 : first; i < lines.length; i++) {
    if (lines[i]!.trim() === '') continue;
    out.push({ record: parseLine(lines[i]!, header, columns, `line ${i + 1} of ${source}`), line: i + 1 });
  }
  return out;
}

function splitFields(line: string): string[] {
  return line.split(',').map((f) => f.trim());
}

function parseLine(line: string, header: readonly string[], at: Record<'thread' | 'time' | 'action' | 'pointer' | 'size' | 'stream', number>, where: string): RmmLogRecord {
  const fail = (expectation: string): never => {
    throw new InvalidArgumentError(where, line, `a record ${header.join(',')} ${expectation}`);
  };
  const fields = splitFields(line);
  if (fields.length !== header.length) fail(`of ${header.length} comma-separated fields (it has ${fields.length})`);
  const field = (index: number): string | undefined => (index < 0 ? undefined : fields[index]);
  const integer = (text: string | undefined, name: string, pattern: RegExp, what: string): number => {
    if (text === undefined) return 0;
    const value = pattern.test(text) ? Number(text) : Number.NaN;
    return Number.isSafeInteger(value) ? value : fail(`whose ${name} is ${what}`);
  };
  const action = field(at.action)!.toLowerCase();
  const time = field(at.time);
  return {
    thread: integer(field(at.thread), 'Thread', DECIMAL_INTEGER, 'a non-negative decimal integer'),
    timeSeconds: time === undefined ? null : (parseSeconds(time) ?? fail('whose Time is non-negative seconds such as 0.000125, or a time of day such as 08:20:17.637045')),
    action: action === 'allocate' || action === 'free' || action === 'allocate failure' ? action : action === 'deallocate' ? 'free' : fail("whose Action is 'allocate', 'free' or 'allocate failure'"),
    address: integer(field(at.pointer), 'Pointer', INTEGER, 'an address, 0x followed by hex digits or decimal'),
    size: integer(field(at.size), 'Size', DECIMAL_INTEGER, 'a non-negative decimal integer'),
    stream: integer(field(at.stream), 'Stream', INTEGER, 'a stream handle, hex (0x…) or decimal'),
  };
}

/** Seconds (`1634567890.123456`) or a time of day (`08:20:17.637045`, `08:20:17:637045`); undefined otherwise. */
function parseSeconds(text: string): number | undefined {
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  const match = /^(\d+):(\d+):(\d+)(?:[.:](\d{1,6}))?$/.exec(text);
  if (!match) return undefined;
  const micros = Number((match[4] ?? '0').padEnd(6, '0'));
  return (((Number(match[1]) * 60 + Number(match[2])) * 60 + Number(match[3])) * 1e6 + micros) / 1e6;
}
