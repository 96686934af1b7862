// The main job (`pnpm demo`): trains the example model under Large Model Support at a quarter of its unconstrained
// peak, with a progress bar, then again with the `speculative` policy and speculation on (LMS learns the loop and
// pages ahead of it), checks both against the unconstrained run and prints LMS's statistics for the three.
//   node examples/train/dist/main.js [--model transformer|mlp] [--fraction 0.25] [--policy lru|best-fit]
//                                    [--steps 8] [--device cpu|webgpu] [--record run.json]
// --record writes the constrained run's snapshot with its events (page-outs and page-ins among them) for
// `stowage viz run.json -o memory.html` and `stowage trace run.json --chrome`.
import 'reflect-metadata';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import cliProgress from 'cli-progress';
import { formatBytes } from '@stowage/core';
import { openWebGpuDevice } from '@stowage/allocator-webgpu';
import type { LmsRunModel, LmsRunResult } from './lmsRun.js';
import { runUnderLms } from './lmsRun.js';
import { recordRun } from './recordRun.js';

/** The deep shapes of the README's table: each op pins a sixteenth (or less) of the peak, so a quarter fits. */
const SHAPES: Readonly<Record<'mlp' | 'transformer', LmsRunModel>> = {
  mlp: { model: 'mlp', sizes: { hidden: 128, layers: 16 } },
  transformer: { model: 'transformer', sizes: { sequence: 64, model: 64, hidden: 256, blocks: 6 } },
};

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      model: { type: 'string', default: 'transformer' },
      fraction: { type: 'string', default: '0.25' },
      policy: { type: 'string', default: 'lru' },
      steps: { type: 'string', default: '8' },
      device: { type: 'string', default: 'cpu' },
      record: { type: 'string' },
    },
  });
  const shape = SHAPES[values.model as keyof typeof SHAPES];
  const fraction = Number(values.fraction);
  const steps = Number(values.steps);
  const policy = values.policy as 'lru' | 'best-fit';
  const device = values.device as 'cpu' | 'webgpu';
  if (shape === undefined || !(fraction > 0 && fraction <= 1) || !Number.isSafeInteger(steps) || steps < 1) {
    throw new Error('usage: main.js [--model transformer|mlp] [--fraction (0, 1]] [--policy lru|best-fit] [--steps n ≥ 1] [--device cpu|webgpu]');
  }
  // The context, not only its device, must live to the end: Dawn fails if its GPU object is collected first.
  const context = device === 'webgpu' ? await openWebGpuDevice() : undefined;
  const gpu = context?.device;
  const settings = { ...shape, device, steps, ...(gpu === undefined ? {} : { gpu }) };
  const sizes = Object.entries(shape.sizes ?? {}).map(([k, v]) => `${k} ${v}`).join(', ');
  console.log(`Stowage LMS demo — training a ${shape.model} (${sizes}) for ${steps} steps on ${device}, Node ${process.version}\n`);

  const free = await runUnderLms({ ...settings, onStep: () => {} });
  const peak = free.stats['reserved_bytes.all.peak']!;
  const budgetBytes = Math.floor(peak * fraction);
  console.log(`Unconstrained: peak reserved ${formatBytes(peak)} (P), the largest op pins ${formatBytes(free.pinnedPeakBytes)}.`);
  console.log(`Under LMS with a budget of ${formatBytes(budgetBytes)} (P × ${fraction}), policy ${policy}:`);

  const bar = new cliProgress.SingleBar(
    { format: '  {bar} step {value}/{total} | loss {loss} | budget {budget}', hideCursor: true, noTTYOutput: true, notTTYSchedule: 1000 },
    cliProgress.Presets.shades_classic,
  );
  bar.start(steps, 0, { loss: '…', budget: formatBytes(budgetBytes) });
  const recording = values.record === undefined ? undefined : recordRun(device, steps);
  let constrained: LmsRunResult;
  try {
    constrained = await runUnderLms({
      ...settings,
      budgetBytes,
      policy,
      onRuntime: recording?.onRuntime,
      onStep: (step, loss) => {
        bar.update(step + 1, { loss: loss.toFixed(5) });
        recording?.onStep(step);
      },
    });
  } finally {
    bar.stop();
  }

  if (recording !== undefined && values.record !== undefined) {
    writeFileSync(values.record, JSON.stringify(recording.recording()));
    console.log(`Recorded the run under LMS to ${values.record}: \`stowage viz ${values.record} -o memory.html\` draws it.`);
  }
  console.log(`Again with policy speculative and speculation on (LMS learns each step's pins and pages ahead of them)…`);
  const speculative = await runUnderLms({ ...settings, budgetBytes, policy: 'speculative', speculation: true });

  const same = sameBits(free, constrained);
  const sameSpeculative = sameBits(free, speculative);
  console.log(`\nLosses ${constrained.losses.map((l) => l.toFixed(4)).join(' → ')}`);
  console.log(`Losses and final weights bit-identical to the unconstrained run: ${same ? 'yes' : 'NO'} (${policy}), ${sameSpeculative ? 'yes' : 'NO'} (speculative).`);
  const largest = Math.max(constrained.maxReservedBytes, speculative.maxReservedBytes);
  console.log(`Reserved bytes after every op stayed within the budget: largest ${formatBytes(largest)} of ${formatBytes(budgetBytes)}.`);
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
  const medianMs = (run: LmsRunResult) => median(run.stepMs.slice(1)).toFixed(1);
  console.log(`Median step: ${medianMs(free)} ms unconstrained, ${medianMs(constrained)} ms under LMS (${policy}), ${medianMs(speculative)} ms with speculation.\n`);
  printTable([
    ['unconstrained', free.stats],
    [`budget, ${policy}`, constrained.stats],
    ['budget, speculative', speculative.stats],
  ]);
  context?.device.destroy(); // also keeps the context reachable until here
  if (!same || !sameSpeculative) process.exitCode = 1;
}

