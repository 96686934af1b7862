import { expect } from 'chai';
import type { CachingAllocatorOptions, DataPtr } from '@stowage/core';
import type { MemoryReclaimer, SnapshotBlock } from '@stowage/core/plugin-kit';
import {
  CachingAllocator,
  CpuMemoryBackend,
  DeviceMismatchError,
  DoubleFreeError,
  ForeignPointerError,
  InvalidArgumentError,
  OutOfMemoryError,
  StorageImpl,
  UseAfterReleaseError,
} from '@stowage/core';
import { VirtualMemoryBackend, describeAllocatorContract } from '@stowage/core/testing';
import { blockOf, engine, expectSnapshotCoversReserved, KiB, MiB, thrownBy } from './helpers.js';

describeAllocatorContract('CachingAllocator (pytorch preset) over a virtual device', () => new CachingAllocator(new VirtualMemoryBackend(), { preset: 'pytorch' }));
describeAllocatorContract('CachingAllocator (best preset) over a virtual device', () => new CachingAllocator(new VirtualMemoryBackend(), { preset: 'best' }));
describeAllocatorContract('CachingAllocator (best preset) over host memory', () => new CachingAllocator(new CpuMemoryBackend()));

/** The inactive small-pool block a request of `rounded` bytes should take: smallest, then lowest address. */
function expectedFit(allocator: CachingAllocator<number>, rounded: number): SnapshotBlock | undefined {
  return allocator
    .snapshot()
    .segments.filter((s) => s.segment_type === 'small' && s.stream === 0)
    .flatMap((s) => s.blocks)
    .filter((b) => b.state === 'inactive' && b.size >= rounded)
    .sort((x, y) => x.size - y.size || x.address - y.address)[0];
}

