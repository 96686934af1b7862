import * as tf from '@tensorflow/tfjs-core';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import type { Runtime, StorageImpl } from '@stowage/core';
import { createRuntime } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { webgpu } from '@stowage/allocator-webgpu';
import { lms } from '@stowage/lms';
import { registerStowageWebGpuBackend, StowageWebGpuBackend, SynchronousStepPolicy } from '@stowage/tfjs-webgpu';
import { DeviceMemoryCounter } from '../browser/DeviceMemoryCounter.js';
import { kernelWorkingSet } from './lmsRuns.js';
import type { GraphModelLike, RealModel, RealModelRun } from './realModels.js';
import { predictRealModel } from './realModels.js';


/** Where a real model runs: tfjs's own backend, Stowage's without LMS, or Stowage's under LMS with a budget. */
export type RealBackend =
  | { readonly kind: 'stock' }
  | { readonly kind: 'stowage' }
  /**
   * `segments`: `'shared'` (default) the default segment sizing; `'own'` one segment per allocation, never split.
   * `pagingReserve`: the webgpu plugin's option (default here {@link REAL_PAGING_RESERVE}).
   */
  | { readonly kind: 'lms'; readonly budgetBytes: number; readonly segments?: 'own' | 'shared'; readonly pagingReserve?: { readonly fraction: number } };

/**
 * The share of the budget the real models' LMS runs keep for page-out staging: their uploads are clean (Note
 * [Clean uploads] in @stowage/tfjs-webgpu), so few page-outs happen, and the rest of the budget is the tensors'.
 */
export const REAL_PAGING_RESERVE = { fraction: 1 / 16 } as const;

/** What `runReal` measured. */
export interface RealRun {
  /** The last prediction (absent when the run failed). */
  readonly run?: RealModelRun;
  /** Every prediction gave the first one's bits. */
  readonly stable: boolean;
  readonly error?: unknown;
  /** The device's peak bytes from before the backend was made (every GPUBuffer: DeviceMemoryCounter). */
  readonly peakGpuBytes: number;
  /** createBuffer calls at the device over the whole run (load, the untimed prediction, the timed ones). */
  readonly createBufferCalls: number;
  /** Of those, buffers with STORAGE usage and with UNIFORM usage. */
  readonly storageCalls: number;
  readonly uniformCalls: number;
  /** Milliseconds of each timed prediction. */
  readonly msPerPrediction: readonly number[];
  /** The allocator's statistics at the end (Stowage only). */
  readonly stats?: Readonly<Record<string, number>>;
}

/**
 * Runs a real model on `backend`: loads it with `load` (weights go to the device at the first prediction), one
 * untimed prediction, then `predictions` timed ones; counts the device's buffers from before the backend exists.
 * Under LMS the runtime is `webgpu({ limit: budgetBytes, pagingReserve })` (default segments) and
 * `lms({ policy: new SynchronousStepPolicy() })`; each prediction's `data()` is its async point.
 */
export async function runReal(context: WebGpuContext, model: RealModel, load: () => Promise<GraphModelLike>, backend: RealBackend, predictions: number): Promise<RealRun> {
  const counter = new DeviceMemoryCounter(context.device).install();
  let runtime: Runtime | undefined;
  let run: RealModelRun | undefined;
  let stable = true;
  let error: unknown;
  let stats: Record<string, number> | undefined;
  const msPerPrediction: number[] = [];
  try {
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
    if (backend.kind === 'stock') tf.registerBackend('webgpu', () => new WebGPUBackend(context.device));
    else {
      const plugins =
        backend.kind === 'lms'
          ? [
              backend.segments === 'own'
                ? webgpu({ device: context.device, limit: backend.budgetBytes, pagingReserve: backend.pagingReserve ?? REAL_PAGING_RESERVE, segmentSize: (rounded: number) => rounded, splitBlocks: false })
                : webgpu({ device: context.device, limit: backend.budgetBytes, pagingReserve: backend.pagingReserve ?? REAL_PAGING_RESERVE }),
              lms({ policy: new SynchronousStepPolicy(), devices: ['webgpu'] }),
            ]
          : [webgpu({ device: context.device, limit: '2GiB' })];
      runtime = await createRuntime({ plugins });
      await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
    }
    if (!(await tf.setBackend('webgpu'))) throw new Error(`tfjs could not initialize the ${backend.kind} webgpu backend`);
    const graph = await load();
    try {
      const first = await predictRealModel(model, graph);
      run = first;
      for (let i = 0; i < predictions; i++) {
        const started = performance.now();
        run = await predictRealModel(model, graph);
        msPerPrediction.push(performance.now() - started);
        stable &&= sameBits(run, first);
      }
    } finally {
      graph.dispose();
    }
  } catch (caught) {
    error = caught;
  }
  try {
    if (runtime !== undefined) stats = runtime.allocator('webgpu').memoryStats() as Record<string, number>;
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
  } finally {
    await runtime?.dispose();
    counter.uninstall();
  }
  const figures = { stable, peakGpuBytes: counter.peakBytes, createBufferCalls: counter.calls, storageCalls: counter.storageCalls, uniformCalls: counter.uniformCalls, msPerPrediction, ...(stats === undefined ? {} : { stats }) };
  return error === undefined ? { run, ...figures } : { error, ...figures };
}

