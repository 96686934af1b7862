import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { installWebGpuGlobals, ortUnavailable } from '@stowage/lab/onnx';
import { deviceOrSkip } from './testDevice.js';

/** onnxruntime-web's module as the ONNX tests use it. */
export type Ort = typeof import('onnxruntime-web');

/** What `useOrtOnDawn` sets up for a suite: the Dawn device, ORT's native WebGPU build, and the undo list. */
export interface OrtOnDawn {
  readonly context: WebGpuContext;
  readonly ort: Ort;
  /** Undone in reverse order after the suite (the WebGPU globals first of all); a suite may add its own. */
  readonly restore: (() => void)[];
}

/**
 * Registers the suite's `before`/`after`: opens the Dawn device (skips, saying why, without one or where
 * onnxruntime-web's WebGPU cannot run on it), installs the WebGPU globals ORT looks for, and imports ORT's native
 * WebGPU build with one thread and errors-only logging. Call it inside `describe`; read the result in tests/hooks.
 */
export function useOrtOnDawn(): () => OrtOnDawn {
  let setup: OrtOnDawn | undefined;
  const restore: (() => void)[] = [];
  before(async function () {
    const context = await deviceOrSkip(this);
    const unavailable = await ortUnavailable(context.keepAlive as GPU | undefined, context.adapterInfo);
    if (unavailable !== undefined) {
      console.log(`    skipped: ${unavailable}`);
      this.skip();
    }
    restore.push(await installWebGpuGlobals(context.keepAlive as GPU));
    const ort = (await import('onnxruntime-web/webgpu')) as unknown as Ort;
    ort.env.wasm.numThreads = 1;
    ort.env.logLevel = 'error';
    setup = { context, ort, restore };
  });
  after(() => {
    for (const undo of restore.splice(0).reverse()) undo();
  });
  return () => {
    if (setup === undefined) throw new Error('useOrtOnDawn: read inside a test or hook, after the suite\'s before');
    return setup;
  };
}
