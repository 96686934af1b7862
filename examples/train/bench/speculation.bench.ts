// The simulated-time rows of `pnpm bench:lms` (issue 19): every generated trace (src/traces) under LMS on the `sim`
// device (`runTraceOnSim`), under budgets P/2, P/4 and P/8 of its unconstrained peak of live bytes P
// (`peakLiveBytes`), with each policy (lru, best-fit, speculative), speculation off and on, on each link (pcie4,
// pcie5, c2c); then whether issue 19's targets were met. lms.bench.ts calls `speculationRows`. One JSON line per
// record on stdout:
//
//   sim          {"trace","device":"sim","link","budget","budgetBytes","policy","speculative","iteration","fits",
//                 "slowdown","gapToBound","hiddenOut","hiddenIn","precision","recall","wastedBytes","bytesMoved",
//                 "beladyBytesMoved","timeUs","boundUs","freeUs","stallUs","identical","predicted","fallbacks","error"?}
//                one per (trace, budget, policy, speculation, link, iteration). slowdown = T / T_free and gapToBound =
//                (T − T_bound) / T_free, with T_free the unconstrained run's time for the same iteration and T_bound
//                max(compute, page-out copy time, page-in copy time) (Note [The bound] in src/simRun.ts). hiddenOut
//                and hiddenIn: the share of page-out and page-in copy time that overlapped a kernel. precision =
//                speculative hits / speculative page-outs, recall = hits / (hits + misses), over the iteration (null
//                where nothing was speculated on). wastedBytes: speculative page-out and prefetch bytes never used.
//                bytesMoved: the bytes both copy engines moved in the iteration (page-outs, page-ins, speculative
//                ones included); beladyBytesMoved: what Belady-MIN moves for the same iteration under the same
//                budget (over iterations 0..i minus over 0..i−1). identical: the run's persistent bytes equal the
//                unconstrained run's at the end. predicted and fallbacks: LMS's iterations_predicted and
//                prediction_fallbacks over the iteration; speculativePageOuts, speculativeHits, speculativeMisses the
//                counts behind precision and recall. timeUs, boundUs, computeUs, outUs, inUs, freeUs, stallUs: the
//                iteration's time, its bound, the kernels', page-outs' and page-ins' time, the unconstrained run's
//                time and the compute engine's idle time, in µs; boundBy: the bound's largest term. A run that did
//                not fit has fits false and its error on every row; the iterations it completed keep their figures.
//   sim-summary  {"scenario":"summary","device":"sim","iterations","targetsFrom","targets":{…},"varyingLearned"}
//                each target with "met" (null when the run had no rows for it: --quick), its worst figure, where,
//                and the worst of every other configuration; varyingLearned: the learned configuration on
//                transformer-varying under P/4, iteration by iteration (what happens at each new length). Last.
//
// Choices:
// - ITERATIONS (5) iterations per run; the targets count iterations TARGETS_FROM (3) and later, numbered from 0
//   as the rows number them, so that speculation has learned from at least three.
// - LMS decides the same on every link (Note [One run, several links] in src/ScheduleRecording.ts): one LMS run
//   per (trace, budget, policy, speculation), on pcie4, replayed on pcie5 and c2c. 90 runs of real bytes (up to
//   1.6 GB paged per run on the largest trace): about 3 minutes on two shared cores.
// - The targets are about the learned configuration, policy `speculative` with speculation on: each reports its
//   worst figure there and, for comparison, the worst of every other configuration.
// - `--quick` (under a minute): budget P/4 only, and policies lru (speculation off, IBM's) and speculative (off
//   and on); targets about other budgets then report no figures.
import type { BenchRecord, BenchReporter } from '@stowage/bench-kit';
import type { BuiltInPolicyName } from '@stowage/lms';
import type { LinkName } from '@stowage/lab';
import { beladyMin, LINK_PROFILES } from '@stowage/lab';
import type { ModelTrace, SimIteration, SimRunResult, TraceName } from '@stowage/example-train';
import { peakLiveBytes, runTraceOnSim, toOfflineTrace, TRACES } from '@stowage/example-train';

