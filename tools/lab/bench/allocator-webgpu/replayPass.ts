import type { MeasuredCpuTimes } from './CpuClock.js';
import { CpuClock } from './CpuClock.js';
import type { ReplayAllocator } from './ReplayAllocator.js';
import type { ReplayPlan } from './ReplayPlan.js';
import { ALLOC } from './ReplayPlan.js';
import type { RssSampler } from './RssSampler.js';

/** What one pass over a plan did. */
export interface PassResult {
  /** Operations performed (allocs + frees), up to and including the one after which the replay stopped. */
  readonly ops: number;
  /** Seconds in the allocator's calls and the program's submits, RSS sampling excluded. */
  readonly seconds: number;
  readonly opsPerSec: number;
  /** `createBuffer` calls during the pass. */
  readonly createBufferCalls: number;
  /** Peak of the allocator's reserved bytes during the pass. */
  readonly peakReservedBytes: number;
  /** Peak resident memory above the sampler's baseline during the pass. */
  readonly rssAboveBaselineBytes: number;
  /** Where the timed loop's time went (CpuClock.ts); the main thread's fields only on Linux. */
  readonly cpu: MeasuredCpuTimes;
  /** Why the pass stopped early, when it did. */
  readonly failed?: string;
}

export interface PassOptions {
  /** The program submits after this many frees (Note [tfjs release at submit]: also when tfjs releases). */
  readonly submitEveryFrees: number;
  /** The pass stops once the allocator's reserved bytes pass this. */
  readonly stopReservedBytes: number;
  /** Resident memory is sampled every this many operations (a power of two) and at the end. */
  readonly rssEveryOps: number;
  readonly rss: RssSampler;
}

/**
 * Replays `plan` once against `allocator`, timing the allocator's calls and the program's submits. After the
 * timed loop it frees what is still live (as a program's step ends) and submits, untimed, so that a next pass
 * starts with everything returned. Stops, recorded in `failed`, when reserved bytes pass the bound or the
 * allocator throws.
 */
export function replayPass(allocator: ReplayAllocator, plan: ReplayPlan, options: PassOptions): PassResult {
  const { kind, slot, size, length } = plan;
  const { submitEveryFrees, stopReservedBytes, rss } = options;
  const rssMask = options.rssEveryOps - 1;
  const handles: unknown[] = new Array<unknown>(plan.slots).fill(undefined);
  allocator.resetPeak();
  const createdBefore = allocator.createBufferCalls;
  let failed: string | undefined;
  let frees = 0;
  let pausedMs = 0;
  let i = 0;
  const clock = new CpuClock();
  clock.start();
  const start = performance.now();
  try {
    for (; i < length; i++) {
      if ((i & rssMask) === 0) {
        const t = performance.now();
        rss.sample();
        pausedMs += performance.now() - t;
      }
      const s = slot[i]!;
      if (kind[i] === ALLOC) {
        handles[s] = allocator.allocate(size[i]!);
        if (allocator.reservedBytes > stopReservedBytes) {
          failed = `reserved passed ${formatGiB(stopReservedBytes)} at op ${i}`;
          i++;
          break;
        }
      } else {
        allocator.free(handles[s]);
        handles[s] = undefined;
        if (++frees % submitEveryFrees === 0) allocator.submit();
      }
    }
  } catch (error) {
    failed = `${allocator.name} threw at op ${i}: ${error instanceof Error ? error.message : String(error)}`;
  }
  const seconds = (performance.now() - start - pausedMs) / 1000;
  const cpu = clock.stop();
  const peakReservedBytes = allocator.peakReservedBytes;
  const rssAboveBaselineBytes = rss.takeMaxAboveBaseline();
  for (const handle of handles) if (handle !== undefined) allocator.free(handle);
  allocator.submit();
  const result: PassResult = {
    ops: i,
    seconds,
    opsPerSec: seconds > 0 ? i / seconds : 0,
    createBufferCalls: allocator.createBufferCalls - createdBefore,
    peakReservedBytes,
    rssAboveBaselineBytes,
    cpu,
  };
  return failed === undefined ? result : { ...result, failed };
}

function formatGiB(bytes: number): string {
  return `${+(bytes / 2 ** 30).toFixed(2)} GiB`;
}
