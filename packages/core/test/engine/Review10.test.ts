import { expect } from 'chai';
import type { DataPtr, MemoryReclaimer, SnapshotBlock } from '@stowage/core';
import {
  CachingAllocator,
  DeviceMismatchError,
  DoubleFreeError,
  ForeignPointerError,
  InvalidArgumentError,
  OutOfMemoryError,
  UseAfterReleaseError,
} from '@stowage/core';
// The pool is internal to the engine (not exported): the test reaches it through the built package.
import { Block, Segment } from '../../dist/engine/Block.js';
import { BlockPool } from '../../dist/engine/BlockPool.js';
import { engine, expectSnapshotCoversReserved, KiB, MiB } from './helpers.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** (size, address) order: the pool's order within a stream. */
function byKey(a: Block, b: Block): number {
  return a.size - b.size || a.address - b.address;
}

/** Checks every query of `pool` (stream 0) against `model`, the blocks it should hold. */
function expectPoolMatches(pool: BlockPool, model: readonly Block[], probes: readonly number[]): void {
  const sorted = [...model].sort(byKey);
  expect(pool.size).to.equal(sorted.length);
  expect([...pool.blocks()]).to.deep.equal(sorted);
  for (let i = 0; i < sorted.length; i++) {
    expect(pool.lower(sorted[i]!), `the block before the ${i}th`).to.equal(sorted[i - 1]);
    expect(pool.higher(sorted[i]!), `the block after the ${i}th`).to.equal(sorted[i + 1]);
  }
  for (const bytes of probes) expect(pool.lowerBound(0, bytes), `lower bound of ${bytes}`).to.equal(sorted.find((b) => b.size >= bytes));
  expect(pool.largest(0)).to.equal(sorted.at(-1));
}

describe('BlockPool edge cases (Note [Size buckets])', () => {
  const segment = new Segment({ handle: null, byteOffset: 0, address: 0, byteLength: 0 }, 0, 0, false, false);

  it('keeps the order when sizes arrive ascending past several chunk splits and the last size of each chunk leaves', () => {
    const pool = new BlockPool(false);
    let model: Block[] = [];
    // Ascending sizes always land in the last chunk, which splits at 512 sizes into two of 256: chunks end at
    // multiples of 256.
    for (let size = 1; size <= 1300; size++) {
      const block = new Block(segment, 10_000 + size, size);
      pool.insert(block);
      model.push(block);
    }
    const probes = [0, 1, 255, 256, 257, 511, 512, 513, 767, 768, 769, 1024, 1299, 1300, 1301];
    expectPoolMatches(pool, model, probes);
    // The last size of each chunk, then a whole chunk.
    const leaving = model.filter((b) => b.size % 256 === 0 || (b.size > 512 && b.size <= 768));
    for (const block of leaving) pool.remove(block);
    model = model.filter((b) => !leaving.includes(b));
    expectPoolMatches(pool, model, probes);
    for (const block of leaving) pool.insert(block);
    model.push(...leaving);
    expectPoolMatches(pool, model, probes);
  });

  it('keeps the order when sizes arrive descending past chunk splits and leave from the largest down', () => {
    const pool = new BlockPool(false);
    const model: Block[] = [];
    for (let size = 1100; size >= 1; size--) {
      const block = new Block(segment, 50_000 - size, size * 512);
      pool.insert(block);
      model.push(block);
    }
    expectPoolMatches(pool, model, [0, 512, 513, 256 * 512, 256 * 512 + 1, 1100 * 512, 1100 * 512 + 1]);
    const seen: Block[] = [];
    for (let b = pool.largest(0); b !== undefined; ) {
      const lower = pool.lower(b);
      pool.remove(b);
      seen.push(b);
      b = lower;
    }
    expect(seen).to.deep.equal([...model].sort(byKey).reverse());
    expect(pool.size).to.equal(0);
    expect(pool.lowerBound(0, 0)).to.equal(undefined);
    expect(pool.largest(0)).to.equal(undefined);
  });

  it('answers a lower bound of zero or fewer bytes with the smallest block, lowest address first', () => {
    const pool = new BlockPool(false);
    const blocks = [new Block(segment, 3000, 1024), new Block(segment, 1000, 512), new Block(segment, 2000, 512)];
    for (const block of blocks) pool.insert(block);
    expect(pool.lowerBound(0, 0)).to.equal(blocks[1]);
    expect(pool.lowerBound(0, -4 * MiB), 'a gap search may start below zero').to.equal(blocks[1]);
    expect(pool.lowerBound(1, 0), 'another stream has nothing').to.equal(undefined);
  });

  it('steps through blocks of one size by address and on to the neighbouring sizes', () => {
    const pool = new BlockPool(false);
    const a = new Block(segment, 900, 64);
    const ties = [500, 100, 300].map((address) => new Block(segment, address, 128));
    const z = new Block(segment, 50, 256);
    for (const block of [a, ...ties, z]) pool.insert(block);
    const [t500, t100, t300] = ties as [Block, Block, Block];
    expect(pool.lowerBound(0, 65), 'the tie at the lowest address').to.equal(t100);
    expect(pool.lowerBound(0, 128)).to.equal(t100);
    expect(pool.higher(t100)).to.equal(t300);
    expect(pool.higher(t500)).to.equal(z);
    expect(pool.lower(t100)).to.equal(a);
    expect(pool.largest(0)).to.equal(z);
    pool.remove(t100);
    expect(pool.lowerBound(0, 128), 'the next tie by address').to.equal(t300);
    pool.remove(t500); // the bucket's first (highest address)
    pool.remove(t300); // the bucket's last: it empties
    expect(pool.lowerBound(0, 65), 'an emptied size is skipped').to.equal(z);
    expect(pool.lower(z)).to.equal(a);
    expect(pool.has(t300)).to.equal(false);
    pool.remove(t300); // not there: nothing changes
    expect(pool.size).to.equal(2);
  });
});

