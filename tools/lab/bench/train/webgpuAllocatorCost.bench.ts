// pnpm bench:webgpu-train — the WebGPU allocator's cost per operation on a real workload: the training loop of
// @stowage/example-train on WebGPU (Dawn in Node), with TensorFlow.js's WebGPU buffer manager making the same
// allocations at the same moments as a shadow (Note [Shadow allocations] in ShadowedAllocator.ts). The WebGPU
// allocator's issue is judged on this workload for time per operation (and on memory and cold-pass time by
// `pnpm bench:webgpu`). Performance is measured here, never asserted in a test. One JSON line per record:
//
//   environment  {"scenario":"environment","node","cpu","cores","adapter","steps","date"} (first)
//   skipped      {"scenario":"skipped","reason"}   when Dawn finds no adapter
//   step         {"scenario":"step","workload","step","allocations","frees","stepMs","stowage":{"meanNsPerOp",
//                 "typicalNsPerOp"},"tfjs":{…},"meanRatio","typicalRatio"}   one line per training step; step -1 is
//                making the model and uploading its data (before the first step). An operation is one allocation and,
//                whenever it comes, its free (for tfjs also its release after the next submit). meanNsPerOp: all the
//                allocator's calls' time over the allocations; typicalNsPerOp: the sum of the medians of each kind of
//                call, robust to moments the process lost the CPU (on a loaded 2-core machine they decide the mean).
//                Ratios: Stowage's over tfjs's.
//   summary      {"scenario":"summary","workload","cold","early","steady","memory","met"}: cold, early and steady are
//                cost figures ({stowage,tfjs}:{meanNsPerOp,typicalNsPerOp}, meanRatio, typicalRatio) over the model's
//                making with the first step, over steps 1 to 4, and over the second half of the steps (steady also
//                has allocationsPerStep, the median stepMs and each allocator's mean share of a step's time); memory:
//                {stowagePeakReserved, stowagePeakAllocated, tfjsPeakCreated, tfjsPeakUsed, stowageCreateBuffer,
//                tfjsCreateBuffer}. met: the steady typicalRatio at most 1 (Stowage's time per operation at most
//                tfjs's).
//
// Workloads: the example's two deep shapes (mlp hidden 128 layers 16; transformer sequence 64 model 64 hidden 256
// blocks 6), as `pnpm bench:lms` trains them, but on the WebGPU plugin's defaults (no LMS, no budget): the
// allocator a program gets. A fresh Dawn device per workload. --steps N (default 30: V8 compiles the engine's
// paths over the first twenty or so steps of these loops, and a training run has thousands).
import 'reflect-metadata'; // an application entry point: first, before tsyringe loads (STYLE.md §5)
import os from 'node:os';
import { createRuntime, wrapAllocators } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import type { LmsRunModel } from '@stowage/example-train';
import { createWebGpuOps, train } from '@stowage/example-train';
import { BenchReporter, BenchUsageError, median, parseBenchFlags, runBench } from '@stowage/lab/bench-kit';
import type { AllocatorSamples } from './ShadowedAllocator.js';
import { markOf, ShadowedAllocator, slice } from './ShadowedAllocator.js';

const USAGE = `Usage: node tools/lab/dist-bench/train/webgpuAllocatorCost.bench.js [--steps N]
  --steps N   training steps per workload (default 30, at least 6)
JSON lines go to stdout.`;

interface Workload {
  readonly name: string;
  readonly shape: LmsRunModel;
}

const WORKLOADS: readonly Workload[] = [
  { name: 'mlp hidden 128 layers 16', shape: { model: 'mlp', sizes: { hidden: 128, layers: 16 } } },
  { name: 'transformer sequence 64 model 64 hidden 256 blocks 6', shape: { model: 'transformer', sizes: { sequence: 64, model: 64, hidden: 256, blocks: 6 } } },
];

/** A step's samples and wall time. */
interface StepFigures {
  readonly step: number;
  readonly samples: AllocatorSamples;
  readonly stepMs: number;
}

const sum = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0);
const round = (value: number, digits = 0): number => Number(value.toFixed(digits));
const medianOf = (values: readonly number[]): number => (values.length === 0 ? 0 : median(values));

/**
 * Nanoseconds per operation (an allocation and its free) of each allocator: `mean`, every call's time over the
 * allocations (what the program paid, the moments it lost the CPU to other processes or the garbage collector
 * included), and `typical`, the sum of the medians of each kind of call (robust to those moments).
 */
function perOp(samples: AllocatorSamples): { mean: { stowage: number; tfjs: number }; typical: { stowage: number; tfjs: number } } {
  const n = Math.max(1, samples.stowageAllocate.length);
  return {
    mean: {
      stowage: (sum(samples.stowageAllocate) + sum(samples.stowageFree)) / n,
      tfjs: (sum(samples.tfjsAcquire) + sum(samples.tfjsFree) + sum(samples.tfjsReleaseAtSubmit)) / n,
    },
    typical: {
      stowage: medianOf(samples.stowageAllocate) + medianOf(samples.stowageFree),
      tfjs: medianOf(samples.tfjsAcquire) + medianOf(samples.tfjsFree) + medianOf(samples.tfjsReleaseAtSubmit),
    },
  };
}

