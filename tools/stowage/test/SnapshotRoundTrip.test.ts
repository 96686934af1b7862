import { expect } from 'chai';
import type { CachingAllocatorOptions } from '@stowage/core';
import { CachingAllocator } from '@stowage/core';
import { VirtualMemoryBackend } from '@stowage/core/testing';
import type { TraceEvent } from '@stowage/lab/replay';
import { findTraceRoot, listTraces, readPytorchReference, readTraceFile, replayTrace, traceSummary } from '@stowage/lab/replay';
import { readSnapshotPickle, toTraceEvents, writeSnapshotPickle } from '@stowage/snapshot-pickle';

/** What a replay did: the engine's segments and peaks, and the replayer's peak of live requested bytes. */
interface Figures {
  readonly segments: number;
  readonly peakReservedBytes: number;
  readonly peakAllocatedBytes: number;
  readonly peakLiveBytes: number;
}

/** Replays `events` through a fresh engine with `options`; with `record`, also returns its snapshot at the end. */
function replay(events: readonly TraceEvent[], options: CachingAllocatorOptions, record = false) {
  using engine = new CachingAllocator(new VirtualMemoryBackend({ storeData: false }), options);
  if (record) engine.recordHistory({ maxEntries: 4 * events.length + 4096 });
  const result = replayTrace(engine, events, { keepLive: true });
  expect(result.failedAt, 'the replay completes').to.equal(undefined);
  const stats = engine.memoryStats();
  const figures: Figures = {
    segments: stats['segment.all.allocated'],
    peakReservedBytes: stats['reserved_bytes.all.peak'],
    peakAllocatedBytes: stats['allocated_bytes.all.peak'],
    peakLiveBytes: result.peakLiveBytes,
  };
  const snapshot = record ? engine.snapshot() : undefined;
  for (const ptr of result.live ?? []) engine.free(ptr);
  return { figures, snapshot };
}

/**
 * The engine's history, as PyTorch's memory viewer and `stowage replay` read it: a run recorded into a snapshot,
 * written as a pickle, read back and turned into a trace again must be the same run. Its allocations pair with
 * their frees (no allocation appears to predate the recording), and replaying it reproduces the recorded run's
 * segment count and peak reserved and allocated bytes, on every trace the traces README marks "must match".
 */
describe('CachingAllocator#recordHistory through a snapshot pickle', function () {
  this.timeout(300_000);
  const root = findTraceRoot();
  const reference = root ? readPytorchReference(root) : new Map();
  const traces = root ? listTraces(root).filter((t) => reference.get(t.name)?.mustMatch) : [];

  if (!root || traces.length === 0) {
    it('round-trips the must-match traces (skipped: no ../shared/traces directory with a reference table was found)', function () {
      console.log('    skipped: ../shared/traces (or $STOWAGE_TRACES) with its README reference table was not found');
      this.skip();
    });
    return;
  }

  for (const trace of traces) {
    for (const preset of ['pytorch', 'best'] as const) {
      it(`replays the recorded history of ${trace.name} to the same segments and peaks (${preset} preset)`, async () => {
        const options: CachingAllocatorOptions = { preset };
        const { figures: recorded, snapshot } = replay(await readTraceFile(trace), options, true);
        if (preset === 'pytorch') {
          const ref = reference.get(trace.name)!;
          expect([recorded.segments, (recorded.peakReservedBytes / 2 ** 30).toFixed(3)], "the recorded run is PyTorch's").to.deep.equal([ref.segments, ref.peakReservedGiB.toFixed(3)]);
        }
        const history = toTraceEvents(readSnapshotPickle(writeSnapshotPickle(snapshot!)));
        expect(history.filter((e) => e.pre).length, 'allocations the history cannot pair with an alloc entry').to.equal(0);
        const summary = traceSummary(history);
        expect(summary.peakLiveBytes, "the history's peak of live bytes (PyTorch's viewer's timeline)").to.equal(recorded.peakLiveBytes);
        expect(summary.peakReservedBytes, "the history's peak of reserved bytes").to.equal(recorded.peakReservedBytes);
        if (preset === 'pytorch') expect(summary.segmentAllocs, "the history's segment_alloc entries").to.equal(recorded.segments);
        expect(replay(history, options).figures).to.deep.equal(recorded);
      });
    }
  }
});
