import type { StorageImpl } from '@stowage/core';
import { createRuntime, InvalidArgumentError, isOutOfMemoryError, resolve } from '@stowage/core';
import type { BuiltInPolicyName, LmsPolicy, SpeculationOptions } from '@stowage/lms';
import type { LinkName, LinkProfile, SimulatedDevice, TimelineEntry } from '@stowage/lab';
import { LmsController, lms, PAGING_STAT_KEYS, pin, SPECULATION_STAT_KEYS } from '@stowage/lms';
import { resolveLink, simulated, simulatedDeviceOf } from '@stowage/lab';
import { BudgetExceededError } from './BudgetExceededError.js';
import type { ScheduleMark } from './ScheduleRecording.js';
import { ScheduleRecording } from './ScheduleRecording.js';
import type { ModelTrace, TraceOp, TraceTensor } from './traces/Trace.js';

// A generated trace (traces/Trace.ts) run under LMS on the simulated-time device: the bench's measurement of
// issue 19 (`pnpm bench:lms`, bench/speculation.bench.ts).
//
// - One runtime per run: the `sim` device plugin under the budget, one segment per allocation (Note [Segments under
//   a small budget] in lmsRun.ts), and `lms({ devices: ['sim'], policy, speculation })`.
// - The persistent tensors are made first, with real bytes, and unpinned; the host then waits for the device, so
//   iteration 0 starts on an idle device.
// - Each op: pin what it reads and updates, allocate and pin what it creates, take the pointers (after the pins:
//   a page-in may move a storage), enqueue a kernel of the compute model's duration that reads and writes them
//   and does real byte work (Note [Byte work]), unpin, release what it frees; then the host waits (Note [A
//   synchronous host]).
// - Each iteration ends with `synchronize()` and LMS's `endIteration()`; its figures come from the device's
//   timeline and engine totals, and from the allocator's statistics, between its start and its end.
// - `replayLinks`: the run's schedule, recorded, runs again on a device of each of these links (Note [One run,
//   several links] in ScheduleRecording.ts): the figures of a run on each, for the price of one LMS run.
// - An OutOfMemoryError ends the run with `fits: false` and its message; reserved bytes over the budget are a
//   BudgetExceededError (the engine's promise broken), thrown.

// Note [Compute model]: an op takes max(flops / FLOP rate, bytes accessed / memory bandwidth), the roofline of one
// kernel, rounded up to whole nanoseconds. The figures are an H100 SXM's as achieved rather than as sold: dense
// bf16 peaks at 989 TFLOP/s and large transformer GEMMs reach about 40 % of it, so 400e12 FLOP/s; HBM3's 3.35 TB/s
// at the 80 % a streaming kernel reaches, 2.68e12 B/s. No launch overhead is added: a kernel with neither flops nor
// bytes takes no time. Times follow from the traces' shapes as stated in their generators: models of a few dozen
// to a hundred and fifty MiB, so that a run with real bytes takes a second or two here. At their widths (1024 for
// the MLP) a kernel computes for less time than its output takes to cross PCIe, so under a tight budget an
// iteration is bound by the link, not by compute; the bench reports the gap to that bound.

// Note [Pins before outputs]: an op pins its existing operands before it allocates its outputs, as a kernel
// launch does in a framework (the inputs are held when the op allocates its result). The other order lets the
// allocation reclaim an input of the same op, which the pin then pages straight back in: bytes no policy chose to
// move, and that Belady-MIN, which makes room with the op's pins held, never counts.

// Note [A synchronous host]: the host issues an op only once the kernel `runAhead` ops before it has ended; with
// the default 0 it waits for each kernel before the next op, as IBM's LMS sees a PyTorch program whose host blocks
// on every op. So what LMS starts while handling an op (a page-out when an allocation needs room, a page-in at a
// pin) begins when the previous kernel has ended, and a kernel waits for its page-ins: without speculation the
// transfers sit on the critical path, and the time the compute engine idles in an iteration is the program's
// stall. A larger `runAhead` lets the host enqueue ahead of the device, as an asynchronous PyTorch host does: LMS
// then acts earlier in simulated time, and the device's hazards (SimulatedDevice.ts) keep every byte right.

// Note [Byte work]: each kernel fills every tensor it creates or updates with one byte derived from the op's index,
// the iteration's, and bytes sampled from everything it reads and the old contents of what it updates. A write
// lost by LMS (a stale host copy paged back in), a page-in of the wrong bytes, or a read of a reclaimed tensor's
// freed block changes the bytes that later kernels sample, and so the persistent tensors' final bytes: their
// checksums are compared with the unconstrained run's.

