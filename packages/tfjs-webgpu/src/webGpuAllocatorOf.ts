import type { Allocator, Runtime } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import { WebGpuAllocator } from '@stowage/allocator-webgpu';

/**
 * The WebGPU allocator serving `device` in `runtime`, found through any adaptors or decorators over it (LMS).
 * @throws InvalidArgumentError when no WebGpuAllocator serves the device; BackendUnavailableError (the runtime's)
 * when no plugin serves it at all
 */
export function webGpuAllocatorOf(runtime: Runtime, device: string): WebGpuAllocator {
  for (let a: Allocator | undefined = runtime.allocator(device); a; a = a.upstream) {
    if (a instanceof WebGpuAllocator) return a;
  }
  throw new InvalidArgumentError('options.device', device, 'a device served by the webgpu() plugin of @stowage/allocator-webgpu');
}
