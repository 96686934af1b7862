// The WebGPU replay benchmark (STYLE.md §11): in one process, on one Dawn adapter, replay shared traces through
// Stowage's WebGPU allocator, TensorFlow.js's WebGPU BufferManager, and raw createBuffer/destroy per
// allocation. Each trace's sizes are scaled so its peak live bytes are at most 512 MiB; each allocator replays
// it twice in a row on one instance: 'cold' pays for buffer creation (on software drivers createBuffer costs
// about 0.5–0.65 ms per MiB), 'warm' shows the allocator's own cost, and for the caching allocators 'steady' is
// the best of 8 more passes (the JIT warmed up). The program submits after every --submit-every frees (default 1).
// An allocator whose reserved bytes pass 4 GiB is stopped and reported failed at that op.
//
// Fairness: each allocator run gets a fresh GPUDevice of the same adapter (Note [A device per allocator run] in
// DeviceSource.ts), the process runs under fixed malloc settings (withMallocSettings.ts), and memory is touched
// just before each run (Note [Prewarm] in prewarmMemory.ts): so no allocator inherits another's resident memory,
// and none pays alone for memory the machine took back.
//
//   environment   {"scenario":"environment","node","adapter","cpu","cores","mallocMmapThreshold","date"}   (first)
//   pass lines    {"allocator","trace","pass","ops","opsPerSec","createBufferCalls","peakAllocated","peakReserved",
//                  "rssAboveBaseline","mainThreadCpuMs"?,"mainThreadWaitMs"?,"processCpuMs","failed"?}
//                  rssAboveBaseline: peak resident bytes during the pass above the level just before the cold pass
//                  (after GC and a drained queue); the CPU times say where the timed loop's wall time went
//                  (CpuClock.ts): a main thread that waits while V8 compiles on other threads makes a pass slower
//   summary       {"scenario":"summary","trace",…} Stowage against tfjs, per trace (compareWithTfjs.ts)
import 'reflect-metadata'; // an application entry point: first, before tsyringe loads (STYLE.md §5)
import os from 'node:os';
import type { TraceFile } from '@stowage/lab/replay';
import { findTraceRoot, listTraces, readTraceFile } from '@stowage/lab/replay';
import { BenchReporter, runBench, selectByName } from '@stowage/lab/bench-kit';
import { compareWithTfjs } from './compareWithTfjs.js';
import { DeviceSource } from './DeviceSource.js';
import { BENCH_USAGE, BenchUsageError, parseBenchArgs } from './parseBenchArgs.js';
import type { MeasuredCpuTimes } from './CpuClock.js';
import type { PassLine } from './PassLine.js';
import { prewarmMemory } from './prewarmMemory.js';
import type { ReplayAllocator, ReplayAllocatorKind } from './ReplayAllocator.js';
import { replayAllocatorKinds } from './replayAllocatorKinds.js';
import { replayPass } from './replayPass.js';
import type { ReplayPlan } from './ReplayPlan.js';
import { compileReplayPlan } from './ReplayPlan.js';
import { RssSampler } from './RssSampler.js';
import { selectTraces } from './selectTraces.js';
import { settleMemory } from './settleMemory.js';
import { withMallocSettings } from './withMallocSettings.js';

const MAX_PEAK_LIVE_BYTES = 512 * 2 ** 20;
const STOP_RESERVED_BYTES = 4 * 2 ** 30;
const RSS_EVERY_OPS = 64;
const PASSES = ['cold', 'warm'] as const;
/**
 * Replays after the warm pass for the allocators that cache (a program's later steps): the 'steady' line reports
 * the best of them. Not a target of the issue; it separates the allocator's cost from the JIT's warm-up.
 */
const STEADY_REPLAYS = 8;

async function main(): Promise<void> {
  const args = parseBenchArgs(process.argv.slice(2));
  if (args.help) {
    process.stdout.write(`${BENCH_USAGE}\n`);
    return;
  }
  if (!withMallocSettings()) return; // the run happened in a child process under the settings
  const all = replayAllocatorKinds();
  const kinds = selectByName(all, args.allocators);
  const root = findTraceRoot();
  if (root === undefined) throw new BenchUsageError('No trace directory found (shared/traces above the working directory, or $STOWAGE_TRACES).');
  const traces = selectTraces(listTraces(root), args);
  if (traces.length === 0) throw new BenchUsageError(`No trace under ${root} matches${args.trace === undefined ? ' the default set' : ` "${args.trace}"`}.`);

  const devices = new DeviceSource();
  const first = await devices.open();
  const passes = kinds.reduce((n, k) => n + PASSES.length + (k.steady ? 1 : 0), 0);
  const reporter = new BenchReporter('webgpu bench', traces.length * passes);
  try {
    reporter.emit({
      scenario: 'environment',
      node: process.version,
      adapter: first.adapterInfo,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      mallocMmapThreshold: process.env.MALLOC_MMAP_THRESHOLD_ ?? 'default',
      submitEveryFrees: args.submitEveryFrees,
      date: new Date().toISOString(),
    });
    first.device.destroy();
    for (const trace of traces) await benchTrace(trace, devices, kinds, reporter, args.submitEveryFrees);
  } finally {
    reporter.stop();
  }
}