const ITERATIONS = 5;
const TARGETS_FROM = 3;
const LINKS: readonly LinkName[] = ['pcie4', 'pcie5', 'c2c'];
const TRACE_NAMES: readonly TraceName[] = ['mlp', 'transformer', 'unet', 'transformer-varying', 'optimizer'];
/** The traces whose iterations repeat: the speculation targets are about them. */
const REPEATING: readonly TraceName[] = ['mlp', 'transformer', 'unet', 'optimizer'];
/** The traces that must fit under P/8. */
const FIT_AT_EIGHTH: readonly TraceName[] = ['mlp', 'transformer', 'unet'];

interface Budget {
  readonly budget: string;
  readonly divisor: number;
}
const BUDGETS: readonly Budget[] = [
  { budget: 'P/2', divisor: 2 },
  { budget: 'P/4', divisor: 4 },
  { budget: 'P/8', divisor: 8 },
];

interface Mode {
  readonly policy: BuiltInPolicyName;
  readonly speculative: boolean;
}
const MODES: readonly Mode[] = (['lru', 'best-fit', 'speculative'] as const).flatMap((policy) => [false, true].map((speculative) => ({ policy, speculative })));
const QUICK_MODES: readonly Mode[] = [
  { policy: 'lru', speculative: false },
  { policy: 'speculative', speculative: false },
  { policy: 'speculative', speculative: true },
];

/** One (config, iteration) JSON line. */
type SimRow = {
  readonly trace: TraceName;
  readonly device: 'sim';
  readonly link: LinkName;
  readonly budget: string;
  readonly budgetBytes: number;
  readonly policy: BuiltInPolicyName;
  readonly speculative: boolean;
  readonly iteration: number;
  readonly fits: boolean;
  readonly slowdown: number | null;
  readonly gapToBound: number | null;
  readonly hiddenOut: number | null;
  readonly hiddenIn: number | null;
  readonly precision: number | null;
  readonly recall: number | null;
  readonly wastedBytes: number | null;
  readonly bytesMoved: number | null;
  readonly beladyBytesMoved: number | null;
  readonly timeUs: number | null;
  readonly boundUs: number | null;
  /** Which term of the bound is largest: the kernels, the page-outs or the page-ins. */
  readonly boundBy: 'compute' | 'pageOut' | 'pageIn' | null;
  readonly computeUs: number | null;
  /** The page-outs' and page-ins' copy time (the copy engines' busy time). */
  readonly outUs: number | null;
  readonly inUs: number | null;
  readonly freeUs: number | null;
  readonly stallUs: number | null;
  readonly identical: boolean | null;
  readonly predicted: number | null;
  readonly fallbacks: number | null;
  /** The counts precision and recall come from. */
  readonly speculativePageOuts: number | null;
  readonly speculativeHits: number | null;
  readonly speculativeMisses: number | null;
  readonly error?: string;
};

export interface SpeculationBenchOptions {
  /** Fewer budgets and configurations (under a minute). */
  readonly quick?: boolean;
}

/**
 * Runs the simulated-time part of the LMS bench and emits its rows and its summary through `reporter` (the
 * header of this file says what they hold). Returns the rows.
 */
