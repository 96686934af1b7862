import type { BenchRecord } from '@stowage/lab/bench-kit';
import type { LmsRunResult, StepStatKey } from '@stowage/example-train';

/** The real training loop as issue 19's bench names it, beside the generated traces. */
export type LoopTrace = 'train-mlp' | 'train-transformer';
export type LoopPolicy = 'lru' | 'best-fit' | 'speculative';

/** The iteration from which the summary aggregates: the loop's first steps are learned, not predicted. */
export const FIRST_MEASURED_ITERATION = 3;

/** Which run of the real loop a record is about. */
export type LoopRun = {
  readonly trace: LoopTrace;
  readonly device: 'cpu' | 'webgpu';
  /** 'P/2', 'P/4', 'P/8'. */
  readonly budget: string;
  readonly policy: LoopPolicy;
  /** Speculative page-out and prefetch on (`lms({ speculation: true })`). */
  readonly speculative: boolean;
};

/**
 * One step of one run of the real loop, in issue 19's form. `link` is null (a real device, not a link profile);
 * `iteration` is the step's index (0: the first, which also makes the model); a run that threw has one record,
 * with iteration null, fits false and its error.
 */
export type LoopRecord = LoopRun & {
  readonly link: null;
  readonly iteration: number | null;
  readonly fits: boolean;
  /** Wall-clock milliseconds of the step (train's, with LMS's `endIteration`). */
  readonly stepMs: number | null;
  /** stepMs over the unconstrained run's median step. */
  readonly slowdown: number | null;
  /** speculative_hits / speculative_page_out in the step; null when nothing was paged out speculatively. */
  readonly precision: number | null;
  /** speculative_hits / (speculative_hits + speculative_misses): the reclaims that found their copy made; null when none copied. */
  readonly recall: number | null;
  /** speculative_wasted_bytes + prefetch_wasted_bytes. */
  readonly wastedBytes: number | null;
  /** page_out_bytes + page_in_bytes (speculative page-outs and prefetches included). */
  readonly bytesMoved: number | null;
  /** transfer_wait_ms: time the program awaited a transfer (pinAsync). */
  readonly waitMs: number | null;
  /** room_wait_ms: the part of waitMs pinAsync waited for page-outs to give device memory back (not for bytes). */
  readonly roomWaitMs: number | null;
  /** transfer_poll_ms: time pinAsync let the event loop turn so that finished page-outs land. */
  readonly pollMs: number | null;
  /** page_in_predicted: pins from zero, while the sequence predicts, that found their storage prefetched or reclaimed. */
  readonly predictedPageIns: number | null;
  /** page_in_ready_before_use: those of them whose bytes were on the device or the host when the pin came. */
  readonly readyBeforeUse: number | null;
  readonly speculativePageOuts: number | null;
  readonly hits: number | null;
  readonly misses: number | null;
  readonly prefetches: number | null;
  readonly prefetchHits: number | null;
  readonly error?: string;
};

type Counters = Readonly<Record<StepStatKey, number>>;

/** The records of one run: one per step, or one for a run that threw. */
export function loopRecordsOf(run: LoopRun, result: LmsRunResult | { readonly error: string }, baselineMs: number | null): LoopRecord[] {
  if ('error' in result) return [{ ...run, link: null, iteration: null, fits: false, stepMs: null, slowdown: null, ...figuresOf(null), error: result.error }];
  return result.stepStats.map((counters, iteration) => {
    const stepMs = result.stepMs[iteration]!;
    const slowdown = baselineMs === null ? null : round(stepMs / baselineMs, 3);
    return { ...run, link: null, iteration, fits: true, stepMs: round(stepMs, 1), slowdown, ...figuresOf(counters) };
  });
}

type Figures = Pick<
  LoopRecord,
  'precision' | 'recall' | 'wastedBytes' | 'bytesMoved' | 'waitMs' | 'roomWaitMs' | 'pollMs' | 'speculativePageOuts' | 'hits' | 'misses' | 'prefetches' | 'prefetchHits' | 'predictedPageIns' | 'readyBeforeUse'
>;

function figuresOf(c: Counters | null): Figures {
  if (c === null) {
    return {
      precision: null,
      recall: null,
      wastedBytes: null,
      bytesMoved: null,
      waitMs: null,
      roomWaitMs: null,
      pollMs: null,
      speculativePageOuts: null,
      hits: null,
      misses: null,
      prefetches: null,
      prefetchHits: null,
      predictedPageIns: null,
      readyBeforeUse: null,
    };
  }
  return {
    precision: ratio(c.speculative_hits, c.speculative_page_out),
    recall: ratio(c.speculative_hits, c.speculative_hits + c.speculative_misses),
    wastedBytes: c.speculative_wasted_bytes + c.prefetch_wasted_bytes,
    bytesMoved: c.page_out_bytes + c.page_in_bytes,
    waitMs: round(c.transfer_wait_ms, 1),
    roomWaitMs: round(c.room_wait_ms, 1),
    pollMs: round(c.transfer_poll_ms, 1),
    speculativePageOuts: c.speculative_page_out,
    hits: c.speculative_hits,
    misses: c.speculative_misses,
    prefetches: c.prefetch,
    prefetchHits: c.prefetch_hits,
    predictedPageIns: c.page_in_predicted,
    readyBeforeUse: c.page_in_ready_before_use,
  };
}