/** Whether two predictions have the same bits. */
export function sameBits(a: RealModelRun, b: RealModelRun): boolean {
  return a.outputBytes.byteLength === b.outputBytes.byteLength && a.outputBytes.every((x, i) => x === b.outputBytes[i]);
}

/** A real model's floor under LMS and what it is made of. */
export interface RealFloor {
  /** The floor: the most tensor bytes that must stay on the device at once within one prediction (see `realFloor`). */
  readonly floorBytes: number;
  /** The largest single kernel's inputs and output (bytes, in blocks): a lower bound of the floor. */
  readonly largestKernelBytes: number;
  /** Kernels one prediction runs. */
  readonly kernels: number;
}

/**
 * The floor of any LMS budget for one prediction of a real model (Note [LMS inside a synchronous step] in
 * @stowage/tfjs-webgpu): a prediction is one synchronous stretch between two async points, so a tensor it writes
 * has no host copy before it returns and must stay on the device until it is no longer needed. At each kernel, the
 * bytes of its inputs and output plus every tensor written earlier in the prediction that a later kernel reads or
 * that is still alive when the prediction returns (its outputs, until `data()` reads them); the most over the
 * kernels. Weights and the input are uploaded from host values (clean: LMS may drop them and write them back at
 * once), so they count only where a kernel reads them. Recorded on the second prediction, on Stowage without a
 * budget; sizes rounded to the engine's blocks.
 */
export async function realFloor(context: WebGpuContext, model: RealModel, load: () => Promise<GraphModelLike>): Promise<RealFloor> {
  const runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '2GiB' })] });
  const kernels: { inputs: StorageImpl[]; output: StorageImpl | undefined; outputId: object }[] = [];
  let recording = false;
  let aliveAtEnd = new Set<StorageImpl>();
  try {
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
    await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
    if (!(await tf.setBackend('webgpu'))) throw new Error('tfjs could not initialize the Stowage backend');
    const backend = tf.backend() as StowageWebGpuBackend;
    const map = (backend as unknown as { tensorMap: { get(id: object): { resource: unknown }; has(id: object): boolean } }).tensorMap;
    const storageOf = (t: tf.TensorInfo): StorageImpl | undefined => {
      const resource = map.get(t.dataId).resource;
      return resource instanceof Object && 'byteLength' in resource ? (resource as StorageImpl) : undefined;
    };
    const original = backend.runWebGPUProgram.bind(backend);
    backend.runWebGPUProgram = (program, inputs, outputDtype, uniform, output) => {
      const result = original(program, inputs, outputDtype, uniform, output);
      if (recording) kernels.push({ inputs: inputs.map(storageOf).filter((s) => s !== undefined), output: storageOf(result), outputId: result.dataId });
      return result;
    };
    const graph = await load();
    const recorded: GraphModelLike = {
      execute: (input) => {
        recording = true;
        try {
          return graph.execute(input);
        } finally {
          recording = false;
          // tfjs's tensors still alive: tfjs disposes a tensor that recorded work uses only at the submit.
          backend.ensureCommandEncoderReady();
          backend.endComputePassEncoder();
          backend.submitQueue();
          aliveAtEnd = new Set(kernels.filter((k) => k.output !== undefined && map.has(k.outputId)).map((k) => k.output!));
        }
      },
      dispose: () => graph.dispose(),
    };
    try {
      await predictRealModel(model, graph);
      await predictRealModel(model, recorded);
    } finally {
      graph.dispose();
    }
  } finally {
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
    await runtime.dispose();
  }
  const { maxBytes: floorBytes, largestKernelBytes } = kernelWorkingSet(kernels, aliveAtEnd);
  return { floorBytes, largestKernelBytes, kernels: kernels.length };
}

