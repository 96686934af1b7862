// Applications import reflect-metadata first (STYLE.md §5): tsyringe in core needs it before it loads.
import 'reflect-metadata';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-core/dist/register_all_gradients.js';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { createRuntime } from '@stowage/core';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import type { StorageImpl } from '@stowage/core';
import { lms } from '@stowage/lms';
import { registerStowageWebGpuBackend, StowageWebGpuBackend, SynchronousStepPolicy } from '@stowage/tfjs-webgpu';
import type { Model, ModelRun } from '@stowage/lab/tfjs';
import { budgetAt, DeviceMemoryCounter, mlp, MODELS, runModel } from '@stowage/lab/tfjs';
import type { TfjsBrowserLmsResult, TfjsBrowserModelResult, TfjsBrowserReport } from './TfjsBrowserReport.js';

/**
 * The entry of the tfjs browser bundle (dist-browser/stowage-tfjs-checks.js, built by
 * test/browser/TfjsBrowserChecks.test.ts). `window.runStowageTfjsBrowserChecks()` opens a device through
 * `navigator.gpu` and runs each model of @stowage/lab/tfjs (predict, then 5 Adam steps) on tfjs's own WebGPU backend
 * and on the Stowage backend, both on that device, and reports whether the results are bit-identical; then the
 * mlp under LMS at 0.7 of stock's peak GPU bytes (Note [LMS inside a synchronous step]; its smallest budget in
 * Node is 0.672: Note [Budgets of a synchronous step under one budget] in test/StowageWebGpuBackendLms.test.ts).
 */

declare global {
  interface Window {
    runStowageTfjsBrowserChecks(): Promise<TfjsBrowserReport>;
  }
}

const sameBits = (a: Float32Array | number[], b: Float32Array | number[]): boolean => {
  const x = new Uint32Array(Float32Array.from(a).buffer);
  const y = new Uint32Array(Float32Array.from(b).buffer);
  return x.length === y.length && x.every((v, i) => v === y[i]);
};

window.runStowageTfjsBrowserChecks = async (): Promise<TfjsBrowserReport> => {
  const started = performance.now();
  const adapter = navigator.gpu ? await navigator.gpu.requestAdapter() : null;
  if (adapter === null) {
    const unavailable = navigator.gpu ? 'navigator.gpu gave no adapter' : 'no navigator.gpu';
    return { userAgent: navigator.userAgent, unavailable, adapter: null, models: [], dataSync: { sameAsData: false }, elapsedMs: 0 };
  }
  const context = await openWebGpuDevice();
  const device = context.device;
  tf.env().set('WEBGPU_CPU_FORWARD', false);
  const models: TfjsBrowserModelResult[] = [];
  for (const { name, make } of MODELS) {
    try {
      if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu'); // tfjs's own registration, at first
      tf.registerBackend('webgpu', () => new WebGPUBackend(device));
      await tf.setBackend('webgpu');
      const stock: ModelRun = await runModel(make, 5);
      tf.removeBackend('webgpu');
      const runtime = await createRuntime({ plugins: [webgpu({ device, limit: '1GiB' })] });
      await registerStowageWebGpuBackend(runtime);
      await tf.setBackend('webgpu');
      device.pushErrorScope('validation');
      const stowage = await runModel(make, 5);
      const validation = await device.popErrorScope();
      tf.removeBackend('webgpu');
      await runtime.dispose();
      models.push({
        name,
        samePrediction: sameBits(stowage.prediction, stock.prediction),
        sameLosses: sameBits(stowage.losses, stock.losses),
        sameWeights: sameBits(stowage.weights, stock.weights),
        losses: stowage.losses,
        validationError: validation?.message ?? null,
      });
    } catch (error) {
      models.push({ name, samePrediction: false, sameLosses: false, sameWeights: false, losses: [], validationError: null, error: String(error) });
    }
  }
  const lmsResult = await runUnderLmsAtSmallBudget(device, 'mlp', mlp);
  // Last: run before the LMS run, tfjs's read through canvases left the page's GPU connection broken for it here
  // (headless Chromium on SwiftShader: "A valid external Instance reference no longer exists" at its first mapAsync).
  const dataSync = await checkDataSync(device);
  const info = (adapter as GPUAdapter & { info?: GPUAdapterInfo }).info;
  device.destroy();
  return {
    userAgent: navigator.userAgent,
    adapter: [info?.vendor, info?.architecture].filter(Boolean).join(' ') || 'adapter',
    models,
    dataSync,
    lms: lmsResult,
    elapsedMs: Math.round(performance.now() - started),
  };
};