/** The figures the compute model takes: a device's FLOP rate and memory bandwidth, as achieved. */
export interface ComputeModel {
  /** Floating-point operations per second. */
  readonly flopsPerSecond: number;
  /** Device memory bytes read and written per second. */
  readonly memoryBytesPerSecond: number;
}

/** An H100 SXM at an achieved 400 TFLOP/s bf16 and 80 % of 3.35 TB/s (Note [Compute model]). */
export const H100_COMPUTE: ComputeModel = Object.freeze({ flopsPerSecond: 400e12, memoryBytesPerSecond: 2.68e12 });

/** Nanoseconds one op takes under `model`: max(flops / FLOP rate, bytes / bandwidth), rounded up (Note [Compute model]). */
export function kernelDurationNs(op: Pick<TraceOp, 'flops' | 'bytesAccessed'>, model: ComputeModel = H100_COMPUTE): number {
  return Math.ceil(Math.max((op.flops * 1e9) / model.flopsPerSecond, (op.bytesAccessed * 1e9) / model.memoryBytesPerSecond));
}

export interface SimRunOptions {
  readonly trace: ModelTrace;
  /** Iterations to run: 0, 1, …, iterations − 1. A positive whole number. */
  readonly iterations: number;
  /** The device allocator's budget (`limit`) in bytes; none when absent. */
  readonly budgetBytes?: number;
  /** The host link. */
  readonly link: LinkName | LinkProfile;
  /** LMS's reclaim policy. */
  readonly policy: BuiltInPolicyName | LmsPolicy;
  /** LMS's speculation (`lms({ speculation })`). */
  readonly speculation: boolean | SpeculationOptions;
  /** The kernels' durations; H100_COMPUTE when absent. */
  readonly computeModel?: ComputeModel;
  /** Kernels the host may run ahead of the device (Note [A synchronous host]); 0 when absent. */
  readonly runAhead?: number;
  /** Links to replay the run's schedule on (`SimRunResult.replays`); none when absent. */
  readonly replayLinks?: readonly (LinkName | LinkProfile)[];
}

/** The LMS statistics keys whose change over an iteration a SimIteration reports. */
export const SIM_STAT_KEYS = [
  ...PAGING_STAT_KEYS,
  ...SPECULATION_STAT_KEYS,
  'reclaimed',
  'reclaimed_bytes',
  'alloc_distribution.reclaim_one',
  'alloc_distribution.reclaim_fragments',
  'alloc_distribution.reclaim_all',
] as const;

export type SimStatKey = (typeof SIM_STAT_KEYS)[number];

/** One iteration as the simulated device ran it. Times are simulated nanoseconds. */
export interface SimIteration {
  readonly iteration: number;
  /** From the host's clock at its start to the end of its last operation (`synchronize()`). */
  readonly timeNs: number;
  /** The compute engine's busy time: the kernels. */
  readonly computeBusyNs: number;
  /** timeNs − computeBusyNs: the time the compute engine waited (for transfers, or for the host). */
  readonly stallNs: number;
  readonly d2hBusyNs: number;
  readonly d2hBytes: number;
  readonly h2dBusyNs: number;
  readonly h2dBytes: number;
  /** Share of the page-outs' copy time that overlapped kernels; null when nothing was paged out. */
  readonly hiddenOut: number | null;
  /** Share of the page-ins' copy time that overlapped kernels; null when nothing was paged in. */
  readonly hiddenIn: number | null;
  /** max(computeBusyNs, page-out copy time, page-in copy time): Note [The bound]. */
  readonly boundNs: number;
  /** `reserved_bytes.all.peak` over the iteration. */
  readonly reservedPeakBytes: number;
  /** How much each LMS statistic changed over the iteration. */
  readonly stats: Readonly<Record<SimStatKey, number>>;
}

export interface SimRunResult {
  /** False when an OutOfMemoryError ended the run; `iterations` then holds those completed. */
  readonly fits: boolean;
  /** The OutOfMemoryError's message, when the run did not fit. */
  readonly error?: string;
  readonly iterations: readonly SimIteration[];
  /** The most bytes the allocator reserved, over the whole run (the persistent tensors' creation included). */
  readonly reservedPeakBytes: number;
  /** A checksum (`checksumOf`) of each persistent tensor's final bytes, in `trace.persistent` order, as 8 hex digits; null when it did not fit. */
  readonly checksums: readonly string[] | null;
  /**
   * The run on each of `replayLinks`, in order: its iterations' times and transfers on that link; their statistics
   * and reserved peaks are the run's (LMS does the same on every link).
   */
  readonly replays: readonly { readonly link: LinkProfile; readonly iterations: readonly SimIteration[] }[];
}

