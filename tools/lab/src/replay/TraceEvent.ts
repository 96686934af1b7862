import type { SnapshotAction } from '@stowage/core/plugin-kit';
import { InvalidArgumentError } from '@stowage/core';

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
  /** The device index the event happened on, when the trace records one (its lines' `device`). */
  readonly device?: number;
  /** Microseconds since the first event; null or absent when the trace has no times. */
  readonly timeUs?: number | null;
  /** `oom` only: the bytes the device reported free when the allocation failed. */
  readonly deviceFree?: number;
}

/**
 * Checks a list of trace events handed to `traceSummary` or `replayTrace` (what `readTrace` returns always
 * passes): an array of objects with a {@link TraceAction}, an `id` that is a safe integer of at least -1, and a
 * `size` and `stream` that are non-negative safe integers; `pre`, when present, a boolean. One pass, O(events).
 * @throws InvalidArgumentError naming the first bad event's field (`events[3].action`)
 */
export function checkTraceEvents(argument: string, events: unknown): readonly TraceEvent[] {
  if (!Array.isArray(events)) throw new InvalidArgumentError(argument, events, 'an array of trace events (what readTrace returns)');
  for (let i = 0; i < events.length; i++) {
    const e: unknown = events[i];
    const at = `${argument}[${i}]`;
    if (typeof e !== 'object' || e === null) throw new InvalidArgumentError(at, e, 'a trace event { action, id, size, stream }');
    const r = e as Record<string, unknown>;
    if (!isTraceAction(r.action)) throw new InvalidArgumentError(`${at}.action`, r.action, `one of ${TRACE_ACTIONS.join(', ')}`);
    if (typeof r.id !== 'number' || !Number.isSafeInteger(r.id) || r.id < -1) {
      throw new InvalidArgumentError(`${at}.id`, r.id, 'a safe integer of at least -1 (-1 for events of no allocation)');
    }
    if (!isCount(r.size)) throw new InvalidArgumentError(`${at}.size`, r.size, 'a non-negative safe integer');
    if (!isCount(r.stream)) throw new InvalidArgumentError(`${at}.stream`, r.stream, 'a non-negative safe integer');
    if (r.pre !== undefined && typeof r.pre !== 'boolean') throw new InvalidArgumentError(`${at}.pre`, r.pre, 'true or false');
    if (r.device !== undefined && !isCount(r.device)) throw new InvalidArgumentError(`${at}.device`, r.device, 'a non-negative safe integer (a device index)');
    if (r.deviceFree !== undefined && !isCount(r.deviceFree)) throw new InvalidArgumentError(`${at}.deviceFree`, r.deviceFree, 'a non-negative safe integer');
  }
  return events as readonly TraceEvent[];
}

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}