function concat(all: readonly AllocatorSamples[]): AllocatorSamples {
  return {
    stowageAllocate: all.flatMap((s) => s.stowageAllocate),
    stowageFree: all.flatMap((s) => s.stowageFree),
    tfjsAcquire: all.flatMap((s) => s.tfjsAcquire),
    tfjsFree: all.flatMap((s) => s.tfjsFree),
    tfjsReleaseAtSubmit: all.flatMap((s) => s.tfjsReleaseAtSubmit),
  };
}

interface CostFigures {
  readonly stowage: { readonly meanNsPerOp: number; readonly typicalNsPerOp: number };
  readonly tfjs: { readonly meanNsPerOp: number; readonly typicalNsPerOp: number };
  readonly meanRatio: number;
  readonly typicalRatio: number;
}

function costFigures(samples: AllocatorSamples): CostFigures {
  const { mean, typical } = perOp(samples);
  return {
    stowage: { meanNsPerOp: round(mean.stowage), typicalNsPerOp: round(typical.stowage) },
    tfjs: { meanNsPerOp: round(mean.tfjs), typicalNsPerOp: round(typical.tfjs) },
    meanRatio: round(mean.stowage / mean.tfjs, 3),
    typicalRatio: round(typical.stowage / typical.tfjs, 3),
  };
}

async function runWorkload(reporter: BenchReporter, workload: Workload, context: WebGpuContext, steps: number): Promise<void> {
  const gpu = context.device;
  let shadow: ShadowedAllocator | undefined;
  await using runtime = await createRuntime({
    plugins: [webgpu({ device: gpu }), wrapAllocators('webgpu', (allocator) => (shadow = new ShadowedAllocator(allocator, gpu)))],
  });
  const ops = createWebGpuOps(runtime, { gpu });
  const samples = shadow!.samples;
  const figures: StepFigures[] = [];
  let before = markOf(samples);
  let stepStart = performance.now();
  const endStep = (step: number): void => {
    const now = performance.now();
    const mark = markOf(samples);
    figures.push({ step, samples: slice(samples, before, mark), stepMs: now - stepStart });
    before = mark;
    stepStart = now;
  };
  await train({ ...workload.shape, ops, steps, onStart: () => endStep(-1), onStep: (step) => endStep(step) });
  for (const f of figures) {
    const counts = { allocations: f.samples.stowageAllocate.length, frees: f.samples.stowageFree.length };
    reporter.emit({ scenario: 'step', workload: workload.name, step: f.step, ...counts, stepMs: round(f.stepMs, 1), ...costFigures(f.samples) });
  }
  const steady = figures.filter((f) => f.step >= Math.floor(steps / 2));
  const steadySamples = concat(steady.map((f) => f.samples));
  const steadyFigures = costFigures(steadySamples);
  const stepMs = median(steady.map((f) => f.stepMs));
  const allocationsPerStep = median(steady.map((f) => f.samples.stowageAllocate.length));
  const { mean } = perOp(steadySamples);
  const stats = runtime.allocator('webgpu').memoryStats();
  reporter.emit({
    scenario: 'summary',
    workload: workload.name,
    cold: costFigures(concat(figures.filter((f) => f.step <= 0).map((f) => f.samples))),
    early: costFigures(concat(figures.filter((f) => f.step >= 1 && f.step <= 4).map((f) => f.samples))),
    steady: {
      ...steadyFigures,
      allocationsPerStep,
      stepMs: round(stepMs, 1),
      stowageShareOfStep: round((mean.stowage * allocationsPerStep) / (stepMs * 1e6), 5),
      tfjsShareOfStep: round((mean.tfjs * allocationsPerStep) / (stepMs * 1e6), 5),
    },
    memory: {
      stowagePeakReserved: stats['reserved_bytes.all.peak'],
      stowagePeakAllocated: stats['allocated_bytes.all.peak'],
      tfjsPeakCreated: shadow!.tfjsPeaks.allocatedBytes,
      tfjsPeakUsed: shadow!.tfjsPeaks.usedBytes,
      stowageCreateBuffer: stats['num_device_alloc'],
      tfjsCreateBuffer: shadow!.tfjsCreatedBuffers,
    },
    met: steadyFigures.typicalRatio <= 1,
  });
}

async function main(): Promise<void> {
  const flags = parseBenchFlags(process.argv.slice(2), { steps: { type: 'string' } }, USAGE);
  if (flags.help) {
    console.log(USAGE);
    return;
  }
  const steps = flags.steps === undefined ? 30 : Number(flags.steps);
  if (!Number.isSafeInteger(steps) || steps < 6) throw new BenchUsageError(`--steps must be a whole number of at least 6, not ${flags.steps}.\n${USAGE}`);
  const reporter = new BenchReporter('webgpu-train', WORKLOADS.length);
  const contexts: WebGpuContext[] = []; // Dawn's objects must outlive their devices: kept to the end
  let adapter = 'none';
  try {
    contexts.push(await openWebGpuDevice());
    adapter = contexts[0]!.adapterInfo;
  } catch (error) {
    reporter.emit({ scenario: 'skipped', reason: `no WebGPU adapter: ${(error as Error).message}` });
    return;
  }
  reporter.emit({ scenario: 'environment', node: process.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, adapter, steps, date: new Date().toISOString() });
  for (const [i, workload] of WORKLOADS.entries()) {
    if (i > 0) contexts.push(await openWebGpuDevice());
    reporter.task(workload.name);
    await runWorkload(reporter, workload, contexts[i]!, steps);
    contexts[i]!.device.destroy();
    reporter.step();
  }
  reporter.stop();
}

runBench(main);
