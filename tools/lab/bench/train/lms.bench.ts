// pnpm bench:lms — the training loop of @stowage/example-train under Large Model Support, on the CPU and on WebGPU
// (Dawn in Node), under budgets of P, P/2, P/4 and P/8, where P is the loop's unconstrained peak of reserved bytes
// (`unconstrainedPeak`), with each policy, and with LMS's speculation off and on (issue 19's real loop); then the
// cost of a pin and an unpin; then whether the targets were met. Performance is measured here, never asserted in a
// test. One JSON line per record on stdout:
//
//   environment  {"scenario":"environment","node","cpu","cores","adapter","steps","plans","quick","date"} (first);
//                steps is per device
//   skipped      {"device":"webgpu","skipped":true,"reason"}   when Dawn finds no adapter
//   run          {"workload","device","budget","budgetBytes","policy","fits","stepMs","slowdown","pageOuts","pageIns",
//                 "bytesMoved","waitMs","reclaimOne","reclaimFragments","reclaimAll","agreesWithIbm"?,"error"?}
//                speculation off. Budget "none" is the unconstrained run (no limit; it adds "peakBytes" and
//                "pinnedPeakBytes"), the baseline of `slowdown`. stepMs is the median of the steps after the first
//                (the first makes the model and uploads its data); bytesMoved is page_out_bytes + page_in_bytes;
//                waitMs is transfer_wait_ms; reclaim* count alloc_distribution.reclaim_*. A run that throws has fits
//                false, its error (class and message) and the counts its allocator had reached.
//   loop step    {"trace","device","link":null,"budget","policy","speculative","iteration","fits","stepMs","slowdown",
//                 "precision","recall","wastedBytes","bytesMoved","waitMs","roomWaitMs","pollMs","speculativePageOuts",
//                 "hits","misses","prefetches","prefetchHits","predictedPageIns","readyBeforeUse","error"?}   issue 19's real loop: one line per step of every run of the
//                deep shapes (trace "train-mlp", "train-transformer") under P/2, P/4, P/8 with lru, best-fit and
//                speculative, speculation off (speculative false) and on (`lms({ speculation: true })`); the lru and
//                best-fit runs without speculation are the run rows' own. Every step is a line, iteration 0 (which
//                also makes the model) included, so that the learning shows; the summary aggregates iterations 3 on.
//                The figures are the counters' growth over the step (LmsRunResult#stepStats, the step ending with
//                LmsController#endIteration): precision = speculative_hits / speculative_page_out, recall =
//                speculative_hits / (speculative_hits + speculative_misses), null without a denominator (speculation
//                off, say); a copy started in one step and used in the next counts in different steps, so a step's
//                precision may leave [0, 1] where a run's stays in it. wastedBytes = speculative_wasted_bytes +
//                prefetch_wasted_bytes; bytesMoved = page_out_bytes + page_in_bytes (speculative page-outs and
//                prefetches included); waitMs = transfer_wait_ms (pinAsync awaiting page-outs' mapAsync, on WebGPU;
//                0 on the CPU, whose copies are synchronous), roomWaitMs = room_wait_ms (the part waited for page-outs
//                to give back the device memory the next allocations need: Note [Waiting for page-outs] in
//                @stowage/lms's Residency.ts; the rest waited for a page-in's bytes), pollMs = transfer_poll_ms
//                (event-loop turns that let finished copies land); prefetches, prefetchHits = prefetch,
//                prefetch_hits; predictedPageIns, readyBeforeUse = page_in_predicted, page_in_ready_before_use (Note
//                [Ready before use] in LmsStats.ts); slowdown = stepMs over the unconstrained run's median step. A
//                run that throws has one line, iteration null, fits false and its error.
//   pin-unpin    {"workload":"pin-unpin","device":"cpu","policy","form","pinUnpinNs"}   one pin and one unpin of a
//                resident storage, as `storage.lms.pin(); storage.lms.unpin()` and as `pin(storage).release()`
//   summary      {"scenario":"summary","loop":{"fromIteration","totals","comparisons"},"targets":{…}}: the real
//                loop from iteration 3 on (LoopRecord.ts: each run with speculation on beside the same run with it
//                off, steps summed, stepMs their mean), and each target with "met" and its figures — the run rows'
//                targets, and the real loop's: every run with speculation on fits, precision ≥ 0.95 and recall ≥ 0.98
//                in every one, on WebGPU less waiting with speculation than without in every pair (waits for room
//                and polls beside), and on WebGPU at least 95 % of the page-ins of predicted storages ready before
//                their pin in every run with speculation on (webGpuReadyBeforeUseAtLeast95: share, lowest).
//   sim, sim-summary   the simulated-time rows after these (`speculationRows`): speculation.bench.ts documents them.
//   published, published-summary   with --published, and only then: the published swapping systems' setups at
//                full size (published/published.bench.ts documents them).
//
// Workloads: the two deep shapes the example's README marks in bold (mlp hidden 128 layers 16; transformer sequence
// 64 model 64 hidden 256 blocks 6), whose largest op pins a small part of P, and the two default shapes, which pin
// more than half of P and so cannot run under P/2 or less: their rows say so (fits false, OutOfMemoryError).
// Policies of the run rows: `lru` and `best-fit`, and `ibm-reference`, IBM's reclaim written in this directory from
// the reference's description (IbmReferencePolicy.ts); each `lru` row says whether `lru` paged out the same storages
// in the same order as the reference did under the same budget (agreesWithIbm). The real loop adds `speculative`
// (farthest predicted next use) and speculation on with lru, best-fit and speculative (LOOP_EXTRA).
//
// Choices, for the real-device rows in about four minutes on a small machine (two shared cores here, at a load of
// 3 to 4 from other work; about six at a load of 6 to 7), the simulated-time rows' minute aside:
// - STEPS: 6 steps per run on the CPU (the loop aggregates iterations 3 to 5), 5 on WebGPU (iterations 3 and 4); CPU
//   runs take a second or less each.
// - Before each device's rows, unrecorded warm-up runs (`warmUp`): a baseline timed while the JIT still compiles
//   the ops and LMS's paths came out 20 to 60 % slower than the budgeted runs after it.
// - WebGPU in Node is Dawn on SwiftShader where there is no GPU: a deep step takes about 0.5 to 1 s there, a run
//   3 to 6 s. It trains the two deep shapes at every budget (the targets are about them; about 3 minutes) and
//   not the default shapes, whose refusals under P/2 and less the CPU rows already show. Both WebGPU workloads share
//   one Dawn device, kept open to the end.
// - `--quick` (about a minute with the simulated-time rows, at a load of 3 to 4): QUICK_STEPS (4: the loop's iteration 3 alone) on both devices,
//   the CPU rows as above, and on WebGPU the deep mlp only, under P/4 only; fitsAtEighthWithBestPolicy then covers
//   the CPU alone.
// Step times and WebGPU's waits on a shared machine vary by tens of percent between runs of the same configuration
// (SwiftShader's mapAsync waits on the same cores): read `slowdown` and waitMs against that noise; page and byte
// counts are exact and repeat from run to run on the CPU.
import 'reflect-metadata'; // an application entry point: first, before tsyringe loads (STYLE.md §5)
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Runtime } from '@stowage/core';
import { cpu, createRuntime, resolve } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { openWebGpuDevice } from '@stowage/allocator-webgpu';
import type { Residency } from '@stowage/lms';
import { LmsController, lms, pin } from '@stowage/lms';
import type { LmsRunModel, LmsRunResult } from '@stowage/example-train';
import { runUnderLms, unconstrainedPeak } from '@stowage/example-train';
import type { BenchRecord } from '@stowage/lab/bench-kit';
import { BenchReporter, median, parseBenchFlags, runBench, timePerCall } from '@stowage/lab/bench-kit';
import { IbmReferencePolicy } from './IbmReferencePolicy.js';
import type { LoopPolicy, LoopRecord, LoopTrace } from './LoopRecord.js';
import { loopRecordsOf, summarizeLoop } from './LoopRecord.js';
import { PageOutTrace } from './PageOutTrace.js';
import { speculationRows } from './speculation.bench.js';
import { publishedRows } from './published/published.bench.js';

