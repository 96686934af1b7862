import type { AllocateOptions, Allocator } from '@stowage/core';
import type { DataPtr } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import { isOutOfMemoryError } from '@stowage/core';
import { ReplayStoppedError } from './ReplayStoppedError.js';
import type { TraceEvent } from './TraceEvent.js';
import { checkTraceEvents } from './TraceEvent.js';
import { checkBoolean, checkEnum, checkFunction, checkOptions } from '@stowage/core/plugin-kit';

const REPLAY_OPTION_KEYS: readonly (keyof ReplayOptions)[] = ['freeAt', 'streams', 'scale', 'stopWhen', 'onProgress', 'keepLive'];

/** How {@link replayTrace} replays a trace. */
export interface ReplayOptions {
  /**
   * Which free event returns an allocation. `'completed'` (default): its `free_completed` event where the trace
   * has one for that id, else its `free_requested`. `'requested'`: its `free_requested` where the trace has one,
   * else its `free_completed`. See Note [Free at completed].
   */
  readonly freeAt?: 'requested' | 'completed';
  /**
   * true: allocate on the event's stream, as an ordinal: the trace's distinct stream values numbered 0, 1, 2… in
   * order of first appearance (traces record CUDA stream handles, not ordinals). The allocator must serve that
   * many streams. false (default): every allocation on the allocator's default stream.
   */
  readonly streams?: boolean;
  /** Multiplies every allocation size, rounding up to an integer. A positive finite number; default 1. */
  readonly scale?: number;
  /** Asked before every 256th operation (the first included); true stops the replay, recorded in `failedAt`. */
  readonly stopWhen?: () => boolean;
  /** Called with replayable events processed and their total: every 4096 events and once when the replay ends. */
  readonly onProgress?: (done: number, total: number) => void;
  /** true: leave what is still live at the end allocated and return it in `live`. Default false: free it. */
  readonly keepLive?: boolean;
}

/** What a replay did. Byte figures count requested (scaled) bytes, as the replayer tracks them. */
export interface ReplayResult {
  /** Allocator calls made: `allocs + frees`. */
  readonly ops: number;
  readonly allocs: number;
  readonly frees: number;
  /** Wall-clock seconds of the allocator calls (the replay loop); excludes preparation and the final cleanup. */
  readonly seconds: number;
  /** `ops / seconds`; 0 when nothing ran. */
  readonly opsPerSec: number;
  /** Peak over the replay of the sum of requested sizes of live allocations. */
  readonly peakLiveBytes: number;
  /** Requested bytes live when the replay ended (before the final cleanup). */
  readonly finalLiveBytes: number;
  /**
   * Set when the replay ended early: `op` is the index of the operation that failed or was not performed, `event`
   * the index in `events` of its event; `error` the allocator's `OutOfMemoryError` or a {@link ReplayStoppedError}.
   */
  readonly failedAt?: { readonly op: number; readonly event: number; readonly error: Error };
  /** With `keepLive`: the pointers still live, for the caller to free. */
  readonly live?: DataPtr[];
}

// Note [Free at completed]
// PyTorch records free_requested when a tensor dies and free_completed when its block may be reused (after
// the streams that used it are done); the two differ only in multi-stream runs. A replay that frees at
// free_completed reuses memory no sooner than PyTorch could. Traces without free_completed events (static/,
// zdevito_*) fall back to free_requested per allocation.

const ALLOC = 0;
const FREE = 1;
const STOP_CHECK_EVERY = 256;
const PROGRESS_MASK = 4095;

/** The trace compiled to parallel arrays so that the timed loop touches only numbers. */
interface Plan {
  readonly kind: Uint8Array;
  /** Dense index of the allocation (its id's slot). */
  readonly slot: Int32Array;
  /** Scaled requested bytes (allocs). */
  readonly size: Float64Array;
  /** Stream ordinal (allocs). */
  readonly stream: Int32Array;
  /** Index of the trace event, for error messages. */
  readonly eventIndex: Int32Array;
  readonly length: number;
  readonly slots: number;
}

