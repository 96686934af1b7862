/** GPUBufferUsage.MAP_READ | COPY_DST: what a readback buffer of the pool is. */
const READBACK_USAGE = 0x0001 | 0x0008;

/**
 * Note [Pooled readback buffers]: a program reads results back through MAP_READ | COPY_DST staging buffers it
 * makes and destroys per read (onnxruntime-web makes one per output per run: 304 of a PaddleOCR classifier's 973
 * buffers in `pnpm bench:ort`). A MAP_READ buffer cannot be a range of a segment (a segment cannot be mapped), so
 * the Stowage device backs each such buffer with a real one of this pool: the smallest idle one at least as large,
 * else a new one. Destroying the program's buffer unmaps the real one (which cancels a pending map, as destroy
 * does) and gives it back; commands run in queue order, so the next copy into it runs after every earlier read.
 * When a new buffer is made because no idle one is large enough, the idle smaller ones are destroyed: the pool
 * keeps about as many buffers as reads are in flight at once, each the size of the largest, and no more than
 * `maxIdleBytes` idle.
 *
 * Invariants: a buffer is idle or lent, never both; idleBytes == sum of the idle buffers' sizes <= maxIdleBytes.
 */
export class ReadbackPool {
  /** Real buffers made so far. */
  created = 0;
  readonly #idle: GPUBuffer[] = [];
  #idleBytes = 0;

  constructor(
    private readonly device: GPUDevice,
    private readonly maxIdleBytes = 16 << 20,
  ) {}

  /** The real buffer behind each readback stand-in the pool lent. */
  readonly #lent = new WeakMap<object, GPUBuffer>();
  /** Gives a collected stand-in's buffer back. */
  readonly #collected = new FinalizationRegistry<GPUBuffer>((real) => this.give(real));

  /**
   * A MAP_READ stand-in for `descriptor` over a buffer of the pool, made by `standIn` with its destroy and mapping
   * members: its destroy (or its collection) gives the buffer back.
   */
  standIn(descriptor: GPUBufferDescriptor, standIn: (real: GPUBuffer, destroy: () => void, mapping: PropertyDescriptorMap) => GPUBuffer): GPUBuffer {
    const real = this.take(descriptor.size, descriptor.label);
    let given = false;
    const stand = standIn(real, () => {
      if (given) return;
      given = true;
      this.#collected.unregister(real);
      this.give(real);
    }, readbackMembers(real, descriptor.size));
    this.#lent.set(stand, real);
    this.#collected.register(stand, real, real);
    return stand;
  }

  /** The real buffer behind readback stand-in `buffer`; undefined for any other buffer. */
  realOf(buffer: GPUBuffer): GPUBuffer | undefined {
    return this.#lent.get(buffer);
  }

  /** Bytes of the idle buffers. */
  get idleBytes(): number {
    return this.#idleBytes;
  }

  /** A real MAP_READ | COPY_DST buffer of at least `size` bytes, unmapped, lent until `give`. */
  take(size: number, label?: string): GPUBuffer {
    let best = -1;
    for (let i = 0; i < this.#idle.length; i++) {
      const candidate = this.#idle[i]!;
      if (candidate.size >= size && (best < 0 || candidate.size < this.#idle[best]!.size)) best = i;
    }
    if (best >= 0) {
      const [buffer] = this.#idle.splice(best, 1);
      this.#idleBytes -= buffer!.size;
      return buffer!;
    }
    // None large enough: the smaller idle ones would only sit beside the new one.
    for (const small of this.#idle.splice(0)) small.destroy();
    this.#idleBytes = 0;
    this.created++;
    return this.device.createBuffer({ size: Math.max(4, Math.ceil(size / 4) * 4), usage: READBACK_USAGE, label: label ?? 'stowage readback' });
  }

  /** Gives a lent buffer back (unmapping it), or destroys it when the idle bytes would pass `maxIdleBytes`. */
  give(buffer: GPUBuffer): void {
    if (buffer.mapState !== 'unmapped') buffer.unmap();
    if (this.#idleBytes + buffer.size > this.maxIdleBytes) {
      buffer.destroy();
      return;
    }
    this.#idle.push(buffer);
    this.#idleBytes += buffer.size;
  }

  /** Destroys the idle buffers. */
  clear(): void {
    for (const buffer of this.#idle.splice(0)) buffer.destroy();
    this.#idleBytes = 0;
  }
}

/** The mapping members of a readback stand-in of `size` bytes over `real` (Note [Pooled readback buffers]). */
export function readbackMembers(real: GPUBuffer, size: number): PropertyDescriptorMap {
  return {
    mapState: { get: () => real.mapState, enumerable: true },
    mapAsync: { value: (mode: number, offset = 0, bytes?: number) => real.mapAsync(mode, offset, bytes ?? size - offset) },
    getMappedRange: { value: (offset = 0, bytes?: number) => real.getMappedRange(offset, bytes ?? size - offset) },
    unmap: { value: () => real.unmap() },
  };
}
