import { expect } from 'chai';
import type { DataPtr } from '@stowage/core';
import { engine, expectSnapshotCoversReserved, MiB, RetiringAllocator } from './helpers.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

describe('CachingAllocator#snapshot', () => {
  it('starts the first entry of an expandable segment at its first mapped block when the segment begins with a gap', () => {
    const { allocator } = engine({ preset: 'pytorch', expandableSegments: true, segmentPageBytes: 2 * MiB });
    const [a, b, c, d, e] = [1, 2, 3, 4, 5].map(() => allocator.allocate(4 * MiB)) as [DataPtr, DataPtr, DataPtr, DataPtr, DataPtr];
    allocator.free(a);
    allocator.free(c);
    allocator.emptyCache(); // unmaps a's and c's pages: gaps before b and between b and d
    allocator.assertInvariants();
    const entries = allocator.snapshot().segments;
    expect(entries.map((s) => [s.address, s.total_size])).to.deep.equal([
      [b.address, 4 * MiB],
      [d.address, 8 * MiB],
    ]);
    expect(entries[1]!.blocks.map((x) => x.address)).to.deep.equal([d.address, e.address]);
    expectSnapshotCoversReserved(allocator);
    allocator.free(b);
    allocator.free(d);
    allocator.free(e);
    expectSnapshotCoversReserved(allocator);
    allocator.emptyCache();
    expect(allocator.snapshot().segments, 'nothing mapped, nothing listed').to.deep.equal([]);
    expect(allocator.reservedBytes).to.equal(0);
  });

  it('lists a retired segment, with its free blocks outside the pools, until it goes back', () => {
    const allocator = new RetiringAllocator(new VirtualMemoryBackend({ storeData: false }), { preset: 'pytorch' });
    const a = allocator.allocate(4 * MiB);
    const b = allocator.allocate(4 * MiB);
    allocator.free(a);
    allocator.retire(b.handle as number);
    expectSnapshotCoversReserved(allocator);
    const [entry] = allocator.snapshot().segments;
    expect(entry!.blocks.map((x) => x.state)).to.deep.equal(['inactive', 'active_allocated', 'inactive']);
    allocator.free(b);
    expect(allocator.snapshot().segments).to.deep.equal([]);
    allocator.assertInvariants();
  });
});
