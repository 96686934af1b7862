import type { SnapshotAction, SnapshotFrame, SnapshotTraceEntry } from '../contracts/MemorySnapshot.js';

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

/** Parses `new Error().stack` into PyTorch-style frames, dropping Stowage's own engine frames. */
export function captureFrames(skip: number): SnapshotFrame[] {
  const lines = (new Error().stack ?? '').split('\n').slice(1 + skip);
  const frames: SnapshotFrame[] = [];
  for (const line of lines) {
    const m = /^\s*at (?:(.*?) \()?(.*?):(\d+):\d+\)?$/.exec(line);
    if (m) frames.push({ name: m[1] ?? '<anonymous>', filename: m[2]!, line: Number(m[3]) });
  }
  return frames;
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

  constructor(options: HistoryOptions) {
    this.maxEntries = options.maxEntries ?? 10_000;
    this.stacks = options.stacks ?? false;
  }

  record(action: SnapshotAction, addr: number, size: number, stream: number, extra?: { device_free?: number }): void {
    const entry: SnapshotTraceEntry = {
      action,
      addr,
      size,
      stream,
      time_us: monotonicMicros(),
      frames: this.stacks ? captureFrames(3) : [],
      compile_context: 'N/A',
      user_metadata: '',
      ...extra,
    };
    if (this.#ring.length < this.maxEntries) this.#ring.push(entry);
    else {
      this.#ring[this.#next] = entry;
      this.#next = (this.#next + 1) % this.maxEntries;
    }
  }

  entries(): SnapshotTraceEntry[] {
    return [...this.#ring.slice(this.#next), ...this.#ring.slice(0, this.#next)];
  }
}