export async function speculationRows(reporter: BenchReporter, options: SpeculationBenchOptions = {}): Promise<BenchRecord[]> {
  const quick = options.quick ?? false;
  const budgets = quick ? BUDGETS.filter((b) => b.budget === 'P/4') : BUDGETS;
  const modes = quick ? QUICK_MODES : MODES;
  const rows: SimRow[] = [];
  for (const name of TRACE_NAMES) {
    const trace = TRACES[name]();
    reporter.task(`sim: ${name} unconstrained`);
    const peakBytes = peakLiveBytes(trace, ITERATIONS);
    const free = await runTraceOnSim({ trace, iterations: ITERATIONS, link: 'pcie4', policy: 'lru', speculation: false });
    if (!free.fits) throw new Error(`The unconstrained run of ${name} did not fit: ${free.error}`);
    const freeNs = free.iterations.map((it) => it.timeNs);
    for (const { budget, divisor } of budgets) {
      const budgetBytes = Math.floor(peakBytes / divisor);
      const belady = beladyPerIteration(trace, budgetBytes);
      for (const { policy, speculative } of modes) {
        reporter.task(`sim: ${name} under ${budget} with ${policy}, speculation ${speculative ? 'on' : 'off'}`);
        const run = await runTraceOnSim({ trace, iterations: ITERATIONS, budgetBytes, link: 'pcie4', policy, speculation: speculative, replayLinks: LINKS.slice(1) });
        const identical = run.fits ? JSON.stringify(run.checksums) === JSON.stringify(free.checksums) : null;
        const byLink: [LinkName, readonly SimIteration[]][] = [['pcie4', run.iterations], ...run.replays.map((r, j): [LinkName, readonly SimIteration[]] => [LINKS[j + 1]!, r.iterations])];
        for (const [link, iterations] of byLink) {
          for (let i = 0; i < ITERATIONS; i++) {
            const row = rowOf({ trace: name, link, budget, budgetBytes, policy, speculative }, run, iterations[i], i, freeNs[i]!, belady[i] ?? null, identical);
            rows.push(row);
            reporter.emit(row);
          }
        }
      }
    }
  }
  const summary = summarize(rows, quick);
  reporter.emit(summary);
  return [...rows, summary];
}

/** What Belady-MIN moves in each iteration under `budgetBytes`: over iterations 0..i minus over 0..i−1 (null when it does not fit). */
function beladyPerIteration(trace: ModelTrace, budgetBytes: number): (number | null)[] {
  const totals = Array.from({ length: ITERATIONS }, (_, i) => {
    const result = beladyMin(toOfflineTrace(trace, i + 1), budgetBytes);
    return result.fits ? result.bytesMoved : null;
  });
  return totals.map((total, i) => (total === null || (i > 0 && totals[i - 1] === null) ? null : total - (i > 0 ? totals[i - 1]! : 0)));
}

type Config = Pick<SimRow, 'trace' | 'link' | 'budget' | 'budgetBytes' | 'policy' | 'speculative'>;

function rowOf(config: Config, run: SimRunResult, it: SimIteration | undefined, iteration: number, freeNs: number, beladyBytes: number | null, identical: boolean | null): SimRow {
  const head = { trace: config.trace, device: 'sim' as const, link: config.link, budget: config.budget, budgetBytes: config.budgetBytes, policy: config.policy, speculative: config.speculative, iteration, fits: run.fits };
  const error = run.error === undefined ? {} : { error: run.error };
  if (it === undefined) {
    const none = { slowdown: null, gapToBound: null, hiddenOut: null, hiddenIn: null, precision: null, recall: null, wastedBytes: null, bytesMoved: null };
    const times = { timeUs: null, boundUs: null, boundBy: null, computeUs: null, outUs: null, inUs: null, freeUs: round(freeNs / 1e3, 1), stallUs: null };
    const counts = { predicted: null, fallbacks: null, speculativePageOuts: null, speculativeHits: null, speculativeMisses: null };
    return { ...head, ...none, beladyBytesMoved: beladyBytes, ...times, identical, ...counts, ...error };
  }
  const s = it.stats;
  return {
    ...head,
    slowdown: round(it.timeNs / freeNs, 4),
    gapToBound: round((it.timeNs - it.boundNs) / freeNs, 4),
    hiddenOut: it.hiddenOut === null ? null : round(it.hiddenOut, 4),
    hiddenIn: it.hiddenIn === null ? null : round(it.hiddenIn, 4),
    precision: ratio(s.speculative_hits, s.speculative_page_out),
    recall: ratio(s.speculative_hits, s.speculative_hits + s.speculative_misses),
    wastedBytes: s.speculative_wasted_bytes + s.prefetch_wasted_bytes,
    bytesMoved: it.d2hBytes + it.h2dBytes,
    beladyBytesMoved: beladyBytes,
    timeUs: round(it.timeNs / 1e3, 1),
    boundUs: round(it.boundNs / 1e3, 1),
    boundBy: it.boundNs === it.computeBusyNs ? 'compute' : it.boundNs === it.d2hBusyNs ? 'pageOut' : 'pageIn',
    computeUs: round(it.computeBusyNs / 1e3, 1),
    outUs: round(it.d2hBusyNs / 1e3, 1),
    inUs: round(it.h2dBusyNs / 1e3, 1),
    freeUs: round(freeNs / 1e3, 1),
    stallUs: round(it.stallNs / 1e3, 1),
    identical,
    predicted: s.iterations_predicted,
    fallbacks: s.prediction_fallbacks,
    speculativePageOuts: s.speculative_page_out,
    speculativeHits: s.speculative_hits,
    speculativeMisses: s.speculative_misses,
    ...error,
  };
}

