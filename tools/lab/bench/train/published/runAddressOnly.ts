import type { StorageImpl } from '@stowage/core';
import { createRuntime, InvalidArgumentError, isOutOfMemoryError, resolve } from '@stowage/core';
import type { BuiltInPolicyName } from '@stowage/lms';
import { LmsController, lms, PAGING_STAT_KEYS, pin, SPECULATION_STAT_KEYS } from '@stowage/lms';
import type { LinkProfile, TimelineEntry } from '@stowage/lab';
import { simulated, simulatedDeviceOf } from '@stowage/lab';
import type { ComputeModel, ModelTrace, TraceTensor } from '@stowage/example-train';
import { hiddenShare, kernelDurationNs } from '@stowage/example-train';

// A generated trace under LMS on an address-only simulated device (Note [Address-only memory] in
// src/simulated/AddressMemory.ts): example-train's `runTraceOnSim` without the bytes, so that the published setups
// run at full size (a 16 GiB device, a 120 GiB working set) in seconds. What it keeps of that runner:
// - One runtime per run: the `sim` device under the budget, one segment per allocation, never split (Note [Segments
//   under a small budget] in example-train's lmsRun.ts), and LMS with the given policy and speculation.
// - The persistent tensors are made first and unpinned; the host waits for the device before iteration 0.
// - Each op pins its inputs, allocates and pins its outputs (Note [Pins before outputs] in simRun.ts), enqueues a
//   kernel of the compute model's roofline duration that reads and writes their blocks, unpins, releases what it
//   frees; the host then waits for that kernel (Note [A synchronous host] there: IBM's LMS sees a host that
//   blocks on every op).
// - Each iteration ends with `synchronize()` and LMS's `endIteration()`; its figures come from the device's engines
//   and timeline, and from LMS's counters, between its start and its end.
// What it drops: the kernels' byte work and the checksums (a run that checks bit-identity runs with bytes, at the
// example's sizes), and replays on other links (each setup has its paper's link).

/** One iteration as the simulated device ran it; times in simulated nanoseconds. */
export interface AddressOnlyIteration {
  readonly timeNs: number;
  readonly computeBusyNs: number;
  readonly d2hBusyNs: number;
  readonly h2dBusyNs: number;
  readonly d2hBytes: number;
  readonly h2dBytes: number;
  /** Shares of the page-out and page-in copy time that overlapped a kernel; null without copies. */
  readonly hiddenOut: number | null;
  readonly hiddenIn: number | null;
  /** max(compute, page-out copy time, page-in copy time) (Note [The bound] in example-train's simRun.ts). */
  readonly boundNs: number;
  /** How much each LMS counter (PAGING_STAT_KEYS, SPECULATION_STAT_KEYS) changed over the iteration. */
  readonly stats: Readonly<Record<string, number>>;
}

export interface AddressOnlyRunOptions {
  readonly trace: ModelTrace;
  readonly iterations: number;
  /** The allocator's budget in bytes; none when absent. */
  readonly budgetBytes?: number;
  readonly link: LinkProfile;
  readonly computeModel: ComputeModel;
  readonly policy: BuiltInPolicyName;
  readonly speculation: boolean;
}

export interface AddressOnlyRunResult {
  /** False when an OutOfMemoryError ended the run; `iterations` holds those completed. */
  readonly fits: boolean;
  readonly error?: string;
  readonly iterations: readonly AddressOnlyIteration[];
  /** `reserved_bytes.all.peak` over the whole run. */
  readonly reservedPeakBytes: number;
}

const STAT_KEYS = [...PAGING_STAT_KEYS, ...SPECULATION_STAT_KEYS] as const;

interface Mark {
  readonly nowNs: number;
  readonly entries: number;
  readonly computeBusyNs: number;
  readonly d2hBusyNs: number;
  readonly h2dBusyNs: number;
  readonly d2hBytes: number;
  readonly h2dBytes: number;
}

/**
 * Runs `trace` under LMS on an address-only simulated device of its own.
 * @throws InvalidArgumentError for a bad iteration count or budget; Error when reserved bytes passed the budget (a
 *   broken engine promise); what LMS throws besides OutOfMemoryError
 */
