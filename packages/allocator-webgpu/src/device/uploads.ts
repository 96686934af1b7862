import { HostMapping } from './HostMapping.js';
import { mappedMembers } from './placement.js';

/**
 * Note [Uploads written where they go]: an upload (MAP_WRITE | COPY_SRC, mapped at creation: onnxruntime-web's
 * staging buffer per upload) is only host bytes at first (Note [Mapped at creation]). Its one use is a copy into
 * a buffer. A copy into a range nothing has used yet (no command, bind group or write named it: onnxruntime-web's
 * weights, each uploaded into a buffer just made) is a `queue.writeBuffer` of those bytes at once: the range is
 * new, so no earlier command can see the difference, and the upload takes no device memory (as ranges, the
 * weights' uploads of a session held twice its weights until the first submit). Any other use makes it a range,
 * written once and copied from, freed at its destroy: for a copy into a buffer, a range of a storage segment
 * (where segments' free tails hold it) unless that lands in the destination's own segment, else a range of a
 * uniform segment (Note [Uniform ranges]: another buffer than any storage segment, so the copy needs no scratch).
 * Precondition of the write at once: a command buffer recorded after the copy and submitted before it does not read
 * the destination expecting zeros.
 */
export class Uploads {
  /** Host bytes of upload stand-ins, once unmapped and until destroyed. */
  readonly #bytes = new WeakMap<object, { bytes: Uint8Array | undefined }>();

  /**
   * An upload stand-in of `descriptor`, made by `standIn` with the mapping members it is given; `destroyed` runs at
   * its destroy (for the range it may have become).
   */
  make(descriptor: GPUBufferDescriptor, standIn: (destroy: () => void, mapping: PropertyDescriptorMap) => GPUBuffer, destroyed: (stand: GPUBuffer) => void): GPUBuffer {
    const upload: { bytes: Uint8Array | undefined } = { bytes: undefined };
    const mapping = new HostMapping(descriptor.size, (bytes) => {
      upload.bytes = bytes;
    });
    const stand = standIn(() => {
      upload.bytes = undefined;
      destroyed(stand);
    }, mappedMembers(mapping));
    this.#bytes.set(stand, upload);
    return stand;
  }

  /** The host bytes of upload stand-in `buffer` once unmapped; undefined for any other buffer or after its destroy. */
  bytesOf(buffer: GPUBuffer): Uint8Array | undefined {
    return this.#bytes.get(buffer)?.bytes;
  }
}
