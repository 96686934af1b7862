import type { CachingAllocatorOptions, DataPtr } from '@stowage/core';
import { CachingAllocator, VirtualMemoryBackend } from '@stowage/core';

export const KiB = 1 << 10;
export const MiB = 1 << 20;

/** A caching engine over a virtual device (no real memory), with the backend for inspection. */
export function engine(
  options: CachingAllocatorOptions = { preset: 'pytorch' },
  device: { streams?: number; capacityBytes?: number; pageBytes?: number } = {},
): { allocator: CachingAllocator<number>; backend: VirtualMemoryBackend } {
  const backend = new VirtualMemoryBackend({ storeData: false, ...device });
  return { allocator: new CachingAllocator(backend, options), backend };
}

/** The snapshot block at a pointer's address. */
export function blockOf(allocator: CachingAllocator<number>, ptr: DataPtr) {
  for (const segment of allocator.snapshot().segments) {
    const block = segment.blocks.find((b) => b.address === ptr.address);
    if (block) return { segment, block };
  }
  throw new Error(`no block at 0x${ptr.address.toString(16)}`);
}