describe('CachingAllocator#allocate', () => {
  it('refuses an unknown option key (naming the nearest known one) and, for zero bytes too, a usage the device cannot serve; nothing changes', () => {
    const engine = new CachingAllocator(new CpuMemoryBackend());
    const before = engine.memoryStats();
    expect(() => engine.allocate(64, { stram: 0 } as never)).to.throw(InvalidArgumentError, /^options\.stram must be left out: .*did you mean stream\?/);
    expect(() => engine.allocate(0, { usage: 'uniform' })).to.throw(InvalidArgumentError, /options\.usage/);
    expect(() => engine.allocate(0, { shared: 'no' } as never)).to.throw(InvalidArgumentError, /options\.shared/);
    expect(() => engine.allocate(8, null as never)).to.throw(InvalidArgumentError, /^options must be an options object/);
    expect(engine.memoryStats()).to.deep.equal(before);
    expect(engine.allocate(64, { stream: 0, usage: 'storage', shared: false, other: undefined } as never).byteLength, 'known keys, and an undefined one').to.equal(64);
  });

  it('rounds a small request to 512 bytes inside a 2 MiB small-pool segment', () => {
    const { allocator, backend } = engine();
    const ptr = allocator.allocate(100);
    const { segment, block } = blockOf(allocator, ptr);
    expect(block.size).to.equal(512);
    expect(segment.total_size).to.equal(2 * MiB);
    expect(segment.segment_type).to.equal('small');
    const s = allocator.memoryStats();
    expect(s['allocated_bytes.small_pool.current']).to.equal(512);
    expect(s['requested_bytes.all.current']).to.equal(100);
    expect(s['reserved_bytes.small_pool.current']).to.equal(2 * MiB);
    expect(backend.mallocCount).to.equal(1);
    allocator.assertInvariants();
  });

  it('sizes large segments at 20 MiB under 10 MiB and rounds bigger requests to 2 MiB', () => {
    const sizes = [1.5 * MiB, 10 * MiB, 11 * MiB].map((n) => {
      const { allocator } = engine();
      return blockOf(allocator, allocator.allocate(n)).segment.total_size;
    });
    expect(sizes).to.deep.equal([20 * MiB, 10 * MiB, 12 * MiB]);
  });

  it('reuses a freed block of the same size class without asking the backend', () => {
    const { allocator, backend } = engine();
    const a = allocator.allocate(3000);
    const address = a.address;
    allocator.free(a);
    const b = allocator.allocate(2900);
    expect(b.address).to.equal(address);
    expect(backend.mallocCount).to.equal(1);
  });

  it('splits small-pool blocks down to 512 bytes but keeps a large-pool remainder of 1 MiB or less attached', () => {
    const { allocator } = engine();
    const small = allocator.allocate(MiB);
    expect(blockOf(allocator, small).segment.blocks.map((b) => b.size)).to.deep.equal([MiB, MiB]);
    const large = allocator.allocate(19.5 * MiB);
    expect(blockOf(allocator, large).block.size, 'a 0.5 MiB remainder is not split off').to.equal(20 * MiB);
    expect(allocator.memoryStats()['allocated_bytes.large_pool.current']).to.equal(20 * MiB);
    const other = allocator.allocate(2 * MiB);
    expect(blockOf(allocator, other).segment.blocks.map((b) => b.size)).to.deep.equal([2 * MiB, 18 * MiB]);
    allocator.assertInvariants();
  });

  it('picks the best fit by size, then the lowest address', () => {
    const { allocator } = engine();
    const [a, , b, , c] = [8 * KiB, KiB, 4 * KiB, KiB, 4 * KiB].map((n) => allocator.allocate(n));
    allocator.free(a!);
    allocator.free(c!);
    allocator.free(b!);
    const fit = allocator.allocate(3.5 * KiB);
    expect(fit.address, 'the lower of the two 4 KiB holes').to.equal(b!.address);
    allocator.assertInvariants();
  });

  it('never serves a small request from the large pool or the other way round', () => {
    const { allocator, backend } = engine();
    allocator.free(allocator.allocate(4 * MiB));
    allocator.allocate(64 * KiB);
    expect(backend.mallocCount).to.equal(2);
  });

  it('keeps blocks at least the max split size whole and serves them only to requests near their size', () => {
    const { allocator, backend } = engine({ preset: 'pytorch', maxSplitSize: '32MiB' });
    const big = allocator.allocate(40 * MiB);
    expect(allocator.memoryStats()['oversize_allocations.current']).to.equal(1);
    expect(allocator.memoryStats()['oversize_segments.current']).to.equal(1);
    allocator.free(big);
    const medium = allocator.allocate(21 * MiB);
    expect(backend.mallocCount, 'a request under the max split size does not take an oversize block').to.equal(2);
    const near = allocator.allocate(36 * MiB);
    expect(near.address, 'an oversize request within 20 MiB of the block reuses it whole').to.equal(big.address);
    expect(blockOf(allocator, near).block.size).to.equal(40 * MiB);
    allocator.free(medium);
    allocator.assertInvariants();
  });

  it('serves zero-byte requests without touching the device', () => {
    const { allocator, backend } = engine();
    const ptr = allocator.allocate(0);
    expect(ptr.byteLength).to.equal(0);
    expect(backend.mallocCount).to.equal(0);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(1);
    allocator.free(ptr);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(0);
  });

  it('rejects a stream the device does not have, changing nothing', () => {
    const { allocator } = engine(undefined, { streams: 2 });
    const before = allocator.memoryStats();
    for (const stream of [2, -1, 0.5]) expect(() => allocator.allocate(64, { stream })).to.throw(InvalidArgumentError, /options.stream must be a stream of virtual:0/);
    expect(allocator.memoryStats()).to.deep.equal(before);
  });

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

describe('CachingAllocator#free', () => {
  it('merges a freed block with both free neighbours and undoes the split accounting', () => {
    const { allocator } = engine();
    const [a, b, c] = [KiB, 2 * KiB, KiB].map((n) => allocator.allocate(n));
    allocator.free(a!);
    allocator.free(c!);
    expect(allocator.memoryStats()['inactive_split.all.current']).to.equal(2);
    allocator.free(b!);
    const [segment] = allocator.snapshot().segments;
    expect(segment!.blocks.map((x) => [x.size, x.state])).to.deep.equal([[2 * MiB, 'inactive']]);
    const s = allocator.memoryStats();
    expect(s['inactive_split.all.current']).to.equal(0);
    expect(s['inactive_split_bytes.all.current']).to.equal(0);
    expect(s['allocated_bytes.all.current']).to.equal(0);
    expect(s['active_bytes.all.current']).to.equal(0);
    allocator.assertInvariants();
  });

  it('rejects a double free, a foreign pointer and a non-pointer, changing nothing', () => {
    const { allocator } = engine();
    const { allocator: other } = engine();
    const ptr = allocator.allocate(64);
    allocator.free(ptr);
    const before = allocator.memoryStats();
    expect(() => allocator.free(ptr)).to.throw(DoubleFreeError);
    expect(() => allocator.free(other.allocate(64))).to.throw(ForeignPointerError);
    expect(() => allocator.free({ address: 0 } as DataPtr)).to.throw(InvalidArgumentError);
    expect(allocator.memoryStats()).to.deep.equal(before);
    allocator.assertInvariants();
  });

  it('rejects each kind of bad pointer with its own error type in free, copyData and recordStream', () => {
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

describe('CachingAllocator#recordStream', () => {
  it('holds a block used on another stream until that stream has done its work', () => {
    const { allocator, backend } = engine(undefined, { streams: 2 });
    const a = allocator.allocate(4 * KiB);
    allocator.recordStream(a, 1);
    backend.holdStream(1);
    allocator.free(a);
    expect(blockOf(allocator, { address: a.address } as DataPtr).block.state).to.equal('active_pending_free');
    let s = allocator.memoryStats();
    expect(s['allocated_bytes.all.current']).to.equal(0);
    expect(s['active_bytes.all.current']).to.equal(4 * KiB);
    const b = allocator.allocate(4 * KiB);
    expect(b.address, 'the pending block is not reused').to.not.equal(a.address);
    backend.completeStream(1);
    const c = allocator.allocate(4 * KiB);
    expect(c.address, 'reused once the event completed').to.equal(a.address);
    s = allocator.memoryStats();
    expect(s['active_bytes.all.current']).to.equal(8 * KiB);
    allocator.assertInvariants();
  });

  it('records a stream on a pointer a live storage holds, whose block then waits for that stream once the storage is released', () => {
    const { allocator, backend } = engine(undefined, { streams: 2 });
    const storage = new StorageImpl({ dataPtr: allocator.allocate(4 * KiB), allocator });
    const address = storage.data().address;
    allocator.recordStream(storage.data(), 1);
    backend.holdStream(1);
    storage.release();
    expect(allocator.allocate(4 * KiB).address, 'the block waits for stream 1').to.not.equal(address);
    backend.completeStream(1);
    expect(allocator.allocate(4 * KiB).address, 'reused once stream 1 is done').to.equal(address);
    allocator.assertInvariants();
  });

  it('keeps blocks with the stream that allocated them', () => {
    const { allocator, backend } = engine(undefined, { streams: 2 });
    allocator.free(allocator.allocate(4 * KiB, { stream: 1 }));
    const ptr = allocator.allocate(4 * KiB, { stream: 0 });
    expect(backend.mallocCount).to.equal(2);
    expect(blockOf(allocator, ptr).segment.stream).to.equal(0);
  });

  it('waits for pending events in emptyCache and then releases the segment', () => {
    const { allocator, backend } = engine(undefined, { streams: 2 });
    const a = allocator.allocate(4 * KiB);
    allocator.recordStream(a, 1);
    backend.holdStream(1);
    allocator.free(a);
    allocator.emptyCache();
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
    allocator.assertInvariants();
  });

  it('returns held blocks once their events complete and no sooner, however many wait', () => {
    const { allocator, backend } = engine(undefined, { streams: 2 });
    const pendingBytes = (): number => {
      const s = allocator.memoryStats();
      return s['active_bytes.all.current'] - s['allocated_bytes.all.current'];
    };
    const freeOnStream1 = (ptrs: readonly DataPtr[]): void => {
      for (const ptr of ptrs) {
        allocator.recordStream(ptr, 1);
        allocator.free(ptr);
      }
    };
    // Each round: a batch whose events complete, then one recorded after that stays held; the next allocation
    // returns exactly the first batch and the previous round's held one, and stops at this round's held one:
    // thousands of entries wait behind a moving head while new ones arrive.
    for (const [completed, held] of [[1500, 300], [40, 2000], [2500, 1], [0, 700], [3, 3]] as const) {
      const first = Array.from({ length: completed }, () => allocator.allocate(512));
      const second = Array.from({ length: held }, () => allocator.allocate(512));
      backend.holdStream(1);
      freeOnStream1(first);
      backend.completeStream(1);
      backend.holdStream(1);
      freeOnStream1(second);
      allocator.free(allocator.allocate(512)); // processes what completed
      expect(pendingBytes(), `after ${completed} completed and ${held} held`).to.equal(held * 512);
      allocator.assertInvariants();
    }
    backend.completeStream(1);
    allocator.free(allocator.allocate(512));
    expect(pendingBytes()).to.equal(0);
    allocator.assertInvariants();
  });

  it('rejects a freed pointer, a foreign pointer and an unknown stream', () => {
    const { allocator } = engine(undefined, { streams: 2 });
    const { allocator: other } = engine(undefined, { streams: 2 });
    const ptr = allocator.allocate(64);
    expect(() => allocator.recordStream(ptr, 2)).to.throw(InvalidArgumentError, /^stream must be/);
    expect(() => allocator.recordStream(other.allocate(64), 1)).to.throw(ForeignPointerError);
    allocator.free(ptr);
    expect(() => allocator.recordStream(ptr, 1)).to.throw(UseAfterReleaseError, /it was freed/);
  });
});

describe('CachingAllocator out-of-memory chain', () => {
  it('frees its own cached segments and retries before failing', () => {
    const { allocator, backend } = engine({ preset: 'pytorch', memoryLimit: '40MiB' });
    allocator.free(allocator.allocate(30 * MiB));
    const ptr = allocator.allocate(36 * MiB);
    expect(ptr.byteLength).to.equal(36 * MiB);
    const s = allocator.memoryStats();
    expect(s.num_alloc_retries).to.equal(1);
    expect(s.num_device_free).to.equal(1);
    expect(backend.reservedBytes).to.equal(36 * MiB);
  });

  it('fits a segment into the room a budget has left when PyTorch\'s size for the request does not fit (Note [Segments under a budget])', () => {
    const small = engine({ preset: 'pytorch', memoryLimit: '1MiB' });
    const tiny = small.allocator.allocate(64);
    expect(small.backend.reservedBytes).to.equal(MiB, 'a 2 MiB small segment cannot fit 1 MiB: the segment is the budget');
    const next = small.allocator.allocate(1000);
    expect(small.backend.reservedBytes).to.equal(MiB, 'the next request splits that segment');
    small.allocator.assertInvariants();
    tiny.release();
    next.release();

    const { allocator, backend } = engine({ preset: 'pytorch', memoryLimit: '8MiB' });
    const a = allocator.allocate(4 * MiB);
    expect(backend.reservedBytes).to.equal(8 * MiB, 'a 20 MiB segment cannot fit 8 MiB: the segment takes the room');
    const b = allocator.allocate(3 * MiB);
    expect(b.address).to.equal(a.address + 4 * MiB, 'the second request splits the same segment');
    expect(() => allocator.allocate(2 * MiB)).to.throw(OutOfMemoryError);
    allocator.assertInvariants();
    a.release();
    b.release();
  });

  it('prefers releasing cached segments to a segment of the room left, under a budget', () => {
    const { allocator, backend } = engine({ preset: 'pytorch', memoryLimit: '21MiB' });
    allocator.free(allocator.allocate(64)); // a 2 MiB small segment, cached
    const ptr = allocator.allocate(4 * MiB); // 20 MiB does not fit beside it: the cache goes first, then 20 MiB
    expect(backend.reservedBytes).to.equal(20 * MiB);
    expect(allocator.memoryStats().num_device_free).to.equal(1);
    allocator.assertInvariants();
    ptr.release();
  });

  it('keeps PyTorch\'s segment sizes without a budget: a device that refuses them fails the request', () => {
    const { allocator } = engine({ preset: 'pytorch' }, { capacityBytes: 8 * MiB });
    expect(() => allocator.allocate(4 * MiB)).to.throw(OutOfMemoryError);
  });

  it('calls the reclaimers in order, retrying after the first that frees something', () => {
    const calls: string[] = [];
    let hog: DataPtr | undefined;
    const reclaimers: MemoryReclaimer[] = [
      { reclaim: () => (calls.push('ipc'), 0) },
      {
        reclaim: (_device, bytes) => {
          calls.push(`lms ${bytes}`);
          hog?.release();
          hog = undefined;
          return 30 * MiB;
        },
      },
      { reclaim: () => (calls.push('never'), 0) },
    ];
    const { allocator } = engine({ preset: 'pytorch', memoryLimit: '40MiB', reclaimers: () => reclaimers });
    hog = allocator.allocate(30 * MiB);
    const ptr = allocator.allocate(36 * MiB);
    expect(calls).to.deep.equal(['ipc', `lms ${36 * MiB}`]);
    expect(ptr.byteLength).to.equal(36 * MiB);
    allocator.assertInvariants();
  });

  it('throws a PyTorch-style OutOfMemoryError only after every step failed, and keeps working', () => {
    const calls: string[] = [];
    const { allocator } = engine({ preset: 'pytorch', memoryLimit: '40MiB', reclaimers: () => [{ reclaim: () => (calls.push('ipc'), 0) }] });
    const reported: number[] = [];
    allocator.events.on('outOfMemory', (e) => reported.push(e.requestedBytes));
    const keep = allocator.allocate(30 * MiB);
    let error: unknown;
    try {
      allocator.allocate(36 * MiB);
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(OutOfMemoryError);
    expect((error as Error).message).to.equal(
      "Out of memory on virtual:0: tried to allocate 36.00 MiB; the allocator's budget is 40.00 MiB, of which 10.00 MiB is free. " +
        '30.00 MiB is reserved by Stowage, of which 30.00 MiB is allocated and 0 B is cached but unallocated.',
    );
    expect(calls).to.deep.equal(['ipc']);
    expect(reported).to.deep.equal([36 * MiB]);
    expect(allocator.memoryStats().num_ooms).to.equal(1);
    allocator.free(keep);
    expect(allocator.allocate(36 * MiB).byteLength).to.equal(36 * MiB);
  });

  it('hints at fragmentation when cached memory could have held the request', () => {
    const { allocator } = engine({ preset: 'pytorch', memoryLimit: '24MiB' });
    const blocks = Array.from({ length: 10 }, () => allocator.allocate(2 * MiB)); // fills one 20 MiB segment
    blocks.filter((_, i) => i % 2 === 0).forEach((p) => allocator.free(p));
    // 10 MiB cached in 2 MiB holes; a new 20 MiB segment would pass the limit.
    expect(() => allocator.allocate(5 * MiB)).to.throw(OutOfMemoryError, /10\.00 MiB is cached but unallocated\. The cached memory is large enough for this request but fragmented/);
  });

  it('gives no fragmentation hint when the cache is too small anyway', () => {
    const { allocator } = engine({ preset: 'pytorch', memoryLimit: '44MiB' });
    const [a, , c] = [12 * MiB, 2 * MiB, 12 * MiB].map((n) => allocator.allocate(n));
    allocator.free(a!);
    allocator.free(c!);
    let error: unknown;
    try {
      allocator.allocate(26 * MiB);
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(OutOfMemoryError);
    expect((error as Error).message).to.not.contain('fragmented');
    expect(allocator.memoryStats().num_device_free, 'the unsplit cached segment went back first').to.equal(1);
  });
});

describe('CachingAllocator#events', () => {
  it('reports the segments the out-of-memory chain released before it emits outOfMemory (Note [Segment events])', () => {
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

  it('emits segmentReserved for a new expandable segment once a snapshot accounts for its bytes', () => {
    const { allocator } = engine({ preset: 'pytorch', expandableSegments: true, segmentPageBytes: 2 * MiB });
    const seen: [snapshotBytes: number, reservedBytes: number][] = [];
    allocator.events.on('segmentReserved', () => {
      const snapshotBytes = allocator.snapshot().segments.reduce((n, s) => n + s.total_size, 0);
      seen.push([snapshotBytes, allocator.memoryStats()['reserved_bytes.all.current']]);
    });
    allocator.allocate(3 * MiB); // a new expandable segment
    allocator.allocate(3 * MiB); // grows it
    expect(seen).to.have.length(2);
    for (const [snapshotBytes, reservedBytes] of seen) expect(snapshotBytes).to.equal(reservedBytes);
  });

  for (const [name, options] of [
    ['expandable', { preset: 'best' }],
    ['fixed', { preset: 'pytorch' }],
  ] as const) {
    it(`never hands a listener that allocates from segmentReserved the block being reserved (${name} segments)`, () => {
      const { allocator } = engine(options);
      const fromListener: DataPtr[] = [];
      let calls = 0;
      allocator.events.on('segmentReserved', () => {
        if (calls++ < 3) fromListener.push(allocator.allocate(3 * MiB));
      });
      const outer = allocator.allocate(3 * MiB); // new segment; the listener allocates, growing it again
      const more = allocator.allocate(5 * MiB); // and a free tail being extended
      const all = [outer, more, ...fromListener];
      expect(fromListener.length).to.be.greaterThan(0);
      const ranges = all.map((p) => [p.address, p.address + p.byteLength] as const).sort((x, y) => x[0] - y[0]);
      for (let i = 1; i < ranges.length; i++) expect(ranges[i]![0], 'overlapping allocations').to.be.at.least(ranges[i - 1]![1]);
      allocator.assertInvariants();
      for (const p of all) allocator.free(p);
      allocator.emptyCache();
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
    });
  }

  it('emits segmentReleased for an expandable segment once the unmapped gap is in place, so a snapshot in the listener is consistent', () => {
    const { allocator } = engine({ preset: 'best' });
    const a = allocator.allocate(3 * MiB);
    const b = allocator.allocate(6 * MiB);
    allocator.allocate(3 * MiB);
    allocator.free(b);
    const seen: number[] = [];
    allocator.events.on('segmentReleased', () => {
      allocator.assertInvariants();
      for (const s of allocator.snapshot().segments) seen.push(s.total_size - s.blocks.reduce((n, x) => n + x.size, 0));
    });
    allocator.emptyCache();
    expect(seen.length).to.be.greaterThan(0);
    expect(seen.every((d) => d === 0), 'mapped blocks add up to the mapped size in every listener call').to.equal(true);
    allocator.free(a);
  });
});

describe('CachingAllocator garbage collection', () => {
  it('frees the oldest cached segments when reserved memory passes the threshold of the limit', () => {
    const { allocator, backend } = engine({ preset: 'pytorch', memoryLimit: '100MiB', garbageCollectionThreshold: 0.5 });
    [22 * MiB, 24 * MiB].map((n) => allocator.allocate(n)).forEach((p) => allocator.free(p));
    // Age them: searches of the large pool that a third cached segment serves.
    for (let i = 0; i < 5; i++) allocator.free(allocator.allocate(30 * MiB));
    expect(backend.reservedBytes).to.equal(76 * MiB);
    allocator.allocate(40 * MiB);
    expect(allocator.memoryStats().num_device_free, 'the two old segments went back, the young one stayed').to.equal(2);
    expect(backend.reservedBytes).to.equal(70 * MiB);
    allocator.assertInvariants();
  });

  it('requires a memory limit for a threshold', () => {
    expect(() => engine({ garbageCollectionThreshold: 0.5 })).to.throw(InvalidArgumentError, /memoryLimit/);
  });
});

describe('CachingAllocator expandable segments', () => {
  it('grows one segment by pages instead of reserving new ones, and unmaps the free tail', () => {
    const { allocator, backend } = engine({ preset: 'best' });
    const a = allocator.allocate(3 * MiB);
    const b = allocator.allocate(5 * MiB);
    const [segment] = allocator.snapshot().segments;
    expect(allocator.snapshot().segments).to.have.length(1);
    expect(segment!.is_expandable).to.equal(true);
    expect(segment!.total_size).to.equal(8 * MiB);
    expect(b.address).to.equal(a.address + 3 * MiB);
    allocator.free(b);
    allocator.emptyCache();
    expect(backend.reservedBytes).to.equal(4 * MiB);
    allocator.free(a);
    allocator.emptyCache();
    expect(backend.reservedBytes).to.equal(0);
    expect(allocator.snapshot().segments).to.have.length(0);
    allocator.assertInvariants();
  });

  for (const [limit, reservedMiB, behaviour] of [
    [0, 12, 'unmaps free pages before growing when reserved would pass the fragmentation limit'],
    [1, 20, 'keeps free pages mapped while reserved stays within the fragmentation limit'],
  ] as const) {
    it(behaviour, () => {
      const { allocator, backend } = engine({ preset: 'best', fragmentationLimit: limit });
      const a = allocator.allocate(8 * MiB);
      allocator.allocate(2 * MiB);
      allocator.free(a); // 8 MiB of free pages at the start: a 10 MiB request does not fit there
      allocator.allocate(10 * MiB);
      expect(backend.reservedBytes).to.equal(reservedMiB * MiB);
      allocator.assertInvariants();
    });
  }

  it("unmaps another stream's free pages too before growing past the fragmentation limit", () => {
    const { allocator, backend } = engine({ preset: 'best', fragmentationLimit: 0 }, { streams: 2 });
    const other = allocator.allocate(8 * MiB, { stream: 1 });
    allocator.allocate(2 * MiB, { stream: 1 });
    allocator.free(other);
    allocator.allocate(10 * MiB, { stream: 0 }); // 12 MiB live: a new peak
    expect(backend.reservedBytes).to.equal(12 * MiB);
    const streams = allocator.snapshot().segments.map((s) => [s.stream, s.total_size]);
    expect(streams).to.have.deep.members([[0, 10 * MiB], [1, 2 * MiB]]);
    allocator.assertInvariants();
  });

  it('unmaps before mapping past the most ever mapped, even below the peak of live bytes', () => {
    const { allocator, backend } = engine({ preset: 'best', fragmentationLimit: 0 });
    allocator.free(allocator.allocate(100 * MiB)); // 100 MiB mapped, all free
    const x = allocator.allocate(60 * MiB);
    allocator.allocate(2 * MiB);
    allocator.free(x); // free: 60 MiB below the 2 MiB block, 38 MiB above it
    allocator.allocate(70 * MiB); // 72 MiB live: no new live peak, but 132 MiB mapped would be
    expect(backend.reservedBytes).to.equal(72 * MiB);
    allocator.assertInvariants();
  });

  it('unmaps only at a new peak, so a loop of static shapes stops mapping after its second step', () => {
    const { allocator, backend } = engine({ preset: 'best', fragmentationLimit: 0 });
    const step = (): void => {
      const a = allocator.allocate(8 * MiB);
      const b = allocator.allocate(2 * MiB);
      allocator.free(a);
      const c = allocator.allocate(10 * MiB); // the step's peak: 12 MiB live
      allocator.free(b);
      allocator.free(c);
    };
    step(); // the first step unmaps a's pages at its peak
    expect(backend.reservedBytes).to.equal(12 * MiB);
    step(); // maps them again: 12 MiB live is no new peak, so nothing else is unmapped for it
    const mapsAfterSecond = backend.mallocCount;
    for (let i = 0; i < 5; i++) step();
    expect(backend.mallocCount, 'page maps after the second step').to.equal(mapsAfterSecond);
    expect(backend.reservedBytes).to.equal(20 * MiB); // what PyTorch's 20 MiB segment holds for this loop
    allocator.assertInvariants();
  });

  it('falls back to fixed segments on a backend that cannot map pages', () => {
    const { allocator } = engine({ preset: 'best' }, { pageBytes: 0 });
    allocator.allocate(3 * MiB);
    expect(allocator.snapshot().segments[0]!.is_expandable).to.equal(false);
    expect(allocator.snapshot().allocator_settings.expandable_segments).to.equal(false);
  });
});

describe('CachingAllocator deferred coalescing (best preset)', () => {
  it('hands freed small blocks back, last first, for requests of their size without merging them', () => {
    const { allocator } = engine({ preset: 'best' });
    const [, a, b] = [64 * KiB, 4 * KiB, 4 * KiB, 64 * KiB].map((n) => allocator.allocate(n));
    allocator.free(a!);
    allocator.free(b!); // neighbours: merged at once they would make one 8 KiB block
    const free = allocator.snapshot().segments.flatMap((s) => s.blocks.filter((x) => x.state === 'inactive' && x.size < 64 * KiB));
    expect(free.map((x) => x.size)).to.deep.equal([4 * KiB, 4 * KiB]);
    expect(allocator.allocate(4 * KiB).address).to.equal(b!.address);
    expect(allocator.allocate(4 * KiB).address).to.equal(a!.address);
    allocator.assertInvariants();
  });

  it('merges a block whose free completes after nothing is left allocated', () => {
    const { allocator, backend } = engine({ preset: 'best' }, { streams: 2 });
    const [a, b] = [4 * KiB, 4 * KiB].map((n) => allocator.allocate(n));
    allocator.recordStream(a!, 1);
    backend.holdStream(1);
    allocator.free(b!);
    allocator.free(a!); // waits for stream 1
    backend.completeStream(1);
    const c = allocator.allocate(16 * KiB); // completes a's free first, with nothing allocated
    expect(c.address).to.equal(a!.address); // a and b merged with the rest: the new block starts where a did
    allocator.assertInvariants();
  });

  it('merges every held-back block once nothing is allocated', () => {
    const { allocator } = engine({ preset: 'best' });
    const ptrs = [4 * KiB, 8 * KiB, 4 * KiB].map((n) => allocator.allocate(n));
    for (const p of ptrs) allocator.free(p);
    const blocks = allocator.snapshot().segments.flatMap((s) => s.blocks);
    expect(blocks).to.have.length(1);
    expect(blocks[0]!.state).to.equal('inactive');
    allocator.assertInvariants();
  });
});

describe('CachingAllocator segment sizing options', () => {
  it('sizes new segments with segmentSize, never below the request', () => {
    const sizes: [number, number][] = [];
    const { allocator } = engine({
      preset: 'pytorch',
      segmentSize: (bytes, reserved) => {
        sizes.push([bytes, reserved]);
        return 8 * MiB;
      },
    });
    allocator.allocate(MiB);
    allocator.allocate(8 * MiB);
    allocator.allocate(12 * MiB);
    expect(sizes).to.deep.equal([[MiB, 0], [8 * MiB, 8 * MiB], [12 * MiB, 16 * MiB]]);
    expect(allocator.snapshot().segments.map((s) => s.total_size)).to.deep.equal([8 * MiB, 8 * MiB, 12 * MiB]);
    allocator.assertInvariants();
  });

  it("tells segmentSize the new segment's kind and what that kind has reserved", () => {
    const calls: [reserved: number, kind: number, kindReserved: number][] = [];
    const backend = Object.assign(new VirtualMemoryBackend({ storeData: false }), { segmentKind: (o: { usage?: string }) => (o.usage === 'uniform' ? 1 : 0) });
    const allocator = new CachingAllocator(backend, {
      preset: 'best',
      expandableSegments: false,
      segmentSize: (_bytes, reserved, { kind, kindReservedBytes }) => {
        calls.push([reserved, kind, kindReservedBytes]);
        return 4 * MiB;
      },
    });
    allocator.allocate(3 * MiB);
    allocator.allocate(3 * MiB);
    allocator.allocate(KiB, { usage: 'uniform' });
    allocator.allocate(4 * MiB, { usage: 'uniform' });
    expect(calls).to.deep.equal([
      [0, 0, 0],
      [4 * MiB, 0, 4 * MiB],
      [8 * MiB, 1, 0],
      [12 * MiB, 1, 4 * MiB],
    ]);
    allocator.assertInvariants();
  });

  it('serves small and large requests from one pool with unifiedPools, splitting down to 512 bytes', () => {
    const { allocator, backend } = engine({ preset: 'pytorch', unifiedPools: true, segmentSize: () => 32 * MiB });
    const small = allocator.allocate(1000);
    const large = allocator.allocate(19.5 * MiB);
    expect(backend.mallocCount).to.equal(1);
    expect(large.address).to.equal(small.address + 1024);
    expect(blockOf(allocator, large).block.size).to.equal(19.5 * MiB);
    expect(allocator.memoryStats()['segment.large_pool.current']).to.equal(1);
    allocator.assertInvariants();
  });

  it('never splits a block with splitBlocks false: a cached block too large for a request stays whole, and a segment holds one allocation', () => {
    const { allocator, backend } = engine({ preset: 'best', expandableSegments: false, splitBlocks: false, segmentSize: (n) => n, memoryLimit: 8 * MiB });
    const big = allocator.allocate(4 * MiB);
    big.release(); // cached: a whole 4 MiB segment
    const small = allocator.allocate(2 * MiB);
    expect(backend.mallocCount, 'a new segment for the smaller request, not half of the cached one').to.equal(2);
    expect(blockOf(allocator, small).block.size).to.equal(2 * MiB);
    const more = allocator.allocate(4 * MiB); // the cached 4 MiB block fits it exactly
    expect(backend.mallocCount).to.equal(2);
    for (const segment of allocator.snapshot().segments) expect(segment.blocks.length, `blocks of the segment at ${segment.address}`).to.equal(1);
    // Under the budget (8 MiB, 6 MiB reserved), a 4 MiB request finds no cached block and no room until the cache
    // is released: the engine releases whole free segments, which with no splits every free block is.
    more.release();
    const again = allocator.allocate(5 * MiB);
    expect(again.byteLength).to.equal(5 * MiB);
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.be.at.most(8 * MiB);
    allocator.assertInvariants();
  });

  it('splits as before with splitBlocks true (the default)', () => {
    const { allocator, backend } = engine({ preset: 'best', expandableSegments: false, segmentSize: (n) => n });
    allocator.allocate(4 * MiB).release();
    allocator.allocate(2 * MiB);
    expect(backend.mallocCount, 'the cached 4 MiB block was split for the 2 MiB request').to.equal(1);
    allocator.assertInvariants();
  });

  // A custom segment size at or above the max split size must not leave a small request's segment unusable: split
  // for a request under the max split size, its remainder would be an oversize free block that no request under
  // the max split size may take and that, being split, no cache release returns, so every small request would
  // reserve a new segment and the device would run out with almost all of it cached. (WebGPU's defaults, 48 MiB
  // segments, with maxSplitSize '32MiB' would reserve 988 MiB of a 1 GiB budget for 100 requests of 64 KiB.)
  // Here: a 256 MiB device, maxSplitSize 32 MiB, segmentSize () => 64 MiB, eight requests of 1 MiB.
  for (const unifiedPools of [false, true]) {
    it(`serves a request under the max split size from the segment an earlier one left mostly free (unifiedPools ${unifiedPools})`, () => {
      const backend = new VirtualMemoryBackend({ storeData: false, capacityBytes: 256 * MiB, pageBytes: 0 });
      const allocator = new CachingAllocator(backend, { preset: 'pytorch', unifiedPools, maxSplitSize: 32 * MiB, segmentSize: (n) => Math.max(n, 64 * MiB) });
      const live: DataPtr[] = [];
      for (let i = 0; i < 8; i++) live.push(allocator.allocate(1 * MiB)); // one 64 MiB segment holds all eight
      allocator.assertInvariants();
      expect(allocator.memoryStats()['segment.all.current'], 'segments reserved for 8 MiB of 1 MiB requests').to.be.at.most(1);
    });
  }
});

describe('CachingAllocator#trim', () => {
  it('releases cached segments, largest first, down to a target', () => {
    const { allocator, backend } = engine();
    const ptrs = [12 * MiB, 14 * MiB, 16 * MiB].map((n) => allocator.allocate(n));
    ptrs.forEach((p) => allocator.free(p));
    expect(allocator.trim(30 * MiB)).to.equal(26 * MiB);
    expect(allocator.trim(0)).to.equal(0);
    expect(backend.reservedBytes).to.equal(0);
    expect(() => allocator.trim(-1)).to.throw(InvalidArgumentError, /targetBytes/);
  });
});

describe('CachingAllocator#memoryStats', () => {
  it('tracks peaks, cumulative figures and resets peaks to current', () => {
    const { allocator } = engine();
    const a = allocator.allocate(3 * MiB);
    allocator.free(a);
    allocator.allocate(KiB);
    let s = allocator.memoryStats();
    expect(s['allocated_bytes.all.peak']).to.equal(3 * MiB);
    expect(s['allocated_bytes.all.allocated']).to.equal(3 * MiB + KiB);
    expect(s['allocated_bytes.all.freed']).to.equal(3 * MiB);
    expect(s['allocation.all.allocated']).to.equal(2);
    expect(s['segment.all.current']).to.equal(2);
    expect(s.num_device_alloc).to.equal(2);
    expect(s.max_split_size).to.equal(-1);
    allocator.resetPeakStats();
    s = allocator.memoryStats();
    expect(s['allocated_bytes.all.peak']).to.equal(KiB);
    expect(s['reserved_bytes.all.peak']).to.equal(22 * MiB);
  });

  // As PyTorch's DeviceCachingAllocator::free does, the caller's free counts an oversize allocation out (next to
  // allocation and allocated_bytes), not the return of its block once the block's stream events complete: a freed
  // oversize block that waits on another stream (or any freed block under a deferredFree backend such as WebGPU)
  // no longer counts.
  it('stops counting an oversize allocation when the caller frees it, while it waits on another stream', () => {
    const backend = new VirtualMemoryBackend({ storeData: false, streams: 2 });
    const allocator = new CachingAllocator(backend, { preset: 'pytorch', maxSplitSize: 32 * MiB });
    const ptr = allocator.allocate(40 * MiB);
    expect(allocator.memoryStats()['oversize_allocations.current']).to.equal(1);
    allocator.recordStream(ptr, 1);
    backend.holdStream(1);
    allocator.free(ptr);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(0);
    expect(allocator.memoryStats()['oversize_allocations.current'], 'counted out at free, as PyTorch does').to.equal(0);
  });
});

describe('CachingAllocator#snapshot', () => {
  it('lists each mapped range of an expandable segment as an entry of its own, as PyTorch does', () => {
    const { allocator } = engine({ preset: 'best' });
    const a = allocator.allocate(3 * MiB);
    const b = allocator.allocate(6 * MiB);
    const c = allocator.allocate(3 * MiB);
    allocator.free(b);
    allocator.emptyCache(); // unmaps b's whole pages: a gap between a and c
    const entries = allocator.snapshot().segments;
    expect(entries, 'one entry before the gap, one after').to.have.length(2);
    expect(entries.every((s) => s.is_expandable)).to.equal(true);
    expect(entries[0]!.blocks.map((x) => x.address)).to.include(a.address);
    expect(entries[1]!.blocks.map((x) => x.address)).to.include(c.address);
    expect(entries[1]!.address, 'the second entry starts after the unmapped gap').to.be.greaterThan(entries[0]!.address + entries[0]!.total_size);
    expectSnapshotCoversReserved(allocator);
    expect(allocator.memoryStats()['segment.all.current'], 'still one segment').to.equal(1);
  });

  it('records a bounded history with PyTorch action names and monotonic times', () => {
    const { allocator } = engine();
    allocator.recordHistory({ maxEntries: 4 });
    const a = allocator.allocate(100);
    allocator.free(a);
    allocator.allocate(200);
    const trace = allocator.snapshot().device_traces[0]!;
    expect(trace.map((e) => e.action)).to.deep.equal(['alloc', 'free_requested', 'free_completed', 'alloc']);
    const all = allocator.snapshot();
    allocator.recordHistory({ maxEntries: 2 });
    allocator.emptyCache();
    expect(allocator.snapshot().device_traces[0]).to.have.length(0);
    const times = trace.map((e) => e.time_us);
    expect(times).to.deep.equal([...times].sort((x, y) => x - y));
    expect(all.segments[0]!.blocks[0]).to.include({ size: 512, requested_size: 200, state: 'active_allocated' });
    allocator.recordHistory(false);
    expect(() => allocator.recordHistory({ maxEntries: 0 })).to.throw(InvalidArgumentError);
  });

  it('refuses history options that are not an options object with InvalidArgumentError, not a TypeError', () => {
    const { allocator } = engine();
    for (const bad of [null, 'on', { maxEntries: 4, stack: true }, { stacks: 'yes' }]) {
      expect(() => allocator.recordHistory(bad as object), JSON.stringify(bad)).to.throw(InvalidArgumentError);
    }
  });

  it('puts the history of device N at device_traces[N], where PyTorch\'s memory viewer looks for it', () => {
    const allocator = new CachingAllocator(new VirtualMemoryBackend({ device: { type: 'virtual', index: 2 }, storeData: false }), { preset: 'pytorch' });
    allocator.recordHistory();
    allocator.allocate(100);
    const snapshot = allocator.snapshot();
    expect(snapshot.segments[0]!.device).to.equal(2);
    expect(snapshot.device_traces.map((t) => t.length)).to.deep.equal([0, 0, 2]);
  });

  it('records segment events and an oom entry with the free bytes', () => {
    const { allocator } = engine({ preset: 'pytorch', memoryLimit: '20MiB' });
    allocator.recordHistory({ stacks: true });
    allocator.allocate(4 * MiB);
    expect(() => allocator.allocate(17 * MiB)).to.throw(OutOfMemoryError);
    const trace = allocator.snapshot().device_traces[0]!;
    expect(trace.map((e) => e.action)).to.deep.equal(['segment_alloc', 'alloc', 'oom']);
    expect(trace[2]!.device_free).to.equal(0);
    expect(trace[1]!.frames.some((f) => f.filename.includes('CachingAllocator.test'))).to.equal(true);
  });

  it('records a snapshot entry of the active bytes after each snapshot, as PyTorch does, listed by the next one', () => {
    const { allocator } = engine();
    allocator.recordHistory();
    allocator.allocate(1000);
    expect(allocator.snapshot().device_traces[0]!.map((e) => e.action)).to.deep.equal(['segment_alloc', 'alloc']);
    const last = allocator.snapshot().device_traces[0]!.at(-1)!;
    expect(last).to.include({ action: 'snapshot', addr: 0, size: 1024 });
  });

  it("records each free at the freed block's own address and requested size, not at the block it merged into", () => {
    for (const preset of ['pytorch', 'best'] as const) {
      const { allocator } = engine({ preset });
      allocator.recordHistory();
      const ptrs = [allocator.allocate(256), allocator.allocate(256), allocator.allocate(256)];
      for (const p of ptrs) allocator.free(p);
      const frees = allocator.snapshot().device_traces[0]!.filter((e) => e.action !== 'alloc' && e.action !== 'segment_alloc' && e.action !== 'segment_map');
      const expected = ptrs.flatMap((p) => ['free_requested', 'free_completed'].map((action) => ({ action, addr: p.address, size: 256 })));
      expect(frees.map(({ action, addr, size }) => ({ action, addr, size })), preset).to.deep.equal(expected);
    }
  });

  it("records a free completed after another stream's work with its block's address and its allocation's frames", () => {
    const { allocator, backend } = engine({ preset: 'pytorch' }, { streams: 2 });
    allocator.recordHistory({ stacks: true });
    const neighbour = allocator.allocate(1000);
    const used = allocator.allocate(1000);
    allocator.recordStream(used, 1);
    backend.holdStream(1);
    allocator.free(used);
    allocator.free(neighbour);
    backend.completeStream(1);
    allocator.allocate(100); // processes the completed event
    const trace = allocator.snapshot().device_traces[0]!;
    const alloc = trace.find((e) => e.action === 'alloc' && e.addr === used.address)!;
    const completed = trace.find((e) => e.action === 'free_completed' && e.addr === used.address)!;
    expect(completed.size).to.equal(1000);
    expect(completed.frames).to.deep.equal(alloc.frames);
  });

  it('lists the frames of live blocks and of their segments when stacks were on, the caller first', () => {
    const { allocator, backend } = engine({ preset: 'pytorch' }, { streams: 2 });
    allocator.recordHistory({ stacks: true });
    const live = allocator.allocate(1000);
    const pending = allocator.allocate(1000);
    const freed = allocator.allocate(1000);
    allocator.recordStream(pending, 1);
    backend.holdStream(1);
    allocator.free(pending);
    allocator.free(freed);
    const segment = allocator.snapshot().segments[0]!;
    const frames = (address: number) => segment.blocks.find((b) => b.address === address)!.frames;
    expect(frames(live.address)[0]!.filename, 'an allocated block: its allocation, first frame the caller').to.include('CachingAllocator.test');
    expect(frames(pending.address)[0]!.filename, 'a block pending free keeps its frames').to.include('CachingAllocator.test');
    expect(segment.blocks.filter((b) => b.state === 'inactive').every((b) => b.frames.length === 0), 'free blocks have none').to.equal(true);
    expect(segment.frames[0]!.filename, "the segment: the allocation that reserved it").to.include('CachingAllocator.test');
    const { allocator: plain } = engine();
    plain.recordHistory();
    plain.allocate(1000);
    expect(plain.snapshot().segments[0]!.blocks[0]!.frames, 'no stacks, no frames').to.deep.equal([]);
  });
});

describe('CachingAllocator options', () => {
  it('rejects out-of-range options with the option named', () => {
    const bad: [object, RegExp][] = [
      [{ maxSplitSize: '8MiB' }, /maxSplitSize/],
      [{ roundupPower2Divisions: 3 }, /roundupPower2Divisions/],
      [{ garbageCollectionThreshold: 1.5, memoryLimit: '1GiB' }, /garbageCollectionThreshold/],
      [{ memoryLimit: 'lots' }, /memoryLimit/],
      [{ memoryLimit: { fraction: 2 } }, /fraction/],
      [{ preset: 'fast' }, /preset/],
    ];
    for (const [options, pattern] of bad) expect(() => engine(options)).to.throw(InvalidArgumentError, pattern);
  });

  it('takes a memory limit as a fraction of the device capacity', () => {
    const { allocator } = engine({ preset: 'pytorch', memoryLimit: { fraction: 0.5 } }, { capacityBytes: 64 * MiB });
    expect(allocator.capacityBytes).to.equal(32 * MiB);
    expect(() => allocator.allocate(40 * MiB)).to.throw(OutOfMemoryError, /budget is 32\.00 MiB/);
  });
});

describe('resolveCachingOptions', () => {
  const backend = (): VirtualMemoryBackend => new VirtualMemoryBackend({ storeData: false });
  const make = (options: unknown) => () => new CachingAllocator(backend(), options as CachingAllocatorOptions);

  it('rejects roundupPower2Divisions that are not powers of two past 2^32 with InvalidArgumentError', () => {
    // 3 * 2^32 and 2^32 + 2^31 pass a 32-bit `d & (d - 1)` test.
    expect(make({ roundupPower2Divisions: 3 * 2 ** 32 })).to.throw(InvalidArgumentError, /roundupPower2Divisions/);
    expect(make({ roundupPower2Divisions: [0, 2 ** 32 + 2 ** 31] })).to.throw(InvalidArgumentError, /roundupPower2Divisions/);
  });

  it('rejects a segmentPageBytes that is not a byte count or { small, large } of them, and a pageRuns that is not a boolean', () => {
    expect(make({ segmentPageBytes: 0 })).to.throw(InvalidArgumentError, /segmentPageBytes/);
    expect(make({ segmentPageBytes: 'huge' })).to.throw(InvalidArgumentError, /segmentPageBytes/);
    expect(make({ segmentPageBytes: { small: '2MiB' } })).to.throw(InvalidArgumentError, /segmentPageBytes/);
    expect(make({ segmentPageBytes: { small: '2MiB', large: '20MiB', huge: 1 } })).to.throw(InvalidArgumentError, /segmentPageBytes\.huge/);
    expect(make({ pageRuns: 'yes' })).to.throw(InvalidArgumentError, /pageRuns/);
    expect(make({ segmentPageBytes: { small: '2MiB', large: 20 * MiB }, pageRuns: true })).not.to.throw();
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

  it('refuses boolean options given as anything but a boolean, enums outside their members and unknown keys with InvalidArgumentError', () => {
    const bad: [unknown, RegExp][] = [
      [{ unifiedPools: 'no' }, /options\.unifiedPools must be true or false; got "no"/],
      [{ expandableSegments: 'yes' }, /options\.expandableSegments must be true or false/],
      [{ deferCoalescing: 1 }, /options\.deferCoalescing must be true or false; got 1/],
      [{ preset: 'fast' }, /options\.preset must be one of "best", "pytorch"/],
      [{ maxSplitSze: '64MiB' }, /options\.maxSplitSze.*did you mean maxSplitSize\?/],
      [{ unifiedPool: true }, /did you mean unifiedPools\?/],
      [{ memoryLimit: { fracton: 0.5 } }, /options\.memoryLimit\.fracton.*did you mean fraction\?/],
      [[], /options must be an options object/],
    ];
    for (const [options, pattern] of bad) {
      const error = thrownBy(make(options));
      expect(error, `${JSON.stringify(options)}: ${String(error)}`).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
    }
    // Valid input keeps its meaning: booleans, an undefined key, the presets.
    expect(make({ unifiedPools: false, expandableSegments: true, deferCoalescing: false, preset: 'pytorch', maxSplitSize: undefined })).not.to.throw();
  });
});

describe('CachingAllocator constructor (the backend)', () => {
  for (const backend of [null, undefined, {}, 'cpu']) {
    it(`refuses ${String(backend === undefined ? 'undefined' : JSON.stringify(backend))} as a backend with InvalidArgumentError`, () => {
      expect(() => new CachingAllocator(backend as never)).to.throw(InvalidArgumentError, /^backend must be a MemoryBackend/);
    });
  }
});