const USAGE = `Usage: node tools/lab/dist-bench/train/lms.bench.js [--quick] [--published]
  --quick       the CPU rows and, on WebGPU, the deep mlp only (under a minute); with --published, no searches
  --published   only the published setups (published/published.bench.ts): each paper's model, GPU and link,
                simulated at full size on an address-only device, beside the paper's figure
JSON lines go to stdout; a progress bar goes to stderr when it is a terminal.`;

/**
 * Optimizer steps per run, by device (QUICK_STEPS with --quick): the first makes the model, the median of the
 * others is the step time; the real-loop records aggregate the steps from iteration 3 on (3 to 5 on the CPU, 3 and 4
 * on WebGPU, 3 alone with --quick).
 */
const STEPS: Readonly<Record<DeviceName, number>> = { cpu: 6, webgpu: 5 };
const QUICK_STEPS: Readonly<Record<DeviceName, number>> = { cpu: 4, webgpu: 4 };
/** A storage's size in the pin-unpin rows (any resident size costs the same). */
const PIN_BYTES = 64 * 1024;
/** The pin-unpin target, in nanoseconds. */
const PIN_UNPIN_TARGET_NS = 500;

type DeviceName = 'cpu' | 'webgpu';
type PolicyName = 'lru' | 'best-fit' | 'speculative' | 'ibm-reference';
/** The policies of the run rows (speculation off). */
const POLICIES: readonly PolicyName[] = ['lru', 'best-fit', 'ibm-reference'];
const BUILT_IN: readonly PolicyName[] = ['lru', 'best-fit'];
/** The real loop's configurations beside the run rows' (lru and best-fit without speculation): each under P/2, P/4, P/8. */
const LOOP_EXTRA: readonly { policy: LoopPolicy; speculative: boolean }[] = [
  { policy: 'speculative', speculative: false },
  { policy: 'lru', speculative: true },
  { policy: 'best-fit', speculative: true },
  { policy: 'speculative', speculative: true },
];
interface Budget {
  readonly budget: string;
  /** The budget is P / divisor, in whole bytes. */
  readonly divisor: number;
}
const BUDGETS: readonly Budget[] = [
  { budget: 'P', divisor: 1 },
  { budget: 'P/2', divisor: 2 },
  { budget: 'P/4', divisor: 4 },
  { budget: 'P/8', divisor: 8 },
];
/** WebGPU's budgets with --quick. */
const QUICK_BUDGETS: readonly Budget[] = BUDGETS.filter((b) => b.divisor === 4);

