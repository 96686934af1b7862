import * as tf from '@tensorflow/tfjs-core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import type { NeededLimits } from '@stowage/lab/browser';
import { deviceOrSkip } from '@stowage/lab/browser';
import { installWebGpuGlobals } from '@stowage/tfjs-webgpu';
import { registerTfjsGradients } from '@stowage/lab/tfjs/node';

/**
 * What tfjs-backend-webgpu's kernels assume of a device: WebGPU's core defaults for compute (workgroups of 256
 * invocations along x, 16 KiB of workgroup memory, 8 storage buffers a stage). A device of the compatibility
 * feature level (Mesa's OpenGL ES) may have less; there tfjs's kernels fail validation ("Entry-point uses
 * workgroup_size(256, 1, 1) that exceeds the maximum allowed"), with stock tfjs as with Stowage's backend, so the
 * tests skip, naming the limit. (`openWebGpuDevice` asks for these where the adapter has them.)
 */
export const TFJS_LIMITS: NeededLimits = {
  maxComputeWorkgroupSizeX: 256,
  maxComputeInvocationsPerWorkgroup: 256,
  maxComputeWorkgroupStorageSize: 16384,
  maxStorageBuffersPerShaderStage: 8,
};

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
