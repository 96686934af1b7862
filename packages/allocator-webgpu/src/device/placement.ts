import { BufferUsage } from '../WebGpuUsage.js';
import type { HostMapping } from './HostMapping.js';

// Where the Stowage device puts each buffer a program asks for (SubAllocatingDevice.ts), and the mapping members
// of its stand-ins.

/** The usage a segment has (KIND_FLAGS of the storage kind): a buffer asking for more is the real device's, but for INDIRECT. */
const SEGMENT_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;
/** GPUBufferUsage.INDIRECT: served from a segment (Note [Indirect arguments] in SubAllocatingDevice.ts). */
const INDIRECT = 0x0100;
const COPIES = BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

/**
 * Note [Uniform ranges]: a program's uniform buffers (onnxruntime-web makes one per uniform size it meets, 72 for a
 * PaddleOCR classifier) are ranges of the allocator's uniform segments (usage UNIFORM | STORAGE | COPY_SRC |
 * COPY_DST), whose blocks start at the backend's alignment, a multiple of minUniformBufferOffsetAlignment (256).
 * WebGPU refuses a buffer bound as a uniform and as writable storage in one dispatch, and every storage binding of
 * this device is writable (Note [Storage bindings are all writable]): so nothing of a uniform segment is ever bound
 * as storage — alias copies are ranges of storage segments (Note [Aliased bindings]) — and a storage segment is
 * never bound as a uniform (its usage has no UNIFORM). An upload that becomes a range (Note [Uploads written where
 * they go] in SubAllocatingDevice.ts) is never bound either: it lies in a storage segment other than its copy's
 * destination's, or in a uniform segment, so that its copy goes between two buffers and needs no scratch range.
 *
 * Where a buffer the program asks for goes: a range of a storage or a uniform segment, a pooled readback buffer,
 * or (undefined) the real device.
 */
export function placementOf(descriptor: GPUBufferDescriptor): 'storage' | 'uniform' | 'upload' | 'readback' | undefined {
  const usage = descriptor.usage;
  const mapped = descriptor.mappedAtCreation === true;
  if (!(descriptor.size > 0)) return undefined;
  if ((usage & BufferUsage.STORAGE) !== 0 && (usage & ~(SEGMENT_USAGE | INDIRECT)) === 0) return 'storage';
  if ((usage & BufferUsage.UNIFORM) !== 0 && (usage & ~(BufferUsage.UNIFORM | COPIES)) === 0) return 'uniform';
  if (mapped && (usage & BufferUsage.MAP_WRITE) !== 0 && (usage & ~(BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC)) === 0) return 'upload';
  if (!mapped && (usage & BufferUsage.MAP_READ) !== 0 && (usage & ~(BufferUsage.MAP_READ | BufferUsage.COPY_DST)) === 0) return 'readback';
  return undefined;
}

/** The mapping members of a stand-in of a range that is never mapped. */
export const UNMAPPABLE: PropertyDescriptorMap = {
  mapState: { value: 'unmapped', enumerable: true },
  mapAsync: { value: () => Promise.reject(new Error('mapAsync on a buffer without MAP_READ or MAP_WRITE usage (a Stowage range): map a staging buffer of your own.')) },
  getMappedRange: { value: () => { throw new Error('getMappedRange on a buffer that is not mapped (a Stowage range).'); } },
  unmap: { value: () => undefined },
};

/** The mapping members of a stand-in made mappedAtCreation (Note [Mapped at creation]). */
export function mappedMembers(mapping: HostMapping): PropertyDescriptorMap {
  return {
    mapState: { get: () => mapping.mapState, enumerable: true },
    mapAsync: { value: () => Promise.reject(new Error('mapAsync on a Stowage range: a range is mapped only at its creation (mappedAtCreation); map a staging buffer of your own.')) },
    getMappedRange: { value: (offset?: number, size?: number) => mapping.getMappedRange(offset, size) },
    unmap: { value: () => mapping.unmap() },
  };
}
