// The WebGPU segment-sizing sweep (STYLE.md §11), behind Note [WebGPU segment sizing] in src/webgpu.ts: without a
// device, replay every PyTorch trace, scaled to several peaks (a trace whose own peak is lower once, unscaled),
// through the caching engine under the WebGPU allocator's defaults with each candidate sizing rule, and count
// createBuffer calls (segments made) and peak reserved bytes; count TensorFlow.js's buffer manager's createBuffer
// calls on the same plan with a model of its free lists (FreeListModel); two passes each, like the bench's cold and
// warm ones. No timing: the placement decisions alone, so it runs in seconds.
//
// Candidates: the former rule, a fixed minimum segment (`fixed-<M>MiB`: first segment = minimum = M MiB), the
// growing rule (`grow-<first>-<growth>`: a first segment of <first>, each new one <growth> of what is reserved,
// up to the 48 MiB minimum, then as the fixed rule), the default marked, and the default with other minima
// (`…-min<M>MiB`: whether smaller segments at scale would create fewer bytes than tfjs, for the cold pass).
//
//   cell lines     {"scenario":"cell","set","trace","peakMiB","tfjsCreateBufferCalls","candidate","createBufferCalls",
//                   "createBufferRatio","reservedOverAllocated","createdBytesRatio"}
//   summary lines  {"scenario":"summary","set","candidate","cells","reservedTargetMet","defaultTracesReservedMet",
//                   "createBufferTargetMet","createdBytesAtMostTfjs","geomeanReservedOverAllocated",
//                   "geomeanCreateBufferRatio","geomeanCreatedBytesRatio"} — one per candidate and set.
//
// Sets: `large`, the traces scaled to 300–512 MiB (the WebGPU bench's 512 MiB and four below), and `small`, scaled
// to 1.5, 5 and 12 MiB (programs the size of the tfjs bench's models and a little larger). The targets are the WebGPU
// issue's: peak reserved at most 1.15× peak allocated (`reservedTargetMet`; `defaultTracesReservedMet` counts the
// six traces `pnpm bench:webgpu` replays, at its 512 MiB), createBuffer calls at most 2 % of tfjs's (dropped as a
// target, still shown). createdBytesRatio (bytes of buffers created against tfjs's) stands in for the cold pass:
// on software drivers createBuffer's cost is per byte, so the cold pass is at least as fast as tfjs's roughly when
// it creates no more bytes. The large set's cells at 512 MiB match `pnpm bench:webgpu` exactly (tfjs makes no
// buffer in its second pass).
import 'reflect-metadata'; // an application entry point: first, before tsyringe loads (STYLE.md §5)
import { CachingAllocator } from '@stowage/core';
import type { DataPtr } from '@stowage/core';
import { findTraceRoot, listTraces, readTraceFile } from '@stowage/lab/replay';
import type { WebGpuSegmentSizing } from '@stowage/allocator-webgpu';
import { webGpuEngineDefaults } from '@stowage/allocator-webgpu';
import { BenchReporter, BenchUsageError, runBench } from '@stowage/lab/bench-kit';
import { EpochBackend } from './EpochBackend.js';
import { FreeListModel } from './FreeListModel.js';
import type { ReplayPlan } from './ReplayPlan.js';
import { ALLOC, compileReplayPlan } from './ReplayPlan.js';
import { DEFAULT_TRACES } from './selectTraces.js';

const KiB = 2 ** 10;
const MiB = 2 ** 20;
/** Peaks the traces are scaled to (at most; a smaller trace keeps its own), per set. */
const SETS = [
  { set: 'large', peaksMiB: [300, 360, 420, 480, 512] },
  { set: 'small', peaksMiB: [1.5, 5, 12] },
] as const;

interface Candidate {
  readonly name: string;
  readonly sizing: WebGpuSegmentSizing;
  readonly isDefault?: boolean;
}

