import type { Allocator } from '@stowage/core';
import { CachingAllocator } from '@stowage/core';
import { makeDirectAllocator } from '@stowage/core/plugin-kit';
import { createExactSizePoolAllocator } from './ExactSizePoolAllocator.js';
import type { VirtualMemoryBackend } from '@stowage/core/testing';

/** An allocator under test: its name in the bench's output and how to build one over a fresh backend. */
export interface BenchAllocator {
  readonly name: string;
  make(backend: VirtualMemoryBackend): Allocator;
}

/**
 * The allocators the engine benchmark compares, baselines first. `no-cache` is the reference every trace line
 * reports `opsPerSecVsNoCache` against, so it stays first.
 */
export function benchAllocators(): BenchAllocator[] {
  return [
    { name: 'no-cache', make: (backend) => makeDirectAllocator(backend) },
    { name: 'exact-size-pool', make: (backend) => createExactSizePoolAllocator(backend) },
    { name: 'caching-pytorch', make: (backend) => new CachingAllocator(backend, { preset: 'pytorch' }) },
    { name: 'caching-best', make: (backend) => new CachingAllocator(backend, { preset: 'best' }) },
  ];
}