interface Workload {
  readonly name: string;
  /** A shape whose largest op pins a small part of its peak: the targets are about these. */
  readonly deep: boolean;
  readonly shape: LmsRunModel;
  /** The deep shapes' name as a trace of issue 19: they also give the real-loop records. */
  readonly trace?: LoopTrace;
}

const DEEP_MLP: Workload = { name: 'mlp hidden 128 layers 16', deep: true, shape: { model: 'mlp', sizes: { hidden: 128, layers: 16 } }, trace: 'train-mlp' };
const DEEP_TRANSFORMER: Workload = {
  name: 'transformer sequence 64 model 64 hidden 256 blocks 6',
  deep: true,
  shape: { model: 'transformer', sizes: { sequence: 64, model: 64, hidden: 256, blocks: 6 } },
  trace: 'train-transformer',
};
const DEFAULT_MLP: Workload = { name: 'mlp default', deep: false, shape: { model: 'mlp', sizes: {} } };
const DEFAULT_TRANSFORMER: Workload = { name: 'transformer default', deep: false, shape: { model: 'transformer', sizes: {} } };
const DEEP_NAMES = new Set([DEEP_MLP.name, DEEP_TRANSFORMER.name]);

/** One run's JSON line. */
type RunRow = {
  readonly workload: string;
  readonly device: DeviceName;
  readonly budget: string;
  readonly budgetBytes: number | null;
  readonly policy: PolicyName;
  readonly fits: boolean;
  readonly stepMs: number | null;
  readonly slowdown: number | null;
  readonly pageOuts: number | null;
  readonly pageIns: number | null;
  readonly bytesMoved: number | null;
  readonly waitMs: number | null;
  readonly reclaimOne: number | null;
  readonly reclaimFragments: number | null;
  readonly reclaimAll: number | null;
  readonly agreesWithIbm?: boolean;
  readonly error?: string;
};

