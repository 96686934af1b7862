import { expect } from 'chai';
import type { DataPtr } from '@stowage/core';
import type { MemoryReclaimer } from '@stowage/core/plugin-kit';
import { CachingAllocator, OutOfMemoryError } from '@stowage/core';
import { engine, expectSnapshotCoversReserved, KiB, MiB } from './helpers.js';

describe('CachingAllocator#allocate (out-of-memory chain with quick lists, Note [Deferred coalescing])', () => {
  /** A reclaimer that frees the given pointers, one per call, and counts its calls. */
  function reclaimerOf(allocator: CachingAllocator<number>, ptrs: DataPtr[]): MemoryReclaimer & { calls: number } {
    const reclaimer = {
      calls: 0,
      reclaim: (): number => {
        reclaimer.calls++;
        let freed = 0;
        for (const ptr of ptrs.splice(0)) {
          freed += ptr.byteLength;
          allocator.free(ptr);
        }
        return freed;
      },
    };
    return reclaimer;
  }

  function full(): { allocator: CachingAllocator<number>; live: DataPtr[]; toReclaim: DataPtr[]; reclaimer: { calls: number } } {
    const toReclaim: DataPtr[] = [];
    const set: { reclaimer?: MemoryReclaimer & { calls: number } } = {};
    const { allocator } = engine({ preset: 'best', expandableSegments: false, memoryLimit: 4 * MiB, reclaimers: () => [set.reclaimer!] });
    const reclaimer = (set.reclaimer = reclaimerOf(allocator, toReclaim));
    const live: DataPtr[] = [];
    for (let i = 0; i < 64; i++) live.push(allocator.allocate(64 * KiB)); // two 2 MiB segments, full
    expect(allocator.reservedBytes).to.equal(4 * MiB);
    return { allocator, live, toReclaim, reclaimer };
  }

  it('serves a request from a block of its size that a reclaimer freed into a quick list', () => {
    const { allocator, live, toReclaim, reclaimer } = full();
    toReclaim.push(live.splice(10, 1)[0]!);
    const ptr = allocator.allocate(64 * KiB);
    expect(reclaimer.calls).to.equal(1);
    allocator.assertInvariants();
    expectSnapshotCoversReserved(allocator);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(64);
    allocator.free(ptr);
    for (const p of live) allocator.free(p);
    allocator.assertInvariants();
    expect(allocator.memoryStats()['inactive_split.all.current'], 'every segment whole again').to.equal(0);
  });

  it('merges quick-listed halves a reclaimer freed before it answers that nothing fits', () => {
    const { allocator, live, toReclaim, reclaimer } = full();
    // Two neighbours: 128 KiB once merged, more than a quick list holds for 64 KiB requests.
    toReclaim.push(...live.splice(20, 2));
    const ptr = allocator.allocate(128 * KiB);
    expect(reclaimer.calls).to.equal(1);
    allocator.assertInvariants();
    expectSnapshotCoversReserved(allocator);
    allocator.free(ptr);
    expect(() => allocator.allocate(4 * MiB), 'nothing left to reclaim').to.throw(OutOfMemoryError);
    allocator.assertInvariants();
    expectSnapshotCoversReserved(allocator);
  });

  it('serves a request from blocks a reclaimer freed into the quick lists, before reporting out of memory', () => {
    // deferCoalescing: blocks a reclaimer frees wait unmerged in quick lists; only their merge makes room.
    const held: DataPtr[] = [];
    const reclaimers: MemoryReclaimer[] = [{ reclaim: () => held.splice(0).reduce((n, p) => (p.release(), n + p.byteLength), 0) }];
    const { allocator } = engine({ preset: 'best', expandableSegments: false, reclaimers: () => reclaimers }, { capacityBytes: 2 * MiB });
    for (let i = 0; i < 4; i++) held.push(allocator.allocate(16 * KiB)); // [0, 64 KiB)
    allocator.allocate(MiB); // [64 KiB, 1088 KiB)
    allocator.allocate(960 * KiB); // the rest of the only segment the device can hold
    const ptr = allocator.allocate(64 * KiB);
    expect(ptr.byteLength).to.equal(64 * KiB);
    allocator.assertInvariants();
  });
});
