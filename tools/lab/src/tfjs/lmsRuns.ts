import * as tf from '@tensorflow/tfjs-core';
import type { Runtime, StorageImpl } from '@stowage/core';
import { createRuntime } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { webgpu } from '@stowage/allocator-webgpu';
import { lms } from '@stowage/lms';
import { registerStowageWebGpuBackend, StowageWebGpuBackend, SynchronousStepPolicy } from '@stowage/tfjs-webgpu';
import { DeviceMemoryCounter } from '../browser/DeviceMemoryCounter.js';
import type { Model, ModelRun } from './models.js';
import { runModel } from './models.js';
import { onBackend } from './onBackend.js';

/** The caching engine's block rounding (bytes): a budget holds whole blocks. */
const BLOCK_BYTES = 512;

/** A run of a model on tfjs's own backend and what it held on the device. */
export interface StockRun {
  readonly run: ModelRun;
  /** The device's peak bytes while it ran (every createBuffer and destroy, staging and tfjs's pools included). */
  readonly peakGpuBytes: number;
  /** tfjs's bytes of live tensors (`numBytesInGPU`) at their largest, sampled after every kernel. */
  readonly peakTensorBytes: number;
}

/** Runs the model on tfjs's own backend, counting its buffers at the device. */
export async function runStock(context: WebGpuContext, make: () => Model, steps: number): Promise<StockRun> {
  const counter = new DeviceMemoryCounter(context.device).install();
  let peakTensorBytes = 0;
  try {
    const run = await onBackend(context, 'stock', (backend) => {
      const original = backend.runWebGPUProgram.bind(backend);
      backend.runWebGPUProgram = (...args) => {
        const result = original(...args);
        peakTensorBytes = Math.max(peakTensorBytes, backend.memory().numBytesInGPU);
        return result;
      };
      return runModel(make, steps);
    });
    return { run, peakGpuBytes: counter.peakBytes, peakTensorBytes };
  } finally {
    counter.uninstall();
  }
}

/** What a run under LMS produced: the run, or the error that stopped it, and the allocator's statistics. */
export interface LmsRun {
  readonly run?: ModelRun;
  readonly error?: unknown;
  readonly stats: Readonly<Record<string, number>>;
}

/**
 * Runs the model on the Stowage backend under LMS (`SynchronousStepPolicy`) with a budget of `budgetBytes` (the
 * webgpu plugin's `limit`; one segment per allocation, never split, so that the budget is tensor bytes: Note
 * [Segments under a small budget] in examples/train), ending every step with `endLmsStep()`. `body`, when given,
 * runs instead of the model (with the backend and runtime). `withLms` false: the same runtime without `lms()`.
 * `splitSteps`: each training step has an async point between its gradients and its update (`runModel`'s `midStep`).
 */
export async function runUnderLms(
  context: WebGpuContext,
  make: () => Model,
  steps: number,
  budgetBytes: number,
  body?: (backend: StowageWebGpuBackend, runtime: Runtime) => Promise<void>,
  withLms = true,
  splitSteps = false,
): Promise<LmsRun> {
  const device = webgpu({ device: context.device, limit: budgetBytes, segmentSize: (rounded: number) => rounded, splitBlocks: false });
  const runtime = await createRuntime({ plugins: withLms ? [device, lms({ policy: new SynchronousStepPolicy(), devices: ['webgpu'] })] : [device] });
  let run: ModelRun | undefined;
  let error: unknown;
  try {
    await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
    if (!(await tf.setBackend('webgpu'))) throw new Error('tfjs could not initialize the Stowage backend');
    const backend = tf.backend();
    if (!(backend instanceof StowageWebGpuBackend)) throw new Error('expected the Stowage backend');
    if (body !== undefined) await body(backend, runtime);
    else run = await runModel(make, steps, () => backend.endLmsStep(), () => backend.lmsSettle(), splitSteps ? () => backend.lmsSettle() : undefined);
  } catch (caught) {
    error = caught;
  }
  const stats = runtime.allocator('webgpu').memoryStats();
  try {
    tf.removeBackend('webgpu');
  } finally {
    await runtime.dispose();
  }
  return error === undefined ? { run, stats } : { error, stats };
}

/** Whether two runs are bit-identical: prediction, losses and trained weights. */
export function isSameRun(a: ModelRun, b: ModelRun): boolean {
  const bits = (x: Float32Array | number[]): Buffer => Buffer.from(Float32Array.from(x).buffer);
  return bits(a.prediction).equals(bits(b.prediction)) && bits(a.losses).equals(bits(b.losses)) && bits(a.weights).equals(bits(b.weights));
}

/**
 * The smallest budget (in `resolutionBytes` steps, between `lowBytes` and `highBytes`) under which the model runs
 * under LMS to `expected`'s bits, by bisection (assuming a budget that runs makes every larger one run); null when
 * even `highBytes` does not.
 */