export async function runAddressOnly(options: AddressOnlyRunOptions): Promise<AddressOnlyRunResult> {
  const { trace, iterations, budgetBytes, link, computeModel, policy, speculation } = options;
  if (!Number.isSafeInteger(iterations) || iterations < 1) throw new InvalidArgumentError('iterations', iterations, 'a positive whole number');
  if (budgetBytes !== undefined && (!Number.isSafeInteger(budgetBytes) || budgetBytes <= 0)) throw new InvalidArgumentError('budgetBytes', budgetBytes, 'a positive whole number of bytes');
  const limit = budgetBytes === undefined ? {} : { limit: budgetBytes };
  await using runtime = await createRuntime({
    plugins: [
      simulated({ addressOnly: true, link, memoryBytesPerSecond: Math.round(computeModel.memoryBytesPerSecond), ...limit, segmentSize: (rounded) => rounded, splitBlocks: false }),
      lms({ devices: ['sim'], policy, speculation }),
    ],
  });
  const allocator = runtime.allocator('sim');
  const device = simulatedDeviceOf(runtime)!;
  const controller = resolve(runtime.container, LmsController);
  const statsOf = (): Readonly<Record<string, number>> => allocator.memoryStats();
  const newStorage = (tensor: TraceTensor): StorageImpl => runtime.storage(tensor.bytes, { device: 'sim' });
  const markOf = (): Mark => {
    const { nowNs, compute, d2h, h2d } = device.stats;
    return { nowNs, entries: device.timeline.length, computeBusyNs: compute.busyNs, d2hBusyNs: d2h.busyNs, h2dBusyNs: h2d.busyNs, d2hBytes: d2h.bytes, h2dBytes: h2d.bytes };
  };

  const done: AddressOnlyIteration[] = [];
  const persistent = new Map<number, StorageImpl>();
  try {
    for (const tensor of trace.persistent) {
      const storage = newStorage(tensor);
      pin(storage).release();
      persistent.set(tensor.id, storage);
    }
    controller.endIteration(); // making the model is not an iteration of the loop
    device.synchronize();
    let start = markOf();
    let startStats = statsOf();
    for (let i = 0; i < iterations; i++) {
      const { tensors, ops } = trace.iteration(i);
      const sizes = new Map<number, TraceTensor>(tensors.map((t) => [t.id, t]));
      const live = new Map<number, StorageImpl>(persistent);
      const storageOf = (id: number): StorageImpl => {
        const storage = live.get(id);
        if (storage === undefined) throw new InvalidArgumentError('trace', trace.name, `a trace whose iteration ${i} uses tensor ${id} only while it exists`);
        return storage;
      };
      for (const op of ops) {
        const written = new Set([...op.updates, ...op.creates]);
        const readOnly = [...new Set(op.reads)].filter((id) => !written.has(id)).map(storageOf);
        const updated = [...new Set(op.updates)].map(storageOf);
        let kernel: TimelineEntry;
        const inputs = pin(...readOnly, ...updated);
        try {
          const created = op.creates.map((id) => {
            const storage = newStorage(sizes.get(id)!);
            live.set(id, storage);
            return storage;
          });
          const outputs = pin(...created);
          try {
            const reads = readOnly.map((s) => s.data());
            const writes = [...updated, ...created].map((s) => s.mutableData());
            kernel = device.kernel(op.name || 'op', kernelDurationNs(op, computeModel), { reads, writes });
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
        device.hostWait(kernel.endNs);
      }
      device.synchronize();
      const end = markOf();
      controller.endIteration();
      const endStats = statsOf();
      const reservedPeak = endStats['reserved_bytes.all.peak']!;
      if (budgetBytes !== undefined && reservedPeak > budgetBytes) throw new Error(`Reserved ${reservedPeak} bytes over the budget of ${budgetBytes} in iteration ${i}: the engine broke its promise.`);
      done.push(measure(device.timeline.slice(start.entries, end.entries), start, end, startStats, endStats));
      start = end;
      startStats = endStats;
    }
  } catch (error) {
    if (!isOutOfMemoryError(error)) throw error;
    return { fits: false, error: error.message, iterations: done, reservedPeakBytes: statsOf()['reserved_bytes.all.peak'] ?? 0 };
  }
  return { fits: true, iterations: done, reservedPeakBytes: statsOf()['reserved_bytes.all.peak'] ?? 0 };
}

function measure(entries: readonly TimelineEntry[], start: Mark, end: Mark, startStats: Readonly<Record<string, number>>, endStats: Readonly<Record<string, number>>): AddressOnlyIteration {
  const kernels = entries.filter((e) => e.engine === 'compute');
  const pageOuts = entries.filter((e) => e.engine === 'd2h');
  const pageIns = entries.filter((e) => e.engine === 'h2d');
  const computeBusyNs = end.computeBusyNs - start.computeBusyNs;
  const d2hBusyNs = end.d2hBusyNs - start.d2hBusyNs;
  const h2dBusyNs = end.h2dBusyNs - start.h2dBusyNs;
  return {
    timeNs: end.nowNs - start.nowNs,
    computeBusyNs,
    d2hBusyNs,
    h2dBusyNs,
    d2hBytes: end.d2hBytes - start.d2hBytes,
    h2dBytes: end.h2dBytes - start.h2dBytes,
    hiddenOut: hiddenShare(pageOuts, kernels),
    hiddenIn: hiddenShare(pageIns, kernels),
    boundNs: Math.max(computeBusyNs, d2hBusyNs, h2dBusyNs),
    stats: Object.fromEntries(STAT_KEYS.map((key) => [key, (endStats[key] ?? 0) - (startStats[key] ?? 0)])),
  };
}
