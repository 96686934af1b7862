import { createExactSizePoolAllocator } from './ExactSizePoolAllocator.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/**
 * The bench's self-check of its exact-size-pool baseline, run before any figure is taken: a freed block is reused
 * for a request of the same rounded size and only for that size, reserved bytes count cached blocks, and
 * emptyCache returns every cached block to the backend.
 * @throws Error naming the first expectation that failed
 */
export function checkExactSizePool(): void {
  const backend = new VirtualMemoryBackend({ storeData: false });
  using allocator = createExactSizePoolAllocator(backend);
  const expect = (ok: boolean, what: string): void => {
    if (!ok) throw new Error(`exact-size-pool self-check failed: ${what}.`);
  };
  const a = allocator.allocate(1000);
  const address = a.address;
  allocator.free(a);
  const b = allocator.allocate(600);
  expect(b.address === address && backend.mallocCount === 1, 'a 600-byte request reuses the freed 1000-byte block (both round to 1024)');
  const c = allocator.allocate(1025);
  expect(backend.mallocCount === 2, 'a 1025-byte request (1536 rounded) gets a new segment');
  allocator.free(b);
  allocator.free(c);
  const stats = allocator.memoryStats();
  expect(stats['reserved_bytes.all.current'] === 1024 + 1536, 'reserved bytes count both cached blocks');
  expect(stats['allocated_bytes.all.current'] === 0, 'nothing is allocated after both frees');
  allocator.emptyCache();
  expect(backend.reservedBytes === 0 && allocator.memoryStats()['reserved_bytes.all.current'] === 0, 'emptyCache returns every block');
}
