import type { SnapshotAction } from '../contracts/MemorySnapshot.js';

/** What a trace event records: the actions of PyTorch's snapshot traces (c10 `TraceEntry::Action`) but `snapshot`. */
export type TraceAction = Exclude<SnapshotAction, 'snapshot'>;

/** Every {@link TraceAction}, in c10's order. */
export const TRACE_ACTIONS: readonly TraceAction[] = [
  'alloc',
  'free_requested',
  'free_completed',
  'segment_alloc',
  'segment_free',
  'segment_map',
  'segment_unmap',
  'oom',
];

/** True when `value` names a {@link TraceAction}. */
export function isTraceAction(value: unknown): value is TraceAction {
  return typeof value === 'string' && (TRACE_ACTIONS as readonly string[]).includes(value);
}

/**
 * One event of an allocation trace, in recorded order (the format of `shared/traces`, see its README).
 * `alloc`, `free_requested` and `free_completed` of one allocation share its `id`; replay links them by id.
 */
export interface TraceEvent {
  readonly action: TraceAction;
  /** Links an allocation to its frees. -1 for events that belong to no allocation (`segment_*`, `oom`). */
  readonly id: number;
  /** Requested bytes (`alloc`, frees), segment bytes (`segment_*`), or the failed request (`oom`). */
  readonly size: number;
  /** The stream as the trace recorded it (a CUDA stream handle, 0 for the default stream); not an ordinal. */
  readonly stream: number;
  /** Device address, when the trace recorded one. */
  readonly addr?: number;
  /** True for allocations live before recording began; they come first in the trace. */
  readonly pre?: boolean;
  /** Microseconds since the first event; null or absent when the trace has no times. */
  readonly timeUs?: number | null;
  /** `oom` only: the bytes the device reported free when the allocation failed. */
  readonly deviceFree?: number;
}