// Note [The bound]: no schedule of an iteration's work on the simulated device ends before its kernels have run
// back to back on the one compute engine, nor before each copy engine has run its copies back to back: each
// copy holds its engine for its latency plus bytes / bandwidth (LinkProfile.ts), so a copy engine's busy time is
// the least time its copies take. The bound is the largest of the three, for the copies the run made; it says
// how well the run overlapped them, not whether it moved more bytes than needed (Belady-MIN's byte count says
// that). The latencies count: the device charges them, so leaving them out would put a run of many small copies
// over a bound it cannot reach.

/**
 * Runs `trace` under LMS on a simulated-time device of its own and measures each iteration.
 * @throws InvalidArgumentError for a bad iteration count, budget or run-ahead; BudgetExceededError when the
 * allocator reserved more than the budget (a broken engine promise); what LMS throws besides OutOfMemoryError
 */
export async function runTraceOnSim(options: SimRunOptions): Promise<SimRunResult> {
  const { trace, iterations, budgetBytes, link, policy, speculation, computeModel = H100_COMPUTE, runAhead = 0, replayLinks = [] } = options;
  if (!Number.isSafeInteger(iterations) || iterations < 1) throw new InvalidArgumentError('iterations', iterations, 'a positive whole number');
  if (budgetBytes !== undefined && (!Number.isSafeInteger(budgetBytes) || budgetBytes <= 0)) {
    throw new InvalidArgumentError('budgetBytes', budgetBytes, 'a positive whole number of bytes');
  }
  if (!Number.isSafeInteger(runAhead) || runAhead < 0) throw new InvalidArgumentError('runAhead', runAhead, 'a non-negative whole number of kernels');
  if (!Array.isArray(replayLinks)) throw new InvalidArgumentError('replayLinks', replayLinks, 'a list of links');
  const replayProfiles = replayLinks.map((l: LinkName | LinkProfile) => resolveLink(l));
  const limit = budgetBytes === undefined ? {} : { limit: budgetBytes };
  // One segment per allocation, never split (Note [Segments under a small budget] in lmsRun.ts).
  await using runtime = await createRuntime({
    plugins: [simulated({ link, ...limit, segmentSize: (roundedBytes) => roundedBytes, splitBlocks: false }), lms({ devices: ['sim'], policy, speculation })],
  });
  const allocator = runtime.allocator('sim');
  const device = simulatedDeviceOf(runtime)!;
  const recording = new ScheduleRecording(device);
  const controller = resolve(runtime.container, LmsController);
  const newStorage = (tensor: TraceTensor): StorageImpl => runtime.storage(tensor.bytes, { device: 'sim' });
  const statsOf = (): Readonly<Record<string, number>> => allocator.memoryStats();

  const done: LmsFigures[] = [];
  const marks: ScheduleMark[] = [];
  let opsRun = 0;
  const persistent = new Map<number, StorageImpl>();
  try {
    for (const [i, tensor] of trace.persistent.entries()) {
      const storage = newStorage(tensor);
      runtime.write(storage, initialBytes(tensor.bytes, i));
      pin(storage).release();
      persistent.set(tensor.id, storage);
    }
    controller.endIteration(); // making the model is not an iteration of the loop: LMS learns from iteration 0 on
    recording.synchronize();
    // Iteration i's device figures run from mark i to mark i + 1, each taken once the device is idle, before LMS
    // hears of the iteration's end: the copies `endIteration` starts (a prefetch for the next) count in the next.
    // Its LMS statistics run from after the previous `endIteration` to after its own, so that the counters it
    // updates (iterations_predicted, prediction_fallbacks) count in the iteration they are about.
    marks.push(recording.mark());
    let startStats = statsOf();
    allocator.resetPeakStats();
    for (let i = 0; i < iterations; i++) {
      const { tensors, ops } = trace.iteration(i);
      const sizes = new Map<number, TraceTensor>(tensors.map((t) => [t.id, t]));
      const live = new Map<number, StorageImpl>(persistent);
      const storageOf = (id: number): StorageImpl => {
        const storage = live.get(id);
        if (storage === undefined) throw new InvalidArgumentError('trace', trace.name, `a trace whose iteration ${i} uses tensor ${id} only while it exists`);
        return storage;
      };
      const kernels: TimelineEntry[] = [];
      for (const [k, op] of ops.entries()) {
        opsRun++;
        // Inputs first: an output allocated while they were unpinned could reclaim one of them (Note [Pins before outputs]).
        const written = new Set([...op.updates, ...op.creates]);
        const readOnly = [...new Set(op.reads)].filter((id) => !written.has(id)).map(storageOf);
        const updated = [...new Set(op.updates)].map(storageOf);
        const inputs = pin(...readOnly, ...updated);
        try {
          const created = op.creates.map((id) => {
            const tensor = sizes.get(id);
            if (tensor === undefined) throw new InvalidArgumentError('trace', trace.name, `a trace whose iteration ${i} lists tensor ${id}, which op ${op.name} creates`);
            const storage = newStorage(tensor);
            live.set(id, storage);
            return storage;
          });
          const outputs = pin(...created);
          try {
            const readPtrs = readOnly.map((s) => s.data());
            const updatePtrs = updated.map((s) => s.mutableData());
            const writePtrs = [...updatePtrs, ...created.map((s) => s.mutableData())];
            const kernel = device.kernel(op.name || 'op', kernelDurationNs(op, computeModel), { reads: readPtrs, writes: writePtrs }, () => {
              let mixed = mix(mix(FNV_OFFSET, i), k);
              for (const ptr of [...readPtrs, ...updatePtrs]) mixed = mix(mixed, sampleOf(bytesOf(ptr)));
              for (const [w, ptr] of writePtrs.entries()) bytesOf(ptr).fill(mix(mixed, w) & 0xff);
            });
            kernels.push(kernel);
          } finally {
            outputs.release();
          }
        } finally {
          inputs.release();
        }
        for (const id of op.frees) {
          storageOf(id).release();
          live.delete(id);
        }
        const waitFor = kernels[kernels.length - 1 - runAhead];
        if (waitFor !== undefined) recording.hostWaitFor(waitFor);
      }
      recording.synchronize();
      marks.push(recording.mark());
      controller.endIteration();
      const endStats = statsOf();
      const reservedPeakBytes = endStats['reserved_bytes.all.peak']!;
      if (budgetBytes !== undefined && reservedPeakBytes > budgetBytes) throw new BudgetExceededError(opsRun, reservedPeakBytes, budgetBytes);
      const stats = Object.fromEntries(SIM_STAT_KEYS.map((key) => [key, (endStats[key] ?? 0) - (startStats[key] ?? 0)])) as Record<SimStatKey, number>;
      done.push({ iteration: i, reservedPeakBytes, stats });
      startStats = endStats;
      allocator.resetPeakStats();
    }
  } catch (error) {
    if (!isOutOfMemoryError(error)) throw error;
    recording.stop();
    const replays = replayProfiles.map((l) => ({ link: l, iterations: measureAll(done, recording.replay(l)) }));
    return { fits: false, error: error.message, iterations: measureAll(done, { device, marks }), reservedPeakBytes: reservedPeakOf(statsOf()), checksums: null, replays };
  }
  recording.stop();
  const checksums: string[] = [];
  for (const tensor of trace.persistent) {
    const storage = persistent.get(tensor.id)!;
    const guard = pin(storage);
    try {
      checksums.push(checksumOf(bytesOf(storage.data()))); // read in place: the device's memory is the host's
    } finally {
      guard.release();
    }
  }
  const replays = replayProfiles.map((l) => ({ link: l, iterations: measureAll(done, recording.replay(l)) }));
  return { fits: true, iterations: measureAll(done, { device, marks }), reservedPeakBytes: reservedPeakOf(statsOf()), checksums, replays };
}

