// Applications import reflect-metadata first (STYLE.md §5): tsyringe in core needs it before it loads.
import 'reflect-metadata';
import { createWebGpuAllocator, stowageDevice, stowageDeviceCounts } from '@stowage/allocator-webgpu';
import * as transformers from '@huggingface/transformers';
import * as ortJsep from 'onnxruntime-web';
import * as ortNative from 'onnxruntime-web/webgpu';
import type { OnnxCheckPath, OnnxCheckReport, OnnxRun } from './OnnxCheckReport.js';

/**
 * The entry of the browser bundle for onnxruntime-web and transformers.js (dist-browser/stowage-onnx-checks.js,
 * built by test/browser/onnxPage.ts for the StowageDevice.*.browser tests). It defines
 * `window.runStowageOnnxChecks(path)`; the page is served with onnxruntime-web's wasm files under /ort/ (1.30,
 * this package's) and /ort-transformers/ (transformers.js's own build), and the models under /models/, all from
 * local files:
 * - 'native': onnxruntime-web's native WebGPU EP runs silero VAD v5 (3 steps, state fed back) and the PaddleOCR
 *   direction classifier on a plain device, then on a Stowage device over another;
 * - 'jsep-plain' / 'jsep-stowage': the JSEP build runs silero VAD v5 and the classifier on the device its adapter's requestDevice
 *   answers with (JSEP starts once per page, so each device has a page);
 * - 'transformers': transformers.js's image-classification pipeline, its model from /models/ only, on a plain
 *   device and on a Stowage device.
 */

declare global {
  interface Window {
    runStowageOnnxChecks(path: OnnxCheckPath): Promise<OnnxCheckReport>;
  }
}

/** Limits onnxruntime-web asks for when it opens a device itself (@stowage/lab/onnx's ORT_LIMITS). */
const ORT_LIMITS = ['maxStorageBuffersPerShaderStage', 'maxBufferSize', 'maxStorageBufferBindingSize', 'maxComputeWorkgroupStorageSize'] as const;
const CLASSIFIER_DIMS = [1, 3, 48, 192];

type Ort = typeof ortNative;
type DeviceKind = OnnxRun['device'];

