import { expect } from 'chai';
import type { CachingAllocatorOptions } from '@stowage/core';
import { CachingAllocator, InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import { engine, MiB } from './helpers.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** The engine with its protected `retireSegment` reachable, as a backend-specific allocator has it. */
class RetiringAllocator extends CachingAllocator<number> {
  retire(handle: number): boolean {
    return this.retireSegment(handle);
  }
}

describe('CachingAllocator retired expandable segments (statistics)', () => {
  it('keeps oversize_segments at zero when a retired expandable segment of at least the max split size goes back', () => {
    const backend = new VirtualMemoryBackend({ storeData: false });
    const allocator = new RetiringAllocator(backend, { preset: 'pytorch', expandableSegments: true, maxSplitSize: 24 * MiB });
    const big = allocator.allocate(30 * MiB); // one expandable segment with 30 MiB of pages mapped
    expect(allocator.memoryStats()['oversize_segments.current'], 'an expandable segment is not counted as an oversize segment').to.equal(0);
    allocator.retire(big.handle as number);
    allocator.free(big); // the retired segment goes back with its 30 MiB mapped
    allocator.assertInvariants();
    const s = allocator.memoryStats();
    expect(s['reserved_bytes.all.current']).to.equal(0);
    expect(s['oversize_segments.current'], 'no segment is left, so no oversize segment').to.equal(0);
    expect(s['oversize_segments.freed'], 'nothing that was never counted is counted as freed').to.equal(s['oversize_segments.allocated']);
  });
});

describe('CachingAllocator outOfMemory event (Note [Segment events])', () => {
  it('reports the segments the out-of-memory chain released before it emits outOfMemory', () => {
    const { allocator } = engine({ preset: 'pytorch' }, { capacityBytes: 40 * MiB });
    const keep = allocator.allocate(8 * MiB); // a 20 MiB segment, live
    allocator.free(allocator.allocate(512)); // a 2 MiB small segment, cached
    let eventBytes = allocator.reservedBytes;
    allocator.events.on('segmentReserved', (e) => (eventBytes += e.bytes));
    allocator.events.on('segmentReleased', (e) => (eventBytes -= e.bytes));
    const seen: { eventBytes: number; reserved: number; snapshotBytes: number }[] = [];
    allocator.events.on('outOfMemory', (e) => {
      const snapshotBytes = allocator.snapshot().segments.reduce((n, s) => n + s.total_size, 0);
      seen.push({ eventBytes, reserved: e.stats['reserved_bytes.all.current'], snapshotBytes });
    });
    // 20 MiB live + a 2 MiB cached segment of 40: the chain releases the cached segment, and 20 MiB still do not fit.
    expect(() => allocator.allocate(30 * MiB)).to.throw(OutOfMemoryError);
    expect(seen).to.have.length(1);
    expect(seen[0]!.reserved).to.equal(20 * MiB);
    expect(seen[0]!.snapshotBytes).to.equal(20 * MiB);
    expect(seen[0]!.eventBytes, 'segmentReleased for the cached segment came before outOfMemory').to.equal(20 * MiB);
    allocator.free(keep);
  });
});

describe('resolveCachingOptions (typed errors)', () => {
  const backend = (): VirtualMemoryBackend => new VirtualMemoryBackend({ storeData: false });
  const make = (options: unknown) => () => new CachingAllocator(backend(), options as CachingAllocatorOptions);

  it('rejects roundupPower2Divisions that are not powers of two past 2^32 with InvalidArgumentError', () => {
    // 3 * 2^32 and 2^32 + 2^31 pass a 32-bit `d & (d - 1)` test.
    expect(make({ roundupPower2Divisions: 3 * 2 ** 32 })).to.throw(InvalidArgumentError, /roundupPower2Divisions/);
    expect(make({ roundupPower2Divisions: [0, 2 ** 32 + 2 ** 31] })).to.throw(InvalidArgumentError, /roundupPower2Divisions/);
  });

  it('rejects roundupPower2Divisions that are neither a number nor a list with InvalidArgumentError, not a TypeError', () => {
    expect(make({ roundupPower2Divisions: true })).to.throw(InvalidArgumentError, /roundupPower2Divisions/);
    expect(make({ roundupPower2Divisions: { 0: 4 } })).to.throw(InvalidArgumentError, /roundupPower2Divisions/);
  });

  it('rejects a segmentSize or reclaimers that is not a function when constructed, not with a TypeError in allocate', () => {
    expect(make({ segmentSize: 32 * MiB })).to.throw(InvalidArgumentError, /segmentSize/);
    expect(make({ reclaimers: [] })).to.throw(InvalidArgumentError, /reclaimers/);
  });

  it('never reserves a segment whose size segmentSize returned as something other than a whole byte count', () => {
    for (const sized of [() => Number.NaN, (n: number) => n * 1.1 + 0.5]) {
      const allocator = new CachingAllocator(backend(), { preset: 'pytorch', segmentSize: sized });
      let error: unknown;
      try {
        allocator.allocate(3 * MiB);
      } catch (e) {
        error = e;
      }
      if (error !== undefined) expect(error, 'a typed error naming the option').to.be.instanceOf(InvalidArgumentError);
      expect(Number.isSafeInteger(allocator.reservedBytes), `reserved bytes ${allocator.reservedBytes}`).to.equal(true);
      allocator.assertInvariants();
    }
  });

  it('rejects a null options object with InvalidArgumentError', () => {
    expect(make(null)).to.throw(InvalidArgumentError, /options/);
  });
});
