// What a cache miss of the CUDA allocator costs end to end, against a cache hit, on the stand-in libcuda (or a real
// libcuda: STOWAGE_LIBCUDA, or one found). A miss is an allocate that no cached block serves: the engine reserves
// memory from the driver (a cuMemAlloc_v2 segment; for an expandable segment an address range, its pages and their
// access), with the cuCtxSetCurrent before each call group. One JSON line per (allocator, request size):
// - missNs / missMeanNs: median and mean nanoseconds of one missing allocate, timed alone (the free and the
//   emptyCache that give the segment back after it are not timed); clockNs is the cost of the two clock reads
//   around it, included in both;
// - cycleNs: median of the whole cycle, allocate (miss) + free + emptyCache: the segment reserved and returned;
// - driverCallsPerMiss, driverCallsPerCycle: driver calls made (CudaDriver#callCount);
// - hitPairNs: an allocate + free pair served from the cache (bench-kit's timePerCall), and hitDriverCalls per pair
//   (0: the hot path makes no FFI call; CudaAllocator#allocate's tests check it).
// Then the environment. Run: npx tsc -b tsconfig.json tools/lab/tsconfig.bench.json &&
// node tools/lab/dist-bench/allocator-cuda/cacheMiss.bench.js [--quick]
import os from 'node:os';
import { parseArgs } from 'node:util';

import type { CachingAllocatorOptions } from '@stowage/core';
import type { CudaAllocator } from '@stowage/allocator-cuda';
import { createCudaAllocator } from '@stowage/allocator-cuda';
import { testLibcuda } from '@stowage/allocator-cuda/testing';
import { BenchReporter, median, runBench, timePerCall } from '@stowage/lab/bench-kit';

const MiB = 2 ** 20;

const SIZES = [512, 3 * MiB, 30 * MiB, 300 * MiB] as const;

const CONFIGURATIONS: readonly { readonly name: string; readonly options: CachingAllocatorOptions & { readonly segmentPageBytes?: number } }[] = [
  { name: 'cuda default (best, expandable, 2 MiB pages)', options: {} },
  { name: 'cuda best, 16 MiB pages', options: { segmentPageBytes: 16 * MiB } },
  { name: 'cuda pytorch (fixed segments)', options: { preset: 'pytorch' } },
];

const round = (x: number, digits = 1): number => Number(x.toFixed(digits));

/** Median nanoseconds of two back-to-back clock reads: what each timed miss carries on top of itself. */
function clockNs(): number {
  const samples: number[] = [];
  for (let i = 0; i < 10_000; i++) {
    const start = process.hrtime.bigint();
    samples.push(Number(process.hrtime.bigint() - start));
  }
  return median(samples);
}

interface MissFigures {
  readonly missNs: number;
  readonly missMeanNs: number;
  readonly cycleNs: number;
  readonly driverCallsPerMiss: number;
  readonly driverCallsPerCycle: number;
}

/** `iterations` cycles of allocate (a miss: the cache is empty) + free + emptyCache, after `warmup` untimed ones. */
function measureMisses(allocator: CudaAllocator, bytes: number, iterations: number, warmup: number): MissFigures {
  const driver = allocator.backend.driver;
  const miss: number[] = [];
  const cycle: number[] = [];
  let missCalls = 0;
  let cycleCalls = 0;
  for (let i = 0; i < warmup + iterations; i++) {
    const calls0 = driver.callCount;
    const start = process.hrtime.bigint();
    const ptr = allocator.allocate(bytes);
    const allocated = process.hrtime.bigint();
    const calls1 = driver.callCount;
    allocator.free(ptr);
    allocator.emptyCache();
    const end = process.hrtime.bigint();
    if (i < warmup) continue;
    miss.push(Number(allocated - start));
    cycle.push(Number(end - start));
    missCalls += calls1 - calls0;
    cycleCalls += driver.callCount - calls0;
  }
  if (allocator.memoryStats()['reserved_bytes.all.current'] !== 0) throw new Error('emptyCache left memory reserved: the next allocate would not miss');
  return {
    missNs: median(miss),
    missMeanNs: miss.reduce((s, v) => s + v, 0) / miss.length,
    cycleNs: median(cycle),
    driverCallsPerMiss: missCalls / iterations,
    driverCallsPerCycle: cycleCalls / iterations,
  };
}

/** Nanoseconds and driver calls of an allocate + free pair served from the cache. */
function measureHits(allocator: CudaAllocator, bytes: number): { readonly hitPairNs: number; readonly hitDriverCalls: number } {
  allocator.free(allocator.allocate(bytes)); // the block is cached from here on
  const driver = allocator.backend.driver;
  let pairs = 0;
  const calls0 = driver.callCount;
  const hitPairNs = timePerCall(() => {
    allocator.free(allocator.allocate(bytes));
    pairs++;
  });
  return { hitPairNs, hitDriverCalls: (driver.callCount - calls0) / pairs };
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean' } } });
  const lib = testLibcuda();
  if (typeof lib === 'string') throw new Error(lib);
  const iterations = values.quick ? 200 : 2000;
  const reporter = new BenchReporter('cuda cache miss', CONFIGURATIONS.length * SIZES.length);
  const clock = clockNs();
  for (const { name, options } of CONFIGURATIONS) {
    for (const bytes of SIZES) {
      reporter.task(`${name} ${bytes}`);
      const allocator = createCudaAllocator({ libcuda: lib.path, allocConf: '', ...options });
      try {
        // The largest requests cost the most per miss (more pages): fewer of them keep the run short.
        const n = bytes >= 100 * MiB ? Math.ceil(iterations / 10) : iterations;
        const misses = measureMisses(allocator, bytes, n, Math.ceil(n / 20));
        const hits = measureHits(allocator, bytes);
        reporter.emit({
          scenario: 'cacheMiss',
          allocator: name,
          bytes,
          iterations: n,
          missNs: round(misses.missNs),
          missMeanNs: round(misses.missMeanNs),
          cycleNs: round(misses.cycleNs),
          driverCallsPerMiss: round(misses.driverCallsPerMiss, 2),
          driverCallsPerCycle: round(misses.driverCallsPerCycle, 2),
          hitPairNs: round(hits.hitPairNs),
          hitDriverCalls: round(hits.hitDriverCalls, 3),
          missOverHitPair: round(misses.missNs / hits.hitPairNs, 1),
          clockNs: round(clock),
        });
      } finally {
        allocator.dispose();
      }
      reporter.step();
    }
  }
  reporter.stop();
  reporter.emit({ scenario: 'environment', library: lib.path, realDriver: lib.hooks === null, node: process.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, date: new Date().toISOString() });
}

runBench(main);
