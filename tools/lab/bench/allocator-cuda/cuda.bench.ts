// The CUDA allocator's benchmark (issue: allocator-cuda). On every trace under ../shared/traces that replays on one
// stream without running out of memory, side by side in one run, each replay the median of three on fresh
// allocators (cache-cold):
// - "engine (virtual) pytorch|default": the caching engine on core's VirtualMemoryBackend, in the pytorch preset and
//   with the CUDA allocator's defaults: the baseline for the allocator's own cost;
// - "cuda default" (no options: expandable segments grown as Note [Expandable segments on CUDA] in CudaAllocator.ts
//   says), "cuda pytorch" (PyTorch's default, fixed segments: the trace-parity test holds it to PyTorch's figures),
//   "cuda pytorch expandable" (preset pytorch with expandableSegments: PyTorch's expandable segments, as the
//   trace-parity test holds them to traces PyTorch recorded with them) and "cuda best, 2 MiB pages mapped one by one"
//   (the engine's best preset with a page per allocation, the default before runs), on the stand-in libcuda (or a
//   real driver: STOWAGE_LIBCUDA, or one found), with unshareable pages (on the stand-in a shareable page holds a
//   file descriptor);
// - "raw cuMemAlloc": every allocation a cuMemAlloc_v2, every free a cuMemFree_v2 (no caching).
// One JSON line per (trace, allocator): pairsPerSec and nsPerPair (driver calls included), driverNsPerPair (time inside
// the backend's segment and page calls), ownNsPerPair (the rest), ownVsEngine (ownNsPerPair over the virtual engine's
// nsPerPair in the same configuration: target ≤ 2), driverCalls (all), memoryCalls (cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAlloc, cuMemFree), pytorchDriverCalls (PyTorch's cudaMalloc/cudaFree
// and map calls: its segments as the traces' README counts them, including those reserved before recording began,
// plus the trace's segment_free/map/unmap events), callsVsPytorch (memoryCalls over pytorchDriverCalls),
// reservedOverAllocated (peak reserved over peak allocated).
// Then, per trace, a "vsPytorch" line: memory calls, peak reserved and peak allocated bytes of the default, the
// pytorch preset, PyTorch's default (its calls from the trace; its peaks the pytorch preset's, which the parity test
// holds equal to PyTorch's) and PyTorch's expandable segments; a summary line per allocator; and one summary over the
// must-match traces with callsAtMostPytorchExpandable (the default's memory calls ≤ PyTorch-expandable's on every
// one) and peakAtMostPytorchExpandable (its peak reserved bytes and peak reserved / peak allocated ≤ PyTorch-
// expandable's on every one). Run: pnpm bench:cuda [--quick] [--trace <substring>]
import os from 'node:os';
import { parseArgs } from 'node:util';

import type { Allocator, CachingAllocatorOptions, MemoryBackend } from '@stowage/core';
import type { PageMapping } from '@stowage/core/plugin-kit';
import { CachingAllocator } from '@stowage/core';
import type { TraceEvent } from '@stowage/lab/replay';
import { findTraceRoot, listTraces, readPytorchReference, readTraceFile, replayTrace, traceSummary } from '@stowage/lab/replay';
import { VirtualMemoryBackend } from '@stowage/core/testing';
import type { CudaAllocator, CudaDriver } from '@stowage/allocator-cuda';
import { createCudaAllocator } from '@stowage/allocator-cuda';
import { cudaEngineOptions } from '@stowage/allocator-cuda/driver';
import { StandInHooks, testLibcuda } from '@stowage/allocator-cuda/testing';
import { BenchReporter, median, runBench, timePerCall } from '@stowage/lab/bench-kit';

const GiB = 2 ** 30;

function libcudaPath(): string {
  const lib = testLibcuda();
  if (typeof lib === 'string') throw new Error(lib);
  return lib.path;
}

/** Accumulates the time spent inside a backend's driver-facing calls (segments and pages). */
class DriverClock {
  ns = 0;