/**
 * Replays a trace's allocations and frees, linked by id, against `allocator`, measuring the live bytes itself.
 * `pre: true` allocations are allocated like the others (they come first); `segment_*` and `oom` events are
 * PyTorch's own decisions and are skipped. Frees of ids never allocated (or already freed) are skipped. After
 * the replay, everything still live is freed unless `keepLive`.
 *
 * An `OutOfMemoryError` from the allocator ends the replay and is recorded in `failedAt`, not thrown.
 * @throws InvalidArgumentError before any allocation when `allocator` is not an Allocator (the arguments swapped,
 * say), `events` is not an array of trace events (see `checkTraceEvents`), the options are not an object, hold an
 * unknown key (naming the nearest) or a value of the wrong type, `scale` is not a positive finite number, or a
 * scaled size is not a safe integer; during the replay when an id is allocated again while live
 * @throws whatever else the allocator throws (after freeing what the replay holds, unless `keepLive`)
 */
export function replayTrace(allocator: Allocator, events: readonly TraceEvent[], given: ReplayOptions = {}): ReplayResult {
  checkAllocator(allocator);
  checkTraceEvents('events', events);
  const options = checkReplayOptions(given);
  const plan = compile(events, options);
  const live: (DataPtr | undefined)[] = new Array<DataPtr | undefined>(plan.slots);
  const liveBytes = new Float64Array(plan.slots);
  const { stopWhen, onProgress } = options;
  const streamOptions: AllocateOptions[] = [];
  let allocs = 0;
  let frees = 0;
  let current = 0;
  let peak = 0;
  let failedAt: ReplayResult['failedAt'];
  let finished = false;
  let nextCheck = 0;
  const start = performance.now();
  let seconds = 0;
  let i = 0;
  try {
    for (; i < plan.length; i++) {
      const ops = allocs + frees;
      if (stopWhen && ops >= nextCheck) {
        nextCheck = ops + STOP_CHECK_EVERY;
        if (stopWhen()) {
          failedAt = { op: ops, event: plan.eventIndex[i]!, error: new ReplayStoppedError(ops) };
          break;
        }
      }
      if (onProgress && (i & PROGRESS_MASK) === 0 && i > 0) onProgress(i, plan.length);
      const slot = plan.slot[i]!;
      if (plan.kind[i] === ALLOC) {
        if (live[slot] !== undefined) {
          const e = events[plan.eventIndex[i]!]!;
          throw new InvalidArgumentError(`events[${plan.eventIndex[i]}].id`, e.id, 'an id that is not live (an alloc needs a free before its id returns)');
        }
        const bytes = plan.size[i]!;
        let ptr: DataPtr;
        try {
          if (options.streams) {
            const s = plan.stream[i]!;
            ptr = allocator.allocate(bytes, (streamOptions[s] ??= { stream: s }));
          } else {
            ptr = allocator.allocate(bytes);
          }
        } catch (error) {
          if (!isOutOfMemoryError(error)) throw error;
          failedAt = { op: ops, event: plan.eventIndex[i]!, error };
          break;
        }
        allocs++;
        live[slot] = ptr;
        liveBytes[slot] = bytes;
        current += bytes;
        if (current > peak) peak = current;
      } else {
        const ptr = live[slot];
        if (ptr === undefined) continue;
        live[slot] = undefined;
        current -= liveBytes[slot]!;
        allocator.free(ptr);
        frees++;
      }
    }
    seconds = (performance.now() - start) / 1000;
    onProgress?.(i, plan.length);
    finished = true;
  } finally {
    if (!options.keepLive) freeAll(allocator, live, finished);
  }
  const ops = allocs + frees;
  const result: ReplayResult = {
    ops,
    allocs,
    frees,
    seconds,
    opsPerSec: seconds > 0 ? ops / seconds : 0,
    peakLiveBytes: peak,
    finalLiveBytes: current,
  };
  const extra: { failedAt?: ReplayResult['failedAt']; live?: DataPtr[] } = {};
  if (failedAt) extra.failedAt = failedAt;
  if (options.keepLive) extra.live = live.filter((p): p is DataPtr => p !== undefined);
  return { ...result, ...extra };
}