/** True when a run under LMS gave `expected`'s bits on every prediction. */
export function runsLike(run: RealRun, expected: RealModelRun): boolean {
  return run.error === undefined && run.run !== undefined && run.stable && sameBits(run.run, expected);
}

/** Per-prediction times of stock and Stowage, in rounds that alternate them in one process. */
export interface AlternatingTimes {
  readonly stockMs: readonly number[];
  readonly stowageMs: readonly number[];
  /** The median over rounds of Stowage's time over stock's in the same round. */
  readonly ratioMedian: number;
  /** Every prediction on both backends gave the same bits. */
  readonly sameBits: boolean;
}

/** The name the Stowage backend has beside stock's `'webgpu'` while `alternatingTimes` runs. */
const STOWAGE_BESIDE = 'stowage-webgpu';

/**
 * Times one prediction per backend per round, `rounds` rounds, with tfjs's own backend and Stowage's (no LMS)
 * alive at once on the same device (Stowage's under a name of its own with tfjs's WebGPU kernels), each with the
 * model loaded and one untimed prediction made (shaders compiled); the backend that goes first alternates between
 * rounds. Judged by the median of the per-round ratios (this machine's noise between single runs is ±20 %).
 */
export async function alternatingTimes(context: WebGpuContext, model: RealModel, load: () => Promise<GraphModelLike>, rounds: number): Promise<AlternatingTimes> {
  const runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '2GiB' })] });
  const names = ['webgpu', STOWAGE_BESIDE] as const;
  const graphs = new Map<string, GraphModelLike>();
  const ms: Record<string, number[]> = { webgpu: [], [STOWAGE_BESIDE]: [] };
  let sameBitsSoFar = true;
  try {
    await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive }); // the WebGPU globals in Node
    tf.removeBackend('webgpu');
    tf.registerBackend('webgpu', () => new WebGPUBackend(context.device));
    tf.registerBackend(STOWAGE_BESIDE, () => new StowageWebGpuBackend(runtime));
    for (const kernel of tf.getKernelsForBackend('webgpu')) tf.registerKernel({ ...kernel, backendName: STOWAGE_BESIDE });
    let first: RealModelRun | undefined;
    for (const name of names) {
      if (!(await tf.setBackend(name))) throw new Error(`tfjs could not initialize the ${name} backend`);
      const graph = await load();
      graphs.set(name, graph);
      const run = await predictRealModel(model, graph);
      first ??= run;
      sameBitsSoFar &&= sameBits(run, first);
    }
    for (let round = 0; round < rounds; round++) {
      for (const name of round % 2 === 0 ? names : [...names].reverse()) {
        await tf.setBackend(name);
        const started = performance.now();
        const run = await predictRealModel(model, graphs.get(name)!);
        ms[name]!.push(performance.now() - started);
        sameBitsSoFar &&= sameBits(run, first!);
      }
    }
  } finally {
    for (const [name, graph] of graphs) {
      await tf.setBackend(name);
      graph.dispose();
    }
    for (const kernel of tf.getKernelsForBackend(STOWAGE_BESIDE)) tf.unregisterKernel(kernel.kernelName, STOWAGE_BESIDE);
    for (const name of names) if (tf.findBackendFactory(name) != null) tf.removeBackend(name);
    await runtime.dispose();
  }
  const ratios = ms[STOWAGE_BESIDE]!.map((x, i) => x / ms['webgpu']![i]!).sort((a, b) => a - b);
  return { stockMs: ms['webgpu']!, stowageMs: ms[STOWAGE_BESIDE]!, ratioMedian: ratios[Math.floor(ratios.length / 2)]!, sameBits: sameBitsSoFar };
}
