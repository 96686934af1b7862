import { expect } from 'chai';
import { VirtualMemoryBackend, assertAllocatorInvariants, describeAllocatorContract } from '@stowage/core/testing';
import { createExactSizePoolAllocator } from './ExactSizePoolAllocator.js';

describeAllocatorContract('exact-size-pool (bench baseline)', () => createExactSizePoolAllocator(new VirtualMemoryBackend({ capacityBytes: 1 << 30 })));

describe('ExactSizePool#allocate', () => {
  it('reuses a freed block only for a request of the same 512-byte-rounded size', () => {
    const backend = new VirtualMemoryBackend();
    using allocator = createExactSizePoolAllocator(backend);
    const a = allocator.allocate(1000);
    const address = a.address;
    allocator.free(a);
    const bigger = allocator.allocate(1025);
    expect(bigger.address).to.not.equal(address);
    const same = allocator.allocate(513);
    expect(same.address).to.equal(address);
    expect(backend.mallocCount).to.equal(2);
    assertAllocatorInvariants(allocator, [bigger, same]);
  });

  it('counts cached blocks as reserved until emptyCache returns them to the backend', () => {
    const backend = new VirtualMemoryBackend();
    using allocator = createExactSizePoolAllocator(backend);
    allocator.free(allocator.allocate(4096));
    allocator.free(allocator.allocate(100));
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(4096 + 512);
    expect(allocator.pool.cachedBytes).to.equal(4096 + 512);
    allocator.emptyCache();
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
    expect(backend.reservedBytes).to.equal(0);
    expect(backend.freeCount).to.equal(2);
  });

  it('releases its cache and retries before reporting out of memory', () => {
    const backend = new VirtualMemoryBackend({ capacityBytes: 8192 });
    using allocator = createExactSizePoolAllocator(backend);
    allocator.free(allocator.allocate(4096));
    allocator.free(allocator.allocate(2048));
    const big = allocator.allocate(8192);
    expect(big.byteLength).to.equal(8192);
    expect(allocator.memoryStats().num_alloc_retries).to.equal(1);
  });
});