async function runStowageOnnxChecks(path: OnnxCheckPath): Promise<OnnxCheckReport> {
  const started = performance.now();
  const elapsedMs = () => Math.round(performance.now() - started);
  const gpu = navigator.gpu as GPU | undefined;
  if (!gpu) return { unavailable: 'navigator.gpu is undefined', runs: [], elapsedMs: elapsedMs() };
  const adapter = await gpu.requestAdapter();
  if (!adapter) return { unavailable: 'navigator.gpu.requestAdapter() returned no adapter', runs: [], elapsedMs: elapsedMs() };
  if (adapter.limits.maxStorageBuffersPerShaderStage < 9) {
    return { unavailable: `the adapter lacks maxStorageBuffersPerShaderStage 9 (it has ${adapter.limits.maxStorageBuffersPerShaderStage})`, runs: [], elapsedMs: elapsedMs() };
  }
  const runs: OnnxRun[] = [];
  if (path === 'native') {
    setUp(ortNative, '/ort/');
    for (const device of ['plain', 'stowage'] as const) runs.push(await recorded('silero-v5', device, (d) => silero(ortNative, d, { executionProviders: [{ name: 'webgpu', device: d } as never] })));
    for (const device of ['plain', 'stowage'] as const) {
      runs.push(await recorded('paddle-classifier', device, (d) => classifier(ortNative, { executionProviders: [{ name: 'webgpu', device: d } as never] })));
    }
  } else if (path === 'jsep-plain' || path === 'jsep-stowage') {
    setUp(ortJsep as unknown as Ort, '/ort/');
    const device = path === 'jsep-plain' ? 'plain' : 'stowage';
    let made: GPUDevice | undefined;
    // JSEP asks its adapter for the device: requestDevice answers with the device of this page's kind.
    ortJsep.env.webgpu.adapter = new Proxy(adapter, {
      get(target, key) {
        if (key === 'requestDevice') return async (descriptor?: GPUDeviceDescriptor) => (made = onTop(device, await target.requestDevice(descriptor)));
        const value: unknown = Reflect.get(target, key, target);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    runs.push(await recorded('silero-v5', device, () => silero(ortJsep as unknown as Ort, undefined, { executionProviders: ['webgpu'] }), () => made));
    runs.push(await recorded('paddle-classifier', device, () => classifier(ortJsep as unknown as Ort, { executionProviders: ['webgpu'] }), () => made));
  } else {
    transformers.env.allowRemoteModels = false;
    transformers.env.allowLocalModels = true;
    transformers.env.useBrowserCache = false;
    transformers.env.localModelPath = '/models/';
    const onnx = transformers.env.backends.onnx as { wasm?: { wasmPaths?: unknown; numThreads?: number } };
    onnx.wasm!.wasmPaths = '/ort-transformers/';
    onnx.wasm!.numThreads = 1;
    for (const device of ['plain', 'stowage'] as const) runs.push(await recorded('transformers.js image-classification', device, (d) => pipelineOn(d)));
  }
  return { runs, elapsedMs: elapsedMs() };

  /** A device of the adapter's limits, then `run` on it (or on the Stowage device over it); destroyed after. */
  async function recorded(model: string, device: DeviceKind, run: (d: GPUDevice) => Promise<string>, madeBy?: () => GPUDevice | undefined): Promise<OnnxRun> {
    const begun = performance.now();
    // A browser's adapter makes one device: each device comes from an adapter of its own.
    const own = madeBy ? undefined : await gpu!.requestAdapter();
    const real = own ? await own.requestDevice({ requiredLimits: Object.fromEntries(ORT_LIMITS.map((n) => [n, own.limits[n]])) }) : undefined;
    const used = real ? onTop(device, real) : undefined;
    try {
      const output = await run(used!);
      const counts = stowageDeviceCounts(used ?? madeBy?.() ?? ({} as GPUDevice));
      return { model, device, output, ...(counts ? { counts: { ...counts } } : {}), elapsedMs: Math.round(performance.now() - begun) };
    } catch (error) {
      return { model, device, output: '', error: String((error as Error).stack ?? error), elapsedMs: Math.round(performance.now() - begun) };
    } finally {
      real?.destroy();
    }
  }
}

/** `real` itself, or a Stowage device over it (its own allocator, 256 MiB). */
function onTop(kind: DeviceKind, real: GPUDevice): GPUDevice {
  if (kind === 'plain') return real;
  const allocator = createWebGpuAllocator({ device: real, keepAlive: navigator.gpu, adapterInfo: 'page', owned: false }, { limit: '256MiB' });
  return stowageDevice(allocator);
}

function setUp(ort: Ort, wasmPaths: string): void {
  ort.env.wasm.wasmPaths = wasmPaths;
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = 'error';
}

function hex(data: ArrayBufferView): string {
  return Array.from(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), (b) => b.toString(16).padStart(2, '0')).join('');
}

async function fetchBytes(url: string): Promise<Uint8Array> {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

/** Silero VAD v5, 3 steps with its state fed back: the hex of every output. */
async function silero(ort: Ort, _device: GPUDevice | undefined, options: object): Promise<string> {
  const session = await ort.InferenceSession.create(await fetchBytes('/models/silero_vad_v5.onnx'), options);
  const parts: string[] = [];
  let state = new ort.Tensor('float32', new Float32Array(2 * 128), [2, 1, 128]);
  try {
    for (let step = 0; step < 3; step++) {
      const input = new ort.Tensor('float32', Float32Array.from({ length: 512 }, (_, i) => Math.sin((i + step * 512) / 7)), [1, 512]);
      const result = await session.run({ input, state, sr: new ort.Tensor('int64', BigInt64Array.from([16000n]), []) });
      parts.push(hex(result['output']!.data as Float32Array));
      state = result['stateN'] as typeof state;
      parts.push(hex(state.data as Float32Array));
    }
  } finally {
    await session.release();
  }
  return parts.join(' ');
}

/** The PaddleOCR direction classifier once, on test/paddleOcr.ts's input: the hex of its output. */
async function classifier(ort: Ort, options: object): Promise<string> {
  const session = await ort.InferenceSession.create(await fetchBytes('/models/paddle-classifier.onnx'), options);
  try {
    const x = Float32Array.from({ length: CLASSIFIER_DIMS.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i / 13));
    const result = await session.run({ x: new ort.Tensor('float32', x, CLASSIFIER_DIMS) });
    return Object.values(result).map((t) => hex(t.data as Float32Array)).join(' ');
  } finally {
    await session.release();
  }
}

/** transformers.js's image-classification pipeline on `device`, on test/paddleOcr.ts's image: its JSON output. */
async function pipelineOn(device: GPUDevice): Promise<string> {
  const classify = await transformers.pipeline('image-classification', 'paddle-ocr-direction', {
    device: 'webgpu',
    dtype: 'fp32',
    session_options: { executionProviders: [{ name: 'webgpu', device } as never] },
  });
  try {
    const pixels = Uint8ClampedArray.from({ length: 192 * 48 * 3 }, (_, i) => (i * 37) % 251);
    return JSON.stringify(await classify(new transformers.RawImage(pixels, 192, 48, 3), { top_k: 2 }));
  } finally {
    await classify.dispose();
  }
}

window.runStowageOnnxChecks = runStowageOnnxChecks;
