// Applications import reflect-metadata first (STYLE.md §5): tsyringe in core needs it before it loads.
import 'reflect-metadata';
import { createRuntime } from '@stowage/core';
import { allocatorContract } from '@stowage/core/testing';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import type { BrowserAdapterInfo, BrowserCheckReport, ContractCheckResult, RoundTripResult } from './BrowserCheckReport.js';

/**
 * The entry of the browser bundle (dist-browser/stowage-webgpu-checks.js, built by test/browser/BrowserChecks.test.ts
 * with `buildBrowserBundle` from `@stowage/lab/browser`). It imports the packages as a browser application
 * would, through their exports maps (the tsc output in dist/), and defines `window.runStowageBrowserChecks()`,
 * which a page or a test driving the browser calls:
 * - asks `navigator.gpu` for an adapter; without one it reports why and runs nothing;
 * - opens a device with `openWebGpuDevice()` (the browser path: `navigator.gpu`);
 * - runs every check of core's `allocatorContract` on a fresh `createWebGpuAllocator(context, { limit: '256MiB' })`,
 *   recording each outcome and going on after a failure;
 * - writes and reads tensors through `createRuntime({ plugins: [webgpu({ device })] })`, whole and unaligned;
 * - destroys the device and resolves to a JSON report (BrowserCheckReport.d.ts).
 */

declare global {
  interface Window {
    runStowageBrowserChecks(): Promise<BrowserCheckReport>;
  }
}

const CONTRACT_LIMIT = '256MiB';

async function runStowageBrowserChecks(): Promise<BrowserCheckReport> {
  const started = performance.now();
  const userAgent = navigator.userAgent;
  const elapsed = () => Math.round(performance.now() - started);
  // @webgpu/types declares navigator.gpu as always there; a browser without WebGPU leaves it undefined.
  const gpu = navigator.gpu as GPU | undefined;
  if (!gpu) {
    const unavailable = `navigator.gpu is undefined (secure context: ${String(isSecureContext)}); Chromium needs --enable-unsafe-webgpu.`;
    return { userAgent, unavailable, adapter: null, contract: [], elapsedMs: elapsed() };
  }
  const adapter = await gpu.requestAdapter();
  if (!adapter) return { userAgent, unavailable: 'navigator.gpu.requestAdapter() returned no adapter.', adapter: null, contract: [], elapsedMs: elapsed() };

  const context = await openWebGpuDevice();
  try {
    const contract = await runContract(context);
    const roundTrip = await runRoundTrip(context.device);
    return { userAgent, adapter: describeAdapter(adapter), deviceInfo: context.adapterInfo, contract, roundTrip, elapsedMs: elapsed() };
  } finally {
    context.device.destroy();
  }
}

/** Runs every contract check, each on a fresh allocator, and records each outcome. */
async function runContract(context: WebGpuContext): Promise<ContractCheckResult[]> {
  const results: ContractCheckResult[] = [];
  for (const check of allocatorContract) {
    const started = performance.now();
    try {
      await check.run(() => createWebGpuAllocator(context, { limit: CONTRACT_LIMIT }));
      results.push({ name: check.name, ok: true, elapsedMs: Math.round(performance.now() - started) });
    } catch (error) {
      results.push({ name: check.name, ok: false, error: describeError(error), elapsedMs: Math.round(performance.now() - started) });
    }
  }
  return results;
}

/**
 * Writes host bytes into WebGPU storages through a runtime and reads them back: a float32 tensor whole, 3 bytes
 * at offset 5 of it (neither offset nor length a multiple of 4), and a 13-byte storage.
 */
async function runRoundTrip(device: GPUDevice): Promise<RoundTripResult> {
  const steps: string[] = [];
  let ok = true;
  const record = (what: string, actual: Uint8Array, expected: Uint8Array) => {
    const difference = firstDifference(actual, expected);
    if (difference !== undefined) ok = false;
    steps.push(`${what}: ${difference ?? 'matched'}`);
  };
  const runtime = await createRuntime({ plugins: [webgpu({ device })] });
  try {
    const values = Float32Array.from({ length: 1000 }, (_, i) => i * 0.25 - 100);
    const tensor = runtime.tensor([values.length], { device: 'webgpu', dtype: 'float32' });
    if (tensor.device.type !== 'webgpu') {
      ok = false;
      steps.push(`tensor device: expected webgpu, got ${tensor.device.type}`);
    }
    runtime.write(tensor.storage, values);
    const expected = new Uint8Array(values.buffer.slice(0));
    record('float32[1000] written whole', await runtime.read(tensor.storage), expected);

    const patch = Uint8Array.of(0xde, 0xad, 0xbe);
    runtime.write(tensor.storage, patch, 5);
    expected.set(patch, 5);
    record('3 bytes written at byte offset 5', await runtime.read(tensor.storage), expected);

    const odd = runtime.storage(13, { device: 'webgpu' });
    const oddBytes = Uint8Array.from({ length: 13 }, (_, i) => (251 - i * 7) & 0xff);
    runtime.write(odd, oddBytes);
    record('13-byte storage written whole', await runtime.read(odd), oddBytes);
    return { ok, steps };
  } catch (error) {
    return { ok: false, steps, error: describeError(error) };
  } finally {
    await runtime.dispose();
  }
}

/** Undefined when equal; otherwise where and how the bytes differ. */
function firstDifference(actual: Uint8Array, expected: Uint8Array): string | undefined {
  if (actual.byteLength !== expected.byteLength) return `read ${actual.byteLength} bytes, expected ${expected.byteLength}`;
  const i = actual.findIndex((b, j) => b !== expected[j]);
  return i === -1 ? undefined : `byte ${i} is ${actual[i]}, expected ${expected[i]}`;
}

function describeAdapter(adapter: GPUAdapter): BrowserAdapterInfo {
  const info = adapter.info as GPUAdapterInfo & { isFallbackAdapter?: boolean };
  return {
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    isFallbackAdapter: info.isFallbackAdapter,
    maxBufferSize: adapter.limits.maxBufferSize,
  };
}

/** `name: message`, then the cause's, so that a failure reads in one line in the Node test's output. */
function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const text = `${error.name}: ${error.message}`;
  return error.cause === undefined ? text : `${text} (cause: ${describeError(error.cause)})`;
}

window.runStowageBrowserChecks = runStowageBrowserChecks;
