// The engine benchmark (STYLE.md §11): every allocator from benchAllocators() on every shared trace, then
// synthetic scenarios. One JSON line per result on stdout; see BENCH_USAGE for the flags.
//
//   trace lines      {"allocator","trace","ops","opsPerSec","peakAllocated","peakReserved","backendMallocs","ratio",
//                     "opsPerSecVsNoCache","pytorchRatio"?}   ratio = peakReserved / peakAllocated
//   scaling          {"allocator","scenario":"scaling","liveBlocks","nsPerOp"} and one "scaling-summary" per allocator
//                    (random replacement over all live blocks), then the same as "scaling-churn" (replacing only
//                    recent blocks while the others stay live: the allocator's own cost). Summaries give
//                    ratioMaxOverMin and, when no-cache ran, ratioOverNoCacheRatio (growth beyond the baseline's,
//                    whose own growth is the memory hierarchy's: it only bumps an address and keeps a Set of live blocks)
//   pairs            {"allocator","scenario":"pairs","pairsPerSec"} (each allocator in a worker thread of its own)
//   static-shape     {"allocator","scenario":"static-shape","iterations","backendMallocsFirst","backendMallocsAfterFirst",
//                    "backendMallocsPerIteration"}, then "static-shape-all": the same on the first allocations of every
//                    PyTorch trace {"sequences","withMallocsAfterFirst","backendMallocsAfterFirst","lastIterationWithMallocs"}
//   ratio-summary    {"allocator","scenario":"ratio-summary","traces","failedTraces","geomeanAll","listedTraces",
//                    "geomeanListed"?,"pytorchGeomeanListed"?,"atOrBelowPytorch"?}   peakReserved/peakAllocated over
//                    the traces replayed to the end (single-stream replays, as the trace lines)
//   environment      {"scenario":"environment","node","cpu","cores","date"}   (last)
import 'reflect-metadata'; // an application entry point: first, before tsyringe loads (STYLE.md §5)
import os from 'node:os';
import type { TraceEvent, TraceFile } from '@stowage/lab/replay';
import { findTraceRoot, listTraces, readTraceFile, traceSummary } from '@stowage/lab/replay';
import type { BenchAllocator } from './benchAllocators.js';
import { benchAllocators } from './benchAllocators.js';
import { BenchReporter, runBench, selectByName } from '@stowage/lab/bench-kit';
import { checkExactSizePool } from './checkExactSizePool.js';
import { runPairsInWorker } from './pairsScenario.js';
import { BENCH_USAGE, parseBenchArgs } from './parseBenchArgs.js';
import { readPytorchRatios } from './readPytorchRatios.js';
import { runScalingScenario } from './scalingScenario.js';
import { firstAllocations, runStaticShapeScenario, syntheticAllocations } from './staticShapeScenario.js';
import { runTraceScenario } from './traceScenario.js';

const BASELINE = 'no-cache';
const SCALING_LIVE_BLOCKS = [100, 1000, 10_000, 100_000];
const SCALING_PAIRS = 200_000;
const STATIC_SHAPE_ALLOCS = 2000;
const STATIC_SHAPE_ITERATIONS = 10;

