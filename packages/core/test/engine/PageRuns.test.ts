import { expect } from 'chai';
import fc from 'fast-check';
import type { DataPtr } from '@stowage/core';
import { CachingAllocator } from '@stowage/core';
import { VirtualMemoryBackend } from '@stowage/core/testing';
import { MiB } from './helpers.js';

/** An engine mapping each growth as one backend allocation, whose backend checks every unmap covers whole ones. */
function runsEngine(): { allocator: CachingAllocator<number>; backend: VirtualMemoryBackend; allocations: Map<number, number> } {
  const backend = new VirtualMemoryBackend({ storeData: false, capacityBytes: 512 * MiB });
  const allocations = new Map<number, number>(); // address → bytes of each allocation mapped
  const mapping = backend.pageMapping!;
  const map = mapping.map.bind(mapping);
  const unmap = mapping.unmap.bind(mapping);
  mapping.map = (range, offset, bytes, allocationBytes) => {
    const ok = map(range, offset, bytes, allocationBytes);
    const each = allocationBytes ?? mapping.pageBytes;
    if (ok) for (let at = offset; at < offset + bytes; at += each) allocations.set(range.address + at, each);
    return ok;
  };
  mapping.unmap = (range, offset, bytes) => {
    for (let at = range.address + offset; at < range.address + offset + bytes; ) {
      const each = allocations.get(at);
      if (each === undefined || at + each > range.address + offset + bytes) throw new Error(`unmap of [${offset}, ${offset + bytes}) cuts an allocation at ${at - range.address}`);
      allocations.delete(at);
      at += each;
    }
    unmap(range, offset, bytes);
  };
  const allocator = new CachingAllocator(backend, { preset: 'best', unifiedPools: false, segmentPageBytes: { small: 2 * MiB, large: 4 * MiB }, pageRuns: true, maxSplitSize: 32 * MiB });
  return { allocator, backend, allocations };
}

describe('CachingAllocator#allocate with page runs (PageRuns)', () => {
  it('maps each growth as one backend allocation of whole pages and unmaps only runs wholly free', () => {
    const { allocator, backend, allocations } = runsEngine();
    const a = allocator.allocate(10 * MiB); // one run of 12 MiB
    const b = allocator.allocate(6 * MiB); // 2 MiB left in a's run, then a run of 4 MiB
    expect([...allocations.values()]).to.deep.equal([12 * MiB, 4 * MiB]);
    allocator.free(a);
    allocator.emptyCache(); // b lies in both runs: neither goes back
    expect(backend.reservedBytes).to.equal(16 * MiB);
    allocator.free(b);
    allocator.emptyCache();
    expect(backend.reservedBytes).to.equal(0);
    expect(allocations.size).to.equal(0);
    allocator.assertInvariants();
  });

  it('keeps reserved bytes equal to the backend allocations and never cuts one, under random programs', () => {
    const op = fc.oneof(
      { weight: 6, arbitrary: fc.record({ kind: fc.constant('alloc' as const), bytes: fc.integer({ min: 1, max: 40 * MiB }) }) },
      { weight: 5, arbitrary: fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'emptyCache' as const }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('trim' as const), target: fc.integer({ min: 0, max: 128 * MiB }) }) },
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 50 }), (ops) => {
        const { allocator, backend, allocations } = runsEngine();
        const live: DataPtr[] = [];
        for (const o of ops) {
          if (o.kind === 'alloc') {
            try {
              live.push(allocator.allocate(o.bytes));
            } catch {
              // out of memory under the 512 MiB capacity: the state must still hold
            }
          } else if (o.kind === 'free') {
            if (live.length > 0) allocator.free(live.splice(o.pick % live.length, 1)[0]!);
          } else if (o.kind === 'emptyCache') allocator.emptyCache();
          else allocator.trim(o.target);
          allocator.assertInvariants();
          const mapped = [...allocations.values()].reduce((sum, bytes) => sum + bytes, 0);
          expect(allocator.reservedBytes).to.equal(mapped);
          expect(backend.reservedBytes).to.equal(mapped);
        }
        for (const ptr of live) allocator.free(ptr);
        allocator.emptyCache();
        expect(allocations.size, 'everything goes back once nothing is live').to.equal(0);
      }),
      { numRuns: 300, seed: 7 },
    );
  });
});
