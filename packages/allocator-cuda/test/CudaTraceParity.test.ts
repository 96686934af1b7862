import { expect } from 'chai';
import { CachingAllocator } from '@stowage/core';
import type { CachingAllocatorOptions } from '@stowage/core';
import { findTraceRoot, listTraces, readPytorchReference, readTraceFile, replayTrace } from '@stowage/lab/replay';
import { VirtualMemoryBackend } from '@stowage/core/testing';
import { createCudaAllocator } from '@stowage/allocator-cuda';
import { cudaEngineOptions } from '@stowage/allocator-cuda/driver';
import { testLibcuda } from '@stowage/allocator-cuda/testing';

const GiB = 2 ** 30;

/**
 * What a replay left behind, for comparing two allocators on one trace: the segments and the peak reserved bytes.
 * Not the allocated bytes: best fit breaks ties between equal blocks by address, and the driver's addresses are in no
 * particular order (the virtual backend's increase), so a request may take a different one of two equal-sized blocks
 * and split it differently (one trace differs by 1 MiB of 778 MiB allocated at peak).
 */
function figures(stats: Record<string, number>) {
  return {
    segments: stats['segment.all.allocated'],
    peakReservedBytes: stats['reserved_bytes.all.peak'],
  };
}

/**
 * The CUDA allocator on the stand-in (or a real driver) makes the same decisions as the engine on the virtual
 * backend, which core's TraceParity test holds to PyTorch's own figures: same segments, same peak reserved bytes.
 * The stand-in's allocations are never touched, so traces reserving tens of GiB cost no memory.
 */
describe('CudaAllocator parity with the engine on recorded traces', function () {
  this.timeout(300_000);
  const lib = testLibcuda();
  const root = findTraceRoot();
  const reference = root ? readPytorchReference(root) : new Map();
  const traces = root ? listTraces(root).filter((t) => reference.get(t.name)?.mustMatch) : [];
  /** Traces recorded with PyTorch's expandable segments (core's TraceParity test holds the engine to them). */
  const expandable = root ? listTraces(root).filter((t) => reference.has(t.name) && t.name.includes('expandable')) : [];
  const why = typeof lib === 'string' ? lib : !root || traces.length === 0 ? '../shared/traces (or $STOWAGE_TRACES) with its README reference table was not found' : null;
  if (why !== null) {
    it('replays the must-match traces (skipped)', function () {
      console.log(`    skipped: ${why}`);
      this.skip();
    });
    return;
  }
  const { path, hooks } = lib as Exclude<typeof lib, string>;

  before(function () {
    if (hooks === null) {
      console.log('    skipped: on a real driver the device\'s memory bounds the replays; run them on the stand-in');
      this.skip();
    }
    createCudaAllocator({ libcuda: path }).dispose(); // the stand-in reads its capacity at the first cuInit
    hooks.setCapacity(96 * GiB);
  });
  after(() => hooks?.setCapacity(GiB));

  /**
   * `options` on the stand-in and, with the CUDA plugin's defaults under them, on the virtual backend. `device`: the
   * CUDA plugin's own options (unshareable pages: the stand-in then needs no descriptor per page).
   */
  async function replayBoth(name: string, options: CachingAllocatorOptions, device: { shareableSegments?: boolean } = {}) {
    const trace = [...traces, ...expandable].find((t) => t.name === name)!;
    const events = await readTraceFile(trace);
    using virtual = new CachingAllocator(new VirtualMemoryBackend({ storeData: false }), cudaEngineOptions(options, true));
    const expected = replayTrace(virtual, events);
    using cuda = createCudaAllocator({ libcuda: path, ...device, ...options });
    expect(cuda.backend.pageMapping !== undefined, 'the stand-in offers the virtual memory calls').to.equal(true);
    const actual = replayTrace(cuda, events);
    expect(actual.failedAt, `the CUDA replay completes (${String(actual.failedAt?.error)})`).to.equal(expected.failedAt);
    return { expected: figures(virtual.memoryStats()), actual: figures(cuda.memoryStats()) };
  }

  for (const trace of traces) {
    it(`maps and unmaps expandable segments on the virtual memory calls as the engine does on the virtual backend, on ${trace.name} (the default)`, async () => {
      const { expected, actual } = await replayBoth(trace.name, {}, { shareableSegments: false });
      expect(actual).to.deep.equal(expected);
    });

    it(`reserves what the engine reserves on the virtual backend, and what PyTorch did, on ${trace.name} (pytorch preset)`, async () => {
      const { expected, actual } = await replayBoth(trace.name, { preset: 'pytorch' });
      expect(actual).to.deep.equal(expected);
      const ref = reference.get(trace.name)!;
      expect(actual.segments, 'PyTorch\'s segment count').to.equal(ref.segments);
      expect((actual.peakReservedBytes! / GiB).toFixed(3), 'PyTorch\'s peak reserved GiB').to.equal(ref.peakReservedGiB.toFixed(3));
    });
  }

  for (const trace of expandable) {
    it(`maps PyTorch's expandable segments on the virtual memory calls as the engine does on the virtual backend, on ${trace.name} (pytorch preset, expandable segments)`, async () => {
      const { expected, actual } = await replayBoth(trace.name, { preset: 'pytorch', expandableSegments: true }, { shareableSegments: false });
      expect(actual).to.deep.equal(expected);
    });
  }
});
