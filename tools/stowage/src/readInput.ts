import { open, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import type { MemorySnapshot } from '@stowage/core';
import { InvalidArgumentError, isStowageError } from '@stowage/core';
import type { TraceEvent } from '@stowage/lab/replay';
import { MissingFileError, parseRmmCsvLog, parseTraceChunks } from '@stowage/lab/replay';
import { fromPytorchSnapshot, MalformedPickleError, readSnapshotPickle, toTraceEvents, UnsafePickleError } from '@stowage/snapshot-pickle';
import { MissingDeviceError } from './MissingDeviceError.js';
import { UnknownFormatError } from './UnknownFormatError.js';
import { UnreadablePickleError } from './UnreadablePickleError.js';
import type { AllocatorEventRecord } from './toChromeTrace.js';

/** The formats the command reads, told apart by their first bytes (never by the file name). */
export type InputFormat = 'trace-jsonl' | 'rmm-csv' | 'snapshot-pickle' | 'snapshot-json';

/** What a command was given: the trace it holds and, for a snapshot, the snapshot itself. */
export interface Input {
  /** The path as the user gave it; `-` for standard input. */
  readonly path: string;
  /**
   * The file name without `.jsonl.gz`, `.jsonl`, `.csv`, `.pickle` or `.json`: the name the traces README uses;
   * `stdin` for standard input.
   */
  readonly name: string;
  readonly format: InputFormat;
  /** The device whose trace `events` is: `--device`, or the input's first device (see {@link inputDevices}). */
  readonly device: number;
  /** Every device the input has something on, ascending. */
  readonly devices: readonly number[];
  /** The trace, ready for `replayTrace` (for a snapshot: its `device_traces[device]` by `toTraceEvents`). */
  readonly events: TraceEvent[];
  /** Set for `snapshot-pickle` and `snapshot-json`. */
  readonly snapshot?: MemorySnapshot;
  /** Set for `snapshot-json`: the document as parsed, for exporting it as is (a recording's extra keys included). */
  readonly json?: unknown;
  /**
   * A recording's trace (a `snapshot-json` that `MemoryEventRecorder#toSnapshot` wrote, whose trace has LMS or IPC
   * events, which `snapshot.device_traces` leaves out): every entry of the device's trace, in order.
   */
  readonly recorded?: AllocatorEventRecord[];
}

/** How to read an input. */
export interface ReadInputOptions {
  /**
   * Which device's trace (an index into a snapshot's `device_traces`; a trace's lines' `device`). Undefined: a
   * snapshot's first device, a trace's every line.
   */
  readonly device?: number | undefined;
  /** Called as the bytes are read, decompressed and parsed, with the phase (`reading`, `decompressing`, `parsing`). */
  readonly onProgress?: ((phase: ReadPhase, done: number, total: number) => void) | undefined;
  /** Where `-` reads from; standard input by default. */
  readonly stdin?: NodeJS.ReadableStream & { readonly isTTY?: boolean };
}

/** The phases of reading an input, in order (`decompressing` only for gzip, `parsing` for JSON lines). */
export type ReadPhase = 'reading' | 'decompressing' | 'parsing';

/** What every reading command takes, for messages. */
export const INPUT_FORMATS = 'a trace (JSON lines, .jsonl or .jsonl.gz), a PyTorch snapshot pickle, a Stowage snapshot (.json) or an RMM CSV log; - reads standard input';
const SNAPSHOT_FORMATS = 'a snapshot (a PyTorch snapshot pickle or a Stowage snapshot .json)';

const GZIP_MAGIC = [0x1f, 0x8b] as const;
const PICKLE_PROTO = 0x80;
const STOP = 0x2e;
/** Bytes of an unrecognized file quoted in the error. */
const QUOTE_BYTES = 16;
/** Bytes read, decompressed or parsed between two progress reports. */
const CHUNK_BYTES = 1 << 20;

/**
 * Reads a trace or snapshot file, or standard input for `-`, whatever its format (see {@link InputFormat}).
 * @throws MissingFileError when there is no file at `path`
 * @throws UnknownFormatError when the file is in no format the command reads, or is a damaged one (the reader's
 * error is its `cause`, and its message is quoted)
 * @throws UnreadablePickleError (`MALFORMED_PICKLE`, `UNSAFE_PICKLE`) for a pickle the reader refuses
 * @throws MissingDeviceError when `options.device` names a device the input has nothing on
 * @throws InvalidArgumentError for `-` when standard input is a terminal, and for an empty path
 */
export async function readInput(path: string, options: ReadInputOptions = {}): Promise<Input> {
  const progress = options.onProgress ?? (() => {});
  const bytes = await readBytes(path, INPUT_FORMATS, options.stdin ?? process.stdin, progress);
  const shown = path === '-' ? 'standard input' : path; // how messages name the input
  const name = path === '-' ? 'stdin' : basename(path).replace(/\.(jsonl\.gz|jsonl|csv|pickle|pkl|json|gz)$/i, '');
  let content: Uint8Array = bytes;
  if (bytes[0] === GZIP_MAGIC[0] && bytes[1] === GZIP_MAGIC[1]) {
    try {
      content = await gunzip(bytes, (done, total) => progress('decompressing', done, total));
    } catch (error) {
      throw new UnknownFormatError(shown, `it is a damaged gzip file (${(error as Error).message})`, INPUT_FORMATS, { cause: error });
    }
  }
  const format = detectFormat(shown, content);
  const read = await readAs(shown, format, async () => {
    switch (format) {
      case 'snapshot-pickle':
        return { snapshot: readSnapshotPickle(content) };
      case 'snapshot-json': {
        const json: unknown = JSON.parse(text(content));
        return { snapshot: fromPytorchSnapshot(json as Parameters<typeof fromPytorchSnapshot>[0]), json };
      }
      case 'rmm-csv':
        return { events: parseRmmCsvLog(text(content), shown) };
      case 'trace-jsonl':
        return { events: await parseTraceChunks(chunked(content, (done, total) => progress('parsing', done, total)), shown) };
    }
  });
  if (read.snapshot !== undefined) {
    const snapshot = read.snapshot;
    const devices = snapshotDevices(snapshot);
    const device = pickDevice(shown, options.device, devices) ?? devices[0] ?? 0;
    const recorded = read.json === undefined ? undefined : recordedTrace(read.json, device);
    return { path, name, format, device, devices, events: toTraceEvents(snapshot, { device }), snapshot, json: read.json, ...(recorded ? { recorded } : {}) };
  }
  const all = read.events!;
  const devices = [...new Set(all.map((e) => e.device ?? 0))].sort((a, b) => a - b);
  const device = pickDevice(shown, options.device, devices);
  const events = device === undefined || devices.length <= 1 ? all : all.filter((e) => (e.device ?? 0) === device);
  return { path, name, format, device: device ?? devices[0] ?? 0, devices, events };
}

/**
 * Reads a snapshot file: a PyTorch snapshot pickle or a Stowage snapshot as JSON.
 * @throws as {@link readInput}; UnknownFormatError for a trace (which has no segments: the message says to make a
 * snapshot of it with `stowage snapshot`)
 */
export async function readSnapshotInput(path: string, options: ReadInputOptions = {}): Promise<Input & { readonly snapshot: MemorySnapshot }> {
  const input = await readInput(path, options);
  if (input.snapshot === undefined) {
    throw new UnknownFormatError(path, `it is ${input.format === 'rmm-csv' ? 'an RMM CSV log' : 'a trace'}; make a snapshot of it first with \`stowage snapshot ${path} -o snapshot.json\``, SNAPSHOT_FORMATS);
  }
  return input as Input & { readonly snapshot: MemorySnapshot };
}

/** The devices a snapshot has something on: a non-empty `device_traces[d]` or a segment of device d. Ascending. */
export function snapshotDevices(snapshot: MemorySnapshot): number[] {
  const devices = new Set<number>();
  snapshot.device_traces.forEach((trace, d) => {
    if (trace.length > 0) devices.add(d);
  });
  for (const segment of snapshot.segments) devices.add(segment.device);
  return [...devices].sort((a, b) => a - b);
}

/** `wanted` when the input has it (or has nothing at all and 0 is asked for). @throws MissingDeviceError otherwise */
function pickDevice(path: string, wanted: number | undefined, devices: readonly number[]): number | undefined {
  if (wanted === undefined || devices.includes(wanted) || (devices.length === 0 && wanted === 0)) return wanted;
  throw new MissingDeviceError(path, wanted, devices);
}

/** The actions a recording adds to PyTorch's (LMS and IPC events). */
const RECORDED_ACTIONS = new Set(['page_out', 'page_in', 'ipc_send', 'ipc_receive', 'ipc_limbo', 'ipc_collect']);

/** True when a parsed snapshot JSON has recorded LMS or IPC entries, on any device. */
export function hasRecordedActions(raw: unknown): boolean {
  const traces = (raw as { device_traces?: unknown[][] }).device_traces;
  return Array.isArray(traces) && traces.some((t) => Array.isArray(t) && t.some((e) => RECORDED_ACTIONS.has((e as { action?: unknown })?.action as string)));
}

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

/** The bytes of the file at `path`, or of `stdin` for `-`, reporting `reading` progress. */
async function readBytes(path: string, expected: string, stdin: NodeJS.ReadableStream & { readonly isTTY?: boolean }, progress: NonNullable<ReadInputOptions['onProgress']>): Promise<Uint8Array> {
  if (path === '-') {
    if (stdin.isTTY === true) throw new InvalidArgumentError('the input', '-', 'a file, or - with the input piped or redirected to standard input (it is a terminal)');
    const parts: Buffer[] = [];
    let done = 0;
    for await (const chunk of stdin as AsyncIterable<Buffer | string>) {
      const part = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      parts.push(part);
      done += part.length;
      progress('reading', done, 0);
    }
    return Buffer.concat(parts);
  }
  if (path === '' || path.includes('\0')) throw new InvalidArgumentError('the input', path, 'a file path, or - for standard input');
  try {
    if ((await stat(path)).isDirectory()) throw new UnknownFormatError(path, 'it is a directory', expected);
    const file = await open(path, 'r');
    try {
      const total = (await file.stat()).size;
      const bytes = Buffer.alloc(total);
      let done = 0;
      while (done < total) {
        const { bytesRead } = await file.read(bytes, done, Math.min(CHUNK_BYTES * 16, total - done), done);
        if (bytesRead === 0) break;
        done += bytesRead;
        progress('reading', done, total);
      }
      return bytes.subarray(0, done);
    } finally {
      await file.close();
    }
  } catch (error) {
    if (isStowageError(error)) throw error;
    const code = (error as { code?: unknown }).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new MissingFileError(path, expected, { cause: error });
    throw new UnknownFormatError(path, `it cannot be read (${(error as Error).message})`, expected, { cause: error });
  }
}

/** `bytes` decompressed, fed to zlib a chunk at a time so that `onProgress` sees the compressed bytes consumed. */
async function gunzip(bytes: Uint8Array, onProgress: (done: number, total: number) => void): Promise<Buffer> {
  const parts: Buffer[] = [];
  const gunzipper = Readable.from(chunked(bytes, onProgress)).pipe(createGunzip());
  for await (const part of gunzipper as AsyncIterable<Buffer>) parts.push(part);
  return Buffer.concat(parts);
}

/** `bytes` in chunks of {@link CHUNK_BYTES}, reporting each one handed out. */
function* chunked(bytes: Uint8Array, onProgress: (done: number, total: number) => void): Generator<Uint8Array> {
  for (let at = 0; at < bytes.length; at += CHUNK_BYTES) {
    const end = Math.min(bytes.length, at + CHUNK_BYTES);
    yield bytes.subarray(at, end);
    onProgress(end, bytes.length);
  }
}

function detectFormat(path: string, content: Uint8Array): InputFormat {
  if (content[0] === PICKLE_PROTO) return 'snapshot-pickle';
  const head = text(content.subarray(0, 4096)).replace(/^\uFEFF/, '');
  // A protocol 0 or 1 pickle (no PROTO opcode) ends in STOP and begins with GLOBAL, MARK, EMPTY_DICT or
  // EMPTY_LIST: read as a pickle, so that the reader says why it refuses it.
  if (content[content.length - 1] === STOP && (/^c[\w.]+\n[\w.]+\n/.test(head) || /^[(}\]]/.test(head))) return 'snapshot-pickle';
  const firstLine = head.split('\n').find((l) => l.trim() !== '')?.trim() ?? '';
  if (firstLine.startsWith('{')) {
    // One object per line is a trace; a snapshot is one object, usually over many lines or one long line.
    if (/"action"\s*:/.test(firstLine) && !/"segments"\s*:/.test(firstLine.slice(0, 200))) return 'trace-jsonl';
    return 'snapshot-json';
  }
  if (/\bAction\b/.test(firstLine) && /\bPointer\b/.test(firstLine) && firstLine.includes(',')) return 'rmm-csv';
  throw new UnknownFormatError(path, content.length === 0 ? 'it is empty' : `it begins with ${describeHead(content)}`, INPUT_FORMATS);
}

/** What a reader gave: a snapshot (with its JSON) or a trace's events. */
interface Read {
  readonly snapshot?: MemorySnapshot;
  readonly json?: unknown;
  readonly events?: TraceEvent[];
}

/**
 * Runs `read`, turning a reader's typed error (a bad line, bad JSON) into UnknownFormatError and a pickle reader's
 * refusal into UnreadablePickleError.
 */
async function readAs(path: string, format: InputFormat, read: () => Promise<Read>): Promise<Read> {
  try {
    return await read();
  } catch (error) {
    if (error instanceof UnknownFormatError) throw error;
    if (error instanceof MalformedPickleError || error instanceof UnsafePickleError) throw new UnreadablePickleError(path, error);
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
