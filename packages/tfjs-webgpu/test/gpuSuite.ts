import * as tf from '@tensorflow/tfjs-core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { deviceOrSkip } from '@stowage/lab/browser';
import { installWebGpuGlobals } from '@stowage/tfjs-webgpu';
import { TFJS_LIMITS } from '@stowage/lab/tfjs';
import { registerTfjsGradients } from '@stowage/lab/tfjs/node';

/**
 * The hooks of a suite that runs tfjs on this machine's WebGPU device: before it, the device (or a skip saying why
 * there is none, or which of {@link TFJS_LIMITS} it lacks), the WebGPU globals tfjs reads, tfjs's gradients, and small kernels kept on the GPU (these tests
 * are about the GPU path; tfjs forwards tiny inputs to its CPU code otherwise); after it, the globals removed, since
 * later test files open devices through `navigator.gpu`. Call it inside `describe`; the returned function gives the
 * device once the suite's `before` ran.
 */
export function useTfjsGpuSuite(): () => WebGpuContext {
  let context: WebGpuContext | undefined;
  let defined: string[] = [];
  before(async function () {
    context = await deviceOrSkip(this, TFJS_LIMITS);
    defined = await installWebGpuGlobals(context.keepAlive);
    await registerTfjsGradients();
    tf.env().set('WEBGPU_CPU_FORWARD', false);
  });
  after(() => removeGlobals(defined));
  return () => {
    if (context === undefined) throw new Error('useTfjsGpuSuite: the suite\'s before hook has not run');
    return context;
  };
}

/** Deletes the globals `installWebGpuGlobals` defined (names as it returns them). */
function removeGlobals(names: readonly string[]): void {
  const global = globalThis as Record<string, unknown> & { navigator?: Record<string, unknown> };
  for (const name of names) {
    if (name === 'navigator.gpu') delete global.navigator?.['gpu'];
    else delete global[name];
  }
}