/** A run's outcome, before it is a row. */
interface RunOutcome {
  readonly fits: boolean;
  /** Median of the steps after the first; null when the run threw. */
  readonly stepMs: number | null;
  readonly stats: Readonly<Record<string, number>> | null;
  readonly trace: PageOutTrace;
  readonly pinnedPeakBytes: number | null;
  /** The run, when it did not throw (its steps, for the real-loop records). */
  readonly run?: LmsRunResult;
  readonly error?: string;
}

/** What runs on one device. */
interface DevicePlan {
  readonly device: DeviceName;
  /** With device 'webgpu': Dawn's device, shared by every run. */
  readonly gpu: GPUDevice | undefined;
  readonly workloads: readonly Workload[];
  readonly budgets: readonly Budget[];
  readonly steps: number;
}

interface RunSettings {
  readonly device: DeviceName;
  readonly gpu: GPUDevice | undefined;
  readonly steps: number;
  readonly workload: Workload;
  readonly budgetBytes: number | undefined;
  readonly policy: PolicyName;
  /** LMS's speculative page-out and prefetch; off when absent. */
  readonly speculative?: boolean;
}

/** Trains one workload under one budget and policy, recording its page-outs; an error is an outcome, not a throw. */
async function runOne({ device, gpu, steps, workload, budgetBytes, policy, speculative = false }: RunSettings): Promise<RunOutcome> {
  const trace = new PageOutTrace();
  let lmsDevice: Residency | undefined;
  const onRuntime = (runtime: Runtime): void => {
    const allocator = runtime.allocator(device);
    lmsDevice = resolve(runtime.container, LmsController).device(allocator.device);
    if (lmsDevice === undefined) throw new Error(`LMS does not page the ${device} allocator: the bench has nothing to measure.`);
    trace.listen(lmsDevice);
  };
  try {
    const run = await runUnderLms({
      device,
      gpu,
      ...workload.shape,
      steps,
      budgetBytes,
      policy: policy === 'ibm-reference' ? new IbmReferencePolicy() : policy,
      speculation: speculative,
      onRuntime,
    });
    return { fits: true, stepMs: median(run.stepMs.slice(1)), stats: run.stats, trace, pinnedPeakBytes: run.pinnedPeakBytes, run };
  } catch (error) {
    // The runtime is disposed by now; LMS's own counters (the keys it merges into memoryStats()) stay readable.
    return { fits: false, stepMs: null, stats: lmsDevice?.stats.toRecord() ?? null, trace, pinnedPeakBytes: null, error: describeError(error) };
  }
}

