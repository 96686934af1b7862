import { Worker } from 'node:worker_threads';
import type { DataPtr } from '@stowage/core';
import type { BenchAllocator } from './benchAllocators.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** The one size class of the tight loop. */
const PAIR_BYTES = 4096;
/** Blocks kept live beside the loop's one block. */
const RESIDENT_BLOCKS = 8;
const BATCH_PAIRS = 50_000;
/** The loop runs whole batches until at least this long has passed. */
const MIN_SECONDS = 1;

/**
 * Throughput of the hottest path: allocate and free one 4 KiB block in a tight loop with a few other blocks live,
 * after one untimed batch.
 * @returns alloc+free pairs per second
 */
export function runPairsScenario(allocator: BenchAllocator): number {
  const backend = new VirtualMemoryBackend({ storeData: false });
  using instance = allocator.make(backend);
  const resident: DataPtr[] = [];
  for (let i = 0; i < RESIDENT_BLOCKS; i++) resident.push(instance.allocate(PAIR_BYTES));
  const batch = (): void => {
    for (let k = 0; k < BATCH_PAIRS; k++) instance.free(instance.allocate(PAIR_BYTES));
  };
  batch();
  let pairs = 0;
  const start = performance.now();
  let seconds = 0;
  do {
    batch();
    pairs += BATCH_PAIRS;
    seconds = (performance.now() - start) / 1000;
  } while (seconds < MIN_SECONDS);
  for (const ptr of resident) instance.free(ptr);
  return pairs / seconds;
}

/**
 * {@link runPairsScenario} for the bench allocator `name` in a worker thread of its own. In one isolate the
 * loop's call sites would have seen every allocator measured before (megamorphic calls, slower for the later
 * ones); a fresh isolate per allocator measures each alone.
 */
export function runPairsInWorker(name: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./pairsWorker.js', import.meta.url), { workerData: { allocator: name } });
    worker.once('message', (pairsPerSec: number) => resolve(pairsPerSec));
    worker.once('error', reject);
    worker.once('exit', (code) => {
      if (code !== 0) reject(new Error(`the pairs worker for ${name} exited with code ${code}`));
    });
  });
}
