import type { TraceEvent } from '@stowage/lab/replay';
import { traceSummary } from '@stowage/lab/replay';

export const ALLOC = 0;
export const FREE = 1;

/**
 * A trace compiled to parallel arrays for the timed loop, sizes scaled. Every operation is valid: a free always
 * names a live slot, an alloc a free one.
 */
export interface ReplayPlan {
  /** ALLOC or FREE per operation. */
  readonly kind: Uint8Array;
  /** Dense index of the allocation. */
  readonly slot: Int32Array;
  /** Scaled bytes (allocs), a multiple of 4. */
  readonly size: Float64Array;
  /** Operations (allocs + frees). */
  readonly length: number;
  readonly slots: number;
  /** The factor every size was multiplied by before rounding up to 4. */
  readonly scale: number;
  /** Peak of the scaled bytes live. */
  readonly peakLiveBytes: number;
  /**
   * Peak of the scaled bytes live plus those freed since the program's last submit (it submits after every
   * `submitEveryFrees` frees): memory no allocator may reuse yet when frees wait for the next submit, as
   * Stowage's and tfjs's do. A lower bound on their reserved bytes, above `peakLiveBytes` where large
   * tensors die in quick succession.
   */
  readonly peakLiveAndPendingBytes: number;
}

/** Tries at shrinking the scale when rounding up to 4 bytes pushed the peak over the bound. */
const MAX_RESCALES = 4;

/**
 * Compiles a trace's allocations and frees for replay, linked by id: an allocation leaves at its `free_completed`
 * event, or its `free_requested` when it has none (core's replayTrace default, Note [Free at completed]).
 * `segment_*` and `oom` events are PyTorch's own decisions and are skipped; a free of an id not live is skipped;
 * an alloc of an id still live frees it first. Sizes are scaled by `min(1, maxPeakLiveBytes / peak live bytes)`
 * and rounded up to a multiple of 4 (what a WebGPU buffer needs); when rounding pushes the peak over
 * `maxPeakLiveBytes`, the scale shrinks until it does not. The program submits after every `submitEveryFrees`
 * frees (for `peakLiveAndPendingBytes`).
 */
export function compileReplayPlan(events: readonly TraceEvent[], maxPeakLiveBytes: number, submitEveryFrees: number): ReplayPlan {
  const peak = traceSummary(events).peakLiveBytes;
  let scale = peak > maxPeakLiveBytes ? maxPeakLiveBytes / peak : 1;
  let plan = compile(events, scale, submitEveryFrees);
  for (let i = 0; i < MAX_RESCALES && plan.peakLiveBytes > maxPeakLiveBytes; i++) {
    scale *= maxPeakLiveBytes / plan.peakLiveBytes;
    plan = compile(events, scale, submitEveryFrees);
  }
  return plan;
}

function compile(events: readonly TraceEvent[], scale: number, submitEveryFrees: number): ReplayPlan {
  const completed = new Set<number>();
  for (const e of events) if (e.action === 'free_completed') completed.add(e.id);
  const n = events.length;
  const kind = new Uint8Array(2 * n);
  const slot = new Int32Array(2 * n);
  const size = new Float64Array(2 * n);
  const slots = new Map<number, number>();
  const liveBytes: number[] = [];
  let length = 0;
  let current = 0;
  let peakLiveBytes = 0;
  let pending = 0;
  let frees = 0;
  let peakLiveAndPendingBytes = 0;
  const push = (op: number, s: number, bytes: number): void => {
    kind[length] = op;
    slot[length] = s;
    size[length] = bytes;
    length++;
  };
  const release = (s: number): void => {
    const bytes = liveBytes[s];
    if (bytes === undefined || bytes < 0) return;
    liveBytes[s] = -1;
    current -= bytes;
    pending += bytes;
    if (++frees % submitEveryFrees === 0) pending = 0;
    push(FREE, s, 0);
  };
  for (const e of events) {
    if (e.action === 'alloc') {
      let s = slots.get(e.id);
      if (s === undefined) slots.set(e.id, (s = slots.size));
      else release(s);
      const bytes = Math.ceil((e.size * scale) / 4) * 4;
      liveBytes[s] = bytes;
      current += bytes;
      if (current > peakLiveBytes) peakLiveBytes = current;
      if (current + pending > peakLiveAndPendingBytes) peakLiveAndPendingBytes = current + pending;
      push(ALLOC, s, bytes);
    } else if (e.action === 'free_completed' || (e.action === 'free_requested' && !completed.has(e.id))) {
      const s = slots.get(e.id);
      if (s !== undefined) release(s);
    }
  }
  return { kind, slot, size, length, slots: slots.size, scale, peakLiveBytes, peakLiveAndPendingBytes };
}