function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** The row of one run; `baselineMs` is the unconstrained run's step time. */
function rowOf(settings: RunSettings, budget: string, outcome: RunOutcome, baselineMs: number | null): RunRow {
  const { stats, stepMs } = outcome;
  const stat = (key: string): number | null => (stats === null ? null : (stats[key] ?? 0));
  const pageOutBytes = stat('page_out_bytes');
  const pageInBytes = stat('page_in_bytes');
  const waitMs = stat('transfer_wait_ms');
  return {
    workload: settings.workload.name,
    device: settings.device,
    budget,
    budgetBytes: settings.budgetBytes ?? null,
    policy: settings.policy,
    fits: outcome.fits,
    stepMs: stepMs === null ? null : round(stepMs, 1),
    slowdown: stepMs === null || baselineMs === null ? null : round(stepMs / baselineMs, 3),
    pageOuts: stat('page_out'),
    pageIns: stat('page_in'),
    bytesMoved: pageOutBytes === null || pageInBytes === null ? null : pageOutBytes + pageInBytes,
    waitMs: waitMs === null ? null : round(waitMs, 1),
    reclaimOne: stat('alloc_distribution.reclaim_one'),
    reclaimFragments: stat('alloc_distribution.reclaim_fragments'),
    reclaimAll: stat('alloc_distribution.reclaim_all'),
    ...(outcome.error === undefined ? {} : { error: outcome.error }),
  };
}

function round(value: number, digits: number): number {
  return Number(value.toFixed(digits));
}

/**
 * Unrecorded runs before anything is timed on `plan`'s device, so that no baseline is timed while the JIT still
 * compiles. On the CPU: each workload without a budget, then the deep mlp under P/4 with each built-in policy (LMS's
 * reclaim and paging paths). On WebGPU, where the time is SwiftShader's and LMS's code is warm from the CPU rows: the
 * deep mlp once without a budget (each workload's `unconstrainedPeak` compiles its own pipelines). The CPU's
 * warm-up also runs the deep mlp under P/4 with `speculative` and speculation on (LMS's speculation paths).
 */
async function warmUp(plan: DevicePlan, reporter: BenchReporter): Promise<void> {
  const { device, gpu, steps } = plan;
  reporter.task(`${device}: warming up`);
  for (const workload of device === 'cpu' ? plan.workloads : [DEEP_MLP]) await runOne({ device, gpu, steps, workload, budgetBytes: undefined, policy: 'lru' });
  if (device !== 'cpu') return;
  const peakBytes = await unconstrainedPeak({ device, gpu, ...DEEP_MLP.shape, steps });
  for (const policy of BUILT_IN) await runOne({ device, gpu, steps, workload: DEEP_MLP, budgetBytes: Math.floor(peakBytes / 4), policy });
  await runOne({ device, gpu, steps, workload: DEEP_MLP, budgetBytes: Math.floor(peakBytes / 4), policy: 'speculative', speculative: true });
}

/**
 * One workload on one device: P from `unconstrainedPeak` (a warm-up too: on WebGPU it compiles the workload's
 * pipelines, so the unconstrained run after it is timed like the others), the unconstrained run, then every budget
 * with every policy; a workload with a `trace` also runs LOOP_EXTRA under every budget but P and emits its real-loop
 * records. Returns the run rows it emitted, and the real-loop records.
 */
