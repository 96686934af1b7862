import { expect } from 'chai';
import { CachingAllocator } from '@stowage/core';
import type { TraceEvent } from '@stowage/lab/replay';
import { findTraceRoot, listTraces, readPytorchReference, readTraceFile, replayTrace } from '@stowage/lab/replay';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** A step of a static-shape loop: the first allocations of a recorded trace, with their frees. */
const STEP_ALLOCS = 2000;
/** Steps replayed; the loop must have stopped mapping well before the last ones. */
const STEPS = 24;
/** Steps at the end that must call the backend not at all. */
const QUIET_STEPS = 4;

function firstAllocations(events: readonly TraceEvent[], allocs: number): TraceEvent[] {
  const ids = new Set<number>();
  for (const e of events) {
    if (ids.size >= allocs) break;
    if (e.action === 'alloc') ids.add(e.id);
  }
  return events.filter((e) => (e.action === 'alloc' || e.action === 'free_requested' || e.action === 'free_completed') && ids.has(e.id));
}

/**
 * The best preset unmaps free pages only at a new peak (Note [Expandable segments]), so a loop that repeats the
 * same allocations settles: after a few steps it maps no more pages and its reserved memory stops growing. On
 * every PyTorch trace that PyTorch's reference table lists, as the engine bench's static-shape-all line reports.
 */
describe('CachingAllocator best preset in a static-shape loop over recorded traces', function () {
  this.timeout(120_000);
  const root = findTraceRoot();
  const reference = root ? readPytorchReference(root) : new Map();
  const traces = root ? listTraces(root).filter((t) => t.kind === 'pytorch' && reference.has(t.name)) : [];

  if (!root || traces.length === 0) {
    it('settles on recorded traces (skipped: no ../shared/traces directory with a reference table was found)', function () {
      console.log('    skipped: ../shared/traces (or $STOWAGE_TRACES) with its README reference table was not found');
      this.skip();
    });
    return;
  }

  for (const trace of traces) {
    it(`stops mapping pages after a few steps of ${trace.name}`, async () => {
      const step = firstAllocations(await readTraceFile(trace), STEP_ALLOCS);
      const backend = new VirtualMemoryBackend({ storeData: false });
      using allocator = new CachingAllocator(backend, { preset: 'best' });
      const mapsPerStep: number[] = [];
      const reservedAfterStep: number[] = [];
      for (let i = 0; i < STEPS; i++) {
        const before = backend.mallocCount;
        expect(replayTrace(allocator, step).failedAt).to.equal(undefined);
        mapsPerStep.push(backend.mallocCount - before);
        reservedAfterStep.push(backend.reservedBytes);
      }
      expect(mapsPerStep.slice(-QUIET_STEPS), `maps per step: ${mapsPerStep.join(' ')}`).to.deep.equal(new Array(QUIET_STEPS).fill(0));
      const settled = reservedAfterStep.slice(-QUIET_STEPS);
      expect(new Set(settled).size, 'reserved bytes stop changing').to.equal(1);
      allocator.assertInvariants();
    });
  }
});
