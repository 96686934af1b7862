import type { Runtime, StorageImpl } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import type { ImportOptions } from './WebGpuAllocator.js';
import { WebGpuBuffers } from './WebGpuBuffers.js';

/**
 * A storage over a caller's GPUBuffer (or a range of it), without copying: tensors can view it, `rt.read` and
 * `rt.write` reach it, and Stowage never destroys the buffer (releasing the storage only forgets it).
 * @throws InvalidArgumentError when the runtime's `device` is not served by the webgpu() plugin (it offers no WebGpuBuffers service), for options that are
 * not an object, or as `importBuffer` (a bad range, a buffer without STORAGE | COPY_SRC | COPY_DST usage)
 */
export function fromGpuBuffer(rt: Runtime, buffer: GPUBuffer, options: ImportOptions & { readonly device?: string } = {}): StorageImpl {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', options, 'an options object (or nothing)');
  const webgpu = rt.service(WebGpuBuffers, options.device ?? 'webgpu');
  if (!webgpu) throw new InvalidArgumentError('options.device', options.device ?? 'webgpu', 'a device served by the webgpu() plugin');
  return rt.adopt(webgpu.importBuffer(buffer, options));
}