async function benchWorkload(plan: DevicePlan, workload: Workload, reporter: BenchReporter): Promise<{ rows: RunRow[]; loop: LoopRecord[] }> {
  const { device, gpu, steps, budgets } = plan;
  reporter.task(`${device}: ${workload.name}`);
  const base: RunSettings = { device, gpu, steps, workload, budgetBytes: undefined, policy: 'lru' };
  let peakBytes: number;
  try {
    peakBytes = await unconstrainedPeak({ device, gpu, ...workload.shape, steps });
  } catch (error) {
    const failed = rowOf(base, 'none', { fits: false, stepMs: null, stats: null, trace: new PageOutTrace(), pinnedPeakBytes: null, error: describeError(error) }, null);
    reporter.emit(failed);
    reporter.step(runsOf(plan, workload));
    return { rows: [failed], loop: [] };
  }
  const unconstrained = await runOne(base);
  const baselineMs = unconstrained.stepMs;
  const rows: RunRow[] = [rowOf(base, 'none', unconstrained, baselineMs)];
  const loop: LoopRecord[] = [];
  reporter.emit({ ...rows[0]!, peakBytes, pinnedPeakBytes: unconstrained.pinnedPeakBytes });
  reporter.step();
  for (const { budget, divisor } of budgets) {
    const budgetBytes = Math.floor(peakBytes / divisor);
    const outcomes = new Map<PolicyName, RunOutcome>();
    for (const policy of POLICIES) {
      reporter.task(`${device}: ${workload.name} under ${budget} with ${policy}`);
      outcomes.set(policy, await runOne({ ...base, budgetBytes, policy }));
      reporter.step();
    }
    const reference = outcomes.get('ibm-reference')!;
    for (const policy of POLICIES) {
      const outcome = outcomes.get(policy)!;
      let row = rowOf({ ...base, budgetBytes, policy }, budget, outcome, baselineMs);
      if (policy === 'lru') row = { ...row, agreesWithIbm: outcome.fits === reference.fits && outcome.trace.equals(reference.trace) };
      rows.push(row);
      reporter.emit(row);
    }
    if (workload.trace === undefined || divisor === 1) continue;
    const loopRuns: { policy: LoopPolicy; speculative: boolean; outcome: RunOutcome }[] = [
      { policy: 'lru', speculative: false, outcome: outcomes.get('lru')! },
      { policy: 'best-fit', speculative: false, outcome: outcomes.get('best-fit')! },
    ];
    for (const { policy, speculative } of LOOP_EXTRA) {
      reporter.task(`${device}: ${workload.name} under ${budget} with ${policy}${speculative ? ' and speculation' : ''}`);
      loopRuns.push({ policy, speculative, outcome: await runOne({ ...base, budgetBytes, policy, speculative }) });
      reporter.step();
    }
    for (const { policy, speculative, outcome } of loopRuns) {
      const run = { trace: workload.trace, device, budget, policy, speculative };
      const records = loopRecordsOf(run, outcome.run ?? { error: outcome.error ?? 'no result' }, baselineMs);
      for (const record of records) reporter.emit(record);
      loop.push(...records);
    }
  }
  return { rows, loop };
}

/** The runs `plan` makes of `workload`, or of all its workloads (warm-up and P not counted). */
function runsOf(plan: DevicePlan, workload?: Workload): number {
  const loopBudgets = plan.budgets.filter((b) => b.divisor > 1).length;
  const runs = (w: Workload): number => 1 + plan.budgets.length * POLICIES.length + (w.trace === undefined ? 0 : loopBudgets * LOOP_EXTRA.length);
  return workload === undefined ? plan.workloads.reduce((n, w) => n + runs(w), 0) : runs(workload);
}

/** Dawn's device, or why there is none. Dawn's Vulkan loader wants XDG_RUNTIME_DIR; a fresh directory when unset. */
async function openDawn(): Promise<WebGpuContext | string> {
  process.env.XDG_RUNTIME_DIR ??= mkdtempSync(path.join(os.tmpdir(), 'stowage-xdg-'));
  try {
    return await openWebGpuDevice();
  } catch (error) {
    return describeError(error);
  }
}

type PinRow = {
  readonly workload: 'pin-unpin';
  readonly device: 'cpu';
  readonly policy: PolicyName;
  readonly form: string;
  readonly pinUnpinNs: number;
};

/**
 * One pin and one unpin of a resident storage, in the state it has between two ops (inactive: on the reclaim
 * list), in a runtime of the CPU allocator under LMS with `lru`.
 */
