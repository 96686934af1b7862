/** What `queue.writeBuffer` takes as data. */
type WriteData = Parameters<GPUQueue['writeBuffer']>[2];

/** GPUBufferUsage UNIFORM | COPY_DST (spec values): the usage tfjs asks its manager for a dispatch's uniforms with. */
export const UNIFORM_USAGE = 0x0040 | 0x0008;

/**
 * Note [Uniforms through Stowage]: tfjs's `makeUniforms` packs a dispatch's uniforms (shapes, strides, the
 * program's own values) into bytes, takes a buffer of exactly that size from its buffer manager, writes the bytes
 * with `queue.writeBuffer(buffer, 0, bytes, 0, size)` and binds the whole buffer. To place those bytes in a range of
 * a Stowage uniform segment without writing that packing again, the Stowage backend's manager hands tfjs this
 * capture buffer (16 bytes, never bound, never written), and the backend's queue (`queue`, a proxy of the
 * device's queue that tfjs's backend holds) takes a `writeBuffer` to it as the bytes of the dispatch being
 * recorded instead of writing them. `StowageWebGpuBackend#makeUniforms` then allocates a uniform block, writes the
 * bytes into it and binds its range; the block is freed at the submit that used it (Note [Frees after their
 * submit]). Every other call on the queue is the queue's own.
 *
 * Invariants: at most one capture is pending (`take` empties it), and it is taken before the next dispatch's.
 */
export class UniformCapture {
  /** What tfjs gets for its uniforms: never bound by a dispatch. */
  readonly buffer: GPUBuffer;
  /** The device's queue, with `writeBuffer` to `buffer` captured. */
  readonly queue: GPUQueue;
  #bytes: Uint8Array | null = null;

  constructor(device: GPUDevice) {
    this.buffer = device.createBuffer({ size: 16, usage: UNIFORM_USAGE, label: 'stowage uniform capture' });
    const queue = device.queue;
    const writeBuffer = (buffer: GPUBuffer, bufferOffset: number, data: WriteData, dataOffset = 0, size?: number): undefined => {
      if (buffer !== this.buffer) return queue.writeBuffer(buffer, bufferOffset, data, dataOffset, size);
      this.#bytes = bytesOf(data, dataOffset, size);
      return undefined;
    };
    // Not cached: the queue's own `submit` and `writeBuffer` may be wrapped and unwrapped by allocators (SubmitCounter).
    this.queue = new Proxy(queue, {
      get(target, key) {
        if (key === 'writeBuffer') return writeBuffer;
        const value: unknown = Reflect.get(target, key, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  }

  /**
   * The bytes tfjs wrote for the dispatch being recorded, and forgets them.
   * @throws Error when nothing was captured (tfjs did not write its uniforms through this queue)
   */
  take(): Uint8Array {
    const bytes = this.#bytes;
    if (bytes === null) throw new Error('No uniforms were captured for this dispatch (Note [Uniforms through Stowage]).');
    this.#bytes = null;
    return bytes;
  }

  dispose(): void {
    this.buffer.destroy();
  }
}

/** The bytes `writeBuffer(…, data, dataOffset, size)` would write (offset and size in elements for a typed array). */
function bytesOf(data: WriteData, dataOffset: number, size: number | undefined): Uint8Array {
  if (ArrayBuffer.isView(data)) {
    const element = (data as unknown as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1;
    const length = size ?? data.byteLength / element - dataOffset;
    return new Uint8Array(data.buffer, data.byteOffset + dataOffset * element, length * element).slice();
  }
  return new Uint8Array(data, dataOffset, size ?? data.byteLength - dataOffset).slice();
}
