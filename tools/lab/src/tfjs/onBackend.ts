import * as tf from '@tensorflow/tfjs-core';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import type { Plugin, Runtime } from '@stowage/core';
import { createRuntime } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { webgpu } from '@stowage/allocator-webgpu';
import type { StowageWebGpuBackendOptions } from '@stowage/tfjs-webgpu';
import { registerStowageWebGpuBackend, StowageWebGpuBackend } from '@stowage/tfjs-webgpu';

export type BackendKind = 'stock' | 'stowage';

/**
 * Runs `body` with tfjs's `'webgpu'` backend on the shared device: tfjs's own (`stock`) or Stowage's, in a runtime
 * of its own (with `morePlugins` after the webgpu plugin), with `options`. The backend is removed (disposed) afterwards, and the runtime disposed.
 */
export async function onBackend<T>(
  context: WebGpuContext,
  kind: BackendKind,
  body: (backend: WebGPUBackend, runtime?: Runtime) => Promise<T>,
  options: StowageWebGpuBackendOptions = {},
  morePlugins: readonly Plugin[] = [],
): Promise<T> {
  let runtime: Runtime | undefined;
  if (kind === 'stock') {
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
    tf.registerBackend('webgpu', () => new WebGPUBackend(context.device));
  } else {
    runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '1GiB' }), ...morePlugins] });
    await registerStowageWebGpuBackend(runtime, { ...options, gpu: context.keepAlive });
  }
  try {
    if (!(await tf.setBackend('webgpu'))) throw new Error(`tfjs could not initialize the ${kind} webgpu backend`);
    const backend = tf.backend() as WebGPUBackend;
    if ((backend instanceof StowageWebGpuBackend) !== (kind === 'stowage')) throw new Error(`expected the ${kind} backend`);
    return await body(backend, runtime);
  } finally {
    tf.removeBackend('webgpu');
    await runtime?.dispose();
  }
}