async function benchPinUnpin(): Promise<PinRow[]> {
  await using runtime = await createRuntime({ plugins: [cpu(), lms({ policy: 'lru' })] });
  const storage = runtime.storage(PIN_BYTES);
  const lmsObject = storage.lms;
  if (lmsObject === null) throw new Error('The CPU allocator is not under LMS: no pin to time.');
  lmsObject.pin();
  lmsObject.unpin();
  const timed: [form: string, run: () => void][] = [
    [
      'storage.lms.pin(); storage.lms.unpin()',
      () => {
        lmsObject.pin();
        lmsObject.unpin();
      },
    ],
    ['pin(storage).release()', () => pin(storage).release()],
  ];
  const rows = timed.map(([form, run]): PinRow => ({ workload: 'pin-unpin', device: 'cpu', policy: 'lru', form, pinUnpinNs: Math.round(timePerCall(run)) }));
  storage.release();
  return rows;
}

/** Where `row` ran, for the summary's lists. */
function where(row: RunRow): string {
  return `${row.device} ${row.workload} ${row.budget} ${row.policy}`;
}

/** The targets, each with `met` and the figures it was decided on, and the real loop's figures (`summarizeLoop`). */
function summarize(rows: readonly RunRow[], loopRecords: readonly LoopRecord[], pinRows: readonly PinRow[], devices: readonly DeviceName[]): BenchRecord {
  const deep = rows.filter((r) => DEEP_NAMES.has(r.workload));
  const atQuarter = deep.filter((r) => r.budget === 'P/4' && BUILT_IN.includes(r.policy));
  const quarterFailed = atQuarter.filter((r) => !r.fits).map(where);
  const bothDevices = devices.includes('cpu') && devices.includes('webgpu');

  const atEighth = deep.filter((r) => r.budget === 'P/8');
  const byPolicy = BUILT_IN.map((policy) => {
    const mine = atEighth.filter((r) => r.policy === policy);
    const fitted = mine.filter((r) => r.fits);
    return { policy, runs: mine.length, fitted: fitted.length, bytesMoved: fitted.reduce((sum, r) => sum + (r.bytesMoved ?? 0), 0) };
  });
  const best = [...byPolicy].sort((a, b) => b.fitted - a.fitted || a.bytesMoved - b.bytesMoved)[0]!;

  const lruRows = rows.filter((r) => r.policy === 'lru' && r.agreesWithIbm !== undefined);
  const ibmBytes = (r: RunRow): number | null => rows.find((o) => o.policy === 'ibm-reference' && o.device === r.device && o.workload === r.workload && o.budget === r.budget)?.bytesMoved ?? null;
  const disagreeing = lruRows.filter((r) => !r.agreesWithIbm || r.bytesMoved !== ibmBytes(r)).map((r) => ({ run: where(r), lruBytes: r.bytesMoved, ibmBytes: ibmBytes(r) }));

  const pairs = rows
    .filter((r) => r.policy === 'best-fit' && r.fits)
    .map((bestFit) => ({ bestFit, lru: rows.find((o) => o.policy === 'lru' && o.fits && o.device === bestFit.device && o.workload === bestFit.workload && o.budget === bestFit.budget) }))
    .filter((p): p is { bestFit: RunRow; lru: RunRow } => p.lru !== undefined);
  const exceeding = pairs.filter((p) => p.bestFit.bytesMoved! > p.lru.bytesMoved!).map((p) => ({ run: where(p.bestFit), bestFitBytes: p.bestFit.bytesMoved, lruBytes: p.lru.bytesMoved }));
  const total = (list: readonly RunRow[]): number => list.reduce((sum, r) => sum + (r.bytesMoved ?? 0), 0);
  const { targets: loopTargets, ...loop } = summarizeLoop(loopRecords);

  return {
    scenario: 'summary',
    loop,
    targets: {
      fitsAtQuarterEveryBuiltInPolicy: {
        met: bothDevices && atQuarter.length > 0 && quarterFailed.length === 0,
        devices,
        runs: atQuarter.length,
        failed: quarterFailed,
      },
      fitsAtEighthWithBestPolicy: { met: best.runs > 0 && best.fitted === best.runs && bothDevices, best: best.policy, byPolicy },
      pinUnpinAtMostHalfMicrosecond: {
        met: pinRows.length > 0 && pinRows.every((r) => r.pinUnpinNs <= PIN_UNPIN_TARGET_NS),
        targetNs: PIN_UNPIN_TARGET_NS,
        ns: Object.fromEntries(pinRows.map((r) => [r.form, r.pinUnpinNs])),
      },
      lruBytesEqualIbmReference: {
        met: lruRows.length > 0 && disagreeing.length === 0,
        runs: lruRows.length,
        lruBytes: total(lruRows),
        ibmBytes: total(rows.filter((r) => r.policy === 'ibm-reference')),
        disagreeing,
      },
      bestFitBytesAtMostLru: {
        met: pairs.length > 0 && exceeding.length === 0,
        compared: pairs.length,
        bestFitBytes: total(pairs.map((p) => p.bestFit)),
        lruBytes: total(pairs.map((p) => p.lru)),
        exceeding,
      },
      ...loopTargets,
    },
  };
}