function ratio(numerator: number, denominator: number): number | null {
  return denominator === 0 ? null : round(numerator / denominator, 4);
}

function round(value: number, digits: number): number {
  return Number(value.toFixed(digits));
}

/** Where a row ran, for the summary. */
function where(row: SimRow): string {
  return `${row.trace} ${row.budget} ${row.link} ${row.policy} speculation ${row.speculative ? 'on' : 'off'} iteration ${row.iteration}`;
}

function configOf(row: SimRow): string {
  return `${row.policy}/${row.speculative ? 'on' : 'off'}`;
}

const isLearned = (row: SimRow): boolean => row.policy === 'speculative' && row.speculative;

/**
 * The worst value of `figure` over `rows` (the largest when `worstIsLarge`), with where it was, and the mean;
 * nulls are left out. `worst` is null when no row has a figure.
 */
function worstOf(rows: readonly SimRow[], figure: (row: SimRow) => number | null, worstIsLarge: boolean): { worst: number | null; at: string | null; mean: number | null; rows: number } {
  let worst: number | null = null;
  let at: string | null = null;
  let sum = 0;
  let count = 0;
  for (const row of rows) {
    const value = figure(row);
    if (value === null) continue;
    sum += value;
    count++;
    if (worst === null || (worstIsLarge ? value > worst : value < worst)) {
      worst = value;
      at = where(row);
    }
  }
  return { worst, at, mean: count === 0 ? null : round(sum / count, 4), rows: count };
}

/** A threshold target over `rows`: the learned configuration decides `met`; every other configuration's worst is shown beside it. */
function thresholdTarget(rows: readonly SimRow[], figure: (row: SimRow) => number | null, limit: number, worstIsLarge: boolean): BenchRecord {
  const learned = worstOf(rows.filter(isLearned), figure, worstIsLarge);
  const configs = [...new Set(rows.filter((r) => !isLearned(r)).map(configOf))];
  const others = Object.fromEntries(configs.map((c) => [c, worstOf(rows.filter((r) => configOf(r) === c), figure, worstIsLarge).worst]));
  const met = learned.worst === null ? null : worstIsLarge ? learned.worst <= limit : learned.worst >= limit;
  return { met, limit, worst: learned.worst, at: learned.at, mean: learned.mean, rows: learned.rows, others };
}

/**
 * A hidden-share target, with its ceiling beside it: no schedule hides more of the copies than the kernels' time
 * covers, so min(1, compute time / copy time) bounds the share; `ceiling` is that bound where the learned
 * configuration's share was worst.
 */