/** slowdown = T / T_free and gapToBound = (T − T_bound) / T_free, against the unconstrained run's iteration time (Note [The bound]). */
export function figuresAgainst(iteration: Pick<SimIteration, 'timeNs' | 'boundNs'>, freeTimeNs: number): { slowdown: number; gapToBound: number } {
  return { slowdown: iteration.timeNs / freeTimeNs, gapToBound: (iteration.timeNs - iteration.boundNs) / freeTimeNs };
}

function reservedPeakOf(stats: Readonly<Record<string, number>>): number {
  return stats['reserved_bytes.all.peak'] ?? 0;
}

/** What LMS did in one iteration: the same on every link. */
interface LmsFigures {
  readonly iteration: number;
  readonly reservedPeakBytes: number;
  readonly stats: Readonly<Record<SimStatKey, number>>;
}

/** Each completed iteration of `done`, timed on `device` from its mark to the next. */
function measureAll(done: readonly LmsFigures[], { device, marks }: { readonly device: SimulatedDevice; readonly marks: readonly ScheduleMark[] }): SimIteration[] {
  return done.map((figures, i) => measure(figures, device.timeline, marks[i]!, marks[i + 1]!));
}

function measure(figures: LmsFigures, timeline: readonly TimelineEntry[], start: ScheduleMark, end: ScheduleMark): SimIteration {
  const entries = timeline.slice(start.entries, end.entries);
  const kernels = entries.filter((e) => e.engine === 'compute');
  const pageOuts = entries.filter((e) => e.engine === 'd2h' && e.name === 'pageOut');
  const pageIns = entries.filter((e) => e.engine === 'h2d' && e.name === 'pageIn');
  const computeBusyNs = end.compute.busyNs - start.compute.busyNs;
  const timeNs = end.nowNs - start.nowNs;
  return {
    iteration: figures.iteration,
    timeNs,
    computeBusyNs,
    stallNs: timeNs - computeBusyNs,
    d2hBusyNs: end.d2h.busyNs - start.d2h.busyNs,
    d2hBytes: end.d2h.bytes - start.d2h.bytes,
    h2dBusyNs: end.h2d.busyNs - start.h2d.busyNs,
    h2dBytes: end.h2d.bytes - start.h2d.bytes,
    hiddenOut: hiddenShare(pageOuts, kernels),
    hiddenIn: hiddenShare(pageIns, kernels),
    boundNs: Math.max(computeBusyNs, busyOf(pageOuts), busyOf(pageIns)),
    reservedPeakBytes: figures.reservedPeakBytes,
    stats: figures.stats,
  };
}

