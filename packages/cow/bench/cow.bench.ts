// pnpm bench:cow — the cost of copy-on-write against eager copies, per size, on the CPU allocator.
// One JSON line per (op, bytes): {"op","bytes","nsPerOp","ratioToPlainCopy"?,"ratioToEagerClone"?}; then the
// flatness of lazy clone and steal over sizes, and an environment line.
//   lazy-clone            lazyClone(storage) and releasing the clone (the data is shared, nothing copied)
//   materialize-copy      a write to one of two lazy copies: allocate and copy under the shared lock
//   materialize-steal     a write to the last reference: keep the data, no copy
//   eager-clone           allocate a new storage and copy (what reshape does without COW); its release untimed,
//                         as the materializations' are
//   plain-copy            Uint8Array#set of the same bytes between two preallocated buffers (the floor: no
//                         allocation)
//   plain-slice           Uint8Array#slice of the same bytes (JavaScript's own allocate-and-copy)
// Rows other than the baselines carry ratioToPlainCopy, ratioToPlainSlice and ratioToEagerClone.
import 'reflect-metadata';
import os from 'node:os';
import type { Runtime, StorageImpl } from '@stowage/core';
import { cpu, createRuntime, hostBytes } from '@stowage/core';
import { lazyClone, materialize } from '@stowage/cow';
import { collectGarbage, median, timePerCall as measure } from '@stowage/bench-kit';

const KiB = 1024;
const SIZES = [KiB, 16 * KiB, 256 * KiB, 4 * 1024 * KiB, 64 * 1024 * KiB, 256 * 1024 * KiB];
/** Each timed step repeats until it has taken this long (and at least 3 times), in ROUNDS rounds. */
const MIN_MS = 270;
const ROUNDS = 9;

function benchSize(rt: Runtime, bytes: number): Record<string, number> {
  const source = rt.storage(bytes);
  rt.write(source, new Uint8Array(bytes).fill(7));
  const results: Record<string, number> = {};
  results['lazy-clone'] = measure(() => lazyClone(source)!.release());
  // A write needs a materialized side each time: time only the materialization of a fresh lazy copy.
  results['materialize-copy'] = timedStep(() => {
    const copy = lazyClone(source)!;
    return [() => void materialize(copy), () => copy.release()];
  });
  results['materialize-steal'] = timedStep(() => {
    const own = rt.storage(bytes);
    const other = lazyClone(own)!;
    other.release(); // `own` is the last reference
    return [() => void materialize(own), () => own.release()];
  });
  // Timed like materialize-copy: the allocation and the copy, not the release of the copy afterwards.
  results['eager-clone'] = timedStep(() => {
    let copy: StorageImpl | undefined;
    return [
      () => {
        copy = rt.storage(bytes);
        rt.allocator().copyData(copy.mutableData(), source.data(), bytes);
      },
      () => copy!.release(),
    ];
  });
  const from = new Uint8Array(bytes).fill(1);
  const to = new Uint8Array(bytes);
  results['plain-copy'] = measure(() => to.set(from));
  results['plain-slice'] = measure(() => void from.slice());
  hostBytes(source.data());
  source.release();
  return results;
}

/**
 * Times only the middle step of setup → step → teardown, repeated: the median of {@link ROUNDS} rounds. The
 * clock is read around each step, the same way at every size (timedStep subtracts what that costs); batching
 * steps would leave small ones hot in cache and large ones cold, which is not the steps' own cost.
 */
function timedOnly(prepare: () => [step: () => void, teardown: () => void]): number {
  collectGarbage();
  const runOnce = (): number => {
    const [step, teardown] = prepare();
    const t = performance.now();
    step();
    const elapsed = performance.now() - t;
    teardown();
    return elapsed;
  };
  const warmUntil = performance.now() + MIN_MS / 10; // warm up: the JIT, and a fresh segment's pages faulted in
  do runOnce();
  while (performance.now() < warmUntil);
  const rounds: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    let total = 0;
    let n = 0;
    const wall = performance.now();
    while (performance.now() - wall < (MIN_MS * 2) / ROUNDS || n < 3) {
      total += runOnce();
      n++;
    }
    rounds.push((total * 1e6) / n);
  }
  return median(rounds);
}

/** timedOnly less what its harness costs by itself (an empty step: the two clock reads and the loop). */
function timedStep(prepare: () => [step: () => void, teardown: () => void]): number {
  const harness = timedOnly(() => [noop, noop]);
  return Math.max(0, timedOnly(prepare) - harness);
}

function noop(): void {}

async function main(): Promise<void> {
  await using rt = await createRuntime({ plugins: [cpu({ limit: '3GiB' })] });
  const rows: { op: string; bytes: number; nsPerOp: number }[] = [];
  benchSize(rt, SIZES[0]!); // a discarded round: the first size measured must not pay for the JIT's warm-up
  for (const bytes of SIZES) {
    const results = benchSize(rt, bytes as number);
    for (const [op, ns] of Object.entries(results)) {
      const row = { op, bytes, nsPerOp: Math.round(ns) };
      rows.push(row);
      const ratio = (baseline: string): number => Number((ns / results[baseline]!).toFixed(3));
      const ratios =
        op === 'plain-copy' || op === 'plain-slice'
          ? {}
          : { ratioToPlainCopy: ratio('plain-copy'), ratioToPlainSlice: ratio('plain-slice'), ratioToEagerClone: ratio('eager-clone') };
      console.log(JSON.stringify({ ...row, ...ratios }));
    }
  }
  for (const op of ['lazy-clone', 'materialize-steal']) {
    const ns = rows.filter((r) => r.op === op).map((r) => r.nsPerOp);
    console.log(JSON.stringify({ op, scenario: 'flatness', maxOverMin: Number((Math.max(...ns) / Math.min(...ns)).toFixed(3)) }));
  }
  console.log(JSON.stringify({ scenario: 'environment', node: process.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, date: new Date().toISOString() }));
}

await main();
