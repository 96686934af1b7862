import { UNMAPPABLE } from './placement.js';

/**
 * GPUBuffer look-alikes the Stowage device hands out: GPUBuffer's prototype (taken from the first real buffer it is
 * given), own members answering for the buffer the program asked for; `mapping` replaces the members of an
 * unmappable one.
 */
export class StandIns {
  #prototype: object | undefined;

  /** A stand-in for `descriptor`; `like` is any real GPUBuffer (its prototype is taken once). */
  make(like: GPUBuffer, descriptor: GPUBufferDescriptor, destroy: () => void, mapping?: PropertyDescriptorMap): GPUBuffer {
    this.#prototype ??= Object.getPrototypeOf(like) as object;
    return Object.create(this.#prototype, {
      size: { value: descriptor.size, enumerable: true },
      usage: { value: descriptor.usage, enumerable: true },
      label: { value: descriptor.label ?? '', writable: true, enumerable: true },
      destroy: { value: destroy },
      ...(mapping ?? UNMAPPABLE),
    }) as GPUBuffer;
  }
}
