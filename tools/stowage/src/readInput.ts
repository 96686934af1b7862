import { readFileSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import { gunzipSync } from 'node:zlib';
import type { MemorySnapshot } from '@stowage/core';
import { InvalidArgumentError, isStowageError } from '@stowage/core';
import type { TraceEvent } from '@stowage/lab/replay';
import { parseRmmCsvLog, readTrace } from '@stowage/lab/replay';
import { fromPytorchSnapshot, readSnapshotPickle, toTraceEvents } from '@stowage/snapshot-pickle';
import { MissingFileError } from './MissingFileError.js';
import { UnknownFormatError } from './UnknownFormatError.js';
import type { AllocatorEventRecord } from './toChromeTrace.js';

/** The formats the command reads, told apart by their first bytes (never by the file name). */
export type InputFormat = 'trace-jsonl' | 'rmm-csv' | 'snapshot-pickle' | 'snapshot-json';

/** What a command was given: the trace it holds and, for a snapshot, the snapshot itself. */
export interface Input {
  readonly path: string;
  /** The file name without `.jsonl.gz`, `.jsonl`, `.csv`, `.pickle` or `.json`: the name the traces README uses. */
  readonly name: string;
  readonly format: InputFormat;
  /** The trace, ready for `replayTrace` (for a snapshot: its `device_traces[device]` by `toTraceEvents`). */
  readonly events: TraceEvent[];
  /** Set for `snapshot-pickle` and `snapshot-json`. */
  readonly snapshot?: MemorySnapshot;
  /**
   * A recording's trace (a `snapshot-json` that `MemoryEventRecorder#toSnapshot` wrote, whose trace has LMS or IPC
   * events, which `snapshot.device_traces` leaves out): every entry of the device's trace, in order.
   */
  readonly recorded?: AllocatorEventRecord[];
}

/** What every reading command takes, for messages. */
export const INPUT_FORMATS = 'a trace (JSON lines, .jsonl or .jsonl.gz), a PyTorch snapshot pickle, a Stowage snapshot (.json) or an RMM CSV log';
const SNAPSHOT_FORMATS = 'a snapshot (a PyTorch snapshot pickle or a Stowage snapshot .json)';

const GZIP_MAGIC = [0x1f, 0x8b] as const;
const PICKLE_PROTO = 0x80;
/** Bytes of an unrecognized file quoted in the error. */
const QUOTE_BYTES = 16;

/**
 * Reads a trace or snapshot file, whatever its format (see {@link InputFormat}).
 * @param device which device's trace of a snapshot (an index into `device_traces`)
 * @throws MissingFileError when there is no file at `path`
 * @throws UnknownFormatError when the file is in no format the command reads, or is a damaged one (the reader's
 * error, a MalformedPickleError say, is its `cause`, and its message is quoted)
 */
export async function readInput(path: string, device = 0): Promise<Input> {
  const bytes = readBytes(path, INPUT_FORMATS);
  const name = basename(path).replace(/\.(jsonl\.gz|jsonl|csv|pickle|pkl|json|gz)$/i, '');
  const gzipped = bytes[0] === GZIP_MAGIC[0] && bytes[1] === GZIP_MAGIC[1];
  let content: Uint8Array = bytes;
  if (gzipped) {
    try {
      content = gunzipSync(bytes);
    } catch (error) {
      throw new UnknownFormatError(path, `it is a damaged gzip file (${(error as Error).message})`, INPUT_FORMATS, { cause: error });
    }
  }
  const format = detectFormat(path, content);
  return readAs(path, format, async () => {
    switch (format) {
      case 'snapshot-pickle':
      case 'snapshot-json': {
        const raw: unknown = format === 'snapshot-json' ? JSON.parse(text(content)) : undefined;
        const snapshot = format === 'snapshot-pickle' ? readSnapshotPickle(content) : fromPytorchSnapshot(raw as Parameters<typeof fromPytorchSnapshot>[0]);
        const recorded = raw === undefined ? undefined : recordedTrace(raw, device);
        return { path, name, format, events: toTraceEvents(snapshot, { device }), snapshot, ...(recorded ? { recorded } : {}) };
      }
      case 'rmm-csv':
        return { path, name, format, events: parseRmmCsvLog(text(content), path) };
      case 'trace-jsonl':
        if (gzipped && !path.endsWith('.gz')) throw new UnknownFormatError(path, 'it is gzipped JSON lines whose name does not end in .gz (rename it)', INPUT_FORMATS);
        return { path, name, format, events: await readTrace(path) };
    }
  });
}

/**
 * Reads a snapshot file: a PyTorch snapshot pickle or a Stowage snapshot as JSON.
 * @throws MissingFileError, UnknownFormatError as {@link readInput}; UnknownFormatError for a trace (which has no
 * segments: the message says to make a snapshot of it with `stowage snapshot`)
 */
export async function readSnapshotInput(path: string, device = 0): Promise<Input & { readonly snapshot: MemorySnapshot }> {
  readBytes(path, SNAPSHOT_FORMATS);
  const input = await readInput(path, device);
  if (input.snapshot === undefined) {
    throw new UnknownFormatError(path, `it is ${input.format === 'rmm-csv' ? 'an RMM CSV log' : 'a trace'}; make a snapshot of it first with \`stowage snapshot ${path} -o snapshot.json\``, SNAPSHOT_FORMATS);
  }
  return input as Input & { readonly snapshot: MemorySnapshot };
}

/** The actions a recording adds to PyTorch's (LMS and IPC events). */
const RECORDED_ACTIONS = new Set(['page_out', 'page_in', 'ipc_send', 'ipc_receive', 'ipc_limbo', 'ipc_collect']);

/**
 * The trace of `device` in a parsed snapshot JSON when it holds recorded LMS or IPC events; undefined otherwise.
 * @throws InvalidArgumentError naming the first entry that is not `{ action, addr, size, stream }`
 */
function recordedTrace(raw: unknown, device: number): AllocatorEventRecord[] | undefined {
  const entries = (raw as { device_traces?: unknown[][] }).device_traces?.[device];
  if (!Array.isArray(entries) || !entries.some((e) => RECORDED_ACTIONS.has((e as { action?: unknown })?.action as string))) return undefined;
  return entries.map((e: unknown, i) => {
    const r = e as Record<string, unknown>;
    const at = `snapshot.device_traces[${device}][${i}]`;
    if (typeof r?.action !== 'string') throw new InvalidArgumentError(`${at}.action`, r?.action, 'an action name');
    for (const key of ['addr', 'size', 'stream'] as const) {
      if (typeof r[key] !== 'number' || !Number.isSafeInteger(r[key]) || (r[key] as number) < 0) throw new InvalidArgumentError(`${at}.${key}`, r[key], 'a non-negative safe integer');
    }
    return { action: r.action, addr: r.addr as number, size: r.size as number, stream: r.stream as number, timeUs: typeof r.time_us === 'number' ? r.time_us : null };
  });
}

function readBytes(path: string, expected: string): Uint8Array {
  try {
    if (statSync(path).isDirectory()) throw new UnknownFormatError(path, 'it is a directory', expected);
    return readFileSync(path);
  } catch (error) {
    if (isStowageError(error)) throw error;
    const code = (error as { code?: unknown }).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new MissingFileError(path, expected, { cause: error });
    throw new UnknownFormatError(path, `it cannot be read (${(error as Error).message})`, expected, { cause: error });
  }
}

function detectFormat(path: string, content: Uint8Array): InputFormat {
  if (content[0] === PICKLE_PROTO) return 'snapshot-pickle';
  const head = text(content.subarray(0, 4096)).replace(/^\uFEFF/, '');
  const firstLine = head.split('\n').find((l) => l.trim() !== '')?.trim() ?? '';
  if (firstLine.startsWith('{')) {
    // One object per line is a trace; a snapshot is one object, usually over many lines or one long line.
    if (/"action"\s*:/.test(firstLine) && !/"segments"\s*:/.test(firstLine.slice(0, 200))) return 'trace-jsonl';
    return 'snapshot-json';
  }
  if (/\bAction\b/.test(firstLine) && /\bPointer\b/.test(firstLine) && firstLine.includes(',')) return 'rmm-csv';
  throw new UnknownFormatError(path, content.length === 0 ? 'it is empty' : `it begins with ${describeHead(content)}`, INPUT_FORMATS);
}

/** Runs `read`, turning a reader's typed error (a bad line, a malformed pickle, bad JSON) into UnknownFormatError. */
async function readAs(path: string, format: InputFormat, read: () => Promise<Input>): Promise<Input> {
  try {
    return await read();
  } catch (error) {
    if (error instanceof UnknownFormatError || error instanceof MissingFileError) throw error;
    if (isStowageError(error) || error instanceof SyntaxError) {
      throw new UnknownFormatError(path, `reading it as ${FORMAT_NAMES[format]} failed: ${(error as Error).message.replace(/\.$/, '')}`, INPUT_FORMATS, { cause: error });
    }
    throw error;
  }
}

const FORMAT_NAMES: Record<InputFormat, string> = {
  'trace-jsonl': 'a JSON-lines trace',
  'rmm-csv': 'an RMM CSV log',
  'snapshot-pickle': 'a PyTorch snapshot pickle',
  'snapshot-json': 'a Stowage snapshot (JSON)',
};

function text(bytes: Uint8Array): string {
  return new TextDecoder().decode(bytes);
}

function describeHead(bytes: Uint8Array): string {
  const head = bytes.subarray(0, QUOTE_BYTES);
  const printable = [...head].every((b) => b === 0x09 || b === 0x0a || b === 0x0d || (b >= 0x20 && b < 0x7f));
  return printable ? JSON.stringify(text(head)) : `the bytes ${[...head].map((b) => b.toString(16).padStart(2, '0')).join(' ')}`;
}