  wrap<T extends object, K extends keyof T>(target: T, names: readonly K[]): void {
    for (const name of names) {
      const original = target[name] as unknown as (...args: unknown[]) => unknown;
      (target as Record<K, unknown>)[name] = (...args: unknown[]) => {
        const start = process.hrtime.bigint();
        try {
          return original.apply(target, args);
        } finally {
          this.ns += Number(process.hrtime.bigint() - start);
        }
      };
    }
  }

  /** Times `backend`'s malloc/free and its page mapping's calls from now on. */
  watch(backend: MemoryBackend<unknown>): void {
    this.wrap(backend as MemoryBackend<unknown>, ['malloc', 'free'] as const);
    if (backend.pageMapping) this.wrap(backend.pageMapping as PageMapping<unknown>, ['reserve', 'map', 'unmap', 'release'] as const);
  }
}

interface Row {
  readonly allocator: string;
  readonly nsPerPair: number;
  readonly driverNsPerPair: number;
  readonly driverCalls: number | undefined;
  /** cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAlloc_v2 and cuMemFree_v2 calls. */
  readonly memoryCalls: number | undefined;
  readonly peakReserved: number;
  readonly peakAllocated: number;
}

/** The driver methods that make the memory calls PyTorch's are compared with (one driver call each). */
const MEMORY_CALLS = ['memCreate', 'memMap', 'memSetAccess', 'memUnmap', 'memRelease', 'memAlloc', 'memFree'] as const;

/** Counts the driver's memory calls (MEMORY_CALLS) from now on. */
function countMemoryCalls(driver: CudaDriver): () => number {
  let calls = 0;
  for (const name of MEMORY_CALLS) {
    const original = driver[name].bind(driver) as (...args: unknown[]) => unknown;
    (driver as unknown as Record<string, unknown>)[name] = (...args: unknown[]) => {
      calls++;
      return original(...args);
    };
  }
  return () => calls;
}

/** Replays `events` through `allocator` once, cold; `pairs` alloc+free pairs. */
function replayRow(name: string, allocator: Allocator, events: readonly TraceEvent[], clock: DriverClock, driver: CudaDriver | null): Row & { failed: boolean } {
  const memoryCalls = driver === null ? () => 0 : countMemoryCalls(driver);
  const calls0 = driver?.callCount ?? 0;
  const result = replayTrace(allocator, events);
  const stats = allocator.memoryStats();
  const pairs = Math.max(1, result.allocs);
  return {
    allocator: name,
    failed: result.failedAt !== undefined,
    nsPerPair: (result.seconds * 1e9) / pairs,
    driverNsPerPair: clock.ns / pairs,
    driverCalls: driver === null ? undefined : driver.callCount - calls0,
    memoryCalls: driver === null ? undefined : memoryCalls(),
    peakReserved: stats['reserved_bytes.all.peak'],
    peakAllocated: stats['allocated_bytes.all.peak'],
  };
}

/** Every allocation a cuMemAlloc_v2 and every free a cuMemFree_v2, in trace order (frees at free_requested). */
function rawRow(cuda: CudaAllocator, events: readonly TraceEvent[]): Row {
  const driver = cuda.backend.driver;
  cuda.backend.enter();
  const live = new Map<number, bigint>();
  const sizes = new Map<number, number>();
  let current = 0;
  let peak = 0;
  let pairs = 0;
  const calls0 = driver.callCount;
  const start = process.hrtime.bigint();
  for (const e of events) {
    if (e.action === 'alloc') {
      live.set(e.id, driver.memAlloc(Math.max(1, e.size)));
      sizes.set(e.id, e.size);
      current += e.size;
      if (current > peak) peak = current;
      pairs++;
    } else if (e.action === 'free_requested' && live.has(e.id)) {
      driver.memFree(live.get(e.id)!);
      live.delete(e.id);
      current -= sizes.get(e.id)!;
    }
  }
  const ns = Number(process.hrtime.bigint() - start);
  for (const ptr of live.values()) driver.memFree(ptr);
  const calls = driver.callCount - calls0;
  return { allocator: 'raw cuMemAlloc', nsPerPair: ns / Math.max(1, pairs), driverNsPerPair: ns / Math.max(1, pairs), driverCalls: calls, memoryCalls: calls, peakReserved: peak, peakAllocated: peak };
}

