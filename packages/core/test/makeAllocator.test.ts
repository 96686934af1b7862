import { expect } from 'chai';
import type { MemoryBlock, MinimalAllocator, SegmentSink } from '@stowage/core';
import { CpuMemoryBackend, InvalidArgumentError, makeAllocator, OutOfMemoryError } from '@stowage/core';
import type { HostBuffer } from '@stowage/core';

/** A minimal allocator over a CPU backend with a cache of freed blocks that only emptyCache returns. */
function cachingCore(capacityBytes: number) {
  const backend = new CpuMemoryBackend({ capacityBytes });
  const cached: MemoryBlock<HostBuffer>[] = [];
  const calls: string[] = [];
  let sink: SegmentSink = { reserved: () => {}, released: () => {} };
  const core: MinimalAllocator<HostBuffer> = {
    device: 'cpu',
    alignment: 64,
    capacityBytes,
    allocate: (n) => {
      calls.push(`allocate ${n}`);
      const hit = cached.findIndex((b) => b.byteLength === n);
      if (hit >= 0) return cached.splice(hit, 1)[0]!;
      const block = backend.malloc(n);
      if (block) sink.reserved({ address: block.address, byteLength: block.byteLength });
      return block;
    },
    free: (b) => void cached.push(b),
    copy: (d, dOff, s, sOff, n) => backend.copy(d, dOff, s, sOff, n),
    write: (d, off, bytes) => backend.write(d, off, bytes),
    read: (s, off, n) => backend.read(s, off, n),
    bindSegments: (s) => (sink = s),
    emptyCache: () => {
      calls.push('emptyCache');
      for (const b of cached.splice(0)) {
        backend.free(b);
        sink.released({ address: b.address, byteLength: b.byteLength });
      }
    },
  };
  return { core, calls, backend };
}

describe('makeAllocator#allocate', () => {
  it('empties the cache and retries once before reporting out of memory', () => {
    const { core, calls } = cachingCore(1000);
    using allocator = makeAllocator(core);
    allocator.free(allocator.allocate(600));
    calls.length = 0;
    const ptr = allocator.allocate(700);
    expect(calls).to.deep.equal(['allocate 700', 'emptyCache', 'allocate 700']);
    expect(allocator.memoryStats().num_alloc_retries).to.equal(1);
    calls.length = 0;
    expect(() => allocator.allocate(400)).to.throw(OutOfMemoryError);
    expect(calls).to.deep.equal(['allocate 400', 'emptyCache', 'allocate 400']);
    expect(allocator.memoryStats().num_ooms).to.equal(1);
    allocator.free(ptr);
  });

  it('counts the segments a core reports as reserved, with their peak', () => {
    const { core } = cachingCore(10_000);
    using allocator = makeAllocator(core);
    allocator.free(allocator.allocate(3000));
    const s = allocator.memoryStats();
    expect(s['reserved_bytes.all.current']).to.equal(3000);
    expect(s['allocated_bytes.all.current']).to.equal(0);
    allocator.emptyCache();
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
    expect(allocator.memoryStats()['reserved_bytes.all.peak']).to.equal(3000);
    expect(allocator.memoryStats()['segment.all.allocated']).to.equal(1);
    allocator.resetPeakStats();
    expect(allocator.memoryStats()['reserved_bytes.all.peak']).to.equal(0);
  });

  it('mentions fragmentation when the cache could have held the request', () => {
    const { core } = cachingCore(1000);
    core.emptyCache = () => {}; // a cache that cannot give memory back
    using allocator = makeAllocator(core);
    allocator.free(allocator.allocate(800));
    expect(() => allocator.allocate(500)).to.throw(OutOfMemoryError, /fragmented/);
  });

  it('rejects an alignment that is not a power of two', () => {
    const { core } = cachingCore(1000);
    expect(() => makeAllocator({ ...core, alignment: 48 })).to.throw(InvalidArgumentError, /alignment must be a power of two; got 48/);
  });

  it('splits statistics into the small (<= 1 MiB) and large pools', () => {
    const { core } = cachingCore(8 << 20);
    using allocator = makeAllocator(core);
    allocator.allocate(1 << 20);
    allocator.allocate((1 << 20) + 1);
    const s = allocator.memoryStats();
    expect(s['allocated_bytes.small_pool.current']).to.equal(1 << 20);
    expect(s['allocated_bytes.large_pool.current']).to.equal((1 << 20) + 1);
    expect(s['allocation.all.current']).to.equal(2);
  });
});