describe('CachingAllocator best fit over many distinct free sizes', () => {
  /** The inactive small-pool block a request of `rounded` bytes should take: smallest, then lowest address. */
  function expectedFit(allocator: CachingAllocator<number>, rounded: number): SnapshotBlock | undefined {
    return allocator
      .snapshot()
      .segments.filter((s) => s.segment_type === 'small' && s.stream === 0)
      .flatMap((s) => s.blocks)
      .filter((b) => b.state === 'inactive' && b.size >= rounded)
      .sort((x, y) => x.size - y.size || x.address - y.address)[0];
  }

  it('takes the smallest fitting block at the lowest address among more than 512 distinct free sizes', () => {
    const { allocator } = engine({ preset: 'pytorch' });
    const freed: DataPtr[] = [];
    const holders: DataPtr[] = [];
    for (let k = 1; k <= 700; k++) {
      freed.push(allocator.allocate(512 * k));
      holders.push(allocator.allocate(512)); // keeps the freed block from merging with the next one
    }
    for (const ptr of freed) allocator.free(ptr);
    allocator.assertInvariants();
    for (const nbytes of [1, 512 * 137 + 1, 512 * 256, 512 * 257, 512 * 511 + 3, 512 * 512, 512 * 513, 512 * 699 + 1, 512 * 700]) {
      const rounded = Math.ceil(nbytes / 512) * 512;
      const fit = expectedFit(allocator, rounded);
      expect(fit, `a free block for ${nbytes} bytes`).to.not.equal(undefined);
      const ptr = allocator.allocate(nbytes);
      expect(ptr.address, `the best fit for ${nbytes} bytes`).to.equal(fit!.address);
      allocator.free(ptr);
      allocator.assertInvariants();
    }
    for (const ptr of holders) allocator.free(ptr);
    allocator.assertInvariants();
  });

  it('gives a request the free block of its size at the lowest address, whatever order they were freed in', () => {
    const { allocator } = engine({ preset: 'pytorch' });
    const [a, , b, , c] = [allocator.allocate(1000), allocator.allocate(512), allocator.allocate(1000), allocator.allocate(512), allocator.allocate(1000), allocator.allocate(512)];
    expect(a!.address).to.be.lessThan(b!.address);
    expect(b!.address).to.be.lessThan(c!.address);
    allocator.free(c!);
    allocator.free(a!);
    allocator.free(b!);
    expect(allocator.allocate(1000).address).to.equal(a!.address);
    expect(allocator.allocate(1000).address).to.equal(b!.address);
    expect(allocator.allocate(1000).address).to.equal(c!.address);
    allocator.assertInvariants();
  });
});

