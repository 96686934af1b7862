import type { Plugin, Runtime } from '@stowage/core';
import { cpu, createRuntime, InvalidArgumentError, resolve } from '@stowage/core';
import { cuda } from '@stowage/allocator-cuda';
import { webgpu } from '@stowage/allocator-webgpu';
import type { BuiltInPolicyName, LmsPolicy, SpeculationOptions } from '@stowage/lms';
import { LmsController, lms, PAGING_STAT_KEYS, pin, pinAsync, SPECULATION_STAT_KEYS } from '@stowage/lms';
import { BudgetExceededError } from './BudgetExceededError.js';
import { createCpuOps } from './cpuOps.js';
import { createCudaHostOps } from './cuda/cudaHostOps.js';
import type { MlpSizes, TransformerSizes } from './models.js';
import type { Ops } from './Ops.js';
import { train } from './train.js';
import { createWebGpuOps } from './webgpu/webGpuOps.js';

// The training loop under Large Model Support: one runtime per run (the device's plugin under a budget, and lms()),
// the ops pinning through LMS, and a probe after every op that the allocator stays within the budget.
//
// - CPU ops pin with `pin`; WebGPU and CUDA ops with `pinAsync`, which waits for a page-in whose bytes are still on
//   their way to the host instead of throwing. CUDA ops compute on the host, over device storages (Note [Host
//   compute on CUDA] in cuda/cudaHostOps.ts).
// - The device allocator's `limit` is the budget; LMS adds none of its own. Segments are one per allocation
//   (Note [Segments under a small budget]), with or without a budget, so that a run's peak and a budget under it
//   measure the same thing.
// - The probe reads `reserved_bytes.all.current` after each op; the engine promises it never exceeds the limit,
//   and the probe turns a broken promise into a BudgetExceededError naming the op.
// - Each training step is one iteration of the loop for LMS: after the step's last update (train's `onStep`) the
//   run calls `LmsController#endIteration`, which is how LMS learns the loop when speculation is on, then reads
//   how much each paging and speculation counter grew during the step (`stepStats`).

// Note [Segments under a small budget]: the caching engine's default segments (2 MiB for requests under 1 MiB,
// 20 MiB for 1–10 MiB) are as large as the whole budget of these models (a few MiB): a budget under 2 MiB serves
// nothing, and one just above it holds a single segment that one pinned tensor keeps reserved. `segmentSize:
// (rounded) => rounded` reserves a segment per allocation, so reserved bytes are allocated bytes plus whole cached
// blocks that the engine releases before LMS reclaims anything: a budget of P/8 then means P/8 of tensors.
// Segments of a fixed share of the budget (a quarter down to a sixteenth) ran the deep models on the CPU as well,
// within budget and bit-identical, but a partly filled segment serves a request only where LMS frees a long
// enough run of neighbouring blocks, and they tie the engine's behaviour to the budget, where one segment per
// allocation does not. The WebGPU plugin's own sizing (segments from 416 KiB, growing to an eighth of the budget,
// at least 2 MiB) still shares segments between tensors, so WebGPU runs take one segment per allocation too, and so do CUDA runs, with expandable segments
// off (one segment growing by pages is not one segment per allocation). The README records the measurements. And
// `splitBlocks: false`: a cached block is never split for a smaller request, since a pinned piece would keep its
// whole segment reserved and, under a budget close to one op's working set, end in OutOfMemoryError although the
// op's storages fit on their own (the simulated-time traces of the bench failed that way at P/8 before).

/** One segment per allocation (Note [Segments under a small budget]). */
const segmentPerAllocation = (roundedBytes: number): number => roundedBytes;

/** The model to train and its sizes, as `train` takes them. */
export type LmsRunModel = { readonly model: 'mlp'; readonly sizes?: Partial<MlpSizes> } | { readonly model: 'transformer'; readonly sizes?: Partial<TransformerSizes> };