/** `dataSync()` on the Stowage backend of a matMul's output and inputs (the largest offset in a segment reported): `data()`'s values. */
async function checkDataSync(device: GPUDevice): Promise<TfjsBrowserReport['dataSync']> {
  const runtime = await createRuntime({ plugins: [webgpu({ device, limit: '1GiB' })] });
  try {
    await registerStowageWebGpuBackend(runtime);
    await tf.setBackend('webgpu');
    const a = tf.tensor2d(Float32Array.from({ length: 64 * 48 }, (_, i) => (i % 13) - 6), [64, 48]);
    const b = tf.tensor2d(Float32Array.from({ length: 48 * 32 }, (_, i) => (i % 7) - 3), [48, 32]);
    const y = tf.matMul(a, b); // tfjs allocates y, then uploads a and b: a and b lie after y in the segment
    const backend = tf.backend() as unknown as StowageWebGpuBackend;
    const offsetOf = (t: tf.Tensor): number => backend.storageManager.allocator.bindingOf((backend.tensorMap.get(t.dataId).resource as StorageImpl).data()).offset;
    let same = true;
    let offset = 0;
    for (const t of [y, a, b]) {
      if (backend.tensorMap.get(t.dataId).values != null) throw new Error('a tensor kept its values on the CPU: dataSync would not read the GPU');
      offset = Math.max(offset, offsetOf(t));
      const synchronous = t.dataSync();
      same &&= sameBits(synchronous as Float32Array, (await t.data()) as Float32Array);
    }
    tf.dispose([a, b, y]);
    return { sameAsData: same, offset };
  } catch (error) {
    return { sameAsData: false, error: String(error) };
  } finally {
    tf.removeBackend('webgpu');
    await runtime.dispose();
  }
}

/** The model on stock tfjs (its peak GPU bytes counted), then under LMS with 0.7 of that peak as the budget. */
async function runUnderLmsAtSmallBudget(device: GPUDevice, name: string, make: () => Model): Promise<TfjsBrowserLmsResult> {
  let stockPeakGpuBytes = 0;
  let budgetBytes = 0;
  try {
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
    tf.registerBackend('webgpu', () => new WebGPUBackend(device));
    await tf.setBackend('webgpu');
    const counter = new DeviceMemoryCounter(device).install();
    const stock = await runModel(make, 5);
    counter.uninstall();
    tf.removeBackend('webgpu');
    stockPeakGpuBytes = counter.peakBytes;
    budgetBytes = budgetAt(stockPeakGpuBytes, 0.7);
    const runtime = await createRuntime({
      plugins: [
        webgpu({ device, limit: budgetBytes, segmentSize: (rounded: number) => rounded, splitBlocks: false }),
        lms({ policy: new SynchronousStepPolicy(), devices: ['webgpu'] }),
      ],
    });
    try {
      await registerStowageWebGpuBackend(runtime);
      await tf.setBackend('webgpu');
      const backend = tf.backend() as StowageWebGpuBackend;
      const run = await runModel(make, 5, () => backend.endLmsStep(), () => backend.lmsSettle());
      const stats = runtime.allocator('webgpu').memoryStats() as unknown as Record<string, number>;
      const same = sameBits(run.prediction, stock.prediction) && sameBits(run.losses, stock.losses) && sameBits(run.weights, stock.weights);
      return { name, stockPeakGpuBytes, budgetBytes, same, reservedPeakBytes: stats['reserved_bytes.all.peak'] ?? -1, pageIns: stats['page_in'] ?? 0 };
    } finally {
      tf.removeBackend('webgpu');
      await runtime.dispose();
    }
  } catch (error) {
    return { name, stockPeakGpuBytes, budgetBytes, same: false, reservedPeakBytes: -1, pageIns: 0, error: String(error) };
  }
}
