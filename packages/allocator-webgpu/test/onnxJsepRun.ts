// A child process of the onnxruntime-web tests: onnxruntime-web's JSEP build starts its WebGPU backend once per
// process, from `env.webgpu.adapter`, so the plain and the Stowage device each run in a process of their own.
// Usage: node onnxJsepRun.js plain|stowage <silero model.onnx>; prints one JSON line { sha256, counts }: a hash of
// every output's bytes, and the Stowage device's counters.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createWebGpuAllocator, openWebGpuDevice, stowageDevice, stowageDeviceCounts } from '@stowage/allocator-webgpu';
import { copySharedUploads, installWebGpuGlobals } from '@stowage/lab/onnx';

type Ort = typeof import('onnxruntime-web');

const [mode, modelPath] = process.argv.slice(2) as ['plain' | 'stowage', string];
const context = await openWebGpuDevice();
const gpu = context.keepAlive as GPU;
await installWebGpuGlobals(gpu);
const ortDist = dirname(createRequire(import.meta.url).resolve('onnxruntime-web')); // its Node entry lies in dist/
const ort = (await import(pathToFileURL(join(ortDist, 'ort.mjs')).href)) as Ort;
ort.env.wasm.numThreads = 1;
ort.env.logLevel = 'error';

let made: GPUDevice | undefined;
const adapter = (await gpu.requestAdapter())!;
// JSEP asks the adapter for its device: the adapter's requestDevice answers with the Stowage device over the real one.
ort.env.webgpu.adapter = new Proxy(adapter, {
  get(target, key) {
    if (key === 'requestDevice') {
      return async (descriptor?: GPUDeviceDescriptor) => {
        const real = await target.requestDevice(descriptor);
        if (mode === 'stowage') made = stowageDevice(createWebGpuAllocator({ device: real, keepAlive: gpu, adapterInfo: 'JSEP', owned: false }, { limit: '256MiB' }));
        else made = copySharedUploads(real); // the plain device with measure 4 only
        return made;
      };
    }
    const value: unknown = Reflect.get(target, key, target);
    return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
  },
});

const session = await ort.InferenceSession.create(readFileSync(modelPath), { executionProviders: ['webgpu'] });
const hash = createHash('sha256');
let state = new ort.Tensor('float32', new Float32Array(2 * 128), [2, 1, 128]);
for (let step = 0; step < 3; step++) {
  const input = new ort.Tensor('float32', Float32Array.from({ length: 512 }, (_, i) => Math.sin((i + step * 512) / 7)), [1, 512]);
  const result = await session.run({ input, state, sr: new ort.Tensor('int64', BigInt64Array.from([16000n]), []) });
  hash.update(new Uint8Array((result['output']!.data as Float32Array).slice().buffer));
  state = result['stateN'] as typeof state;
  hash.update(new Uint8Array((state.data as Float32Array).slice().buffer));
}
console.log(JSON.stringify({ sha256: hash.digest('hex'), counts: made ? (stowageDeviceCounts(made) ?? null) : null }));
process.exit(0);