/** A run's figures summed over its steps from FIRST_MEASURED_ITERATION on (precision and recall of the sums). */
type RunAggregate = {
  readonly fits: boolean;
  readonly steps: number;
  readonly stepMs: number | null;
  readonly bytesMoved: number;
  readonly waitMs: number;
  readonly roomWaitMs: number;
  readonly pollMs: number;
  readonly wastedBytes: number;
  readonly speculativePageOuts: number;
  readonly hits: number;
  readonly misses: number;
  readonly precision: number | null;
  readonly recall: number | null;
  readonly prefetches: number;
  readonly prefetchHits: number;
  readonly predictedPageIns: number;
  readonly readyBeforeUse: number;
  /** readyBeforeUse / predictedPageIns; null when nothing predicted was paged in. */
  readonly readyShare: number | null;
};

function aggregate(records: readonly LoopRecord[]): RunAggregate {
  const measured = records.filter((r) => r.fits && r.iteration !== null && r.iteration >= FIRST_MEASURED_ITERATION);
  const sum = (pick: (r: LoopRecord) => number | null): number => measured.reduce((total, r) => total + (pick(r) ?? 0), 0);
  const hits = sum((r) => r.hits);
  const misses = sum((r) => r.misses);
  const speculativePageOuts = sum((r) => r.speculativePageOuts);
  const predictedPageIns = sum((r) => r.predictedPageIns);
  const readyBeforeUse = sum((r) => r.readyBeforeUse);
  return {
    fits: records.every((r) => r.fits),
    steps: measured.length,
    stepMs: measured.length === 0 ? null : round(sum((r) => r.stepMs) / measured.length, 1),
    bytesMoved: sum((r) => r.bytesMoved),
    waitMs: round(sum((r) => r.waitMs), 1),
    roomWaitMs: round(sum((r) => r.roomWaitMs), 1),
    pollMs: round(sum((r) => r.pollMs), 1),
    wastedBytes: sum((r) => r.wastedBytes),
    speculativePageOuts,
    hits,
    misses,
    precision: ratio(hits, speculativePageOuts),
    recall: ratio(hits, hits + misses),
    prefetches: sum((r) => r.prefetches),
    prefetchHits: sum((r) => r.prefetchHits),
    predictedPageIns,
    readyBeforeUse,
    readyShare: ratio(readyBeforeUse, predictedPageIns),
  };
}

/** The summary's `loop` (all but targets) and its targets, from iteration FIRST_MEASURED_ITERATION on. */
export interface LoopSummary {
  readonly fromIteration: number;
  /** Over every run with speculation on, and the same runs with it off. */
  readonly totals: BenchRecord;
  /** Each run with speculation on beside the same run with it off (null where there is none). */
  readonly comparisons: readonly BenchRecord[];
  readonly targets: Readonly<Record<string, BenchRecord>>;
}

const PRECISION_TARGET = 0.95;
const RECALL_TARGET = 0.98;
/** Issue 33: page-ins of predicted storages ready before the pin that needs them, from FIRST_MEASURED_ITERATION on. */
const READY_BEFORE_USE_TARGET = 0.95;

/**
 * The real loop's part of the summary, from iteration FIRST_MEASURED_ITERATION on: totals, each run with
 * speculation on beside the same run with it off, and the targets — every run with speculation on fits; precision ≥ 0.95 and recall
 * ≥ 0.98 (the loop repeats); on WebGPU, speculation waits less for transfers than the same run without it, and
 * at least 95 % of the page-ins of predicted storages are ready before the pin that needs them (issue 33; Note
 * [Ready before use] in @stowage/lms's LmsStats.ts) in every run with speculation on.
 */
