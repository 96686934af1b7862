// The entry of the tfjs suite's browser bundle (dist-browser/tfjs-suite.js, built by test/tfjsSuite/BrowserSuite.ts):
// `window.runTfjsSuite(backend, selection)` runs tfjs-core's published test suite (dist/tests.js) in the page, with
// jasmine-core booted in the page, on tfjs's own WebGPU backend ('stock') or on Stowage's ('stowage'), on a device
// from `navigator.gpu`, and reports what passed and failed — what test/tfjsSuite/suiteMain.ts does in Node — and
// the top-level suite during which the device was lost, if it was (Note [Device loss in the browser suite] in
// BrowserSuite.ts). `window.listTfjsSuites()` names the suite's top-level suites in order. One run per page load:
// tfjs's suite declares its specs once, under the environment set before it loads.
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
import type { SpecResult } from '../test/tfjsSuite/suiteReporter.js';
import { specsOfBlocks, suiteReporter } from '../test/tfjsSuite/suiteReporter.js';

/**
 * Which specs run: those of tfjs's describeWithFlags blocks of these names (`'matmul'`), or those of these
 * top-level suites (full descriptions, as `listTfjsSuites` gives them), or all (null).
 */
export type SuiteSelection = { readonly names: readonly string[] } | { readonly topSuites: readonly string[] } | null;

/** A run's result, with the top-level suite that was running when the device was lost (null when it was not). */
export type BrowserSuiteResult = SuiteResult & { readonly deviceLostIn: string | null };

declare global {
  interface Window {
    runTfjsSuite(backend: 'stock' | 'stowage', selection: SuiteSelection): Promise<BrowserSuiteResult | { readonly unavailable: string }>;
    listTfjsSuites(): Promise<string[]>;
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
  topSuite(): { readonly children: readonly { readonly description: string }[] };
}

/** Boots jasmine-core in the page: its globals (describe, it, expect, …) and its env. */
function bootJasmine(): JasmineEnv {
  const core = (jasmineRequire as { core(r: unknown): JasmineCore & { DEFAULT_TIMEOUT_INTERVAL: number } }).core(jasmineRequire);
  core.DEFAULT_TIMEOUT_INTERVAL = 120_000; // first compiles of a kernel on a software device are slow
  const env = core.getEnv();
  Object.assign(globalThis, (jasmineRequire as { interface(j: unknown, e: unknown): object }).interface(core, env));
  return env;
}

/** Declares tfjs's specs under the test environment of a run, as tfjs-backend-webgpu's own test registry sets it. */
async function declareSuite(): Promise<void> {
  // As in Node (suiteMain.ts), without readSync: it reads through a canvas, which the Node runs cannot.
  setTestEnvs([{ name: 'webgpu', backendName: 'webgpu', flags: { WEBGPU_CPU_FORWARD: false }, isDataSync: false }]);
  await import('@tensorflow/tfjs-core/dist/tests.js');
}

window.listTfjsSuites = async () => {
  const env = bootJasmine();
  await declareSuite();
  return env.topSuite().children.map((suite) => suite.description);
};

function specFilterOf(selection: SuiteSelection): ((spec: { getFullName(): string }) => boolean) | undefined {
  if (selection === null) return undefined;
  if ('names' in selection) return specsOfBlocks(selection.names);
  return (spec) => selection.topSuites.some((suite) => spec.getFullName().startsWith(`${suite} `));
}

/**
 * How Chromium answers every WebGPU call once the page's GPU connection broke, while `device.lost` stays pending
 * (Note [Device loss in the browser suite] in BrowserSuite.ts).
 */
const LOST_INSTANCE = /A valid external Instance reference no longer exists/;

window.runTfjsSuite = async (backend, selection) => {
  if (!navigator.gpu || (await navigator.gpu.requestAdapter()) === null) return { unavailable: navigator.gpu ? 'navigator.gpu gave no adapter' : 'no navigator.gpu' };
  const env = bootJasmine();
  const specFilter = specFilterOf(selection);
  env.configure({ random: false, ...(specFilter === undefined ? {} : { specFilter }) });

  const context = await openWebGpuDevice();
  let currentTopSuite: string | null = null;
  let deviceLostIn: string | null = null;
  void context.device.lost.then((info) => {
    if (info.reason !== 'destroyed') deviceLostIn ??= currentTopSuite ?? '(before the first suite)';
  });
  if (findBackendFactory('webgpu') != null) removeBackend('webgpu');
  if (backend === 'stock') registerBackend('webgpu', () => new WebGPUBackend(context.device), 3);
  else {
    const runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '4GiB' })] });
    await registerStowageWebGpuBackend(runtime);
  }

  const result: SuiteResult = { backend, adapter: context.adapterInfo, passed: [], failed: [], pending: 0, wallMs: 0 };
  const topSuites = new Set<string>();
  env.addReporter({
    ...suiteReporter(result, (message) => {
      if (LOST_INSTANCE.test(message)) deviceLostIn ??= currentTopSuite;
    }),
    suiteStarted(suite: SpecResult) {
      if (topSuites.has(suite.fullName)) currentTopSuite = suite.fullName;
    },
  });
  await declareSuite(); // declares the specs under the environment set above
  for (const suite of env.topSuite().children) topSuites.add(suite.description);
  const started = performance.now();
  await env.execute();
  result.wallMs = Math.round(performance.now() - started);
  context.device.destroy();
  return { ...result, deviceLostIn };
};