const fixed = (minimumMiB: number): Candidate => ({
  name: `fixed-${minimumMiB}MiB`,
  sizing: { firstSegmentBytes: minimumMiB * MiB, firstUniformSegmentBytes: minimumMiB * MiB, minimumSegmentBytes: minimumMiB * MiB },
});
const grow = (firstKiB: number, growth: number, doublingBelowMiB = 0, isDefault = false): Candidate => ({
  name: `grow-${firstKiB}KiB-${doublingBelowMiB > 0 ? `x2<${doublingBelowMiB}MiB-` : ''}${growth}`,
  sizing: { firstSegmentBytes: firstKiB * KiB, growth, doublingBelowBytes: doublingBelowMiB * MiB },
  ...(isDefault ? { isDefault } : {}),
});
const growMin = (minimumMiB: number): Candidate => ({
  name: `grow-416KiB-x2<4MiB-0.5-min${minimumMiB}MiB`,
  sizing: { firstSegmentBytes: 416 * KiB, growth: 0.5, doublingBelowBytes: 4 * MiB, minimumSegmentBytes: minimumMiB * MiB },
});
const CANDIDATES: readonly Candidate[] = [
  ...[8, 12, 16, 24, 32].map(growMin),
  ...[16, 24, 32, 40, 48, 56, 64].map(fixed),
  ...[128, 416, 1024].flatMap((firstKiB) => [0.125, 0.25, 0.5, 1].map((growth) => grow(firstKiB, growth))),
  ...[256, 416, 512].flatMap((firstKiB) => [2, 4, 8].flatMap((doublingBelowMiB) => [0.25, 0.5].map((growth) => grow(firstKiB, growth, doublingBelowMiB, firstKiB === 416 && doublingBelowMiB === 4 && growth === 0.5)))),
];
/** Dawn's default maxBufferSize. */
const MAX_BUFFER_SIZE = 256 * MiB;
/** Passes over each plan: the WebGPU bench's cold and warm ones. */
const PASSES = 2;
const CREATE_BUFFER_TARGET = 0.02;
const RESERVED_TARGET = 1.15;

interface Cell {
  readonly trace: string;
  /** The trace's cell at the largest peak of its set: the one `pnpm bench:webgpu` replays (large set). */
  readonly largest: boolean;
  readonly createBufferRatio: number;
  readonly reservedOverAllocated: number;
  /** Bytes of buffers created, against tfjs's: on software drivers the cold pass's time is mostly this. */
  readonly createdBytesRatio: number;
}

async function main(): Promise<void> {
  const root = findTraceRoot();
  if (root === undefined) throw new BenchUsageError('No trace directory found (shared/traces above the working directory, or $STOWAGE_TRACES).');
  const traces = listTraces(root).filter((t) => t.kind === 'pytorch');
  const reporter = new BenchReporter('webgpu segment sizing', traces.length * SETS.reduce((n, s) => n + s.peaksMiB.length, 0));
  try {
    const events = new Map(await Promise.all(traces.map(async (t) => [t.name, await readTraceFile(t)] as const)));
    for (const { set, peaksMiB } of SETS) {
      const cells = new Map<string, Cell[]>(CANDIDATES.map((c) => [c.name, []]));
      for (const trace of traces) {
        let previousPeak = -1;
        for (const [p, peakMiB] of peaksMiB.entries()) {
          reporter.task(`${trace.name} at ${peakMiB} MiB`);
          const plan = compileReplayPlan(events.get(trace.name)!, peakMiB * MiB, 1);
          if (plan.peakLiveBytes === previousPeak) {
            for (const list of cells.values()) if (list.at(-1)?.trace === trace.name) list[list.length - 1] = { ...list.at(-1)!, largest: true };
            reporter.step(); // a trace whose own peak is below this one replays unscaled: counted once
            continue;
          }
          previousPeak = plan.peakLiveBytes;
          const tfjs = FreeListModel.replay(plan);
          for (const candidate of CANDIDATES) {
            const { createBufferCalls, createdBytes, peakReservedBytes } = replayOnEngine(plan, candidate.sizing);
            const cell = {
              trace: trace.name,
              largest: p === peaksMiB.length - 1,
              createBufferRatio: createBufferCalls / tfjs.creates,
              reservedOverAllocated: peakReservedBytes / plan.peakLiveBytes,
              createdBytesRatio: createdBytes / tfjs.createdBytes,
            };
            cells.get(candidate.name)!.push(cell);
            reporter.emit({
              scenario: 'cell',
              set,
              trace: trace.name,
              peakMiB: round(plan.peakLiveBytes / MiB),
              tfjsCreateBufferCalls: tfjs.creates,
              candidate: candidate.name,
              createBufferCalls,
              createBufferRatio: round(cell.createBufferRatio),
              reservedOverAllocated: round(cell.reservedOverAllocated),
              createdBytesRatio: round(cell.createdBytesRatio),
            });
          }
          reporter.step();
        }
      }
      for (const candidate of CANDIDATES) summarize(reporter, set, candidate, cells.get(candidate.name)!);
    }
  } finally {
    reporter.stop();
  }
}