export function summarizeLoop(records: readonly LoopRecord[]): LoopSummary {
  const runs = new Map<string, { run: LoopRun; records: LoopRecord[] }>();
  for (const r of records) {
    const key = JSON.stringify([r.device, r.trace, r.budget, r.policy, r.speculative]);
    const entry = runs.get(key) ?? { run: { trace: r.trace, device: r.device, budget: r.budget, policy: r.policy, speculative: r.speculative }, records: [] };
    entry.records.push(r);
    runs.set(key, entry);
  }
  const aggregates = [...runs.values()].map(({ run, records: mine }) => ({ run, figures: aggregate(mine) }));
  const where = (run: LoopRun): string => `${run.device} ${run.trace} ${run.budget} ${run.policy}, speculation ${run.speculative ? 'on' : 'off'}`;
  const on = aggregates.filter((a) => a.run.speculative);
  const comparisons = on.map(({ run, figures }) => {
    const off = aggregates.find((a) => !a.run.speculative && a.run.device === run.device && a.run.trace === run.trace && a.run.budget === run.budget && a.run.policy === run.policy);
    const { device, trace, budget, policy } = run;
    return { device, trace, budget, policy, off: off?.figures ?? null, on: figures };
  });

  const fitting = on.filter((a) => a.figures.fits && a.figures.steps > 0);
  const missing = (pick: (f: RunAggregate) => number | null, target: number) =>
    fitting.filter((a) => (pick(a.figures) ?? 0) < target).map((a) => ({ run: where(a.run), value: pick(a.figures) }));
  const lowest = (pick: (f: RunAggregate) => number | null): number | null => {
    const values = fitting.map((a) => pick(a.figures)).filter((v): v is number => v !== null);
    return values.length === 0 ? null : Math.min(...values);
  };
  const precisionMissing = missing((f) => f.precision, PRECISION_TARGET);
  const recallMissing = missing((f) => f.recall, RECALL_TARGET);
  const webGpu = comparisons.filter((c) => c.device === 'webgpu' && c.off !== null && c.off.fits && c.on.fits);
  const notCut = webGpu.filter((c) => c.on.waitMs >= c.off!.waitMs).map((c) => ({ run: `${c.trace} ${c.budget} ${c.policy}`, offMs: c.off!.waitMs, onMs: c.on.waitMs }));
  const total = (list: readonly { figures: RunAggregate }[], pick: (f: RunAggregate) => number): number => round(list.reduce((sum, a) => sum + pick(a.figures), 0), 1);
  const webGpuOn = fitting.filter((a) => a.run.device === 'webgpu');
  const predictedPageIns = total(webGpuOn, (f) => f.predictedPageIns);
  const readyBeforeUse = total(webGpuOn, (f) => f.readyBeforeUse);
  const readyShare = ratio(readyBeforeUse, predictedPageIns);
  const readyMissing = webGpuOn.filter((a) => a.figures.readyShare !== null && a.figures.readyShare < READY_BEFORE_USE_TARGET).map((a) => ({ run: where(a.run), value: a.figures.readyShare }));
  const sumOf = (pick: (f: RunAggregate) => number, on: boolean): number => round(webGpu.reduce((sum, c) => sum + pick(on ? c.on : c.off!), 0), 1);

  const paired = aggregates.filter((a) => !a.run.speculative && on.some((o) => o.run.device === a.run.device && o.run.trace === a.run.trace && o.run.budget === a.run.budget && o.run.policy === a.run.policy));
  const totals = {
    offBytesMoved: total(paired, (f) => f.bytesMoved),
    onBytesMoved: total(on, (f) => f.bytesMoved),
    onWastedBytes: total(on, (f) => f.wastedBytes),
    offWaitMs: total(paired, (f) => f.waitMs),
    onWaitMs: total(on, (f) => f.waitMs),
    hits: total(on, (f) => f.hits),
    misses: total(on, (f) => f.misses),
    prefetches: total(on, (f) => f.prefetches),
    prefetchHits: total(on, (f) => f.prefetchHits),
  };

  return {
    fromIteration: FIRST_MEASURED_ITERATION,
    totals,
    comparisons,
    targets: {
      loopFitsWithSpeculation: { met: on.length > 0 && on.every((a) => a.figures.fits), runs: on.length, failed: on.filter((a) => !a.figures.fits).map((a) => where(a.run)) },
      loopPrecisionAtLeast95: { met: fitting.length > 0 && precisionMissing.length === 0, target: PRECISION_TARGET, runs: fitting.length, lowest: lowest((f) => f.precision), missing: precisionMissing },
      loopRecallAtLeast98: { met: fitting.length > 0 && recallMissing.length === 0, target: RECALL_TARGET, runs: fitting.length, lowest: lowest((f) => f.recall), missing: recallMissing },
      webGpuWaitCutBySpeculation: {
        met: webGpu.length > 0 && notCut.length === 0,
        compared: webGpu.length,
        offMs: sumOf((f) => f.waitMs, false),
        onMs: sumOf((f) => f.waitMs, true),
        // Of those, the waits for page-outs to give device memory back (the rest waited for a page-in's bytes), and
        // the event-loop turns that let finished copies land.
        offRoomWaitMs: sumOf((f) => f.roomWaitMs, false),
        onRoomWaitMs: sumOf((f) => f.roomWaitMs, true),
        offPollMs: sumOf((f) => f.pollMs, false),
        onPollMs: sumOf((f) => f.pollMs, true),
        notCut,
      },
      webGpuReadyBeforeUseAtLeast95: {
        met: webGpuOn.length > 0 && predictedPageIns > 0 && readyMissing.length === 0,
        target: READY_BEFORE_USE_TARGET,
        runs: webGpuOn.length,
        share: readyShare,
        readyBeforeUse,
        predictedPageIns,
        lowest: webGpuOn.reduce<number | null>((low, a) => (a.figures.readyShare === null ? low : Math.min(low ?? 1, a.figures.readyShare)), null),
        missing: readyMissing,
      },
    },
  };
}

function ratio(numerator: number, denominator: number): number | null {
  return denominator === 0 ? null : round(numerator / denominator, 4);
}

function round(value: number, digits: number): number {
  return Number(value.toFixed(digits));
}