/** The replay of median time among three, each on a fresh allocator (cache-cold, after the first warms the JIT). */
function medianRow<R extends Row>(replay: () => R): R {
  const runs = [replay(), replay(), replay()].sort((a, b) => a.nsPerPair - b.nsPerPair);
  return runs[1]!;
}

function geomean(values: readonly number[]): number {
  return values.length === 0 ? Number.NaN : Math.exp(values.reduce((s, v) => s + Math.log(v), 0) / values.length);
}

const round = (x: number, digits = 1): number => Number(x.toFixed(digits));

/** What one configuration did on one trace, for the comparison with PyTorch. */
interface Figures {
  readonly memoryCalls: number | null;
  readonly peakReservedBytes: number;
  readonly peakAllocatedBytes: number;
  readonly reservedOverAllocated: number;
}

const figuresOf = (row: Row, memoryCalls = row.memoryCalls ?? null): Figures => ({
  memoryCalls,
  peakReservedBytes: row.peakReserved,
  peakAllocatedBytes: row.peakAllocated,
  reservedOverAllocated: round(row.peakReserved / Math.max(1, row.peakAllocated), 4),
});

const DEFAULT = 'cuda default';
const PYTORCH = 'cuda pytorch';
const PYTORCH_EXPANDABLE = 'cuda pytorch expandable';

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean' }, trace: { type: 'string' } } });
  const path = libcudaPath();
  const hooks = StandInHooks.open(path);
  const root = findTraceRoot();
  if (!root) {
    process.stderr.write('No trace directory found (../shared/traces or $STOWAGE_TRACES): nothing to replay.\n');
    return;
  }
  const reference = readPytorchReference(root);
  let traces = listTraces(root).filter((t) => t.kind === 'pytorch' && (values.trace === undefined || t.name.includes(values.trace)));
  if (values.quick) traces = traces.filter((t) => reference.get(t.name)?.mustMatch).slice(0, 3);
  const reporter = new BenchReporter('cuda', traces.length);
  // Unshareable pages: on the stand-in a shareable page holds a file descriptor, and the largest traces map more 2 MiB
  // pages than a process may hold descriptors (a real driver has no such limit).
  const configurations: readonly { name: string; baseline: 'pytorch' | 'default'; options: CachingAllocatorOptions & { shareableSegments?: boolean } }[] = [
    { name: DEFAULT, baseline: 'default', options: { shareableSegments: false } },
    { name: PYTORCH, baseline: 'pytorch', options: { preset: 'pytorch' } },
    { name: PYTORCH_EXPANDABLE, baseline: 'pytorch', options: { preset: 'pytorch', expandableSegments: true, shareableSegments: false } },
    {
      name: 'cuda best, 2 MiB pages mapped one by one',
      baseline: 'default',
      options: { preset: 'best', unifiedPools: true, segmentPageBytes: '2MiB', pageRuns: false, fragmentationLimit: 0.005, shareableSegments: false },
    },
  ];
  const own: Record<string, number[]> = {};
  const callRatios: Record<string, number[]> = {};
  /** Over the traces whose README figures a cold replay reproduces ("must match"): the comparable ones. */
  const mustMatchCallRatios: Record<string, number[]> = {};
  const comparisons: { trace: string; callsVsPytorchExpandable: number; peakVsPytorchExpandable: number; ratioMinusPytorchExpandable: number; callsAtMost: boolean; peakAtMost: boolean }[] = [];
  for (const trace of traces) {
    reporter.task(trace.name);
    const events = await readTraceFile(trace);
    const summary = traceSummary(events);
    if (summary.streams > 1 || summary.ooms > 0) {
      reporter.step();
      continue; // replays flatten streams and these ran out of memory: not comparable call for call
    }
    const mustMatch = reference.get(trace.name)?.mustMatch === true;
    // Segments reserved before recording began have no segment_alloc in the trace; the README's table counts them.
    const pytorchSegments = Math.max(summary.segmentAllocs, reference.get(trace.name)?.segments ?? 0);
    const pytorchDriverCalls = pytorchSegments + summary.segmentFrees + summary.segmentMaps + summary.segmentUnmaps;
    // The stand-in's memory is never touched by a replay: a capacity above the largest trace costs nothing.
    if (hooks) {
      createCudaAllocator({ libcuda: path, allocConf: '' }).dispose();
      hooks.setCapacity(96 * GiB);
    }
    const rows: (Row & { baseline: Row })[] = [];
    const baselines = new Map<string, Row>();
    for (const baseline of ['pytorch', 'default'] as const) {
      const options = cudaEngineOptions(baseline === 'pytorch' ? { preset: 'pytorch' } : {}, true);
      const row = medianRow(() => {
        const clock = new DriverClock();
        const backend = new VirtualMemoryBackend({ storeData: false });
        clock.watch(backend);
        const engine = new CachingAllocator(backend, options);
        const replayed = replayRow(`engine (virtual) ${baseline}`, engine, events, clock, null);
        engine.dispose();
        return replayed;
      });
      baselines.set(baseline, row);
      rows.push({ ...row, baseline: row });
    }
    const byName = new Map<string, Row>();
    for (const { name, baseline, options } of configurations) {
      const row = medianRow(() => {
        const cuda = createCudaAllocator({ libcuda: path, allocConf: '', ...options });
        const clock = new DriverClock();
        clock.watch(cuda.backend);
        const result = replayRow(name, cuda, events, clock, cuda.backend.driver);
        cuda.dispose();
        return result;
      });
      if (row.failed) continue;
      rows.push({ ...row, baseline: baselines.get(baseline)! });
      byName.set(name, row);
    }
    const raw = createCudaAllocator({ libcuda: path, allocConf: '' });
    const rawResult = rawRow(raw, events);
    raw.dispose();
    rows.push({ ...rawResult, baseline: baselines.get('pytorch')! });
    for (const row of rows) {
      const ownNs = row.nsPerPair - row.driverNsPerPair;
      const record = {
        scenario: 'trace',
        trace: trace.name,
        mustMatch,
        allocator: row.allocator,
        pairs: summary.allocs,
        pairsPerSec: round(1e9 / row.nsPerPair, 0),
        nsPerPair: round(row.nsPerPair),
        driverNsPerPair: round(row.driverNsPerPair),
        ownNsPerPair: round(ownNs),
        ownVsEngine: round(ownNs / row.baseline.nsPerPair, 2),
        driverCalls: row.driverCalls ?? null,
        memoryCalls: row.memoryCalls ?? null,
        pytorchDriverCalls,
        // Traces without segment events (static planners, zdevito_*) say nothing of PyTorch's calls.
        callsVsPytorch: row.memoryCalls === undefined || pytorchDriverCalls === 0 ? null : round(row.memoryCalls / pytorchDriverCalls, 3),
        reservedOverAllocated: round(row.peakReserved / Math.max(1, row.peakAllocated), 4),
      };
      reporter.emit(record);
      if (!row.allocator.startsWith('engine') && row.allocator !== 'raw cuMemAlloc') {
        (own[row.allocator] ??= []).push(Math.max(1e-3, record.ownVsEngine));
        if (record.callsVsPytorch !== null) (callRatios[row.allocator] ??= []).push(Math.max(1e-3, record.callsVsPytorch));
        if (record.callsVsPytorch !== null && mustMatch) (mustMatchCallRatios[row.allocator] ??= []).push(Math.max(1e-3, record.callsVsPytorch));
      }
    }
    const [chosen, pytorch, expandable] = [byName.get(DEFAULT), byName.get(PYTORCH), byName.get(PYTORCH_EXPANDABLE)];
    if (chosen && pytorch && expandable) {
      const mine = figuresOf(chosen);
      const theirs = figuresOf(expandable);
      const comparison = {
        trace: trace.name,
        callsVsPytorchExpandable: round(mine.memoryCalls! / Math.max(1, theirs.memoryCalls!), 3),
        peakVsPytorchExpandable: round(mine.peakReservedBytes / theirs.peakReservedBytes, 4),
        ratioMinusPytorchExpandable: round(mine.reservedOverAllocated - theirs.reservedOverAllocated, 4),
        callsAtMost: mine.memoryCalls! <= theirs.memoryCalls!,
        peakAtMost: mine.peakReservedBytes <= theirs.peakReservedBytes && mine.peakReservedBytes / mine.peakAllocatedBytes <= theirs.peakReservedBytes / theirs.peakAllocatedBytes,
      };
      reporter.emit({
        scenario: 'vsPytorch',
        mustMatch,
        default: mine,
        pytorchPreset: figuresOf(pytorch),
        pytorchDefault: figuresOf(pytorch, pytorchDriverCalls),
        pytorchExpandable: theirs,
        ...comparison,
      });
      if (mustMatch) comparisons.push(comparison);
    }
    reporter.step();
  }
  reporter.stop();
  hooks?.setCapacity(GiB);
  for (const name of Object.keys(own)) {
    reporter.emit({
      scenario: 'summary',
      allocator: name,
      traces: own[name]!.length,
      geomeanOwnVsEngine: round(geomean(own[name]!), 2),
      worstOwnVsEngine: round(Math.max(...own[name]!), 2),
      geomeanCallsVsPytorch: round(geomean(callRatios[name] ?? []), 3),
      worstCallsVsPytorch: round(Math.max(...(callRatios[name] ?? [Number.NaN])), 3),
      mustMatchTraces: mustMatchCallRatios[name]?.length ?? 0,
      mustMatchWorstCallsVsPytorch: round(Math.max(...(mustMatchCallRatios[name] ?? [Number.NaN])), 3),
    });
  }
  reporter.emit({
    scenario: 'summary vs PyTorch-expandable',
    allocator: DEFAULT,
    mustMatchTraces: comparisons.length,
    callsAtMostPytorchExpandable: comparisons.length > 0 && comparisons.every((c) => c.callsAtMost),
    peakAtMostPytorchExpandable: comparisons.length > 0 && comparisons.every((c) => c.peakAtMost),
    geomeanCallsVsPytorchExpandable: round(geomean(comparisons.map((c) => c.callsVsPytorchExpandable)), 3),
    worstCallsVsPytorchExpandable: round(Math.max(...comparisons.map((c) => c.callsVsPytorchExpandable)), 3),
    worstPeakVsPytorchExpandable: round(Math.max(...comparisons.map((c) => c.peakVsPytorchExpandable)), 4),
    worstRatioMinusPytorchExpandable: round(Math.max(...comparisons.map((c) => c.ratioMinusPytorchExpandable)), 4),
    failing: comparisons.filter((c) => !c.callsAtMost || !c.peakAtMost).map((c) => c.trace),
  });
  const probe = createCudaAllocator({ libcuda: path, allocConf: '' });
  const query = probe.backend.driver.raw('cuStreamQuery');
  const samples = [0, 1, 2].map(() => timePerCall(() => void query(null)));
  reporter.emit({ scenario: 'ffiCallCost', call: 'raw cuStreamQuery(NULL)', nsPerCall: round(median(samples)) });
  probe.dispose();
  reporter.emit({ scenario: 'environment', library: path, realDriver: hooks === null, node: process.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, date: new Date().toISOString() });
  if (hooks !== null) process.stderr.write('No GPU here: ran on the stand-in libcuda; the real-driver and PyTorch comparisons need STOWAGE_LIBCUDA on a GPU machine.\n');
}

runBench(main);