/** Every allocator on one trace, one after the other; then the summary line. */
async function benchTrace(
  trace: TraceFile,
  devices: DeviceSource,
  kinds: readonly ReplayAllocatorKind[],
  reporter: BenchReporter,
  submitEveryFrees: number,
): Promise<void> {
  const plan = compileReplayPlan(await readTraceFile(trace), MAX_PEAK_LIVE_BYTES, submitEveryFrees);
  const lines: PassLine[] = [];
  for (const kind of kinds) {
    for (const line of await benchAllocator(trace.name, plan, devices, kind, reporter, submitEveryFrees)) {
      reporter.emit({ ...line });
      lines.push(line);
    }
  }
  if (kinds.some((k) => k.name === 'stowage') && kinds.some((k) => k.name === 'tfjs')) reporter.emit(compareWithTfjs(trace.name, plan, lines));
}

/**
 * One allocator's cold and warm passes over `plan` on a fresh instance, on a fresh GPUDevice of the same adapter
 * (DeviceSource.ts says why); no warm pass after a failed cold one. Afterwards the allocator is disposed, the
 * queue drained and the device destroyed.
 */
async function benchAllocator(
  trace: string,
  plan: ReplayPlan,
  devices: DeviceSource,
  kind: ReplayAllocatorKind,
  reporter: BenchReporter,
  submitEveryFrees: number,
): Promise<PassLine[]> {
  const lines: PassLine[] = [];
  const rss = new RssSampler();
  reporter.task(`${trace}: ${kind.name} prewarm`);
  await prewarmMemory((await devices.open()).device, prewarmBytes(plan));
  const context = await devices.open();
  const allocator = kind.create(context);
  try {
    await settleMemory(context.device);
    rss.setBaseline();
    for (const pass of PASSES) {
      reporter.task(`${trace}: ${kind.name} ${pass}`);
      const run = replayPass(allocator, plan, { submitEveryFrees, stopReservedBytes: STOP_RESERVED_BYTES, rssEveryOps: RSS_EVERY_OPS, rss });
      reporter.step();
      lines.push({
        allocator: kind.name,
        trace,
        pass,
        ops: run.ops,
        opsPerSec: Math.round(run.opsPerSec),
        createBufferCalls: run.createBufferCalls,
        peakAllocated: plan.peakLiveBytes,
        peakReserved: run.peakReservedBytes,
        rssAboveBaseline: run.rssAboveBaselineBytes,
        ...run.cpu,
        ...(run.failed === undefined ? {} : { failed: run.failed }),
      });
      if (run.failed !== undefined) {
        reporter.step(PASSES.length - lines.length + (kind.steady ? 1 : 0));
        break;
      }
      // A program's step ends by waiting for its work (reading a loss): the queue drains between the passes, and
      // garbage is collected outside the timed loop.
      await settleMemory(context.device);
    }
    if (kind.steady && lines.length === PASSES.length && lines.every((l) => l.failed === undefined)) {
      reporter.task(`${trace}: ${kind.name} steady`);
      lines.push(await steadyPass(trace, plan, context.device, allocator, kind.name, submitEveryFrees, rss));
      reporter.step();
    }
  } finally {
    allocator.dispose();
    await settleMemory(context.device);
    context.device.destroy();
  }
  return lines;
}

/**
 * {@link STEADY_REPLAYS} more passes: the best ops/s (with that pass's CPU times), the most reserved and resident
 * bytes, all buffers created.
 */
async function steadyPass(
  trace: string,
  plan: ReplayPlan,
  device: GPUDevice,
  allocator: ReplayAllocator,
  name: string,
  submitEveryFrees: number,
  rss: RssSampler,
): Promise<PassLine> {
  let best = 0;
  let bestCpu: MeasuredCpuTimes = { processCpuMs: 0 };
  let createBufferCalls = 0;
  let peakReserved = 0;
  let rssAboveBaseline = 0;
  for (let i = 0; i < STEADY_REPLAYS; i++) {
    const run = replayPass(allocator, plan, { submitEveryFrees, stopReservedBytes: STOP_RESERVED_BYTES, rssEveryOps: RSS_EVERY_OPS, rss });
    if (run.opsPerSec > best) {
      best = run.opsPerSec;
      bestCpu = run.cpu;
    }
    createBufferCalls += run.createBufferCalls;
    peakReserved = Math.max(peakReserved, run.peakReservedBytes);
    rssAboveBaseline = Math.max(rssAboveBaseline, run.rssAboveBaselineBytes);
    await settleMemory(device);
  }
  return {
    allocator: name,
    trace,
    pass: 'steady',
    ops: plan.length,
    opsPerSec: Math.round(best),
    createBufferCalls,
    peakAllocated: plan.peakLiveBytes,
    peakReserved,
    rssAboveBaseline,
    ...bestCpu,
  };
}

/** Twice the plan's lower bound on reserved bytes (tfjs's manager reserved up to about that), within the stop bound. */
function prewarmBytes(plan: ReplayPlan): number {
  return Math.min(STOP_RESERVED_BYTES, Math.max(MAX_PEAK_LIVE_BYTES, 2 * plan.peakLiveAndPendingBytes));
}

runBench(main);