/** Frees every live pointer; when the replay is already failing (`rethrow` false), a failing free is ignored. */
function freeAll(allocator: Allocator, live: (DataPtr | undefined)[], rethrow: boolean): void {
  for (let slot = 0; slot < live.length; slot++) {
    const ptr = live[slot];
    if (ptr === undefined) continue;
    live[slot] = undefined;
    try {
      allocator.free(ptr);
    } catch (error) {
      if (rethrow) throw error;
    }
  }
}

/** @throws InvalidArgumentError unless `value` has an Allocator's `allocate` and `free` */
function checkAllocator(value: unknown): void {
  const candidate = value as Partial<Allocator> | null;
  if (typeof candidate !== 'object' || candidate === null || Array.isArray(candidate) || typeof candidate.allocate !== 'function' || typeof candidate.free !== 'function') {
    throw new InvalidArgumentError('allocator', value, 'an Allocator (replayTrace(allocator, events, options))');
  }
}

function checkReplayOptions(given: ReplayOptions | undefined): ReplayOptions {
  const options = checkOptions('options', given, REPLAY_OPTION_KEYS);
  checkEnum('options.freeAt', options.freeAt, ['completed', 'requested'] as const);
  checkBoolean('options.streams', options.streams);
  checkBoolean('options.keepLive', options.keepLive);
  if (options.stopWhen !== undefined) checkFunction('options.stopWhen', options.stopWhen, 'a function returning true to stop');
  if (options.onProgress !== undefined) checkFunction('options.onProgress', options.onProgress, 'a function (done, total) => void');
  const scale = options.scale ?? 1;
  if (typeof scale !== 'number' || !Number.isFinite(scale) || scale <= 0) throw new InvalidArgumentError('options.scale', scale, 'a positive finite number');
  return options;
}

function compile(events: readonly TraceEvent[], options: ReplayOptions): Plan {
  const scale = options.scale ?? 1;
  const freeAt = options.freeAt ?? 'completed';
  const completed = new Set<number>();
  const requested = new Set<number>();
  for (const e of events) {
    if (e.action === 'free_completed') completed.add(e.id);
    else if (e.action === 'free_requested') requested.add(e.id);
  }
  const n = events.length;
  const kind = new Uint8Array(n);
  const slot = new Int32Array(n);
  const size = new Float64Array(n);
  const stream = new Int32Array(n);
  const eventIndex = new Int32Array(n);
  const slots = new Map<number, number>();
  const ordinals = new Map<number, number>();
  let length = 0;
  for (let i = 0; i < n; i++) {
    const e = events[i]!;
    let op: number;
    if (e.action === 'alloc') op = ALLOC;
    else if (e.action === 'free_completed' && (freeAt === 'completed' || !requested.has(e.id))) op = FREE;
    else if (e.action === 'free_requested' && (freeAt === 'requested' || !completed.has(e.id))) op = FREE;
    else continue;
    let s = slots.get(e.id);
    if (op === FREE && s === undefined) continue; // never allocated
    if (s === undefined) slots.set(e.id, (s = slots.size));
    kind[length] = op;
    slot[length] = s;
    eventIndex[length] = i;
    if (op === ALLOC) {
      size[length] = scaleBytes(e.size, scale, i);
      let ordinal = ordinals.get(e.stream);
      if (ordinal === undefined) ordinals.set(e.stream, (ordinal = ordinals.size));
      stream[length] = ordinal;
    }
    length++;
  }
  return { kind, slot, size, stream, eventIndex, length, slots: slots.size };
}

/** `ceil(bytes * scale)`, ignoring floating-point error below one part in 10^9 (so 1000 * 1.1 is 1100). */
function scaleBytes(bytes: number, scale: number, index: number): number {
  if (scale === 1) return bytes;
  const exact = bytes * scale;
  const nearest = Math.round(exact);
  const scaled = Math.abs(exact - nearest) <= 1e-9 * Math.max(1, exact) ? nearest : Math.ceil(exact);
  if (!Number.isSafeInteger(scaled)) throw new InvalidArgumentError(`events[${index}].size * options.scale`, exact, 'a safe integer byte count');
  return scaled;
}