function summarize(reporter: BenchReporter, set: string, candidate: Candidate, list: readonly Cell[]): void {
  const reservedMet = (c: Cell): boolean => c.reservedOverAllocated <= RESERVED_TARGET;
  const geomean = (f: (c: Cell) => number): number => round(Math.exp(list.reduce((s, c) => s + Math.log(f(c)), 0) / list.length));
  reporter.emit({
    scenario: 'summary',
    set,
    candidate: candidate.name,
    ...(candidate.isDefault === true ? { default: true } : {}),
    cells: list.length,
    reservedTargetMet: list.filter(reservedMet).length,
    defaultTracesReservedMet: list.filter((c) => c.largest && DEFAULT_TRACES.includes(c.trace) && reservedMet(c)).length,
    createBufferTargetMet: list.filter((c) => c.createBufferRatio <= CREATE_BUFFER_TARGET).length,
    createdBytesAtMostTfjs: list.filter((c) => c.createdBytesRatio <= 1).length,
    geomeanReservedOverAllocated: geomean((c) => c.reservedOverAllocated),
    geomeanCreateBufferRatio: geomean((c) => c.createBufferRatio),
    geomeanCreatedBytesRatio: geomean((c) => c.createdBytesRatio),
  });
}

/**
 * Replays `plan` through the engine under the WebGPU defaults with `sizing` twice in a row, as `pnpm bench:webgpu`
 * does (its cold and warm passes: the second starts from the first's cache and may place blocks differently),
 * submitting after every free and freeing what is still live after each pass.
 */
function replayOnEngine(plan: ReplayPlan, sizing: WebGpuSegmentSizing): { createBufferCalls: number; createdBytes: number; peakReservedBytes: number } {
  const backend = new EpochBackend();
  const engine = new CachingAllocator(backend, webGpuEngineDefaults({ maxBufferSize: MAX_BUFFER_SIZE, ...sizing }));
  try {
    const live: (DataPtr | undefined)[] = new Array<DataPtr | undefined>(plan.slots);
    for (let pass = 0; pass < PASSES; pass++) {
      for (let i = 0; i < plan.length; i++) {
        const slot = plan.slot[i]!;
        if (plan.kind[i] === ALLOC) live[slot] = engine.allocate(plan.size[i]!);
        else {
          engine.free(live[slot]!);
          live[slot] = undefined;
          backend.submit();
        }
      }
      for (let slot = 0; slot < live.length; slot++) {
        if (live[slot] !== undefined) engine.free(live[slot]!);
        live[slot] = undefined;
      }
      backend.submit();
    }
    return { createBufferCalls: backend.segmentsMade, createdBytes: backend.bytesMade, peakReservedBytes: engine.memoryStats()['reserved_bytes.all.peak'] };
  } finally {
    engine.dispose();
  }
}

function round(x: number): number {
  return Math.round(x * 10_000) / 10_000;
}

runBench(main);