describe('CachingAllocator#snapshot of expandable segments (one entry per mapped range)', () => {
  it('starts the first entry at the first mapped block when the segment begins with a gap', () => {
    const { allocator } = engine({ preset: 'pytorch', expandableSegments: true });
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
    class RetiringAllocator extends CachingAllocator<number> {
      retire(handle: number): boolean {
        return this.retireSegment(handle);
      }
    }
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

describe('CachingAllocator pointer checks (checkPtr out of the hot path)', () => {
  it('throws the same error type for each kind of bad pointer as before', () => {
    const { allocator } = engine({ preset: 'pytorch' });
    const other = new CachingAllocator(new VirtualMemoryBackend({ storeData: false }), { preset: 'pytorch' });
    const elsewhere = new CachingAllocator(new VirtualMemoryBackend({ storeData: false, device: { type: 'virtual', index: 1 } }), { preset: 'pytorch' });
    const live = allocator.allocate(1024);
    const freed = allocator.allocate(1024);
    allocator.free(freed);
    const foreign = other.allocate(1024);
    const remote = elsewhere.allocate(1024);
    expect(() => allocator.free({} as DataPtr)).to.throw(InvalidArgumentError, /ptr/);
    expect(() => allocator.free(freed)).to.throw(DoubleFreeError, /already released/);
    expect(() => allocator.copyData(live, freed, 16)).to.throw(UseAfterReleaseError, /src is the 1024-byte allocation/);
    expect(() => allocator.copyData(live, remote, 16)).to.throw(DeviceMismatchError, /src lives on/);
    expect(() => allocator.free(remote)).to.throw(DeviceMismatchError);
    expect(() => allocator.free(foreign)).to.throw(ForeignPointerError, /did not allocate it/);
    expect(() => allocator.recordStream(foreign, 0)).to.throw(ForeignPointerError);
    expect(() => allocator.copyData(live, foreign, 16), 'copying from another allocator of the device is allowed').to.not.throw();
    allocator.free(live);
    other.free(foreign);
    elsewhere.free(remote);
  });
});

describe('CachingAllocator out-of-memory retries with quick lists (Note [Deferred coalescing])', () => {
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
});

describe('CachingAllocator expandable segments next to an oversize free block (max split size)', () => {
  /** An engine whose backend records every page-mapping call's byte count. */
  function recordingEngine(): { allocator: CachingAllocator<number>; backend: VirtualMemoryBackend; mapped: number[] } {
    const { allocator, backend } = engine({ preset: 'pytorch', expandableSegments: true, maxSplitSize: 32 * MiB });
    const mapping = backend.pageMapping!;
    const map = mapping.map.bind(mapping);
    const mapped: number[] = [];
    mapping.map = (range, offset, bytes) => {
      mapped.push(bytes);
      return map(range, offset, bytes);
    };
    return { allocator, backend, mapped };
  }

  function expectConsistent(allocator: CachingAllocator<number>, backend: VirtualMemoryBackend, mapped: number[]): void {
    expect(mapped.every((bytes) => bytes > 0), `page mappings of ${mapped.map((b) => b / MiB).join(', ')} MiB`).to.equal(true);
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(backend.reservedBytes);
    allocator.assertInvariants();
    expectSnapshotCoversReserved(allocator);
  }

  it('maps whole new pages for a request beside a gap whose free neighbour is oversize, keeping that block whole', () => {
    const { allocator, backend, mapped } = recordingEngine();
    const oversize = allocator.allocate(40 * MiB);
    const middle = allocator.allocate(14 * MiB);
    allocator.allocate(2 * MiB);
    allocator.free(middle);
    allocator.emptyCache(); // the middle's pages go back: a 14 MiB gap after the 40 MiB block
    allocator.free(oversize);
    const ptr = allocator.allocate(16 * MiB); // too big for the gap; the 40 MiB block is not split for it
    expect(ptr.byteLength).to.equal(16 * MiB);
    expectConsistent(allocator, backend, mapped);
    const blocks = allocator.snapshot().segments.flatMap((s) => s.blocks);
    expect(blocks.some((b) => b.state === 'inactive' && b.size === 40 * MiB), 'the oversize block is still cached whole').to.equal(true);
  });

  it('grows the segment past an oversize free last block instead of shrinking it by a negative mapping', () => {
    const { allocator, backend, mapped } = recordingEngine();
    allocator.allocate(2 * MiB);
    allocator.free(allocator.allocate(40 * MiB));
    const ptr = allocator.allocate(16 * MiB);
    expect(ptr.byteLength).to.equal(16 * MiB);
    expectConsistent(allocator, backend, mapped);
    const blocks = allocator.snapshot().segments.flatMap((s) => s.blocks);
    expect(blocks.some((b) => b.state === 'inactive' && b.size === 40 * MiB), 'the oversize block is still cached whole').to.equal(true);
  });
});
