// The entry of the tfjs suite's browser bundle (dist-browser/tfjs-suite.js, built by test/tfjsSuite/BrowserSuite.ts):
// `window.runTfjsSuite(backend, filter)` runs tfjs-core's published test suite (dist/tests.js) in the page, with
// jasmine-core booted in the page, on tfjs's own WebGPU backend ('stock') or on Stowage's ('stowage'), on a device
// from `navigator.gpu`, and reports what passed and failed — what test/tfjsSuite/suiteMain.ts does in Node. One
// backend per page load: tfjs's suite declares its specs once, under the environment set before it loads.
import 'reflect-metadata';
import { findBackendFactory, registerBackend, removeBackend } from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-core/dist/register_all_gradients.js';
import '@tensorflow/tfjs-core/dist/public/chained_ops/register_all_chained_ops.js';
import { setTestEnvs } from '@tensorflow/tfjs-core/dist/jasmine_util.js';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import jasmineRequire from 'jasmine-core/lib/jasmine-core/jasmine.js';
import { createRuntime } from '@stowage/core';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import { registerStowageWebGpuBackend } from '@stowage/tfjs-webgpu';
import type { SuiteResult } from '../test/tfjsSuite/SuiteResult.js';

declare global {
  interface Window {
    runTfjsSuite(backend: 'stock' | 'stowage', filter: readonly string[] | null): Promise<SuiteResult | { readonly unavailable: string }>;
  }
}

/** What the suite needs of jasmine-core 5's boot: the env and the globals (describe, it, expect, …). */
interface JasmineCore {
  readonly DEFAULT_TIMEOUT_INTERVAL: number;
  getEnv(): JasmineEnv;
}

interface JasmineEnv {
  configure(options: { random?: boolean; specFilter?: (spec: { getFullName(): string }) => boolean }): void;
  addReporter(reporter: object): void;
  execute(): Promise<unknown>;
}

interface SpecResult {
  readonly fullName: string;
  readonly status: string;
  readonly failedExpectations: readonly { readonly message: string }[];
}

window.runTfjsSuite = async (backend, filter) => {
  if (!navigator.gpu || (await navigator.gpu.requestAdapter()) === null) return { unavailable: navigator.gpu ? 'navigator.gpu gave no adapter' : 'no navigator.gpu' };
  const core = (jasmineRequire as { core(r: unknown): JasmineCore & { DEFAULT_TIMEOUT_INTERVAL: number } }).core(jasmineRequire);
  core.DEFAULT_TIMEOUT_INTERVAL = 120_000; // first compiles of a kernel on a software device are slow
  const env = core.getEnv();
  Object.assign(globalThis, (jasmineRequire as { interface(j: unknown, e: unknown): object }).interface(core, env));
  env.configure({
    random: false,
    // A describeWithFlags block named N has specs named "N webgpu {flags} …".
    ...(filter === null ? {} : { specFilter: (spec) => filter.some((name) => spec.getFullName().startsWith(`${name} webgpu `)) }),
  });

  const context = await openWebGpuDevice();
  if (findBackendFactory('webgpu') != null) removeBackend('webgpu');
  if (backend === 'stock') registerBackend('webgpu', () => new WebGPUBackend(context.device), 3);
  else {
    const runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '4GiB' })] });
    await registerStowageWebGpuBackend(runtime);
  }
  // As in Node (suiteMain.ts), without readSync: tfjs's reads through a canvas here, and in a whole-suite run of the
  // stock backend they break its device after a few hundred specs (every later createBuffer of a mapped buffer
  // fails), which would make the two runs incomparable. test/browser/TfjsBrowserChecks.test.ts checks dataSync.
  setTestEnvs([{ name: 'webgpu', backendName: 'webgpu', flags: { WEBGPU_CPU_FORWARD: false }, isDataSync: false }]);

  const result: SuiteResult = { backend, adapter: context.adapterInfo, passed: [], failed: [], pending: 0, wallMs: 0 };
  env.addReporter({
    specDone(spec: SpecResult) {
      if (spec.status === 'passed') result.passed.push(spec.fullName);
      else if (spec.status === 'failed') result.failed.push({ name: spec.fullName, message: spec.failedExpectations[0]?.message ?? '' });
      else if (spec.status === 'pending') result.pending++;
    },
    suiteDone(suite: SpecResult) {
      if (suite.status === 'failed') result.failed.push({ name: `${suite.fullName} (suite)`, message: suite.failedExpectations[0]?.message ?? '' });
    },
  });
  await import('@tensorflow/tfjs-core/dist/tests.js'); // declares the specs under the environment set above
  const started = performance.now();
  await env.execute();
  result.wallMs = Math.round(performance.now() - started);
  context.device.destroy();
  return result;
};