export async function smallestLmsBudget(
  context: WebGpuContext,
  make: () => Model,
  steps: number,
  expected: ModelRun,
  lowBytes: number,
  highBytes: number,
  resolutionBytes = 4096,
): Promise<number | null> {
  const runs = async (budget: number): Promise<boolean> => {
    const { run } = await runUnderLms(context, make, steps, budget);
    return run !== undefined && isSameRun(run, expected);
  };
  if (!(await runs(highBytes))) return null;
  let [fails, works] = [lowBytes, highBytes];
  while (works - fails > resolutionBytes) {
    const mid = Math.round((fails + works) / 2 / BLOCK_BYTES) * BLOCK_BYTES;
    if (await runs(mid)) works = mid;
    else fails = mid;
  }
  return works;
}

/** One kernel's tensors, as `runWebGPUProgram` saw them. */
export interface KernelRecord {
  readonly inputs: readonly StorageImpl[];
  readonly output: StorageImpl | undefined;
}

/** The in-step working set of a model's steps (see `inStepWorkingSet`), per step, and the step at its largest. */
export interface WorkingSet {
  readonly perStepBytes: readonly number[];
  readonly maxBytes: number;
}

/**
 * The in-step working set of the model's training steps, the floor of any budget a synchronous step can run in
 * (Note [LMS inside a synchronous step]): for each kernel of a step, the bytes of its inputs and output (they
 * must be resident) plus the bytes of every tensor made earlier in the same step (dirty: no host copy can exist
 * before the step returns to the event loop) that a later kernel of the step reads; the largest over the step's
 * kernels. Sizes rounded to the engine's blocks. Recorded on the Stowage backend without a budget; the
 * prediction before training is left out. `splitSteps`: each step is two stretches (an async point between its
 * gradients and its update), each its own working set; `perStepBytes` then lists both.
 */
export async function inStepWorkingSet(context: WebGpuContext, make: () => Model, steps: number, splitSteps = false): Promise<WorkingSet> {
  const kernelsPerStep: KernelRecord[][] = [];
  let current: KernelRecord[] | null = null;
  await onBackend(context, 'stowage', async (backend) => {
    const stowage = backend as unknown as StowageWebGpuBackend;
    const map = (stowage as unknown as { tensorMap: { get(id: object): { resource: unknown } } }).tensorMap;
    const storageOf = (t: tf.TensorInfo): StorageImpl | undefined => map.get(t.dataId).resource as StorageImpl | undefined;
    const original = stowage.runWebGPUProgram.bind(stowage);
    stowage.runWebGPUProgram = (program, inputs, outputDtype, uniform, output) => {
      const result = original(program, inputs, outputDtype, uniform, output);
      current?.push({ inputs: inputs.map(storageOf).filter((s) => s !== undefined), output: storageOf(result) });
      return result;
    };
    const boundary = async (): Promise<void> => {
      if (current !== null) kernelsPerStep.push(current);
      current = [];
    };
    await runModel(make, steps, boundary, boundary, splitSteps ? boundary : undefined);
  });
  const perStepBytes = kernelsPerStep.map((kernels) => kernelWorkingSet(kernels).maxBytes);
  return { perStepBytes, maxBytes: Math.max(...perStepBytes) };
}

/**
 * The most bytes a stretch of kernels keeps on the device at once: at each kernel its inputs and output, and every
 * storage made by an earlier kernel that a later one reads (storages of `aliveAtEnd` count as read after the last
 * kernel); and the largest kernel's own inputs and output. Bytes are rounded to the engine's 512-byte blocks.
 */
export function kernelWorkingSet(kernels: readonly KernelRecord[], aliveAtEnd: Iterable<StorageImpl> = []): { maxBytes: number; largestKernelBytes: number } {
  const rounded = (s: StorageImpl): number => Math.ceil(s.byteLength / BLOCK_BYTES) * BLOCK_BYTES;
  const madeAt = new Map<StorageImpl, number>();
  const lastReadAt = new Map<StorageImpl, number>();
  kernels.forEach((k, i) => {
    if (k.output !== undefined && !madeAt.has(k.output)) madeAt.set(k.output, i);
    for (const s of k.inputs) lastReadAt.set(s, i);
  });
  for (const s of aliveAtEnd) lastReadAt.set(s, kernels.length);
  let maxBytes = 0;
  let largestKernelBytes = 0;
  kernels.forEach((k, i) => {
    const own = new Set<StorageImpl>(k.inputs);
    if (k.output !== undefined) own.add(k.output);
    let bytes = 0;
    for (const s of own) bytes += rounded(s);
    largestKernelBytes = Math.max(largestKernelBytes, bytes);
    for (const [s, made] of madeAt) if (made < i && !own.has(s) && (lastReadAt.get(s) ?? -1) > i) bytes += rounded(s);
    maxBytes = Math.max(maxBytes, bytes);
  });
  return { maxBytes, largestKernelBytes };
}
