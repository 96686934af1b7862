import type { SnapshotAction, SnapshotFrame, SnapshotTraceEntry } from '../contracts/MemorySnapshot.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { checkBoolean, checkOptions } from '../validation/validate.js';

export interface HistoryOptions {
  /** Entries kept; the oldest are dropped first. Default 10,000. */
  readonly maxEntries?: number;
  /** Record the JavaScript stack of each entry as `frames` (costly: about a microsecond per event). Default false. */
  readonly stacks?: boolean;
}

/** Microseconds since the epoch on a monotonic clock (performance.now() offset by the time origin). */
export function monotonicMicros(): number {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

/**
 * The URL prefix of this package's compiled files (`…/dist/`), to tell Stowage's own frames from the caller's;
 * undefined where the module has no URL (bundled as a script).
 */
function ownPrefix(): string | undefined {
  try {
    return new URL('../', import.meta.url).href;
  } catch {
    return undefined;
  }
}
const OWN_PREFIX = ownPrefix();
/** Frames captured beyond `Error.stackTraceLimit`: about as many as Stowage's own above the caller's. */
const STACK_EXTRA_FRAMES = 16;

/**
 * Parses `new Error().stack` into PyTorch-style frames, innermost first, without the leading frames inside
 * Stowage's core (the engine and the pointer's deleter), so the first frame is the caller's. Where every frame
 * is inside (a bundle that holds the caller too), keeps them all.
 */
export function captureFrames(): SnapshotFrame[] {
  // Stowage's own frames come first and are dropped: deepen the stack so the caller's keep their depth.
  const limit = Error.stackTraceLimit; // V8 only; undefined elsewhere
  if (typeof limit === 'number') Error.stackTraceLimit = limit + STACK_EXTRA_FRAMES;
  const stack = new Error().stack ?? '';
  if (typeof limit === 'number') Error.stackTraceLimit = limit;
  const frames: SnapshotFrame[] = [];
  for (const line of stack.split('\n').slice(1)) {
    const m = /^\s*at (?:(.*?) \()?(.*?):(\d+):\d+\)?$/.exec(line);
    if (m) frames.push({ name: m[1] ?? '<anonymous>', filename: m[2]!, line: Number(m[3]) });
  }
  const prefix = OWN_PREFIX;
  if (prefix === undefined) return frames;
  const first = frames.findIndex((f) => !f.filename.startsWith(prefix));
  return first < 0 ? frames : frames.slice(first);
}

/**
 * A bounded trace of allocator events in PyTorch's `device_traces` form.
 * Invariant: entries() holds the last min(recorded, maxEntries) entries in order.
 */
export class History {
  readonly maxEntries: number;
  readonly stacks: boolean;
  readonly #ring: SnapshotTraceEntry[] = [];
  #next = 0;

  /**
   * @throws InvalidArgumentError for options that are not `{ maxEntries?: positive integer, stacks?: boolean }`
   */
  constructor(options: HistoryOptions) {
    checkOptions('options', options, ['maxEntries', 'stacks']);
    this.stacks = checkBoolean('options.stacks', options.stacks) ?? false;
    this.maxEntries = options.maxEntries ?? 10_000;
    if (!Number.isSafeInteger(this.maxEntries) || this.maxEntries < 1) throw new InvalidArgumentError('options.maxEntries', options.maxEntries, 'a positive integer');
  }

  /**
   * Appends an entry. `frames` are the entry's frames when the caller has them (a free completed after its
   * streams' events: the allocation's frames, as PyTorch records); otherwise, with `stacks`, the current stack.
   * Returns the entry's frames, which the engine keeps on a live block or a segment for its snapshot.
   */
  record(action: SnapshotAction, addr: number, size: number, stream: number, frames?: SnapshotFrame[] | null, extra?: { device_free?: number }): SnapshotFrame[] {
    const entry: SnapshotTraceEntry = {
      action,
      addr,
      size,
      stream,
      time_us: monotonicMicros(),
      frames: frames ?? (this.stacks ? captureFrames() : []),
      compile_context: 'N/A',
      user_metadata: '',
      ...extra,
    };
    if (this.#ring.length < this.maxEntries) this.#ring.push(entry);
    else {
      this.#ring[this.#next] = entry;
      this.#next = (this.#next + 1) % this.maxEntries;
    }
    return entry.frames;
  }

  entries(): SnapshotTraceEntry[] {
    return [...this.#ring.slice(this.#next), ...this.#ring.slice(0, this.#next)];
  }
}
