import type { Token } from '@stowage/core';
import type { WebGpuAllocator } from './WebGpuAllocator.js';

/**
 * A device service of every WebGPU device in a runtime (Note [Device services] in core): the buffer-level side of
 * the device's allocator — the GPUBuffer range a pointer binds (`bindingOf`), a caller's buffer as a pointer
 * (`importBuffer`), the engine and backend under it, and the submit bookkeeping a client with its own queue
 * submissions needs (`flush`, `freeingSubmitted`). The `webgpu()` plugin registers the device's WebGpuAllocator
 * under this token, so that adaptors and LMS wrapping the allocator the runtime hands out never hide it:
 * `rt.service(WebGpuBuffers, 'webgpu:0')`.
 */
export type WebGpuBuffers = Pick<
  WebGpuAllocator,
  'device' | 'backend' | 'engine' | 'bindingOf' | 'importBuffer' | 'flush' | 'freeingSubmitted' | 'allocate' | 'free' | 'writeBytes' | 'memoryStats'
>;

export const WebGpuBuffers: Token<WebGpuBuffers> = Symbol('stowage.WebGpuBuffers');
