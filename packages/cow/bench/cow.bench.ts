// pnpm bench:cow — the cost of copy-on-write against eager copies, per size, on the CPU allocator.
// One JSON line per (op, bytes): {"op","bytes","nsPerOp","ratioToPlainCopy"?,"ratioToEagerClone"?}; then the
// flatness of lazy clone and steal over sizes, the largest ratio of materialize-copy to eager clone, and an
// environment line. Rounds of every (op, size) interleave (Note [Interleaved rounds]).
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
import { cpu, createRuntime } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import { lazyClone, materialize } from '@stowage/cow';
import { collectGarbage, median, timeRound } from '@stowage/bench-kit';

const KiB = 1024;
const SIZES = [KiB, 16 * KiB, 256 * KiB, 4 * 1024 * KiB, 64 * 1024 * KiB, 256 * 1024 * KiB];
/** Every (op, size) is timed in ROUNDS rounds of at least ROUND_MS (and 3 steps) each; its figure is the median. */
const ROUND_MS = 60;
const ROUNDS = 9;

/** One timed round of a case: nanoseconds per step. */
type Round = () => number;

interface Case {
  readonly op: string;
  readonly bytes: number;
  readonly round: Round;
  /** Timed after the interleaved rounds, on its own (Note [Interleaved rounds]). */
  readonly alone?: boolean;
}

/**
 * The cases of one size. Every case keeps what it needs (the source storage, the plain buffers) until the run
 * ends, so that rounds of all sizes can interleave (Note [Interleaved rounds]).
 */
function casesOf(rt: Runtime, bytes: number): Case[] {
  const source = rt.storage(bytes);
  rt.write(source, new Uint8Array(bytes).fill(7));
  hostBytes(source.data());
  const from = new Uint8Array(bytes).fill(1);
  const to = new Uint8Array(bytes);
  const rounds: Record<string, Round> = {
    'lazy-clone': () => timeRound(() => lazyClone(source)!.release(), ROUND_MS),
    // A write needs a materialized side each time: time only the materialization of a fresh lazy copy.
    'materialize-copy': () =>
      stepRound(() => {
        const copy = lazyClone(source)!;
        return [() => void materialize(copy), () => copy.release()];
      }),
    'materialize-steal': () =>
      stepRound(() => {
        const own = rt.storage(bytes);
        const other = lazyClone(own)!;
        other.release(); // `own` is the last reference
        return [() => void materialize(own), () => own.release()];
      }),
    // Timed like materialize-copy: the allocation and the copy, not the release of the copy afterwards.
    'eager-clone': () =>
      stepRound(() => {
        let copy: StorageImpl | undefined;
        return [
          () => {
            copy = rt.storage(bytes);
            rt.allocator().copyData(copy.mutableData(), source.data(), bytes);
          },
          () => copy!.release(),
        ];
      }),
    'plain-copy': () => timeRound(() => to.set(from), ROUND_MS),
    'plain-slice': () => timeRound(() => void from.slice(), ROUND_MS),
  };
  return Object.entries(rounds).map(([op, round]) => ({ op, bytes, round, ...(op === 'plain-slice' ? { alone: true } : {}) }));
}

/**
 * One round of setup → step → teardown, repeated, timing only the middle step. The clock is read around each step,
 * the same way at every size (the harness's own cost is measured as a case of its own and subtracted); batching
 * steps would leave small ones hot in cache and large ones cold, which is not the steps' own cost.
 */
function stepRound(prepare: () => [step: () => void, teardown: () => void]): number {
  let total = 0;
  let n = 0;
  const wall = performance.now();
  while (performance.now() - wall < ROUND_MS || n < 3) {
    const [step, teardown] = prepare();
    const t = performance.now();
    step();
    total += performance.now() - t;
    teardown();
    n++;
  }
  return (total * 1e6) / n;
}

/** The harness of {@link stepRound} by itself: an empty step (two clock reads and the loop). */
const HARNESS = 'harness';

function noop(): void {}

/**
 * Note [Interleaved rounds]: this machine's speed drifts by 2× over seconds (other processes, CPU frequency). Timing
 * each size's cases one after another put a slow moment on one size and made a flat cost look 2–3× steeper than it
 * is, and a ratio of two ops of one size compare different moments. Rounds therefore go case by case across every
 * size and op, in alternating direction, and each figure is the median of its rounds: a slow moment lands on
 * neighbouring cases of different sizes alike. Plain-slice runs alone, after them: its 256 MiB arrays, made and
 * dropped three or more times a round, slowed whichever large copies came next (at 256 MiB, interleaved with it,
 * materialize-copy took 17–48 ms and an eager clone 17–73 ms by round, and their ratio read 0.77–1.56 between
 * runs; without it both take 18–20 ms in every round).
 */
function timeInterleaved(cases: readonly Case[]): Map<Case, number> {
  const interleaved = cases.filter((c) => c.alone !== true);
  const rounds = new Map<Case, number[]>(cases.map((c) => [c, []]));
  for (const c of interleaved) c.round(); // warm up: the JIT, and fresh segments' pages faulted in
  for (let r = 0; r < ROUNDS; r++) {
    collectGarbage();
    const order = r % 2 === 0 ? interleaved : [...interleaved].reverse();
    for (const c of order) rounds.get(c)!.push(c.round());
  }
  for (const c of cases.filter((c) => c.alone === true)) {
    collectGarbage();
    c.round();
    for (let r = 0; r < ROUNDS; r++) rounds.get(c)!.push(c.round());
  }
  return new Map(cases.map((c) => [c, median(rounds.get(c)!)]));
}

async function main(): Promise<void> {
  await using rt = await createRuntime({ plugins: [cpu({ limit: '3GiB' })] });
  const harness: Case = { op: HARNESS, bytes: 0, round: () => stepRound(() => [noop, noop]) };
  const cases = [harness, ...SIZES.flatMap((bytes) => casesOf(rt, bytes))];
  const figures = timeInterleaved(cases);
  const harnessNs = figures.get(harness)!;
  const stepped = new Set(['materialize-copy', 'materialize-steal', 'eager-clone']);
  const rows: { op: string; bytes: number; nsPerOp: number }[] = [];
  for (const bytes of SIZES) {
    const results: Record<string, number> = {};
    for (const c of cases) {
      if (c.bytes === bytes) results[c.op] = stepped.has(c.op) ? Math.max(0, figures.get(c)! - harnessNs) : figures.get(c)!;
    }
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
  const copyRatios = rows.filter((r) => r.op === 'materialize-copy').map((r) => r.nsPerOp / rows.find((e) => e.op === 'eager-clone' && e.bytes === r.bytes)!.nsPerOp);
  console.log(JSON.stringify({ op: 'materialize-copy', scenario: 'vs-eager-clone', maxRatio: Number(Math.max(...copyRatios).toFixed(3)) }));
  console.log(JSON.stringify({ scenario: 'environment', harnessNs: Math.round(harnessNs), node: process.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, date: new Date().toISOString() }));
}

await main();