async function main(): Promise<void> {
  const args = parseBenchArgs(process.argv.slice(2));
  if (args.help) {
    process.stdout.write(`${BENCH_USAGE}\n`);
    return;
  }
  checkExactSizePool();
  const all = benchAllocators();
  const selected = selectByName(all, args.allocators);
  const baseline = all.find((a) => a.name === BASELINE);

  const root = findTraceRoot();
  if (root === undefined) process.stderr.write('No trace directory found (shared/traces or $STOWAGE_TRACES): skipping the trace replays.\n');
  const traces = root ? listTraces(root).filter((t) => args.trace === undefined || t.name.includes(args.trace)) : [];
  const pytorchRatios = root ? readPytorchRatios(root) : new Map<string, number>();
  // The baseline runs on every trace, unseen when it was filtered out, so that opsPerSecVsNoCache is always there.
  const onTraces = baseline && !selected.includes(baseline) ? [baseline, ...selected] : selected;

  const steps = traces.length * onTraces.length + (args.quick ? 0 : selected.length * (2 * SCALING_LIVE_BLOCKS.length + 3));
  const reporter = new BenchReporter('engine bench', steps);
  try {
    const ratios: TraceRatio[] = [];
    for (const trace of traces) ratios.push(...replayOneTrace(trace, await readTraceFile(trace), onTraces, selected, pytorchRatios, reporter));
    for (const allocator of selected) {
      const mine = ratios.filter((r) => r.allocator === allocator.name);
      if (mine.length > 0) reporter.emit({ allocator: allocator.name, scenario: 'ratio-summary', ...summarizeRatios(mine) });
    }
    if (!args.quick) {
      runScaling(selected, reporter);
      for (const allocator of selected) {
        reporter.task(`pairs: ${allocator.name}`);
        reporter.emit({ allocator: allocator.name, scenario: 'pairs', pairsPerSec: Math.round(await runPairsInWorker(allocator.name)) });
        reporter.step();
      }
      const source = traces.find((t) => t.kind === 'pytorch') ?? traces[0];
      const sequence = source ? firstAllocations(await readTraceFile(source), STATIC_SHAPE_ALLOCS) : syntheticAllocations(STATIC_SHAPE_ALLOCS);
      for (const allocator of selected) {
        reporter.task(`static-shape: ${allocator.name}`);
        const run = runStaticShapeScenario(allocator, sequence, STATIC_SHAPE_ITERATIONS);
        reporter.emit({
          allocator: allocator.name,
          scenario: 'static-shape',
          trace: source?.name ?? 'synthetic',
          iterations: STATIC_SHAPE_ITERATIONS,
          ...run,
        });
        reporter.step();
      }
      const sequences: TraceEvent[][] = [];
      for (const trace of traces.filter((t) => t.kind === 'pytorch')) sequences.push(firstAllocations(await readTraceFile(trace), STATIC_SHAPE_ALLOCS));
      for (const allocator of selected) {
        if (sequences.length === 0) break;
        reporter.task(`static-shape on every trace: ${allocator.name}`);
        reporter.emit({ allocator: allocator.name, scenario: 'static-shape-all', iterations: STATIC_SHAPE_ITERATIONS, ...summarizeStaticShape(allocator, sequences) });
        reporter.step();
      }
    }
    reporter.emit({ scenario: 'environment', node: process.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, date: new Date().toISOString() });
  } finally {
    reporter.stop();
  }
}

function replayOneTrace(
  trace: TraceFile,
  events: readonly TraceEvent[],
  onTraces: readonly BenchAllocator[],
  selected: readonly BenchAllocator[],
  pytorchRatios: ReadonlyMap<string, number>,
  reporter: BenchReporter,
): TraceRatio[] {
  const ratios: TraceRatio[] = [];
  let baselineOpsPerSec: number | undefined;
  const capacityBytes = traceSummary(events).capacityAtOomBytes;
  for (const allocator of onTraces) {
    reporter.task(`${trace.name}: ${allocator.name}`);
    const run = runTraceScenario(allocator, events, capacityBytes);
    reporter.step();
    if (allocator.name === BASELINE) baselineOpsPerSec = run.opsPerSec;
    if (!selected.includes(allocator)) continue;
    const pytorchRatio = pytorchRatios.get(trace.name);
    reporter.emit({
      allocator: allocator.name,
      trace: trace.name,
      ops: run.ops,
      opsPerSec: Math.round(run.opsPerSec),
      peakAllocated: run.peakAllocated,
      peakReserved: run.peakReserved,
      backendMallocs: run.backendMallocs,
      ratio: run.peakAllocated > 0 ? round(run.peakReserved / run.peakAllocated, 4) : null,
      opsPerSecVsNoCache: baselineOpsPerSec ? round(run.opsPerSec / baselineOpsPerSec, 3) : null,
      ...(pytorchRatio === undefined ? {} : { pytorchRatio }),
      ...(capacityBytes === undefined ? {} : { capacityBytes }),
      ...(run.failedAt ? { failedAt: run.failedAt.op, error: run.failedAt.error.message } : {}),
    });
    if (run.peakAllocated > 0) ratios.push({ allocator: allocator.name, ratio: run.peakReserved / run.peakAllocated, pytorchRatio, failed: run.failedAt !== undefined });
  }
  return ratios;
}