/** True when both runs gave the same losses and weights, bit for bit. */
function sameBits(a: LmsRunResult, b: LmsRunResult): boolean {
  const bits = (xs: number[]) => Buffer.from(new Float64Array(xs).buffer);
  if (!bits(a.losses).equals(bits(b.losses)) || a.weights.length !== b.weights.length) return false;
  return a.weights.every((w, i) => Buffer.from(w.buffer, w.byteOffset, w.byteLength).equals(Buffer.from(b.weights[i]!.buffer, b.weights[i]!.byteOffset, b.weights[i]!.byteLength)));
}

const ROWS: readonly [string, string, boolean][] = [
  ['reserved_bytes.all.peak', 'peak reserved', true],
  ['pinned_bytes.all.peak', 'peak pinned', true],
  ['reclaimed', 'storages reclaimed', false],
  ['reclaimed_bytes', 'bytes reclaimed', true],
  ['page_out', 'page-outs (copies to host)', false],
  ['page_out_bytes', 'bytes paged out', true],
  ['page_in', 'page-ins', false],
  ['page_in_bytes', 'bytes paged in', true],
  ['host_bytes.all.peak', 'peak host bytes', true],
  ['transfer_wait_ms', 'waited for transfers (ms)', false],
  ['speculative_page_out', 'speculative page-outs', false],
  ['speculative_hits', 'reclaims finding that copy (hits)', false],
  ['speculative_misses', 'reclaims that had to copy (misses)', false],
  ['speculative_wasted_bytes', 'speculative bytes wasted', true],
  ['prefetch', 'prefetches', false],
  ['prefetch_hits', 'pins finding their prefetch', false],
  ['prefetch_wasted_bytes', 'prefetched bytes wasted', true],
  ['iterations_predicted', 'steps predicted to the end', false],
  ['alloc_distribution.freelist', 'allocations: from the cache', false],
  ['alloc_distribution.device_alloc', 'allocations: new segment', false],
  ['alloc_distribution.device_alloc_retry', 'allocations: after releasing the cache', false],
  ['alloc_distribution.reclaim_one', 'allocations: after reclaim_one', false],
  ['alloc_distribution.reclaim_fragments', 'allocations: after reclaim_fragments', false],
  ['alloc_distribution.reclaim_all', 'allocations: after reclaim_all', false],
];

/** One column per run: its heading and its allocator's statistics. */
function printTable(columns: readonly (readonly [heading: string, stats: Readonly<Record<string, number>>])[]): void {
  const show = (value: number | undefined, bytes: boolean) => (value === undefined ? '-' : bytes ? formatBytes(value) : String(Math.round(value * 100) / 100));
  const rows = [['LMS statistics', ...columns.map(([heading]) => heading)], ...ROWS.map(([key, label, bytes]) => [label, ...columns.map(([, stats]) => show(stats[key], bytes))])];
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  for (const [i, row] of rows.entries()) {
    console.log(row.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  '));
    if (i === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  }
}

await main();
