import type { Runtime } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import { WebGpuBuffers } from '@stowage/allocator-webgpu';

/**
 * The buffer-level service of the WebGPU device `device` in `runtime` (its WebGpuBuffers device service), whatever
 * adaptors or decorators (LMS) wrap the allocator the runtime hands out.
 * @throws InvalidArgumentError when the webgpu() plugin does not serve the device; BackendUnavailableError (the
 * runtime's) when no plugin serves it at all
 */
export function webGpuAllocatorOf(runtime: Runtime, device: string): WebGpuBuffers {
  const buffers = runtime.service(WebGpuBuffers, device);
  if (buffers === undefined) throw new InvalidArgumentError('options.device', device, 'a device served by the webgpu() plugin of @stowage/allocator-webgpu');
  return buffers;
}