function hiddenTarget(rows: readonly SimRow[], figure: 'hiddenOut' | 'hiddenIn', limit: number): BenchRecord {
  const target = thresholdTarget(rows, (r) => r[figure], limit, false);
  const worstRow = rows.find((r) => isLearned(r) && where(r) === target.at);
  const copyUs = worstRow === undefined ? null : figure === 'hiddenOut' ? worstRow.outUs : worstRow.inUs;
  const ceiling = worstRow === undefined || copyUs === null || copyUs === 0 ? null : round(Math.min(1, worstRow.computeUs! / copyUs), 4);
  return { ...target, ceiling };
}

/** Whether every run of `traces` under `budget` fit, in the learned configuration and in each other one. */
function fitsTarget(rows: readonly SimRow[], budget: string, traces: readonly TraceName[]): BenchRecord {
  const runs = rows.filter((r) => r.budget === budget && r.link === 'pcie4' && r.iteration === 0 && traces.includes(r.trace));
  const failed = (list: readonly SimRow[]): string[] => list.filter((r) => !r.fits).map((r) => `${r.trace} ${configOf(r)}: ${r.error ?? ''}`);
  const learned = runs.filter(isLearned);
  const byConfig = Object.fromEntries([...new Set(runs.map(configOf))].map((c) => [c, runs.filter((r) => configOf(r) === c && r.fits).map((r) => r.trace)]));
  return { met: learned.length === 0 ? null : learned.length === traces.length && learned.every((r) => r.fits), traces, failed: failed(learned), fittedByConfig: byConfig, otherFailures: failed(runs.filter((r) => !isLearned(r))).length };
}

/**
 * Precision and recall over the steady iterations of each run with speculation on (counts summed, so that a hit in
 * one iteration of a page-out started in the one before counts once): the worst run of the learned configuration
 * decides `met`; `perIteration` is the worst single iteration's figure, for comparison.
 */
function speculationTarget(rows: readonly SimRow[], figure: 'precision' | 'recall', limit: number): BenchRecord {
  const runs = new Map<string, { config: string; at: string; pageOuts: number; hits: number; misses: number }>();
  for (const r of rows) {
    if (!r.speculative || r.speculativeHits === null) continue;
    const key = `${r.trace} ${r.budget} ${configOf(r)}`;
    const run = runs.get(key) ?? { config: configOf(r), at: `${r.trace} ${r.budget} ${r.policy} speculation on`, pageOuts: 0, hits: 0, misses: 0 };
    run.pageOuts += r.speculativePageOuts!;
    run.hits += r.speculativeHits;
    run.misses += r.speculativeMisses!;
    runs.set(key, run);
  }
  const valueOf = (run: { pageOuts: number; hits: number; misses: number }): number | null => (figure === 'precision' ? ratio(run.hits, run.pageOuts) : ratio(run.hits, run.hits + run.misses));
  const worstIn = (config: string): { value: number; at: string } | null => {
    const values = [...runs.values()].filter((run) => run.config === config).map((run) => ({ value: valueOf(run), at: run.at }));
    const known = values.filter((v): v is { value: number; at: string } => v.value !== null).sort((a, b) => a.value - b.value);
    return known[0] ?? null;
  };
  const learned = worstIn('speculative/on');
  const others = Object.fromEntries([...new Set([...runs.values()].map((run) => run.config))].filter((c) => c !== 'speculative/on').map((c) => [c, worstIn(c)?.value ?? null]));
  const perIteration = worstOf(rows.filter(isLearned), (r) => r[figure], false);
  return { met: learned === null ? null : learned.value >= limit, limit, worst: learned?.value ?? null, at: learned?.at ?? null, perIteration: perIteration.worst, others };
}