function busyOf(entries: readonly TimelineEntry[]): number {
  return entries.reduce((sum, e) => sum + (e.endNs - e.startNs), 0);
}

/**
 * The share of `copies`' time during which some kernel ran; null when they took no time. Both lists run on one
 * engine each, so each is in start order without overlaps (SimulatedDevice's invariants): one sweep.
 */
export function hiddenShare(copies: readonly TimelineEntry[], kernels: readonly TimelineEntry[]): number | null {
  const total = busyOf(copies);
  if (total === 0) return null;
  let overlapNs = 0;
  let k = 0;
  for (const copy of copies) {
    while (k < kernels.length && kernels[k]!.endNs <= copy.startNs) k++;
    for (let j = k; j < kernels.length && kernels[j]!.startNs < copy.endNs; j++) {
      overlapNs += Math.max(0, Math.min(copy.endNs, kernels[j]!.endNs) - Math.max(copy.startNs, kernels[j]!.startNs));
    }
  }
  return overlapNs / total;
}

function bytesOf(ptr: { readonly handle: unknown; readonly byteOffset: number; readonly byteLength: number }): Uint8Array {
  return new Uint8Array(ptr.handle as ArrayBuffer, ptr.byteOffset, ptr.byteLength);
}

/** A persistent tensor's first bytes: a pattern of period 256 that depends on its index, so that every tensor starts distinct. */
function initialBytes(byteLength: number, index: number): Uint8Array {
  const bytes = new Uint8Array(byteLength);
  for (let j = 0; j < Math.min(256, byteLength); j++) bytes[j] = (j * 31 + index * 17 + 1) & 0xff;
  for (let filled = 256; filled < byteLength; filled *= 2) bytes.copyWithin(filled, 0, Math.min(filled, byteLength - filled));
  return bytes;
}

/** The first, middle and last bytes of a tensor's contents, as one number (0 for an empty one). */
function sampleOf(bytes: Uint8Array): number {
  const n = bytes.length;
  return n === 0 ? 0 : bytes[0]! | (bytes[n >> 1]! << 8) | (bytes[n - 1]! << 16);
}

const FNV_OFFSET = 0x811c9dc5;

/** One FNV-1a round over the four bytes of `value`. */
function mix(hash: number, value: number): number {
  let h = hash;
  for (let shift = 0; shift < 32; shift += 8) h = Math.imul(h ^ ((value >>> shift) & 0xff), 0x01000193);
  return h >>> 0;
}

/**
 * A checksum of `bytes` as 8 hex digits: FNV-1a's round over 32-bit little-endian words (a quarter of the rounds
 * of the byte-wise hash), then over the bytes left.
 */
function checksumOf(bytes: Uint8Array): string {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const words = bytes.byteLength >>> 2;
  let h = FNV_OFFSET;
  for (let w = 0; w < words; w++) h = Math.imul(h ^ view.getUint32(4 * w, true), 0x01000193);
  for (let j = 4 * words; j < bytes.byteLength; j++) h = Math.imul(h ^ bytes[j]!, 0x01000193);
  return (h >>> 0).toString(16).padStart(8, '0');
}
