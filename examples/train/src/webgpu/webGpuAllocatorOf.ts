import { ForwardingAllocator } from '@stowage/core';
import { WebGpuAllocator } from '@stowage/allocator-webgpu';

/**
 * The WebGpuAllocator under `allocator`: itself, or the one adaptors (LMS's LmsAllocator, wrapAllocators'
 * wrappers, any ForwardingAllocator) wrap; undefined when there is none. The kernels need its `bindingOf`.
 */
export function webGpuAllocatorOf(allocator: unknown): WebGpuAllocator | undefined {
  let current = allocator;
  while (!(current instanceof WebGpuAllocator) && current instanceof ForwardingAllocator) current = current.upstream;
  return current instanceof WebGpuAllocator ? current : undefined;
}
