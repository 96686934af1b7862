// The WebGPU segment-sizing sweep (STYLE.md §11), behind Note [WebGPU segment sizing] in src/webgpu.ts: without a
// device, replay every PyTorch trace, scaled to several peaks (a trace whose own peak is lower once, unscaled), through the caching engine under the WebGPU
// allocator's defaults with each candidate minimum segment size, and count createBuffer calls (segments made)
// and peak reserved bytes; count TensorFlow.js's buffer manager's createBuffer calls on the same plan with a
// model of its free lists (FreeListModel); two passes each, like the bench's cold and warm ones. No timing: the placement decisions alone, so it runs in seconds.
//
//   cell lines     {"scenario":"cell","trace","peakMiB","tfjsCreateBufferCalls","minimumMiB","createBufferCalls",
//                   "createBufferRatio","reservedOverAllocated","createdBytesRatio"}
//   summary lines  {"scenario":"summary","minimumMiB","cells","createBufferTargetMet","reservedTargetMet",
//                   "bothMet","createdBytesAtMostTfjs","allThreeMet","geomeanReservedOverAllocated"} — one per
//                   minimum, the default marked. createdBytesRatio (bytes of buffers created against tfjs's) stands
//                   in for the cold-pass target: on software drivers createBuffer's cost is per byte, so the cold
//                   pass is at least as fast as tfjs's roughly when it creates no more bytes.
//
// The targets are the WebGPU issue's: createBuffer calls at most 2 % of tfjs's, peak reserved at most 1.15× peak
// allocated. `pnpm bench:webgpu` measures the same two figures on a real device for the six default traces at a
// 512 MiB peak; the sweep's cells at 512 MiB match them exactly (tfjs makes no buffer in its second pass).
import 'reflect-metadata'; // an application entry point: first, before tsyringe loads (STYLE.md §5)
import { CachingAllocator } from '@stowage/core';
import type { DataPtr } from '@stowage/core';
import { findTraceRoot, listTraces, readTraceFile } from '@stowage/core/replay';
import { DEFAULT_MIN_SEGMENT_BYTES, webGpuEngineDefaults } from '@stowage/allocator-webgpu';
import { BenchReporter, BenchUsageError, runBench } from '@stowage/bench-kit';
import { EpochBackend } from './EpochBackend.js';
import { FreeListModel } from './FreeListModel.js';
import type { ReplayPlan } from './ReplayPlan.js';
import { ALLOC, compileReplayPlan } from './ReplayPlan.js';

const MiB = 2 ** 20;
/** Peaks the traces are scaled to (at most; a smaller trace keeps its own): the bench's 512 MiB and four below. */
const PEAKS_MIB = [300, 360, 420, 480, 512] as const;
const MINIMA_MIB = [32, 40, 48, 56, 64, 80] as const;
/** Dawn's default maxBufferSize. */
const MAX_BUFFER_SIZE = 256 * MiB;
/** Passes over each plan: the WebGPU bench's cold and warm ones. */
const PASSES = 2;
const CREATE_BUFFER_TARGET = 0.02;
const RESERVED_TARGET = 1.15;

interface Cell {
  readonly createBufferRatio: number;
  readonly reservedOverAllocated: number;
  /** Bytes of buffers created, against tfjs's: on software drivers the cold pass's time is mostly this. */
  readonly createdBytesRatio: number;
}

async function main(): Promise<void> {
  const root = findTraceRoot();
  if (root === undefined) throw new BenchUsageError('No trace directory found (shared/traces above the working directory, or $STOWAGE_TRACES).');
  const traces = listTraces(root).filter((t) => t.kind === 'pytorch');
  const reporter = new BenchReporter('webgpu segment sizing', traces.length * PEAKS_MIB.length);
  const cells = new Map<number, Cell[]>(MINIMA_MIB.map((m) => [m, []]));
  try {
    for (const trace of traces) {
      const events = await readTraceFile(trace);
      let previousPeak = -1;
      for (const peakMiB of PEAKS_MIB) {
        reporter.task(`${trace.name} at ${peakMiB} MiB`);
        const plan = compileReplayPlan(events, peakMiB * MiB, 1);
        if (plan.peakLiveBytes === previousPeak) {
          reporter.step(); // a trace whose own peak is below this one replays unscaled: counted once
          continue;
        }
        previousPeak = plan.peakLiveBytes;
        const tfjs = FreeListModel.replay(plan);
        const tfjsCreateBufferCalls = tfjs.creates;
        for (const minimumMiB of MINIMA_MIB) {
          const { createBufferCalls, createdBytes, peakReservedBytes } = replayOnEngine(plan, minimumMiB * MiB);
          const cell = {
            createBufferRatio: createBufferCalls / tfjsCreateBufferCalls,
            reservedOverAllocated: peakReservedBytes / plan.peakLiveBytes,
            createdBytesRatio: createdBytes / tfjs.createdBytes,
          };
          cells.get(minimumMiB)!.push(cell);
          reporter.emit({
            scenario: 'cell',
            trace: trace.name,
            peakMiB: round(plan.peakLiveBytes / MiB),
            tfjsCreateBufferCalls,
            minimumMiB,
            createBufferCalls,
            createBufferRatio: round(cell.createBufferRatio),
            reservedOverAllocated: round(cell.reservedOverAllocated),
            createdBytesRatio: round(cell.createdBytesRatio),
          });
        }
        reporter.step();
      }
    }
    for (const [minimumMiB, list] of cells) {
      const createMet = (c: Cell): boolean => c.createBufferRatio <= CREATE_BUFFER_TARGET;
      const reservedMet = (c: Cell): boolean => c.reservedOverAllocated <= RESERVED_TARGET;
      const createdMet = (c: Cell): boolean => c.createdBytesRatio <= 1;
      reporter.emit({
        scenario: 'summary',
        minimumMiB,
        ...(minimumMiB * MiB === DEFAULT_MIN_SEGMENT_BYTES ? { default: true } : {}),
        cells: list.length,
        createBufferTargetMet: list.filter(createMet).length,
        reservedTargetMet: list.filter(reservedMet).length,
        bothMet: list.filter((c) => createMet(c) && reservedMet(c)).length,
        createdBytesAtMostTfjs: list.filter(createdMet).length,
        allThreeMet: list.filter((c) => createMet(c) && reservedMet(c) && createdMet(c)).length,
        geomeanReservedOverAllocated: round(Math.exp(list.reduce((s, c) => s + Math.log(c.reservedOverAllocated), 0) / list.length)),
      });
    }
  } finally {
    reporter.stop();
  }
}

/**
 * Replays `plan` through the engine under the WebGPU defaults twice in a row, as `pnpm bench:webgpu` does (its
 * cold and warm passes: the second starts from the first's cache and may place blocks differently), submitting
 * after every free and freeing what is still live after each pass.
 */
function replayOnEngine(plan: ReplayPlan, minimumSegmentBytes: number): { createBufferCalls: number; createdBytes: number; peakReservedBytes: number } {
  const backend = new EpochBackend();
  const engine = new CachingAllocator(backend, webGpuEngineDefaults({ maxBufferSize: MAX_BUFFER_SIZE, minimumSegmentBytes }));
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
