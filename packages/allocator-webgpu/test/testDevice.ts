import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator } from '@stowage/allocator-webgpu';
import type { WebGpuAllocator, WebGpuOptions } from '@stowage/allocator-webgpu';

export { deviceOrSkip, ownDeviceOrSkip, sharedDevice } from '@stowage/lab/browser';

/** An allocator on the shared device. */
export function allocatorOn(context: WebGpuContext, options: WebGpuOptions = {}): WebGpuAllocator {
  return createWebGpuAllocator(context, { limit: '512MiB', ...options });
}

/** GPUBufferUsage flags the tests use (spec values). */
export const MAP_READ = 0x0001;
export const COPY_SRC = 0x0004;
export const COPY_DST = 0x0008;
export const STORAGE = 0x0080;

/** Reads `size` bytes of `buffer` from `offset` through a staging buffer of the test's own. */
export async function readBuffer(device: GPUDevice, buffer: GPUBuffer, offset: number, size: number): Promise<Uint8Array> {
  const staging = device.createBuffer({ size, usage: MAP_READ | COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, offset, staging, 0, size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(1);
  const bytes = new Uint8Array(staging.getMappedRange()).slice();
  staging.destroy();
  return bytes;
}