/** Bytes moved over Belady-MIN's, summed over the steady iterations of each run; the worst run. */
function beladyTarget(rows: readonly SimRow[], traces: readonly TraceName[], limit: number): BenchRecord {
  const steady = rows.filter((r) => r.link === 'pcie4' && r.fits && r.iteration >= TARGETS_FROM && traces.includes(r.trace));
  const runs = new Map<string, { bytes: number; belady: number; config: string; at: string }>();
  for (const r of steady) {
    const key = `${r.trace} ${r.budget} ${configOf(r)}`;
    const run = runs.get(key) ?? { bytes: 0, belady: 0, config: configOf(r), at: `${r.trace} ${r.budget} ${r.policy} speculation ${r.speculative ? 'on' : 'off'}` };
    run.bytes += r.bytesMoved ?? 0;
    run.belady += r.beladyBytesMoved ?? 0;
    runs.set(key, run);
  }
  const ratios = [...runs.values()].map((run) => ({ ...run, ratio: run.belady === 0 ? (run.bytes === 0 ? 1 : Infinity) : run.bytes / run.belady }));
  const worstIn = (config: string): { ratio: number; at: string } | null => {
    const mine = ratios.filter((r) => r.config === config).sort((a, b) => b.ratio - a.ratio)[0];
    return mine === undefined ? null : { ratio: round(mine.ratio, 4), at: mine.at };
  };
  const learned = worstIn('speculative/on');
  const others = Object.fromEntries([...new Set(ratios.map((r) => r.config))].filter((c) => c !== 'speculative/on').map((c) => [c, worstIn(c)?.ratio ?? null]));
  return { met: learned === null ? null : learned.ratio <= limit, limit, traces, worst: learned?.ratio ?? null, at: learned?.at ?? null, others };
}

function summarize(rows: readonly SimRow[], quick: boolean): BenchRecord {
  const steady = rows.filter((r) => r.fits && r.iteration >= TARGETS_FROM);
  const onPcie4 = (budget: string): SimRow[] => steady.filter((r) => r.link === 'pcie4' && r.budget === budget);
  const repeating = steady.filter((r) => REPEATING.includes(r.trace) && r.link === 'pcie4');
  const varying = rows.filter((r) => r.trace === 'transformer-varying' && r.link === 'pcie4' && isLearned(r));
  const broken = rows.filter((r) => r.fits && r.identical === false && r.link === 'pcie4' && r.iteration === 0).map((r) => `${r.trace} ${r.budget} ${configOf(r)}`);
  return {
    scenario: 'summary',
    device: 'sim',
    quick,
    iterations: ITERATIONS,
    targetsFrom: TARGETS_FROM,
    learned: 'policy speculative, speculation on',
    links: Object.fromEntries(LINKS.map((l) => [l, LINK_PROFILES[l]])),
    targets: {
      bitIdentical: { met: broken.length === 0, differing: broken },
      fitsAtQuarterAllTraces: fitsTarget(rows, 'P/4', TRACE_NAMES),
      fitsAtEighthFirstThree: fitsTarget(rows, 'P/8', FIT_AT_EIGHTH),
      gapAtHalfOnPcie4: thresholdTarget(onPcie4('P/2'), (r) => r.gapToBound, 0.03, true),
      gapAtQuarterOnPcie4: thresholdTarget(onPcie4('P/4'), (r) => r.gapToBound, 0.05, true),
      hiddenOut: hiddenTarget(steady, 'hiddenOut', 0.95),
      hiddenIn: hiddenTarget(steady, 'hiddenIn', 0.9),
      precisionOnRepeating: speculationTarget(repeating, 'precision', 0.95),
      recallOnRepeating: speculationTarget(repeating, 'recall', 0.98),
      bytesAtMostBeladyFirstThree: beladyTarget(rows, FIT_AT_EIGHTH, 1.05),
      bytesOnVaryingAtMostBelady: beladyTarget(rows, ['transformer-varying'], 1.25),
    },
    varyingLearned: varying
      .filter((r) => r.budget === 'P/4')
      .map((r) => ({ iteration: r.iteration, fits: r.fits, predicted: r.predicted, fallbacks: r.fallbacks, precision: r.precision, recall: r.recall, bytesMoved: r.bytesMoved, beladyBytesMoved: r.beladyBytesMoved })),
  };
}
