import type { ReplayResult, TraceEvent } from '@stowage/lab/replay';
import { replayTrace } from '@stowage/lab/replay';
import type { BenchAllocator } from './benchAllocators.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** One allocator's figures on one trace. */
export interface TraceRun {
  readonly ops: number;
  /** The best of the replays: a cold one, a second (warm JIT), and more while under {@link MIN_TIMED_SECONDS}. */
  readonly opsPerSec: number;
  /** The replay's peak of requested bytes live. */
  readonly peakAllocated: number;
  /** The backend's peak reserved bytes during the first replay. */
  readonly peakReserved: number;
  /** Segments the allocator took from the backend during the first replay. */
  readonly backendMallocs: number;
  readonly failedAt?: ReplayResult['failedAt'];
}

/** Replays of one trace go on (after the second) until their timed loops add up to this many seconds. */
export const MIN_TIMED_SECONDS = 0.2;
/** ...but stop after this many, however short the trace. */
const MAX_REPLAYS = 20;

/**
 * Replays `events` at least twice (on a device of `capacityBytes` when given: the memory PyTorch had on a
 * trace that ran out of it), each time on a fresh `VirtualMemoryBackend({ storeData: false })` and a fresh
 * allocator, so every run does the same work: memory figures come from the first (cold) run; ops/s is the best
 * run. Short traces take a millisecond, so replays go on while the timed loops add up to less than
 * {@link MIN_TIMED_SECONDS} (at most {@link MAX_REPLAYS}), to keep timer and GC noise out of the best.
 */
export function runTraceScenario(allocator: BenchAllocator, events: readonly TraceEvent[], capacityBytes?: number): TraceRun {
  const first = replayOnce(allocator, events, capacityBytes);
  let best = first.result.opsPerSec;
  let seconds = first.result.seconds;
  for (let replays = 1; replays < 2 || (seconds < MIN_TIMED_SECONDS && replays < MAX_REPLAYS); replays++) {
    const again = replayOnce(allocator, events, capacityBytes).result;
    best = Math.max(best, again.opsPerSec);
    seconds += again.seconds;
  }
  const run: TraceRun = {
    ops: first.result.ops,
    opsPerSec: best,
    peakAllocated: first.result.peakLiveBytes,
    peakReserved: first.peakReserved,
    backendMallocs: first.mallocs,
  };
  return first.result.failedAt ? { ...run, failedAt: first.result.failedAt } : run;
}

function replayOnce(
  allocator: BenchAllocator,
  events: readonly TraceEvent[],
  capacityBytes: number | undefined,
): { result: ReplayResult; peakReserved: number; mallocs: number } {
  const backend = new VirtualMemoryBackend({ storeData: false, ...(capacityBytes === undefined ? {} : { capacityBytes }) });
  using instance = allocator.make(backend);
  const result = replayTrace(instance, events);
  return { result, peakReserved: backend.peakReservedBytes, mallocs: backend.mallocCount };
}
