import type { WebGpuContext } from '@stowage/allocator-webgpu';

/** The limits of the bench's Dawn device on this machine (SwiftShader through Dawn's Vulkan backend). */
const LIMITS = {
  maxBufferSize: 2 ** 30,
  maxStorageBufferBindingSize: 2 ** 30,
  minStorageBufferOffsetAlignment: 256,
  minUniformBufferOffsetAlignment: 256,
};

/**
 * A context over a stand-in GPUDevice: `createBuffer` returns a plain object with the buffer's size and usage,
 * `queue.submit` and `writeBuffer` do nothing, error scopes report no error and the device is never lost. Enough
 * for the allocators' replay paths (segments, submits, frees), not for copies or reads. It runs the allocators'
 * own JavaScript without Dawn, so their cost per operation can be compared without a driver's noise.
 */
export function standInContext(): WebGpuContext {
  const queue = {
    submit(): undefined {
      return undefined;
    },
    writeBuffer(): undefined {
      return undefined;
    },
  };
  const device = {
    limits: LIMITS,
    queue,
    lost: new Promise<never>(() => {}),
    createBuffer(descriptor: GPUBufferDescriptor) {
      return { size: descriptor.size, usage: descriptor.usage, label: descriptor.label ?? '', mapState: 'unmapped', destroy(): undefined {} };
    },
    pushErrorScope(): undefined {
      return undefined;
    },
    popErrorScope(): Promise<GPUError | null> {
      return Promise.resolve(null);
    },
    destroy(): undefined {
      return undefined;
    },
  };
  return { device: device as unknown as GPUDevice, adapterInfo: 'stand-in device (no driver)', keepAlive: undefined, owned: true };
}
