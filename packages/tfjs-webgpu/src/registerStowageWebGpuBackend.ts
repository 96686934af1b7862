import { findBackendFactory, registerBackend, removeBackend } from '@tensorflow/tfjs-core';
import type { Runtime } from '@stowage/core';
import { BackendUnavailableError } from '@stowage/core';
import type { StowageWebGpuBackendOptions } from './StowageWebGpuBackend.js';
import { StowageWebGpuBackend } from './StowageWebGpuBackend.js';
import { installWebGpuGlobals } from './webGpuGlobals.js';
import { webGpuAllocatorOf } from './webGpuAllocatorOf.js';

export interface RegisterStowageWebGpuOptions extends StowageWebGpuBackendOptions {
  /** tfjs's backend priority (tfjs's own WebGPU backend registers with 3). Default 3. */
  readonly priority?: number;
  /**
   * The GPU object the device came from, for `navigator.gpu` in Node when the runtime was given a device
   * (`webgpu({ device })`); a device the plugin opened brings its own.
   */
  readonly gpu?: unknown;
}

/**
 * Registers the Stowage backend with tfjs under `'webgpu'`, the name tfjs's WebGPU kernels are registered for,
 * replacing any backend of that name (tfjs's own included: it is disposed if it was created). The backend is made
 * when tfjs first asks for it (`await tf.setBackend('webgpu')`), on the runtime's device. In Node, first makes the
 * WebGPU globals tfjs reads exist (`installWebGpuGlobals`).
 * @throws InvalidArgumentError when the runtime's device is not served by Stowage's WebGPU allocator;
 * BackendUnavailableError when no `navigator.gpu` exists and none can be set (pass `gpu`)
 */
export async function registerStowageWebGpuBackend(runtime: Runtime, options: RegisterStowageWebGpuOptions = {}): Promise<void> {
  const { priority = 3, gpu, ...backendOptions } = options;
  const allocator = webGpuAllocatorOf(runtime, backendOptions.device ?? 'webgpu');
  await installWebGpuGlobals(gpu ?? allocator.backend.keepAlive);
  if ((globalThis as { navigator?: { gpu?: unknown } }).navigator?.gpu === undefined) {
    throw new BackendUnavailableError("tfjs's WebGPU backend needs navigator.gpu, and this runtime's device came with no GPU object: pass { gpu } (the object the device was requested from).");
  }
  if (findBackendFactory('webgpu') != null) removeBackend('webgpu');
  registerBackend('webgpu', () => new StowageWebGpuBackend(runtime, backendOptions), priority);
}