export interface LmsRunSettings {
  /** The device the model trains on. */
  readonly device: 'cpu' | 'webgpu' | 'cuda';
  /** Optimizer steps (see `train`). */
  readonly steps: number;
  /**
   * The device allocator's budget in bytes; absent, no budget on the CPU, the WebGPU plugin's default (2 GiB), and
   * the CUDA device's memory.
   */
  readonly budgetBytes?: number;
  /** LMS's reclaim policy, by name or as an object (as `lms({ policy })` takes it); 'lru' when absent. */
  readonly policy?: BuiltInPolicyName | LmsPolicy;
  /** LMS's speculative page-out and prefetch, as `lms({ speculation })` takes it; off when absent. */
  readonly speculation?: boolean | SpeculationOptions;
  /** With device 'webgpu': the GPUDevice to run on (the caller owns it; the run leaves it open). */
  readonly gpu?: GPUDevice;
  /** With device 'cuda': where to load libcuda from (as `cuda({ libcuda })` takes it); the plugin's default when absent. */
  readonly libcuda?: string;
  /** Seeds the data and the initial weights; 1 when absent. */
  readonly seed?: number;
  /** SGD learning rate; `train`'s default when absent. */
  readonly lr?: number;
  /** Called after each step (once LMS has been told that the iteration ended) with its index and its loss. */
  readonly onStep?: (step: number, loss: number) => void;
  /** Called with the run's runtime once it exists, before training (to listen to LMS's events, say). */
  readonly onRuntime?: (runtime: Runtime) => void;
}

export type LmsRunOptions = LmsRunSettings & LmsRunModel;

/** The counters of the allocator's `memoryStats()` that `LmsRunResult#stepStats` gives per step: paging and speculation. */
export const STEP_STAT_KEYS = [...PAGING_STAT_KEYS, 'transfer_wait_ms', 'room_wait_ms', 'transfer_poll_ms', ...SPECULATION_STAT_KEYS] as const;
export type StepStatKey = (typeof STEP_STAT_KEYS)[number];

export interface LmsRunResult {
  /** The loss of each step, before its update. */
  readonly losses: number[];
  /** The parameters after the last step, in parameter order. */
  readonly weights: Float32Array[];
  /**
   * Wall-clock milliseconds of each step, from the end of the step before (the first from the start of training,
   * so it includes making the model and uploading its data).
   */
  readonly stepMs: number[];
  /**
   * Per step: how much each counter of STEP_STAT_KEYS grew from the end of the step before (the first step: from
   * the start of training, so it includes making the model) to the end of this one, `endIteration` included.
   */
  readonly stepStats: Readonly<Record<StepStatKey, number>>[];
  /** The device allocator's `memoryStats()` when training ended, with LMS's keys (`page_out`, `pinned_bytes.all.peak`, …). */
  readonly stats: Readonly<Record<string, number>>;
  /** The largest `reserved_bytes.all.current` seen after an op. */
  readonly maxReservedBytes: number;
  /** `pinned_bytes.all.peak`: the most bytes pinned at once, the least budget any policy could run the loop in. */
  readonly pinnedPeakBytes: number;
  /** The ops run (model creation and reading the weights back included). */
  readonly opCount: number;
}

/**
 * Trains a seeded model on the device under LMS, in a runtime of its own (disposed before it returns), checking
 * after every op that the allocator's reserved bytes are within `budgetBytes`.
 * @throws InvalidArgumentError for a budget that is not a positive integer, a device other than 'cpu', 'webgpu' and
 * 'cuda', device 'webgpu' without `gpu`, or bad training options (see `train`); BackendUnavailableError with device
 * 'cuda' when no libcuda can be loaded or it has no device; BudgetExceededError when reserved
 * bytes exceed the budget after an op; OutOfMemoryError when an op's storages cannot be made resident together
 * within the budget (a budget under the pinned peak, say)
 */