async function main(): Promise<void> {
  // `pnpm bench:lms -- --published` hands the script the `--` itself: a leading one separates nothing here.
  const argv = process.argv.slice(2);
  const flags = parseBenchFlags(argv[0] === '--' ? argv.slice(1) : argv, { quick: { type: 'boolean' }, published: { type: 'boolean' } }, USAGE);
  if (flags.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const quick = flags.quick ?? false;
  if (flags.published ?? false) {
    const reporter = new BenchReporter('lms bench: published setups', 0);
    try {
      reporter.emit({ scenario: 'environment', node: process.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, published: true, quick, date: new Date().toISOString() });
      await publishedRows(reporter, { quick });
    } finally {
      reporter.stop();
    }
    return;
  }
  const steps = quick ? QUICK_STEPS : STEPS;
  const dawn = await openDawn();
  const plans: DevicePlan[] = [{ device: 'cpu', gpu: undefined, workloads: [DEEP_MLP, DEEP_TRANSFORMER, DEFAULT_MLP, DEFAULT_TRANSFORMER], budgets: BUDGETS, steps: steps.cpu }];
  if (typeof dawn !== 'string') {
    const workloads = quick ? [DEEP_MLP] : [DEEP_MLP, DEEP_TRANSFORMER];
    plans.push({ device: 'webgpu', gpu: dawn.device, workloads, budgets: quick ? QUICK_BUDGETS : BUDGETS, steps: steps.webgpu });
  }
  const reporter = new BenchReporter('lms bench', plans.reduce((n, plan) => n + runsOf(plan), 0));
  try {
    reporter.emit({
      scenario: 'environment',
      node: process.version,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      adapter: typeof dawn === 'string' ? null : dawn.adapterInfo,
      steps,
      plans: plans.map((plan) => ({ device: plan.device, workloads: plan.workloads.map((w) => w.name), budgets: plan.budgets.map((b) => b.budget) })),
      quick,
      date: new Date().toISOString(),
    });
    if (typeof dawn === 'string') reporter.emit({ device: 'webgpu', skipped: true, reason: dawn });
    const rows: RunRow[] = [];
    const loopRecords: LoopRecord[] = [];
    for (const plan of plans) {
      await warmUp(plan, reporter);
      for (const workload of plan.workloads) {
        const { rows: mine, loop } = await benchWorkload(plan, workload, reporter);
        rows.push(...mine);
        loopRecords.push(...loop);
      }
    }
    reporter.task('pin-unpin');
    const pinRows = await benchPinUnpin();
    for (const row of pinRows) reporter.emit(row);
    reporter.emit(summarize(rows, loopRecords, pinRows, plans.map((plan) => plan.device)));
    await speculationRows(reporter, { quick });
  } finally {
    reporter.stop();
    if (typeof dawn !== 'string') dawn.device.destroy();
  }
}

runBench(main);
