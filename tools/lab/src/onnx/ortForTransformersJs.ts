import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

/** The part of onnxruntime-web's module transformers.js uses. */
export interface OrtWebModule {
  readonly env: { wasm: { wasmPaths?: unknown } };
  readonly Tensor: unknown;
  readonly InferenceSession: { create(model: Uint8Array, options?: object): Promise<unknown> };
}

// Note [transformers.js on onnxruntime-web in Node]
// In Node, @huggingface/transformers 4 runs onnxruntime-node, whose WebGPU EP opens its own Dawn device inside
// native code: no GPUDevice of JavaScript can reach it. It takes another runtime from
// `globalThis[Symbol.for('onnxruntime')]` when that is set before it is imported, and then runs onnxruntime-web;
// two things differ from a browser there. It hands the runtime a file path, as onnxruntime-node takes (so
// `InferenceSession.create` here reads the file), and it finds no supported device of its own, so a pipeline asks for
// `device: 'auto'` and names its device in `session_options.executionProviders: [{ name: 'webgpu', device }]`,
// which transformers.js passes to onnxruntime-web unchanged. Its wasm files stay local: transformers.js points an
// unset `env.wasm.wasmPaths` at a CDN, so it is set first.

/**
 * Makes `ort` (onnxruntime-web, imported in Node) the runtime transformers.js uses (Note [transformers.js on
 * onnxruntime-web in Node]), its wasm files loaded from `wasmDir` (onnxruntime-web's dist/). Call before importing
 * transformers.js. Returns the undo.
 */
export function installOrtForTransformersJs(ort: OrtWebModule, wasmDir: string): () => void {
  const key = Symbol.for('onnxruntime');
  const scope = globalThis as Record<symbol, unknown>;
  if (key in scope) throw new Error('installOrtForTransformersJs: globalThis[Symbol.for("onnxruntime")] is already set');
  ort.env.wasm.wasmPaths ??= pathToFileURL(wasmDir.endsWith('/') ? wasmDir : `${wasmDir}/`).href;
  scope[key] = {
    ...ort,
    env: ort.env,
    Tensor: ort.Tensor,
    InferenceSession: {
      create: (model: Uint8Array | string, options?: object) => ort.InferenceSession.create(typeof model === 'string' ? readFileSync(model) : model, options),
    },
  };
  return () => delete scope[key];
}