/** One allocator's peakReserved/peakAllocated on one trace, and PyTorch's own where the traces' README lists it. */
interface TraceRatio {
  readonly allocator: string;
  readonly ratio: number;
  readonly pytorchRatio: number | undefined;
  /** The replay ran out of memory (an OOM trace at its recorded capacity): left out of the means. */
  readonly failed: boolean;
}

/**
 * The R/A targets from the trace lines: over the traces whose README lists PyTorch's figures, the geometric
 * mean (target ≤ 1.05) and how many are at or below PyTorch's (target: all); and the geometric mean over every
 * trace replayed. Stream-flattened replays (replayTrace's default) count as they are printed.
 */
function summarizeRatios(all: readonly TraceRatio[]): Record<string, number> {
  const geomean = (values: readonly number[]): number => round(Math.exp(values.reduce((sum, v) => sum + Math.log(v), 0) / values.length), 4);
  const ratios = all.filter((r) => !r.failed);
  const listed = ratios.filter((r) => r.pytorchRatio !== undefined);
  return {
    traces: ratios.length,
    failedTraces: all.length - ratios.length,
    geomeanAll: geomean(ratios.map((r) => r.ratio)),
    listedTraces: listed.length,
    ...(listed.length === 0
      ? {}
      : {
          geomeanListed: geomean(listed.map((r) => r.ratio)),
          pytorchGeomeanListed: geomean(listed.map((r) => r.pytorchRatio!)),
          atOrBelowPytorch: listed.filter((r) => r.ratio <= r.pytorchRatio!).length,
        }),
  };
}

function runScaling(selected: readonly BenchAllocator[], reporter: BenchReporter): void {
  for (const mode of ['random', 'churn'] as const) {
    const scenario = mode === 'random' ? 'scaling' : 'scaling-churn';
    let baselineRatio: number | undefined; // no-cache runs first: its growth is the machine's, not an allocator's
    for (const allocator of selected) {
      const nsPerOp: number[] = [];
      for (const liveBlocks of SCALING_LIVE_BLOCKS) {
        reporter.task(`${scenario} ${liveBlocks}: ${allocator.name}`);
        const ns = runScalingScenario(allocator, liveBlocks, SCALING_PAIRS, mode);
        nsPerOp.push(ns);
        reporter.emit({ allocator: allocator.name, scenario, liveBlocks, nsPerOp: round(ns, 1) });
        reporter.step();
      }
      const ratio = Math.max(...nsPerOp) / Math.min(...nsPerOp);
      if (allocator.name === BASELINE) baselineRatio = ratio;
      reporter.emit({
        allocator: allocator.name,
        scenario: `${scenario}-summary`,
        ratioMaxOverMin: round(ratio, 3),
        ...(baselineRatio === undefined ? {} : { ratioOverNoCacheRatio: round(ratio / baselineRatio, 3) }),
      });
    }
  }
}

/**
 * The static-shape scenario on the first allocations of every PyTorch trace: on how many sequences the allocator
 * still calls the backend after the first iteration, how often in all, and the last iteration that did.
 */
function summarizeStaticShape(
  allocator: BenchAllocator,
  sequences: readonly TraceEvent[][],
): { sequences: number; withMallocsAfterFirst: number; backendMallocsAfterFirst: number; lastIterationWithMallocs: number } {
  let withMallocsAfterFirst = 0;
  let backendMallocsAfterFirst = 0;
  let lastIterationWithMallocs = 1;
  for (const sequence of sequences) {
    const run = runStaticShapeScenario(allocator, sequence, STATIC_SHAPE_ITERATIONS);
    if (run.backendMallocsAfterFirst > 0) withMallocsAfterFirst++;
    backendMallocsAfterFirst += run.backendMallocsAfterFirst;
    run.backendMallocsPerIteration.forEach((n, i) => {
      if (n > 0) lastIterationWithMallocs = Math.max(lastIterationWithMallocs, i + 1);
    });
  }
  return { sequences: sequences.length, withMallocsAfterFirst, backendMallocsAfterFirst, lastIterationWithMallocs };
}

function round(value: number, digits: number): number {
  return Number(value.toFixed(digits));
}

runBench(main);
