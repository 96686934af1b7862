import type { DataPtr } from '@stowage/core';
import type { BenchAllocator } from './benchAllocators.js';
import { createRandom } from './createRandom.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** Smallest and largest block of the scaling scenario. */
const MIN_BYTES = 512;
const MAX_BYTES = 8 << 20;
/**
 * `random`: each pair frees a random one of the live blocks and allocates in its place, so the timed loop walks
 * the whole working set (memory-hierarchy effects grow with it, for every allocator, the no-cache one too).
 * `churn`: the live blocks stay untouched in the background while each pair replaces one of
 * {@link CHURN_SLOTS} recent blocks: the allocator's own cost as its structures grow.
 */
export type ScalingMode = 'random' | 'churn';
const CHURN_SLOTS = 32;

/** Untimed pairs before the timed ones, so the JIT and the allocator's structures are warm. */
const WARMUP_PAIRS = 20_000;

/**
 * Cost of alloc/free with `liveBlocks` blocks live: allocates that many blocks of log-uniform sizes (512 B to
 * 8 MiB, seeded PRNG, the same sizes for every allocator), then times `pairs` replacements, each freeing a random
 * live block and allocating a new random size in its place.
 * @returns nanoseconds per operation (one alloc or one free; a pair is two operations)
 */
export function runScalingScenario(allocator: BenchAllocator, liveBlocks: number, pairs: number, mode: ScalingMode = 'random'): number {
  const backend = new VirtualMemoryBackend({ storeData: false });
  using instance = allocator.make(backend);
  const random = createRandom(0x5ca1e + liveBlocks);
  const live: DataPtr[] = [];
  for (let i = 0; i < liveBlocks; i++) live.push(instance.allocate(random.logUniformBytes(MIN_BYTES, MAX_BYTES)));
  if (mode === 'churn') for (let i = 0; i < CHURN_SLOTS; i++) live.push(instance.allocate(random.logUniformBytes(MIN_BYTES, MAX_BYTES)));
  const total = WARMUP_PAIRS + pairs;
  const slot = new Int32Array(total);
  const size = new Float64Array(total);
  for (let k = 0; k < total; k++) {
    slot[k] = mode === 'random' ? random.below(liveBlocks) : liveBlocks + (k % CHURN_SLOTS);
    size[k] = random.logUniformBytes(MIN_BYTES, MAX_BYTES);
  }
  const replace = (from: number, to: number): void => {
    for (let k = from; k < to; k++) {
      const i = slot[k]!;
      instance.free(live[i]!);
      live[i] = instance.allocate(size[k]!);
    }
  };
  replace(0, WARMUP_PAIRS);
  const start = performance.now();
  replace(WARMUP_PAIRS, total);
  const elapsedNs = (performance.now() - start) * 1e6;
  for (const ptr of live) instance.free(ptr);
  return elapsedNs / (2 * pairs);
}
