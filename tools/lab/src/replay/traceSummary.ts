import type { TraceEvent } from './TraceEvent.js';
import { checkTraceEvents } from './TraceEvent.js';

/** Counts and peaks of a trace, from its events alone (no allocator involved). */
export interface TraceSummary {
  readonly events: number;
  readonly allocs: number;
  /** Allocations marked `pre` (live before recording began). */
  readonly preAllocs: number;
  readonly freeRequested: number;
  readonly freeCompleted: number;
  /** Distinct `stream` values among allocations. */
  readonly streams: number;
  /**
   * Peak of the requested bytes live, an allocation leaving at its `free_requested` (at its `free_completed`
   * when it has no `free_requested`). A lower bound on any allocator's reserved bytes.
   */
  readonly peakLiveBytes: number;
  /** Requested bytes still live after the last event. */
  readonly finalLiveBytes: number;
  /** PyTorch's own `segment_alloc` events (cudaMalloc calls). */
  readonly segmentAllocs: number;
  readonly segmentFrees: number;
  readonly segmentMaps: number;
  readonly segmentUnmaps: number;
  /**
   * Peak of PyTorch's reserved bytes, counted from the start of the recording: segment_alloc and segment_map
   * sizes minus segment_free and segment_unmap sizes. Segments reserved before recording began are not in the
   * trace, so for a trace with `pre` allocations this can fall short of PyTorch's true peak. Undefined when the
   * trace has no `segment_*` events.
   */
  readonly peakReservedBytes: number | undefined;
  readonly ooms: number;
  /**
   * For a trace recorded from the start that ran out of memory: PyTorch's reserved bytes at the first `oom`
   * plus what the device reported free then, i.e. the memory PyTorch's allocator could have had. Replays use it
   * as the device capacity, so that they face the pressure PyTorch faced. Undefined otherwise.
   */
  readonly capacityAtOomBytes: number | undefined;
}

/**
 * Summarizes a trace: event counts, peak live bytes, and PyTorch's segment count and peak reserved bytes.
 * @throws InvalidArgumentError when `events` is not an array of trace events (see `checkTraceEvents`), naming the
 * first bad one: nothing is counted from an event that is not one
 */
export function traceSummary(given: readonly TraceEvent[]): TraceSummary {
  const events = checkTraceEvents('events', given);
  const requested = new Set<number>();
  for (const e of events) if (e.action === 'free_requested') requested.add(e.id);
  const live = new Map<number, number>();
  const streams = new Set<number>();
  let allocs = 0;
  let preAllocs = 0;
  let freeRequested = 0;
  let freeCompleted = 0;
  let current = 0;
  let peak = 0;
  let segmentAllocs = 0;
  let segmentFrees = 0;
  let segmentMaps = 0;
  let segmentUnmaps = 0;
  let reserved = 0;
  let peakReserved = 0;
  let ooms = 0;
  let capacityAtOom: number | undefined;
  const release = (id: number): void => {
    const bytes = live.get(id);
    if (bytes === undefined) return;
    live.delete(id);
    current -= bytes;
  };
  for (const e of events) {
    switch (e.action) {
      case 'alloc':
        allocs++;
        if (e.pre) preAllocs++;
        streams.add(e.stream);
        if (live.has(e.id)) release(e.id);
        live.set(e.id, e.size);
        current += e.size;
        if (current > peak) peak = current;
        break;
      case 'free_requested':
        freeRequested++;
        release(e.id);
        break;
      case 'free_completed':
        freeCompleted++;
        if (!requested.has(e.id)) release(e.id);
        break;
      case 'segment_alloc':
      case 'segment_map':
        if (e.action === 'segment_alloc') segmentAllocs++;
        else segmentMaps++;
        reserved += e.size;
        if (reserved > peakReserved) peakReserved = reserved;
        break;
      case 'segment_free':
      case 'segment_unmap':
        if (e.action === 'segment_free') segmentFrees++;
        else segmentUnmaps++;
        reserved -= e.size;
        break;
      case 'oom':
        ooms++;
        if (capacityAtOom === undefined && e.deviceFree !== undefined && preAllocs === 0) capacityAtOom = reserved + e.deviceFree;
        break;
    }
  }
  const hasSegments = segmentAllocs + segmentFrees + segmentMaps + segmentUnmaps > 0;
  return {
    events: events.length,
    allocs,
    preAllocs,
    freeRequested,
    freeCompleted,
    streams: streams.size,
    peakLiveBytes: peak,
    finalLiveBytes: current,
    segmentAllocs,
    segmentFrees,
    segmentMaps,
    segmentUnmaps,
    peakReservedBytes: hasSegments ? peakReserved : undefined,
    ooms,
    capacityAtOomBytes: capacityAtOom,
  };
}
