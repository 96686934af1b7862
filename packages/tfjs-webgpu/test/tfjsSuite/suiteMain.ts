// The child process of a tfjs suite run (TfjsSuite.ts bundles this file with esbuild and runs the bundle):
//   node tfjs-suite.bundle.cjs <stock|stowage> <filter JSON: describe names, or null for all> <result file>
// It opens the WebGPU device, registers tfjs's 'webgpu' backend (tfjs's own or Stowage's), declares tfjs-core's
// published test suite (dist/tests.js) under one test environment, runs it with jasmine and writes what passed and
// failed. Everything tfjs is bundled from its ES module files, so the suite, the kernels and the backend share one
// copy of tfjs-core.
import 'reflect-metadata';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { findBackendFactory, registerBackend, removeBackend } from '@tensorflow/tfjs-core';
// What a tfjs backend's test setup imports (as @tensorflow/tfjs does): gradients and the chained ops (`x.add(y)`).
import '@tensorflow/tfjs-core/dist/register_all_gradients.js';
import '@tensorflow/tfjs-core/dist/public/chained_ops/register_all_chained_ops.js';
import { setTestEnvs } from '@tensorflow/tfjs-core/dist/jasmine_util.js';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { createRuntime } from '@stowage/core';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import { installWebGpuGlobals, registerStowageWebGpuBackend } from '@stowage/tfjs-webgpu';
import type { SuiteResult } from './SuiteResult.js';
import { specsOfBlocks, suiteReporter } from './suiteReporter.js';

/** What the suite needs of the `jasmine` package's runner (5.x). */
interface JasmineRunner {
  exitOnCompletion: boolean;
  readonly jasmine: { DEFAULT_TIMEOUT_INTERVAL: number };
  readonly env: { configure(options: { random?: boolean; specFilter?: (spec: { getFullName(): string }) => boolean }): void };
  addReporter(reporter: object): void;
  execute(): Promise<unknown>;
}

async function main(): Promise<void> {
  const [kind, filterJson, outfile] = process.argv.slice(2);
  if ((kind !== 'stock' && kind !== 'stowage') || filterJson === undefined || outfile === undefined) {
    throw new Error('usage: <stock|stowage> <filter JSON> <result file>');
  }
  const filter = JSON.parse(filterJson) as string[] | null;
  const require = createRequire(join(process.cwd(), 'package.json'));
  const Jasmine = require('jasmine') as new (options: object) => JasmineRunner;
  const runner = new Jasmine({}); // defines jasmine's globals (describe, it, expect, …) before the suite loads
  runner.exitOnCompletion = false;
  runner.jasmine.DEFAULT_TIMEOUT_INTERVAL = 120_000; // first compiles of a kernel on a software device are slow
  runner.env.configure({
    random: false,
    ...(filter === null ? {} : { specFilter: specsOfBlocks(filter) }),
  });

  const context = await openWebGpuDevice();
  await installWebGpuGlobals(context.keepAlive);
  if (findBackendFactory('webgpu') != null) removeBackend('webgpu');
  if (kind === 'stock') registerBackend('webgpu', () => new WebGPUBackend(context.device), 3);
  else {
    const runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '4GiB' })] });
    await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
  }
  // As tfjs-backend-webgpu's own test registry, except isDataSync: readSync goes through a canvas, which Node lacks.
  setTestEnvs([{ name: 'webgpu', backendName: 'webgpu', flags: { WEBGPU_CPU_FORWARD: false }, isDataSync: false }]);

  const result: SuiteResult = { backend: kind, adapter: context.adapterInfo, passed: [], failed: [], pending: 0, wallMs: 0 };
  runner.addReporter(suiteReporter(result));
  await import('@tensorflow/tfjs-core/dist/tests.js'); // declares the specs under the environment set above
  const started = performance.now();
  await runner.execute();
  result.wallMs = Math.round(performance.now() - started);
  writeFileSync(outfile, JSON.stringify(result));
  context.device.destroy();
  process.exit(0);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