export async function runUnderLms(options: LmsRunOptions): Promise<LmsRunResult> {
  const { device, budgetBytes, policy = 'lru', speculation, gpu, libcuda, onStep, onRuntime, steps, seed, lr } = options;
  if (budgetBytes !== undefined && (!Number.isSafeInteger(budgetBytes) || budgetBytes <= 0)) {
    throw new InvalidArgumentError('budgetBytes', budgetBytes, 'a positive whole number of bytes');
  }
  const limit = budgetBytes === undefined ? {} : { limit: budgetBytes };
  let devicePlugin: Plugin;
  if (device === 'cpu') devicePlugin = cpu({ ...limit, segmentSize: segmentPerAllocation, splitBlocks: false });
  else if (device === 'webgpu') {
    if (gpu === undefined) throw new InvalidArgumentError('gpu', gpu, "the GPUDevice to train on, with device 'webgpu'");
    devicePlugin = webgpu({ device: gpu, ...limit, segmentSize: segmentPerAllocation, splitBlocks: false });
  } else if (device === 'cuda') {
    // allocConf '': the run's engine options are these alone, whatever PYTORCH_CUDA_ALLOC_CONF says.
    const library = libcuda === undefined ? {} : { libcuda };
    devicePlugin = cuda({ ...library, allocConf: '', ...limit, segmentSize: segmentPerAllocation, splitBlocks: false, expandableSegments: false });
  } else throw new InvalidArgumentError('device', device, "'cpu', 'webgpu' or 'cuda'");
  const plugins = device === 'cpu' ? [devicePlugin, lms({ policy, speculation })] : [cpu(), devicePlugin, lms({ policy, speculation, devices: [device] })];
  await using runtime = await createRuntime({ plugins });
  onRuntime?.(runtime);
  const allocator = runtime.allocator(device);
  const controller = resolve(runtime.container, LmsController);
  let opCount = 0;
  let maxReservedBytes = 0;
  const afterOp = (): void => {
    opCount++;
    const reservedBytes = allocator.memoryStats()['reserved_bytes.all.current'];
    maxReservedBytes = Math.max(maxReservedBytes, reservedBytes);
    if (budgetBytes !== undefined && reservedBytes > budgetBytes) throw new BudgetExceededError(opCount, reservedBytes, budgetBytes);
  };
  const ops: Ops =
    device === 'cpu'
      ? createCpuOps(runtime, { pin, afterOp })
      : device === 'webgpu'
        ? createWebGpuOps(runtime, { gpu: gpu!, pin: pinAsync, afterOp })
        : createCudaHostOps(runtime, { pin: pinAsync, afterOp });
  const stepMs: number[] = [];
  const stepStats: Record<StepStatKey, number>[] = [];
  let countersBefore = countersOf(allocator.memoryStats());
  let stepStart = performance.now();
  const model: LmsRunModel = options.model === 'mlp' ? { model: 'mlp', sizes: options.sizes } : { model: 'transformer', sizes: options.sizes };
  const { losses, weights } = await train({
    ...model,
    ops,
    steps,
    seed,
    lr,
    // Making the model is not an iteration of the loop: LMS learns from the first step on (its sequence is the
    // second's) and predicts from the second.
    onStart: () => controller.endIteration(),
    onStep: (step, loss) => {
      controller.endIteration();
      const now = performance.now();
      stepMs.push(now - stepStart);
      stepStart = now;
      const counters = countersOf(allocator.memoryStats());
      stepStats.push(Object.fromEntries(STEP_STAT_KEYS.map((key) => [key, counters[key] - countersBefore[key]])) as Record<StepStatKey, number>);
      countersBefore = counters;
      onStep?.(step, loss);
    },
  });
  const stats: Readonly<Record<string, number>> = allocator.memoryStats();
  return { losses, weights, stepMs, stepStats, stats, maxReservedBytes, pinnedPeakBytes: stats['pinned_bytes.all.peak'] ?? 0, opCount };
}

/** The counters of STEP_STAT_KEYS in `stats` (0 for one it lacks). */
function countersOf(stats: Readonly<Record<string, number>>): Record<StepStatKey, number> {
  return Object.fromEntries(STEP_STAT_KEYS.map((key) => [key, stats[key] ?? 0])) as Record<StepStatKey, number>;
}

/**
 * The peak reserved bytes of the training loop without a budget, under the same runtime as `runUnderLms` (LMS on,
 * one segment per allocation): the P that budgets are fractions of.
 * @throws as `runUnderLms`
 */
export async function unconstrainedPeak(options: Omit<LmsRunSettings, 'budgetBytes' | 'policy'> & LmsRunModel): Promise<number> {
  const { stats } = await runUnderLms(options);
  return stats['reserved_bytes.all.peak']!;
}
