import { expect } from 'chai';
import { CachingAllocator } from '@stowage/core';
import { findTraceRoot, listTraces, readPytorchReference, readTraceFile, replayTrace } from '@stowage/lab/replay';
import { VirtualMemoryBackend } from '@stowage/core/testing';

const GiB = 2 ** 30;

/**
 * The engine in its PyTorch-parity configuration, replayed from a cold start on a virtual device, must
 * reproduce the segment count and peak reserved bytes that PyTorch's own allocator produced, on every trace
 * the traces README marks "must match". The numbers are read from that README at run time.
 */
describe('CachingAllocator PyTorch parity on recorded traces', function () {
  this.timeout(120_000);
  const root = findTraceRoot();
  const reference = root ? readPytorchReference(root) : new Map();
  const traces = root ? listTraces(root).filter((t) => reference.get(t.name)?.mustMatch) : [];

  if (!root || traces.length === 0) {
    it('replays the must-match traces (skipped: no ../shared/traces directory with a reference table was found)', function () {
      console.log('    skipped: ../shared/traces (or $STOWAGE_TRACES) with its README reference table was not found');
      this.skip();
    });
    return;
  }

  it('finds the must-match traces the README lists', () => {
    expect(traces.length).to.be.at.least(10);
  });

  for (const trace of traces) {
    it(`reproduces PyTorch's segments and peak reserved bytes on ${trace.name}`, async () => {
      const ref = reference.get(trace.name)!;
      const backend = new VirtualMemoryBackend({ storeData: false });
      using allocator = new CachingAllocator(backend, { preset: 'pytorch' });
      const result = replayTrace(allocator, await readTraceFile(trace));
      expect(result.failedAt, 'the replay completes').to.equal(undefined);
      const stats = allocator.memoryStats();
      expect(stats['segment.all.allocated'], 'segments created').to.equal(ref.segments);
      expect((stats['reserved_bytes.all.peak'] / GiB).toFixed(3), 'peak reserved GiB').to.equal(ref.peakReservedGiB.toFixed(3));
      expect(backend.peakReservedBytes).to.equal(stats['reserved_bytes.all.peak']);
    });
  }
});
